#!/usr/bin/python3
"""The image's HEALTHCHECK: exit 0 when interpd answers GET /healthz with 200.

/healthz needs no key and stays 200 while the process serves, even when the
database or the sandbox is unavailable (/readyz reports those).  The port
comes from INTERPD_LISTEN (the image sets 0.0.0.0:8080); a listen address
set only in a config file is not seen here, so keep port 8080 or set
INTERPD_LISTEN too.  Proxies from the environment are ignored: the request
goes to the loopback address.
"""
import os
import sys
import urllib.request


def main():
    listen = os.environ.get("INTERPD_LISTEN", "0.0.0.0:8080")
    host, _, port = listen.rpartition(":")
    loopback = "[::1]" if host.startswith("[") else "127.0.0.1"
    url = "http://%s:%s/healthz" % (loopback, port or "8080")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=4) as r:
            status = r.status
    except Exception as e:  # refused, timed out, or an HTTP error status
        print("healthcheck: %s: %s" % (url, e), file=sys.stderr)
        return 1
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
