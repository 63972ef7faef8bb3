"""The interpd client: one method per endpoint of docs/API.md."""

import concurrent.futures
import hashlib
import json
import logging
import os
import re
import threading
import time
import urllib.parse
import uuid

from . import errors
from ._http import Transport
from .events import CallEvent, ResultEvent, parse_sse
from .models import (Execution, ExecutionResult, ExecutionStatus,
                     ExecutionSummary, File, FilePage, Page, PackageResult,
                     Session, Token, Variable, VariableList)

__all__ = ["Client", "Stream"]

log = logging.getLogger("interpd_client")

_CHUNK = 64 * 1024
# A sync run's answer comes when the code has ended: its read timeout is
# the client's plus the run's own (this when the request gives none: the
# standard policy's cap), plus this for pip when it installs packages.
_DEFAULT_RUN_TIMEOUT = 300.0
_INSTALL_ALLOWANCE = 600.0
# A stream gets `: keep-alive` every 5 s while idle, so a read timeout
# above that notices a dead server without cutting a quiet run.
_MIN_STREAM_TIMEOUT = 15.0
# POST /v1/executions/{id}/calls/{call_id}: error.type must be an ASCII
# identifier of at most 64 characters, error.message at most 64 KiB.
_ERR_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_ERR_MESSAGE_MAX = 64 * 1024
_MISSING = object()


def _q(segment):
    """A path segment, percent-encoded (ids are URL-safe, but a caller's
    string is not trusted to be one)."""
    return urllib.parse.quote(str(segment), safe="")


def _id_of(obj, key):
    """An id from a string, or from a dict (File, Session) holding it."""
    if isinstance(obj, dict):
        return obj[key]
    return obj


def _query(**params):
    items = [(k, v) for k, v in params.items() if v is not None]
    return ("?" + urllib.parse.urlencode(items)) if items else ""


def _cap_message(text):
    data = text.encode("utf-8", "replace")
    if len(data) <= _ERR_MESSAGE_MAX:
        return text
    return data[:_ERR_MESSAGE_MAX - 3].decode("utf-8", "ignore") + "..."


def call_answer(functions, name, args, kwargs):
    """The answer body for a call of ``name``: ``{"result": value}``, or
    ``{"error": {"type", "message"}}`` when no function has that name
    (NameError), the function raised (its exception's class name and
    message), or its value is not JSON (TypeError)."""
    fn = functions.get(name)
    if fn is None:
        return {"error": {"type": "NameError", "message":
                          "the client has no function %r" % name}}
    try:
        value = fn(*args, **kwargs)
    except Exception as e:  # the code sees it, as the contract says
        etype = type(e).__name__
        if not _ERR_TYPE.match(etype):
            etype = "CallError"
        return {"error": {"type": etype, "message": _cap_message(str(e))}}
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        return {"error": {"type": "TypeError", "message": _cap_message(
            "the client's %s returned a value that is not JSON: %s" % (
                name, e))}}
    return {"result": value}


