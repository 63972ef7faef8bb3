"""Exceptions raised by the client.

Every error the service answers is an :class:`InterpdError` carrying the
contract's error body (``{"error": {"code", "message", "request_id"}}``):
the HTTP ``status``, the stable ``code``, the human ``message``, the
``request_id`` (for the server's access log) and, on 429 and 503, the
``retry_after`` seconds the server asked for.  Each contract code has a
subclass of its own (``NotFound`` for ``not_found``, ...), so a caller
writes ``except interpd_client.NotFound:``; a code this client does not
know yet is mapped by its status (an unknown 409 code is a ``Conflict``),
else it is a plain :class:`InterpdError`.

Failures that never got an answer from the service are
:class:`TransportError` (``status`` None): :class:`ConnectionFailed`
(refused, reset, closed early) and :class:`RequestTimeout` (no byte
within the client's timeout); :class:`ProtocolError` is an answer the
client cannot read (not the documented shape).  :class:`WaitTimeout` is
``wait()`` giving up on an execution that is still running.
"""

__all__ = [
    "InterpdError", "TransportError", "ConnectionFailed", "RequestTimeout",
    "ProtocolError", "WaitTimeout", "InvalidRequest", "InvalidJson", "InvalidUserId",
    "Unauthorized", "Forbidden", "NotFound", "MethodNotAllowed", "Conflict",
    "SessionBusy", "SessionExpired", "CallExpired", "PayloadTooLarge",
    "UnsupportedMediaType", "TooManyRequests", "InternalError",
    "UpstreamError", "Unavailable", "UpstreamTimeout", "QuotaExceeded",
    "error_class", "error_from_response",
]


class InterpdError(Exception):
    """An error answered by interpd (or, for the transport subclasses, a
    request that got no usable answer).

    Attributes:
        status: the HTTP status (None when there was no answer).
        code: the contract's error code (``"not_found"``, ...).
        message: the server's sentence for a person; may change.
        request_id: the answer's request id (body or ``X-Request-Id``).
        retry_after: seconds the server asked to wait (429, 503), or None.
        attempts: how many times the request was sent (more than 1 when
            the client retried a 429 or 503 before giving up).
        headers: the answer's headers (a dict, lower-case names).
    """

    status = None
    code = None

    def __init__(self, status=None, code=None, message="", request_id=None,
                 retry_after=None, attempts=1, headers=None):
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after
        self.attempts = attempts
        self.headers = dict(headers or {})
        super().__init__(status, code, message, request_id, retry_after)

    def __str__(self):
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        text = " ".join(parts)
        if self.message:
            text = "%s: %s" % (text, self.message) if text else self.message
        if self.request_id:
            text += " (request %s)" % self.request_id
        return text

    def __repr__(self):
        return "%s(status=%r, code=%r, message=%r, request_id=%r)" % (
            type(self).__name__, self.status, self.code, self.message,
            self.request_id)


class TransportError(InterpdError):
    """No usable answer: the request may or may not have reached the
    service."""

    code = "transport_error"


class ConnectionFailed(TransportError):
    """The connection could not be made, or broke before the answer was
    read."""

    code = "connection_failed"


class RequestTimeout(TransportError):
    """The service sent nothing for the client's ``timeout`` seconds."""

    code = "timeout"


class ProtocolError(TransportError):
    """The answer is not what the API documents (bad JSON, a stream that
    ended without its result, a short download)."""

    code = "protocol_error"


class WaitTimeout(InterpdError):
    """``wait()`` gave up: the execution was not over within its
    ``timeout`` (it goes on running; cancel it or wait again)."""

    code = "wait_timeout"


def _subclass(name, status, code, doc):
    cls = type(name, (InterpdError,), {"status": status, "code": code,
                                       "__doc__": doc})
    return cls


InvalidRequest = _subclass("InvalidRequest", 400, "invalid_request",
                           "400 invalid_request: a malformed parameter.")
InvalidJson = _subclass("InvalidJson", 400, "invalid_json",
                        "400 invalid_json: a body that does not parse.")
