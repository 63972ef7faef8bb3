"""interpd_client: a Python client for interpd, the code-interpreter HTTP
service (standard library only, Python 3.9+).

    from interpd_client import Client
    c = Client("http://127.0.0.1:8080", api_key=KEY, user_id="u42")
    f = c.upload("sales.csv")
    r = c.run("print(load_file('sales.csv').shape)", files=[f])
    print(r.stdout)

See README.md beside this package, and docs/API.md of interpd for the
HTTP API every method wraps.
"""

from .client import Client, Stream, call_answer
from .errors import (CallExpired, Conflict, ConnectionFailed, Forbidden,
                     InternalError, InterpdError, InvalidJson,
                     InvalidRequest, InvalidUserId, MethodNotAllowed,
                     NotFound, PayloadTooLarge, ProtocolError, QuotaExceeded,
                     RequestTimeout, SessionBusy, SessionExpired,
                     TooManyRequests, TransportError, Unauthorized,
                     Unavailable, UnsupportedMediaType, UpstreamError,
                     UpstreamTimeout, WaitTimeout, error_class)
from .events import (CallEvent, DisplayEvent, Event, FileEvent, InstallEvent,
                     OutputEvent, ResultEvent)
from .models import (Execution, ExecutionResult, ExecutionStatus,
                     ExecutionSummary, File, FilePage, Model, PackageResult,
                     Page, Session, Token, Variable, VariableList)

__version__ = "0.1.0"

__all__ = [
    "Client", "Stream", "call_answer",
    "InterpdError", "TransportError", "ConnectionFailed", "RequestTimeout",
    "ProtocolError", "WaitTimeout", "InvalidRequest", "InvalidJson",
    "InvalidUserId", "Unauthorized", "Forbidden", "NotFound",
    "MethodNotAllowed", "Conflict", "SessionBusy", "SessionExpired",
    "CallExpired", "PayloadTooLarge", "UnsupportedMediaType",
    "TooManyRequests", "InternalError", "UpstreamError", "Unavailable",
    "UpstreamTimeout", "QuotaExceeded", "error_class",
    "Event", "OutputEvent", "DisplayEvent", "FileEvent", "InstallEvent",
    "CallEvent", "ResultEvent",
    "Model", "File", "FilePage", "Page", "ExecutionResult",
    "ExecutionStatus", "ExecutionSummary", "Execution", "Session",
    "Variable", "VariableList", "Token", "PackageResult",
]
