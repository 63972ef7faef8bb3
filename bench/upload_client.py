#!/usr/bin/python3
"""bench/upload_client.py - a lean HTTP upload client for the benchmarks.

POSTs one file as a raw body with os.sendfile (the kernel moves the page
cache straight to the socket), so the client costs almost no CPU and the
benchmark measures the server rather than curl.  Prints the seconds from
connect to the end of the 201 response; fails on any other status.

    upload_client.py PORT KEY FILE NAME
"""
import os
import socket
import sys
import time


def main():
    port, key, path, name = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    size = os.path.getsize(path)
    head = ("POST /v1/files?filename=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: Bearer %s\r\nX-User-Id: bench\r\n"
            "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n"
            "Connection: close\r\n\r\n" % (name, key, size)).encode()
    with open(path, "rb") as f:
        t0 = time.perf_counter()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head)
        s.sendfile(f)
        resp = bytearray()
        while True:
            d = s.recv(65536)
            if not d:
                break
            resp += d
        t1 = time.perf_counter()
        s.close()
    status = bytes(resp.split(b"\r\n", 1)[0])
    if b" 201 " not in status:
        sys.stderr.write("upload failed: %r\n" % bytes(resp[:300]))
        sys.exit(1)
    body = bytes(resp.split(b"\r\n\r\n", 1)[1])
    sys.stdout.write("%.6f %s\n" % (t1 - t0, body.decode()))


if __name__ == "__main__":
    main()