InvalidUserId = _subclass("InvalidUserId", 400, "invalid_user_id",
                          "400 invalid_user_id: X-User-Id missing or "
                          "malformed.")
Unauthorized = _subclass("Unauthorized", 401, "unauthorized",
                         "401: no key, an unknown or revoked key, or an "
                         "expired token.")
Forbidden = _subclass("Forbidden", 403, "forbidden",
                      "403: outside a token's scopes, or an admin route.")
NotFound = _subclass("NotFound", 404, "not_found",
                     "404: unknown, expired, or someone else's.")
MethodNotAllowed = _subclass("MethodNotAllowed", 405, "method_not_allowed",
                             "405: a method the path does not support.")
Conflict = _subclass("Conflict", 409, "conflict",
                     "409 conflict: e.g. a second answer to a call.")
SessionBusy = _subclass("SessionBusy", 409, "session_busy",
                        "409 session_busy: the session runs another "
                        "execution.")
SessionExpired = _subclass("SessionExpired", 410, "session_expired",
                           "410 session_expired: the session has ended.")
CallExpired = _subclass("CallExpired", 410, "call_expired",
                        "410 call_expired: the call (or its execution) is "
                        "over.")
PayloadTooLarge = _subclass("PayloadTooLarge", 413, "payload_too_large",
                            "413: over a size limit.")
UnsupportedMediaType = _subclass("UnsupportedMediaType", 415,
                                 "unsupported_media_type",
                                 "415: a Content-Type the route refuses.")
TooManyRequests = _subclass("TooManyRequests", 429, "too_many_requests",
                            "429: a full queue or the tenant's share; see "
                            "retry_after.")
InternalError = _subclass("InternalError", 500, "internal_error",
                          "500: the server's fault.")
UpstreamError = _subclass("UpstreamError", 502, "upstream_error",
                          "502: URL ingest: the remote server failed.")
Unavailable = _subclass("Unavailable", 503, "unavailable",
                        "503: a store is down, a feature is off, or the "
                        "server stops; see retry_after.")
UpstreamTimeout = _subclass("UpstreamTimeout", 504, "upstream_timeout",
                            "504: URL ingest: the remote server was too "
                            "slow.")
QuotaExceeded = _subclass("QuotaExceeded", 507, "quota_exceeded",
                          "507: the user's or tenant's quota, or the disk.")

_BY_CODE = {c.code: c for c in (
    InvalidRequest, InvalidJson, InvalidUserId, Unauthorized, Forbidden,
    NotFound, MethodNotAllowed, Conflict, SessionBusy, SessionExpired,
    CallExpired, PayloadTooLarge, UnsupportedMediaType, TooManyRequests,
    InternalError, UpstreamError, Unavailable, UpstreamTimeout,
    QuotaExceeded)}

# A code this client does not know falls back on its status.
_BY_STATUS = {400: InvalidRequest, 401: Unauthorized, 403: Forbidden,
              404: NotFound, 405: MethodNotAllowed, 409: Conflict,
              410: SessionExpired, 413: PayloadTooLarge,
              415: UnsupportedMediaType, 429: TooManyRequests,
              500: InternalError, 502: UpstreamError, 503: Unavailable,
              504: UpstreamTimeout, 507: QuotaExceeded}


def error_class(status, code):
    """The exception class for a status and a contract error code."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    return _BY_STATUS.get(status, InterpdError)


def error_from_response(status, body, headers, retry_after=None,
                        attempts=1):
    """An InterpdError for an error answer: status, its body (bytes) and
    headers (a dict with lower-case names).  A body that is not the
    contract's error object still gives an error (its code None, its
    message the start of the body)."""
    import json

    code, message, request_id = None, "", None
    try:
        err = json.loads(body.decode("utf-8"))["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = err.get("message") or ""
        request_id = err.get("request_id")
    except (ValueError, KeyError, TypeError, AttributeError):
        message = body[:500].decode("utf-8", "replace").strip()
    if not request_id:
        request_id = headers.get("x-request-id")
    cls = error_class(status, code)
    return cls(status, code, message, request_id, retry_after, attempts,
               headers)
