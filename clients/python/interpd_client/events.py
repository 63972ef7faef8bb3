"""Server-Sent Events of a streamed execution, parsed line by line, and
the typed events they become.

The parser follows the WHATWG "event stream interpretation": a line that
starts with ``:`` is a comment (the server's ``: keep-alive``), other lines
are ``NAME: VALUE`` fields (one space after the colon dropped), and a blank
line dispatches the event the fields before it describe.  Each event's
data is JSON (one line, per docs/API.md); it becomes the ``data`` of an
Event subclass chosen by its kind, and a kind this client does not know is
passed through as a plain Event.
"""

import json

from .models import ExecutionResult, File, PackageResult

__all__ = ["Event", "OutputEvent", "DisplayEvent", "FileEvent",
           "InstallEvent", "CallEvent", "ResultEvent", "parse_sse",
           "make_event"]


class Event:
    """One event of a stream.

    Attributes:
        kind: the event name (``stdout``, ``result``, or one added later).
        id: its ``id:`` (an int when it is one, else the text, or None).
        data: its data, decoded from JSON (None when it is not JSON).
        raw: the data text as it came.
    """

    def __init__(self, kind, id, data, raw):
        self.kind = kind
        self.id = id
        self.data = data
        self.raw = raw

    def __repr__(self):
        return "%s(kind=%r, id=%r, data=%r)" % (type(self).__name__,
                                                 self.kind, self.id,
                                                 self.data)


class OutputEvent(Event):
    """``stdout`` or ``stderr``: ``text`` is a chunk of what the code
    wrote (chunks need not match its writes; join them)."""

    @property
    def text(self):
        return self.data if isinstance(self.data, str) else ""


class DisplayEvent(Event):
    """``display``: ``bundle`` is one MIME bundle (``text/plain``, maybe
    ``text/html``, ``image/png`` as base64)."""

    @property
    def bundle(self):
        return self.data if isinstance(self.data, dict) else {}


class FileEvent(Event):
    """``file``: ``file`` is a generated File, as it is stored."""

    @property
    def file(self):
        return File(self.data) if isinstance(self.data, dict) else None


class InstallEvent(Event):
    """``install``: ``package`` is one PackageResult."""

    @property
    def package(self):
        return (PackageResult(self.data) if isinstance(self.data, dict)
                else None)


class CallEvent(Event):
    """``call``: the code called its client.  ``call_id``, ``name``,
    ``args`` (a list), ``kwargs`` (a dict).  ``answer(result)`` and
    ``answer_error(type, message)`` answer it (``POST
    /v1/executions/{id}/calls/{call_id}``); with ``functions`` given to
    the stream, the client has answered it already and ``answered`` is
    True."""

    def __init__(self, kind, id, data, raw):
        super().__init__(kind, id, data, raw)
        self._answer = None   # set by the Stream: f(call_id, payload)
        self.answered = False

    def _field(self, name, default):
        if isinstance(self.data, dict) and name in self.data:
            return self.data[name]
        return default

    @property
    def call_id(self):
        return self._field("call_id", None)

    @property
    def name(self):
        return self._field("name", None)

    @property
    def args(self):
        return self._field("args", [])

    @property
    def kwargs(self):
        return self._field("kwargs", {})

    def answer(self, result):
        """Answer the call with a JSON value: the code's call returns
        it."""
        self._answer(self.call_id, {"result": result})
        self.answered = True

    def answer_error(self, type, message):
        """Answer the call with an error: the code's call raises
        ``type`` (a builtin exception of that name, else a CallError
        subclass) with ``message``."""
        self._answer(self.call_id, {"error": {"type": type,
                                              "message": message}})
        self.answered = True


class ResultEvent(Event):
    """``result``, the last event: ``result`` is the ExecutionResult."""

    @property
    def result(self):
        return (ExecutionResult(self.data) if isinstance(self.data, dict)
                else None)


_KINDS = {"stdout": OutputEvent, "stderr": OutputEvent,
          "display": DisplayEvent, "file": FileEvent,
          "install": InstallEvent, "call": CallEvent, "result": ResultEvent}


def make_event(kind, id, raw):
    """The typed Event for a dispatched SSE event."""
    data = None
    if raw is not None:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
    if isinstance(id, str) and id.isdigit():
        id = int(id)
    return _KINDS.get(kind, Event)(kind, id, data, raw)


def parse_sse(lines):
    """Yield an Event for each event dispatched by the SSE ``lines`` (an
    iterable of bytes, each with its line ending).  Comments are dropped;
    an event without data is dispatched with data None; the kind defaults
    to ``message`` as in a browser."""
    kind, id, data = None, None, []
    seen = False
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if line.endswith("\r\n"):
            line = line[:-2]
        elif line.endswith("\n") or line.endswith("\r"):
            line = line[:-1]
        if line == "":
            if seen:
                yield make_event(kind or "message", id,
                                 "\n".join(data) if data else None)
            kind, data, seen = None, [], False
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        seen = True
        if name == "event":
            kind = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            id = value