class _Upload:
    """An upload's body and headers: raw bytes or multipart/form-data,
    from bytes, a path or a binary file object.  ``body`` is a callable
    (each attempt calls it again), ``rewindable`` says whether a second
    call gives the same bytes."""

    def __init__(self, source, filename, ttl_hours, multipart):
        self.filename = filename
        self.rewindable = True
        self.size = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            self.size = len(data)
            self._chunks = lambda: iter((data,))
        elif isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            self.size = os.stat(path).st_size
            self.filename = filename or os.path.basename(path)
            self._chunks = lambda: self._path_chunks(path)
        elif hasattr(source, "read"):
            self._from_fileobj(source)
        else:
            raise TypeError("upload needs bytes, a path or a binary file "
                            "object, not %s" % type(source).__name__)
        if not self.filename:
            raise ValueError("upload needs a filename for this source")
        self.headers = {}
        self.query = ""
        if multipart:
            self._multipart(ttl_hours)
        else:
            self.headers["Content-Type"] = "application/octet-stream"
            self.query = _query(filename=self.filename, ttl_hours=ttl_hours)
            self._body = self._chunks
            if self.size is not None:
                self.headers["Content-Length"] = str(self.size)

    def _from_fileobj(self, f):
        name = getattr(f, "name", None)
        if not self.filename and isinstance(name, str):
            self.filename = os.path.basename(name)
        try:
            start = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(start)
            self.size = end - start
        except (OSError, AttributeError, ValueError):
            self.rewindable = False
            self._chunks = lambda: self._file_chunks(f)
            return

        def chunks():
            f.seek(start)
            return self._file_chunks(f)
        self._chunks = chunks

    @staticmethod
    def _file_chunks(f):
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return
            yield chunk

    @classmethod
    def _path_chunks(cls, path):
        with open(path, "rb") as f:
            yield from cls._file_chunks(f)

    def _multipart(self, ttl_hours):
        boundary = "interpd-" + uuid.uuid4().hex
        # The part's filename is kept ASCII and quote-free; the exact
        # name goes in the `filename` field, which the server prefers.
        safe = re.sub(r'[^\x20-\x7e]|["\\%]', "_", self.filename)
        head = []
        fields = [("filename", self.filename)]
        if ttl_hours is not None:
            fields.append(("ttl_hours", str(ttl_hours)))
        for name, value in fields:
            head.append(("--%s\r\nContent-Disposition: form-data; "
                         "name=\"%s\"\r\n\r\n" % (boundary, name)).encode()
                        + value.encode("utf-8") + b"\r\n")
        head.append(("--%s\r\nContent-Disposition: form-data; name=\"file\";"
                     " filename=\"%s\"\r\nContent-Type: "
                     "application/octet-stream\r\n\r\n" % (
                         boundary, safe)).encode())
        pre = b"".join(head)
        post = ("\r\n--%s--\r\n" % boundary).encode()
        self.headers["Content-Type"] = ("multipart/form-data; boundary=%s"
                                        % boundary)
        if self.size is not None:
            self.headers["Content-Length"] = str(len(pre) + self.size +
                                                 len(post))

        def body():
            yield pre
            yield from self._chunks()
            yield post
        self._body = body

    def body(self):
        return self._body()


