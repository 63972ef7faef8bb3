"""Typed results: dict subclasses with attribute access.

Every object the service answers is returned as a ``dict`` subclass that
holds the JSON object exactly as the server sent it, so ``f["size"]`` and
``json.dumps(f)`` work, and fields the server adds later are there too.
The documented fields also read as attributes (``f.size``); a documented
field the answer lacks reads as None (a generated file that was not stored
has no ``file_id``), while an unknown attribute raises AttributeError.
Nested objects are typed too: an ExecutionResult's ``generated_files`` are
File objects.

Why dicts rather than dataclasses: the contract lets the server add
fields, and a dict keeps every one of them without a new client release.
"""

import base64

__all__ = ["Model", "File", "FilePage", "Page", "ExecutionResult",
           "ExecutionStatus", "ExecutionSummary", "Execution", "Session",
           "Variable", "VariableList", "Token", "PackageResult"]


class Model(dict):
    """A JSON object from the service, with attribute access to its
    documented ``_fields``."""

    _fields = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            if name in type(self)._fields:
                return None
            raise AttributeError("%s has no field %r" % (
                type(self).__name__, name)) from None

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, dict.__repr__(self))


class File(Model):
    """A File object (``POST /v1/files``, ``GET /v1/files/{id}``, an
    entry of ``generated_files`` or of a ``file`` event).

    Fields: file_id, filename, size, mime_type, file_type, sha256, source
    (``upload``, ``url``, ``generated``), created_at, expires_at; for a
    generated file also stored, data_base64, not_stored_reason, message.
    """

    _fields = ("file_id", "filename", "size", "mime_type", "file_type",
               "sha256", "source", "created_at", "expires_at", "stored",
               "data_base64", "not_stored_reason", "not_inline_reason",
               "quota", "message")

    @property
    def data(self):
        """The inline bytes (``data_base64`` decoded), or None."""
        b64 = self.get("data_base64")
        return base64.b64decode(b64) if isinstance(b64, str) else None


class Page(list):
    """One page of a list: a list of items plus ``next_cursor`` (None on
    the last page)."""

    def __init__(self, items=(), next_cursor=None):
        super().__init__(items)
        self.next_cursor = next_cursor

    def __repr__(self):
        return "%s(%s, next_cursor=%r)" % (type(self).__name__,
                                           list.__repr__(self),
                                           self.next_cursor)


class FilePage(Page):
    """A page of File objects (``GET /v1/files``)."""


class ExecutionResult(Model):
    """The result object of an execution (the synchronous answer, the
    ``result`` event, a finished asynchronous execution's ``result``).

    Fields: execution_id, success, exit_code, timed_out, cancelled,
    stdout, stderr, stdout_truncated, stderr_truncated, execution_time,
    install_time, error (None or a dict: type, message, traceback),
    generated_files (File objects), display (MIME bundles: dicts),
    installed_packages, auto_installed, resources; in a session also
    session_id, session_ended, session_end_reason; cancel_mode.
    """

    _fields = ("execution_id", "success", "exit_code", "timed_out",
               "cancelled", "stdout", "stderr", "stdout_truncated",
               "stderr_truncated", "execution_time", "install_time", "error",
               "generated_files", "generated_files_truncated",
               "generated_files_dropped", "generated_files_skipped",
               "display", "display_truncated", "installed_packages",
               "auto_installed", "resources", "session_id", "session_ended",
               "session_end_reason", "cancel_mode")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        files = self.get("generated_files")
        if isinstance(files, list):
            self["generated_files"] = [
                File(f) if isinstance(f, dict) else f for f in files]

    @property
    def error_type(self):
        """``error["type"]`` (``"ZeroDivisionError"``, ``"Timeout"``,
        ``"Cancelled"``...), or None on success."""
        err = self.get("error")
        return err.get("type") if isinstance(err, dict) else None


