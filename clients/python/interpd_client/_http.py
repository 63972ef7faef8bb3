"""The transport: keep-alive connections (http.client), timeouts, and the
bounded retries of 429 and 503.

A Transport is shared by every Client made from one another (``for_user``,
``for_token``) and is thread-safe: a request takes an idle connection from
the pool (or opens one), and gives it back once its answer has been read
to the end; a connection the server said it will close, or one whose
answer was not read to the end, is closed instead.
"""

import email.utils
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse

from . import errors

log = logging.getLogger("interpd_client")

RETRY_STATUSES = (429, 503)
USER_AGENT = "interpd-client-python/0.1"
# Errors on a pooled connection that mean the server closed it while it
# was idle: the request is sent again once on a fresh connection.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError,
          BrokenPipeError, ConnectionAbortedError)


def parse_retry_after(value):
    """Retry-After (delay-seconds or an HTTP-date) in seconds, or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Response:
    """An answer whose body has not been read yet (a download, a stream).

    ``status``, ``headers`` (lower-case names); read with ``read``,
    ``readline`` or ``iter_chunks``; ``close`` when done: the connection
    goes back to the pool only if the body was read to its end.
    """

    def __init__(self, transport, conn, resp):
        self._transport = transport
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self._done = False

    def read(self, n=None):
        try:
            data = self._resp.read() if n is None else self._resp.read(n)
        except (socket.timeout, TimeoutError) as e:
            self._fail()
            raise errors.RequestTimeout(message="reading the answer: %s" % e)
        except (OSError, http.client.HTTPException) as e:
            self._fail()
            raise errors.ConnectionFailed(message="reading the answer: %s"
                                          % e) from e
        if n is None or not data:
            self._finish()
        return data

    def readline(self):
        try:
            line = self._resp.readline()
        except (socket.timeout, TimeoutError) as e:
            self._fail()
            raise errors.RequestTimeout(message="reading the answer: %s" % e)
        except (OSError, http.client.HTTPException) as e:
            self._fail()
            raise errors.ConnectionFailed(message="reading the answer: %s"
                                          % e) from e
        if not line:
            self._finish()
        return line

    def iter_chunks(self, size=65536):
        while True:
            chunk = self.read(size)
            if not chunk:
                return
            yield chunk

    def _finish(self):
        if not self._done:
            self._done = True
            self._transport._release(self._conn, self._resp)

    def _fail(self):
        if not self._done:
            self._done = True
            self._conn.close()

    def close(self):
        """Give the connection back (body read to its end) or close it."""
        if self._done:
            return
        if self._resp.isclosed():
            self._finish()
        else:
            self._fail()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Transport:
    """The connections to one interpd, their pool, and the retry policy."""

    def __init__(self, base_url, timeout=60.0, retries=3,
                 max_retry_wait=30.0, ssl_context=None, max_idle=8):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("base_url must be http:// or https:// with a "
                             "host: %r" % base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        self._idle = []
        self._lock = threading.Lock()

    # ---- connections -------------------------------------------------------

    def _new_conn(self):
        if self.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            return http.client.HTTPSConnection(self.host, self.port,
                                               timeout=self.timeout,
                                               context=ctx)
        return http.client.HTTPConnection(self.host, self.port,
                                          timeout=self.timeout)

    def _take(self, fresh=False):
        if fresh:
            return self._new_conn(), False
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new_conn(), False

    def _release(self, conn, resp):
        """Back to the pool after its answer was read to the end, unless
        the server will close it."""
        if resp.will_close:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self):
        """Close every idle connection; later requests open new ones."""
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        for c in idle:
            c.close()

    def __del__(self):
        # A pool dropped without close(): its sockets go with it.
        try:
            self.close()
        except Exception:
            pass

    @staticmethod
    def _set_timeout(conn, timeout):
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)

    # ---- one request ---------------------------------------------------------

    def _send_once(self, method, path, body, headers, timeout, fresh):
        """One request on a pooled (or new) connection; a stale pooled
        connection is replaced once.  ``fresh``: a new connection (a body
        that cannot be sent twice).  Returns (conn, HTTPResponse)."""
        for attempt in (0, 1):
            conn, reused = self._take(fresh)
            self._set_timeout(conn, timeout)
            payload = body() if callable(body) else body
            try:
                try:
                    conn.request(method, self.prefix + path, body=payload,
                                 headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The server may have answered before the body was
                    # all sent (an early 413 or 401 closes the
                    # connection): read that answer if it is there.
                    if conn.sock is None:
                        raise
                return conn, conn.getresponse()
            except _STALE as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise errors.ConnectionFailed(
                    message="%s %s: %s" % (method, path, e)) from e
            except (socket.timeout, TimeoutError) as e:
                conn.close()
                raise errors.RequestTimeout(
                    message="%s %s: no answer within %s s" % (
                        method, path, timeout)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise errors.ConnectionFailed(
                    message="%s %s: %s" % (method, path, e)) from e
        raise AssertionError("unreachable")

    def request(self, method, path, body=None, headers=None, timeout=None,
                stream=False, retry=True, fresh=False):
        """Send a request; 429 and 503 are sent again after Retry-After
        (at most ``retries`` times, each wait at most ``max_retry_wait``:
        a longer Retry-After is not waited for).  ``body`` is bytes, an
        iterable of bytes, or a callable returning either (called for
        each attempt, so a retry can send it again).

        Returns a Response: with ``stream`` its body is left to the caller
        (close it), else it is read (``.body``).  An error answer raises
        its InterpdError (the body read)."""
        headers = dict(headers or {})
        headers.setdefault("User-Agent", USER_AGENT)
        timeout = self.timeout if timeout is None else timeout
        attempts = 0
        while True:
            attempts += 1
            conn, resp = self._send_once(method, path, body, headers,
                                         timeout, fresh)
            r = Response(self, conn, resp)
            if r.status < 400:
                if not stream:
                    r.body = r.read()
                return r
            err_body = r.read()
            wait = parse_retry_after(r.headers.get("retry-after"))
            err = errors.error_from_response(r.status, err_body, r.headers,
                                             wait, attempts)
            if (not retry or r.status not in RETRY_STATUSES or
                    attempts > self.retries):
                raise err
            wait = 1.0 if wait is None else wait
            if wait > self.max_retry_wait:
                raise err
            log.info("%s %s: %s; retry %d of %d in %.3g s", method, path,
                     err, attempts, self.retries, wait)
            time.sleep(wait)

    def json(self, method, path, payload=None, headers=None, timeout=None,
             retry=True):
        """A JSON request (``payload`` encoded when not None) and its
        decoded answer (None for an empty body, as a 204's)."""
        headers = dict(headers or {})
        body = None
        if payload is not None:
            body = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        headers.setdefault("Accept", "application/json")
        r = self.request(method, path, body, headers, timeout, retry=retry)
        if not r.body:
            return None
        try:
            return json.loads(r.body.decode("utf-8"))
        except ValueError as e:
            raise errors.ProtocolError(
                r.status, message="%s %s: the answer is not JSON: %r" % (
                    method, path, r.body[:200]),
                request_id=r.headers.get("x-request-id")) from e