class Client:
    """A client of one interpd.

    Args:
        base_url: the service, e.g. ``http://127.0.0.1:8080`` (a path
            prefix is kept: ``https://host/interpd``).
        api_key: a tenant's API key (``ipd_...``).
        token: a scoped token (``ipdt_...``) instead of a key; then no
            ``X-User-Id`` is sent (the user is the token's).
        user_id: the end user (``X-User-Id``) for files, executions and
            sessions with an API key; ints are sent as their decimal
            text.  ``for_user`` gives a client for another user.
        timeout: seconds without a byte from the server before a request
            fails with RequestTimeout (connect and every read).  A
            synchronous run waits longer: its own timeout on top (see
            ``run``).
        retries: how many times a 429 or 503 answer is retried after its
            ``Retry-After`` (1 s when absent); 0 never retries.
        max_retry_wait: the longest Retry-After waited for; a longer
            one raises at once (the error's ``retry_after`` says how
            long the server asked for).
        ssl_context: for https, an ``ssl.SSLContext`` (default: the
            system's trust store).
        call_workers: threads answering ``call`` events with registered
            ``functions`` (calls waiting at once run in parallel, up to
            this many).

    Thread safety: a Client may be used from several threads at once.
    Its connections are kept alive in a pool shared with the clients
    ``for_user`` and ``for_token`` make; each request holds one
    connection until its answer has been read.  A Stream, a Response of
    a download in progress, and a Session object should each be used by
    one thread at a time.
    """

    def __init__(self, base_url, api_key=None, token=None, user_id=None,
                 timeout=60.0, retries=3, max_retry_wait=30.0,
                 ssl_context=None, call_workers=8, _transport=None):
        if api_key and token:
            raise ValueError("give api_key or token, not both")
        self.api_key = api_key
        self.token = token
        self.user_id = None if user_id is None else str(user_id)
        self.call_workers = call_workers
        self._transport = _transport or Transport(
            base_url, timeout=timeout, retries=retries,
            max_retry_wait=max_retry_wait, ssl_context=ssl_context)

    @property
    def base_url(self):
        return self._transport.base_url

    @property
    def timeout(self):
        return self._transport.timeout

    def for_user(self, user_id):
        """A Client for another end user, with the same key and the same
        connection pool."""
        return Client(self.base_url, api_key=self.api_key, token=self.token,
                      user_id=user_id, call_workers=self.call_workers,
                      _transport=self._transport)

    def for_token(self, token):
        """A Client that authenticates with ``token`` (a Token or its
        string), sharing this client's connection pool."""
        token = _id_of(token, "token")
        return Client(self.base_url, token=token,
                      call_workers=self.call_workers,
                      _transport=self._transport)

    def close(self):
        """Close the idle connections (of every client sharing them)."""
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- plumbing ------------------------------------------------------------

    def _headers(self, user=True):
        h = {}
        secret = self.token or self.api_key
        if secret:
            h["Authorization"] = "Bearer " + secret
        if user and not self.token and self.user_id is not None:
            h["X-User-Id"] = self.user_id
        return h

    def _json(self, method, path, payload=None, user=True, timeout=None,
              retry=True):
        return self._transport.json(method, path, payload,
                                    self._headers(user), timeout,
                                    retry=retry)

    # ---- files ----------------------------------------------------------------

    def upload(self, source, filename=None, ttl_hours=None,
               multipart=False):
        """Upload a file (``POST /v1/files``); returns its File.

        Args:
            source: bytes, a path (str or os.PathLike), or a binary file
                object (read from its current position; streamed, not
                held in memory).
            filename: the stored name; default the path's or file
                object's base name (required for bytes).
            ttl_hours: shortens the file's life (never past the server's
                maximum).
            multipart: send ``multipart/form-data`` instead of the raw
                body (the same result; for servers behind proxies that
                want forms).
        """
        up = _Upload(source, filename, ttl_hours, multipart)
        headers = self._headers()
        headers.update(up.headers)
        headers["Accept"] = "application/json"
        r = self._transport.request("POST", "/v1/files" + up.query,
                                    up.body, headers,
                                    retry=up.rewindable,
                                    fresh=not up.rewindable)
        return File(self._decode(r))

    def upload_url(self, url, filename=None, ttl_hours=None):
        """URL ingest: the service fetches ``url`` (http or https; its
        guard refuses private addresses unless allowed) and stores it
        with ``source: "url"``; returns the File."""
        payload = {"url": url}
        if filename is not None:
            payload["filename"] = filename
        if ttl_hours is not None:
            payload["ttl_hours"] = ttl_hours
        return File(self._json("POST", "/v1/files", payload))

    def list_files(self, limit=None, cursor=None):
        """One page of the user's files, newest first: a FilePage (a list
        of File with ``next_cursor``, None on the last page)."""
        doc = self._json("GET", "/v1/files" + _query(limit=limit,
                                                     cursor=cursor))
        return FilePage([File(f) for f in doc.get("files", [])],
                        doc.get("next_cursor"))

    def iter_files(self, page_size=100):
        """Every file of the user, newest first, page after page."""
        cursor = None
        while True:
            page = self.list_files(limit=page_size, cursor=cursor)
            yield from page
            cursor = page.next_cursor
            if not cursor:
                return

    def get_file(self, file_id):
        """The File object of ``file_id`` (a string or a File)."""
        return File(self._json("GET", "/v1/files/" +
                               _q(_id_of(file_id, "file_id"))))

    def download(self, file_id, dest=None):
        """A file's bytes (``GET /v1/files/{id}/content``).

        With ``dest`` None, returns the bytes; with a path (str or
        os.PathLike), streams them into that file and returns the path;
        with a writable binary file object, writes into it and returns
        the number of bytes.  The bytes are checked against the answer's
        ``Content-Length`` and its ``ETag`` (the SHA-256): a mismatch is
        a ProtocolError (and a path written is removed).
        """
        path = "/v1/files/" + _q(_id_of(file_id, "file_id")) + "/content"
        r = self._transport.request("GET", path, None, self._headers(),
                                    stream=True)
        with r:
            if dest is None:
                data = r.read()
                self._check_download(r, len(data),
                                     hashlib.sha256(data).hexdigest())
                return data
            if isinstance(dest, (str, os.PathLike)):
                try:
                    with open(dest, "wb") as f:
                        self._copy(r, f)
                except BaseException:
                    try:
                        os.unlink(dest)
                    except OSError:
                        pass
                    raise
                return dest
            return self._copy(r, dest)

    def _copy(self, r, f):
        h = hashlib.sha256()
        n = 0
        for chunk in r.iter_chunks():
            f.write(chunk)
            h.update(chunk)
            n += len(chunk)
        self._check_download(r, n, h.hexdigest())
        return n

    @staticmethod
    def _check_download(r, n, digest):
        want = r.headers.get("content-length")
        etag = r.headers.get("etag", "").strip('"')
        rid = r.headers.get("x-request-id")
        if want is not None and want.isdigit() and int(want) != n:
            raise errors.ProtocolError(r.status, message="download: %d "
                                       "bytes, Content-Length %s" % (n, want),
                                       request_id=rid)
        if len(etag) == 64 and etag != digest:
            raise errors.ProtocolError(r.status, message="download: SHA-256 "
                                       "%s, ETag %s" % (digest, etag),
                                       request_id=rid)

    def delete_file(self, file_id):
        """Delete a file (``DELETE /v1/files/{id}``, 204)."""
        self._json("DELETE", "/v1/files/" + _q(_id_of(file_id, "file_id")))

    def _decode(self, r):
        try:
            return json.loads(r.body.decode("utf-8"))
        except ValueError as e:
            raise errors.ProtocolError(
                r.status, message="the answer is not JSON: %r" % r.body[:200],
                request_id=r.headers.get("x-request-id")) from e

    # ---- executions -------------------------------------------------------------

    @staticmethod
    def _exec_body(code, files, session, timeout, packages, policy,
                   variables, store_outputs):
        body = {"code": code}
        if files:
            body["files"] = [_id_of(f, "file_id") for f in files]
        if session is not None:
            body["session_id"] = _id_of(session, "session_id")
        if timeout is not None:
            body["timeout"] = timeout
        if packages:
            body["packages"] = list(packages)
        if policy is not None:
            body["policy"] = policy
        if variables is not None:
            body["variables"] = variables
        if store_outputs is not None:
            body["store_outputs"] = store_outputs
        return body

    def run(self, code, files=None, session=None, timeout=None,
            packages=None, policy=None, functions=None, on_event=None,
            variables=None, store_outputs=None, request_timeout=None):
        """Run ``code`` and return its ExecutionResult (the code ran,
        whatever it did: check ``success`` and ``error``).

        Args:
            files: File objects or ids, readable by the code
                (``load_file``, ``FILES``).
            session: a Session or its id: run in it.
            timeout: the run's wall seconds (capped by the policy).
            packages: allowlisted requirements installed first.
            policy: ``strict``, ``standard`` or ``networked`` (no looser
                than the key's).
            functions: ``{"name": callable}``: the names are defined in
                the code, and each call the code makes is answered by
                calling the callable with the call's args and kwargs (its
                return value must be JSON; an exception it raises is
                raised in the code, by class name and message).  The run
                is then streamed.
            on_event: a callable given every Event as it comes (the run
                is then streamed).
            variables: ``{"name": JSON value}`` defined before the code
                runs.
            store_outputs: False: generated files come back inline only.
            request_timeout: a synchronous run's read timeout; default
                the client's timeout + ``timeout`` (300 when None) + 600
                when ``packages`` are installed.
        """
        if functions or on_event:
            with self.stream(code, files=files, session=session,
                             timeout=timeout, packages=packages,
                             policy=policy, functions=functions,
                             variables=variables,
                             store_outputs=store_outputs) as s:
                return s.until_result(on_event)
        body = self._exec_body(code, files, session, timeout, packages,
                               policy, variables, store_outputs)
        if request_timeout is None:
            request_timeout = self.timeout + (
                _DEFAULT_RUN_TIMEOUT if timeout is None else timeout)
            if packages:
                request_timeout += _INSTALL_ALLOWANCE
        return ExecutionResult(self._json("POST", "/v1/executions", body,
                                          timeout=request_timeout))

    def submit(self, code, files=None, session=None, timeout=None,
               packages=None, policy=None, variables=None,
               store_outputs=None, callback_url=None):
        """Run ``code`` asynchronously (``"async": true``; with a
        ``callback_url`` the result is also POSTed there).  Returns an
        Execution: ``.wait()`` for its ExecutionResult, ``.cancel()``."""
        body = self._exec_body(code, files, session, timeout, packages,
                               policy, variables, store_outputs)
        body["async"] = True
        if callback_url is not None:
            body["callback_url"] = callback_url
        return Execution(self._json("POST", "/v1/executions", body),
                         client=self)

    def stream(self, code, files=None, session=None, timeout=None,
               packages=None, policy=None, functions=None, variables=None,
               store_outputs=None, detach=False):
        """Run ``code`` streamed (Server-Sent Events) and return a
        Stream: iterate it for typed Events (OutputEvent for stdout and
        stderr, DisplayEvent, FileEvent, InstallEvent, CallEvent,
        ResultEvent last; other kinds as Event).  ``functions`` as in
        ``run``: their calls are answered by the client (the CallEvent
        still comes, ``answered`` True); without them answer a CallEvent
        with ``event.answer(value)``.  Closing the stream before its
        result cancels the run unless ``detach`` is True."""
        body = self._exec_body(code, files, session, timeout, packages,
                               policy, variables, store_outputs)
        body["stream"] = True
        if functions:
            body["functions"] = sorted(functions)
        if detach:
            body["detach"] = True
        headers = self._headers()
        headers["Content-Type"] = "application/json"
        headers["Accept"] = "text/event-stream"
        data = json.dumps(body).encode("utf-8")
        r = self._transport.request(
            "POST", "/v1/executions", data, headers,
            timeout=max(self.timeout, _MIN_STREAM_TIMEOUT), stream=True)
        if not r.headers.get("content-type", "").startswith(
                "text/event-stream"):
            r.close()
            raise errors.ProtocolError(r.status, message="the answer is not "
                                       "a stream: %s" % r.headers.get(
                                           "content-type"),
                                       request_id=r.headers.get(
                                           "x-request-id"))
        return Stream(self, r, functions or {})

    def get_execution(self, execution_id):
        """``GET /v1/executions/{id}``: an ExecutionStatus (status, and
        the result once an asynchronous one is over)."""
        return ExecutionStatus(self._json(
            "GET", "/v1/executions/" + _q(_id_of(execution_id,
                                                 "execution_id"))))

    def wait(self, execution_id, timeout=None, poll_interval=0.1,
             max_poll_interval=1.0):
        """Poll an asynchronous execution until it is done or cancelled,
        and return its ExecutionResult (None for a synchronous or
        streamed execution's id: their results are not kept).  Polls
        every ``poll_interval`` seconds, growing by half each time up to
        ``max_poll_interval``; after ``timeout`` seconds (None: no limit)
        raises WaitTimeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll_interval
        while True:
            st = self.get_execution(execution_id)
            if st.finished:
                return st.result
            if deadline is not None and time.monotonic() + delay > deadline:
                raise errors.WaitTimeout(message="execution %s still %s "
                                         "after %s s" % (
                                             _id_of(execution_id,
                                                    "execution_id"),
                                             st.status, timeout))
            time.sleep(delay)
            delay = min(max_poll_interval, delay * 1.5)

    def cancel(self, execution_id):
        """Cancel a queued or running execution (``DELETE
        /v1/executions/{id}``, 202 at once); its result then has
        ``cancelled`` True.  An execution that is over: NotFound."""
        return self._json("DELETE", "/v1/executions/" +
                          _q(_id_of(execution_id, "execution_id")))

    def list_executions(self, limit=None, cursor=None):
        """One page of the user's recent executions, newest first: a Page
        of ExecutionSummary with ``next_cursor``."""
        doc = self._json("GET", "/v1/executions" + _query(limit=limit,
                                                          cursor=cursor))
        return Page([ExecutionSummary(e) for e in doc.get("executions", [])],
                    doc.get("next_cursor"))

    def iter_executions(self, page_size=100):
        """Every listed execution of the user, page after page."""
        cursor = None
        while True:
            page = self.list_executions(limit=page_size, cursor=cursor)
            yield from page
            cursor = page.next_cursor
            if not cursor:
                return

    def answer_call(self, execution_id, call_id, result=_MISSING,
                    error=None):
        """Answer a call of the code (``POST
        /v1/executions/{id}/calls/{call_id}``, 204): ``result`` (any JSON
        value) or ``error`` (``{"type": ..., "message": ...}``)."""
        if (result is _MISSING) == (error is None):
            raise ValueError("give result or error")
        payload = {"error": error} if error is not None else {
            "result": result}
        self._json("POST", "/v1/executions/%s/calls/%s" % (
            _q(execution_id), _q(call_id)), payload)

    # ---- sessions ----------------------------------------------------------------

    def create_session(self):
        """Create a session (``POST /v1/sessions``, 201): a Session bound
        to this client (``session.run(code)``; a context manager that
        deletes it on exit)."""
        return Session(self._json("POST", "/v1/sessions", {}), client=self)

    def get_session(self, session_id):
        """A Session by id (SessionExpired once it ended, for an hour)."""
        return Session(self._json("GET", "/v1/sessions/" +
                                  _q(_id_of(session_id, "session_id"))),
                       client=self)

    def list_sessions(self):
        """The user's live sessions, newest first: a list of Session."""
        doc = self._json("GET", "/v1/sessions")
        return [Session(s, client=self) for s in doc.get("sessions", [])]

    def session_variables(self, session_id):
        """A session's variables: a VariableList of Variable (name, type,
        repr) with ``truncated``."""
        doc = self._json("GET", "/v1/sessions/%s/variables" %
                         _q(_id_of(session_id, "session_id")))
        return VariableList([Variable(v) for v in doc.get("variables", [])],
                            bool(doc.get("truncated")))

    def delete_session(self, session_id):
        """End a session (``DELETE /v1/sessions/{id}``, 204)."""
        self._json("DELETE", "/v1/sessions/" +
                   _q(_id_of(session_id, "session_id")))

    # ---- packages, tokens, operations ---------------------------------------------

    def packages(self):
        """``GET /v1/packages``: a dict with ``allowed`` (names),
        ``installed`` (``[{name, version}]``) and ``venv``."""
        return self._json("GET", "/v1/packages", user=False)

    def install_packages(self, packages):
        """Install allowlisted requirements (``POST /v1/packages``): a
        list of PackageResult, one per requirement, in order."""
        doc = self._json("POST", "/v1/packages",
                         {"packages": list(packages)}, user=False,
                         timeout=self.timeout + _INSTALL_ALLOWANCE)
        return [PackageResult(p) for p in doc.get("results", [])]

    def mint_token(self, user_id, scopes, ttl=None):
        """Mint a scoped token for one user of the key's tenant (``POST
        /v1/tokens``, 201): a Token.  ``scopes`` from ``files:read``,
        ``files:write``, ``executions``, ``sessions``; ``ttl`` a duration
        such as ``"15m"`` (default the server's).  Use it with
        ``Client(base_url, token=tok.token)`` or ``for_token(tok)``."""
        payload = {"user_id": str(user_id), "scopes": list(scopes)}
        if ttl is not None:
            payload["ttl"] = ttl
        return Token(self._json("POST", "/v1/tokens", payload, user=False))

    def admin_status(self):
        """``GET /v1/admin/status`` (admin keys): a dict."""
        return self._json("GET", "/v1/admin/status", user=False)

    def admin_cleanup(self):
        """``POST /v1/admin/cleanup`` (admin keys): runs the expiry sweep;
        ``{deleted_files, freed_bytes, orphans_removed, duration_ms}``."""
        return self._json("POST", "/v1/admin/cleanup", user=False)

    def health(self):
        """``GET /healthz``: ``{"status": "ok"}`` while the server
        serves."""
        return self._json("GET", "/healthz", user=False, retry=False)

    def ready(self):
        """``GET /readyz``: its checks; Unavailable (not retried) when a
        check fails."""
        return self._json("GET", "/readyz", user=False, retry=False)