class ExecutionStatus(Model):
    """``GET /v1/executions/{id}``: execution_id, status (``queued``,
    ``running``, ``done``, ``cancelled``), result (an ExecutionResult or
    None) and, with a callback_url, callback."""

    _fields = ("execution_id", "status", "result", "callback")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.get("result"), dict):
            self["result"] = ExecutionResult(self["result"])

    @property
    def finished(self):
        """True once the execution is over (done or cancelled)."""
        return self.get("status") in ("done", "cancelled")


class ExecutionSummary(Model):
    """An entry of ``GET /v1/executions``: execution_id, status,
    created_at, session_id, duration."""

    _fields = ("execution_id", "status", "created_at", "session_id",
               "duration")


class Variable(Model):
    """A session variable: name, type, repr."""

    _fields = ("name", "type", "repr")


class VariableList(list):
    """A session's variables (Variable objects, sorted by name), and
    ``truncated``: whether the server left some out."""

    def __init__(self, items=(), truncated=False):
        super().__init__(items)
        self.truncated = truncated


class Execution(Model):
    """A submitted asynchronous execution (``202 {"execution_id",
    "status"}``), bound to its client: ``status()`` reads it again,
    ``wait()`` polls until it is over and returns its ExecutionResult,
    ``cancel()`` cancels it."""

    _fields = ("execution_id", "status")

    def __init__(self, data=(), client=None):
        super().__init__(data)
        self._client = client

    def refresh(self):
        """``GET /v1/executions/{id}``: an ExecutionStatus; also updates
        this object's ``status``."""
        st = self._client.get_execution(self.execution_id)
        self["status"] = st.get("status")
        return st

    def wait(self, timeout=None, poll_interval=0.1, max_poll_interval=1.0):
        """Poll until done or cancelled; the ExecutionResult."""
        return self._client.wait(self.execution_id, timeout=timeout,
                                 poll_interval=poll_interval,
                                 max_poll_interval=max_poll_interval)

    def cancel(self):
        """``DELETE /v1/executions/{id}`` (202: the cancel is under
        way)."""
        return self._client.cancel(self.execution_id)


class Token(Model):
    """A scoped token (``POST /v1/tokens``): token, user_id, scopes,
    expires_at."""

    _fields = ("token", "user_id", "scopes", "expires_at")


class PackageResult(Model):
    """One requirement's outcome (``POST /v1/packages``, an ``install``
    event): package, status (``installed``, ``already_installed``,
    ``not_allowed``, ``invalid``, ``failed``), version, message."""

    _fields = ("package", "status", "version", "message")


class Session(Model):
    """A session (``POST /v1/sessions``, ``GET /v1/sessions/{id}``):
    session_id, created_at, expires_at, last_used_at, status, policy.

    Bound to the client that made it: ``run`` runs code in it,
    ``variables`` lists its variables, ``refresh`` reads it again and
    ``delete`` ends it.  As a context manager it ends the session on
    exit.
    """

    _fields = ("session_id", "created_at", "expires_at", "last_used_at",
               "status", "policy")

    def __init__(self, data=(), client=None):
        super().__init__(data)
        self._client = client

    def run(self, code, **kwargs):
        """``client.run(code, session=self, ...)``: an ExecutionResult."""
        return self._client.run(code, session=self.session_id, **kwargs)

    def stream(self, code, **kwargs):
        """``client.stream(code, session=self, ...)``: a Stream."""
        return self._client.stream(code, session=self.session_id, **kwargs)

    def submit(self, code, **kwargs):
        """``client.submit(code, session=self, ...)``: an Execution."""
        return self._client.submit(code, session=self.session_id, **kwargs)

    def variables(self):
        """The session's variables: a list of Variable."""
        return self._client.session_variables(self.session_id)

    def refresh(self):
        """Read the session again (``status``, ``expires_at``...);
        returns self."""
        fresh = self._client.get_session(self.session_id)
        self.clear()
        self.update(fresh)
        return self

    def delete(self):
        """End the session (``DELETE /v1/sessions/{id}``)."""
        self._client.delete_session(self.session_id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.delete()
        return False