class Stream:
    """A streamed execution: iterate it for its Events, in order; the
    last is the ResultEvent, and then ``result`` holds the
    ExecutionResult.

    ``execution_id`` is known from the start (``X-Execution-Id``), so
    ``cancel()`` works while it runs.  ``close()`` (or leaving a ``with``
    block) before the result drops the connection, which cancels the run
    unless it was started with ``detach``.  A stream that ends without
    its result raises ProtocolError.
    """

    def __init__(self, client, response, functions):
        self._client = client
        self._r = response
        self._functions = functions
        self.execution_id = response.headers.get("x-execution-id")
        self.request_id = response.headers.get("x-request-id")
        self.result = None
        self._pool = None
        self._pending = []
        self._lock = threading.Lock()
        self._events = parse_sse(iter(self._r.readline, b""))

    def __iter__(self):
        if self.result is not None:
            return  # read to its end already
        try:
            for ev in self._events:
                if isinstance(ev, CallEvent):
                    self._on_call(ev)
                yield ev
                if isinstance(ev, ResultEvent):
                    self.result = ev.result
                    self._finish()
                    return
        finally:
            if self.result is None:
                self.close()
        raise errors.ProtocolError(200, message="the stream of %s ended "
                                   "without its result" % self.execution_id,
                                   request_id=self.request_id)

    def until_result(self, on_event=None):
        """Read the stream to its end (``on_event(event)`` for each) and
        return the ExecutionResult."""
        for ev in self:
            if on_event is not None:
                on_event(ev)
        return self.result

    def _post_answer(self, call_id, payload):
        try:
            self._client.answer_call(self.execution_id, call_id, **payload)
        except (errors.CallExpired, errors.Conflict) as e:
            # The run is over, or the call was answered or timed out:
            # nobody waits for this answer any more.
            log.info("call %s of %s: %s", call_id, self.execution_id, e)

    def _answer_with(self, ev):
        try:
            payload = call_answer(self._functions, ev.name, ev.args,
                                  ev.kwargs)
            self._post_answer(ev.call_id, payload)
        except errors.InterpdError as e:
            log.warning("could not answer call %s of %s: %s", ev.call_id,
                        self.execution_id, e)

    def _on_call(self, ev):
        ev._answer = lambda call_id, payload: self._client.answer_call(
            self.execution_id, call_id, **payload)
        if not self._functions:
            return
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(1, self._client.call_workers),
                    thread_name_prefix="interpd-call")
            self._pending.append(self._pool.submit(self._answer_with, ev))
        ev.answered = True

    def _finish(self):
        """After the result: the body's end (so the connection is kept)
        and the answers still being posted."""
        try:
            self._r.read()
        except errors.TransportError:
            pass
        self._r.close()
        self._shutdown_pool()

    def _shutdown_pool(self):
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def cancel(self):
        """Cancel the run (``DELETE /v1/executions/{id}``); its result
        event still comes, with ``cancelled`` True."""
        return self._client.cancel(self.execution_id)

    def close(self):
        """Drop the connection if the result has not come (cancelling a
        run that is not detached)."""
        self._r.close()
        self._shutdown_pool()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
