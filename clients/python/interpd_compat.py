"""interpd_compat: the seed bot's code interpreter, served by interpd.

The Discord bot this project grew from (Coder-Vippro/ChatGPT-Discord-Bot,
``src/utils/code_interpreter.py`` at commit ee9d114) calls eleven async
functions of that module.  This module has the same names, arguments and
result dicts, implemented on :mod:`interpd_client`, so the bot switches to
interpd by changing one import (or by making its module
``from interpd_compat import *``)::

    from interpd_compat import execute_code, upload_file, list_user_files

Configuration, from the environment when the first call is made, or with
:func:`configure` (its arguments win; None reads the environment):

=========================  ==================================================
``INTERPD_URL``            the service (default ``http://127.0.0.1:8080``)
``INTERPD_API_KEY``        the bot's tenant key (required)
``INTERPD_ADMIN_KEY``      optional admin key: :func:`get_interpreter_status`
                           then reports the whole service and
                           :func:`cleanup_expired_files` runs interpd's sweep
``INTERPD_COMPAT_FILES_DIR``  the local mirror of ``file_path`` (below);
                           default ``/tmp/interpd_compat/user_files``
``INTERPD_TIMEOUT``        seconds the client waits for a byte (default 60;
                           a run waits its own timeout on top)
``CODE_EXECUTION_TIMEOUT`` the seed's: ``execute_code``'s default timeout
                           (default 300; interpd caps it by the key's policy)
=========================  ==================================================

Each function runs the blocking client in a thread (``asyncio.to_thread``),
so the bot's event loop never waits on the network.  ``user_id`` (a Discord
id, an int) is sent as ``X-User-Id`` in decimal; every file belongs to that
user, and another user's file id is "not found", as the seed's Mongo query
by ``user_id`` made it.  ``db_handler`` is accepted everywhere and ignored:
interpd keeps the files' metadata.  Like the seed, no function raises: a
failure comes back in the seed's error shape (``{"success": False,
"error": ...}``, ``[]``, ``None``, ``False`` or ``0``) and is logged on the
``interpd_compat`` logger.

Where the seed's behaviour cannot be kept exactly, this module does what a
bot written for the seed expects:

- ``file_path``: the seed stored files on its own disk and bots open that
  path (its /files command's download button).  Here it is
  ``FILES_DIR/<user_id>/<file_id><ext>``, a local mirror written with the
  bytes whenever they pass through this module (``upload_file``,
  ``upload_discord_attachment``, generated files of ``execute_code``,
  ``load_file``) and removed by the delete functions.  A file that never
  passed through this host (another process, or the mirror pruned) has
  its path in the metadata but nothing there: ``load_file`` fetches it
  and writes it.  ``cleanup_expired_files`` prunes copies of files interpd
  no longer has.
- Metadata (``list_user_files``, ``get_file_metadata``, ``upload_file``'s
  ``metadata``) has the seed's keys: ``file_id``, ``user_id`` (as the
  caller passed it), ``filename`` (interpd's sanitised name),
  ``file_path``, ``file_size``, ``file_type``, ``uploaded_at`` and
  ``expires_at``, the times in the seed's format (naive local time,
  ``datetime.isoformat()``; ``expires_at`` None when files never expire).
  ``file_type`` is interpd's category (from the content and the
  extension: csv, excel, json, text, image, pdf, ...; the seed's
  vocabulary for these); ``upload_file(file_type=...)`` is echoed in its
  own result as the seed does, but interpd does not store it.
- ``list_user_files`` is the seed's effective (second) definition: every
  file of the user, without the seed's ``db_handler is None -> []``.
  interpd never lists an expired file, so neither does this.
- ``execute_code``: ids in ``user_files`` that are unknown, expired or
  another user's are left out (logged), as the seed did.  Inside the code
  ``FILES`` maps each file's id (and its filename) to its path,
  ``load_file(id)`` loads it (interpd's loader: a DataFrame for Excel
  where the seed gave a ``pd.ExcelFile``, a PIL image where it gave a
  path) and, when the code uses it, ``get_file_path(id)`` gives the path
  (defined on a line put before the code; tracebacks keep the code's own
  line numbers).  The seed's regex blocklist is not applied: the code runs
  in interpd's sandbox instead, so "Security validation failed" never
  comes back, and code the seed refused (``import os``) runs.
  ``install_packages`` go through interpd's allowlist (``POST
  /v1/packages``) before the run; a refused or failed one is listed in
  ``failed_packages`` as ``(package, message)`` and the code runs anyway,
  as in the seed.  A package interpd installed by itself after a
  ``ModuleNotFoundError`` is listed in ``installed_packages``, as the
  seed's auto-install was.  ``error`` is the run's stderr (warnings
  included, traceback last), or ``"<type>: <message>"`` when stderr is
  empty (a memory kill, a signal).  ``generated_files`` carry their bytes
  in ``data`` (fetched from interpd when not inline) and the seed's
  ``type`` categories; a chart the code showed with ``plt.show()`` (which
  the seed lost) comes back too, as ``display_N.png`` with ``file_id``
  None.  A figure left open is saved by interpd as ``figure_N.png``.
- ``cleanup_expired_files``: interpd expires files by itself, exactly at
  ``expires_at``.  With an admin key this runs interpd's sweep now and
  returns how many files it deleted (every tenant's, as the seed counted
  every user's); without one it returns how many mirror copies of files
  gone from interpd it removed.
- ``get_interpreter_status``: with an admin key, ``GET /v1/admin/status``
  in the seed's fields (``installed_packages`` as names, ``last_cleanup``
  the last sweep's time, ``file_expiration_hours`` -1 for never).  With a
  tenant key only: the packages and venv from ``GET /v1/packages``,
  ``python_path`` "", the file totals 0 (as the seed without
  ``db_handler``), and ``file_expiration_hours`` and ``max_file_size_mb``
  the seed's own settings (``FILE_EXPIRATION_HOURS``, 48; 50).
"""

import asyncio
import base64
import datetime
import logging
import os
import re
import threading
import time

from interpd_client import (Client, Forbidden, InterpdError, NotFound,
                            PayloadTooLarge)

__all__ = [
    "configure", "execute_code", "upload_file", "upload_discord_attachment",
    "load_file", "list_user_files", "get_file_metadata", "delete_user_file",
    "delete_file", "delete_all_user_files", "cleanup_expired_files",
    "get_interpreter_status", "EXECUTION_TIMEOUT", "MAX_OUTPUT_SIZE",
]

logger = logging.getLogger("interpd_compat")

# The seed's constants: the default timeout of execute_code and its cut of
# the output.
CODE_EXECUTION_TIMEOUT = int(os.getenv("CODE_EXECUTION_TIMEOUT", "300"))
EXECUTION_TIMEOUT = CODE_EXECUTION_TIMEOUT
MAX_OUTPUT_SIZE = 100000
_TRUNCATED = "\n... (output truncated)"

_DEFAULT_URL = "http://127.0.0.1:8080"
_DEFAULT_FILES_DIR = "/tmp/interpd_compat/user_files"

# The seed's categories of generated files, by extension.
_CATEGORIES = [
    ("image", (".png", ".jpg", ".jpeg", ".gif", ".svg", ".bmp", ".webp",
               ".tiff")),
    ("data", (".csv", ".xlsx", ".xls", ".tsv")),
    ("text", (".txt", ".md", ".log", ".out", ".err")),
    ("structured", (".json", ".jsonl", ".xml", ".yaml", ".yml", ".toml")),
    ("html", (".html", ".htm")),
    ("pdf", (".pdf",)),
    ("code", (".py", ".js", ".java", ".cpp", ".c", ".r", ".sql")),
    ("archive", (".zip", ".tar", ".gz", ".7z")),
]

# The seed's sandbox had get_file_path(file_id); interpd's has FILES and
# load_file.  Defined on one line before the code when the code uses it.
_GET_FILE_PATH = '''def get_file_path(file_id):
    if file_id not in FILES:
        raise ValueError(f"File '{file_id}' not found. "
                         f"Available: {list(FILES.keys())}")
    return FILES[file_id]
'''
_CODE_LINE = re.compile(r'(File "<code>", line |\(<code>, line )(\d+)')
_SIZE_LIMIT = re.compile(r"over the limit of (\d+) bytes")

_lock = threading.Lock()
_state = {}


class _Config:
    def __init__(self, url, api_key, admin_key, files_dir, timeout, client):
        env = os.environ.get
        if client is not None:
            url = url or client.base_url
            api_key = api_key or client.api_key
        self.url = url or env("INTERPD_URL") or _DEFAULT_URL
        self.api_key = api_key or env("INTERPD_API_KEY")
        self.admin_key = admin_key or env("INTERPD_ADMIN_KEY")
        self.files_dir = (files_dir or env("INTERPD_COMPAT_FILES_DIR") or
                          _DEFAULT_FILES_DIR)
        if timeout is None:
            timeout = float(env("INTERPD_TIMEOUT") or 60)
        if client is None:
            client = Client(self.url, api_key=self.api_key, timeout=timeout)
        self.client = client
        self.admin = None
        if self.admin_key:
            self.admin = Client(self.url, api_key=self.admin_key,
                                timeout=timeout)


def configure(url=None, api_key=None, admin_key=None, files_dir=None,
              timeout=None, client=None):
    """Set where interpd is and with which keys; replaces the previous
    configuration.  An argument left None is read from the environment
    (``INTERPD_URL``, ``INTERPD_API_KEY``, ``INTERPD_ADMIN_KEY``,
    ``INTERPD_COMPAT_FILES_DIR``, ``INTERPD_TIMEOUT``).  ``client``: an
    :class:`interpd_client.Client` to use (its URL and key), e.g. one
    with other retries.  Not needed when the environment is set: the first
    call configures from it."""
    cfg = _Config(url, api_key, admin_key, files_dir, timeout, client)
    with _lock:
        _state["config"] = cfg
    return cfg


def _config():
    with _lock:
        cfg = _state.get("config")
    if cfg is None:
        cfg = configure()
    if not cfg.api_key:
        raise RuntimeError("interpd_compat: INTERPD_API_KEY is not set "
                           "(or call interpd_compat.configure(api_key=...))")
    return cfg


def _client(user_id):
    """The client for one end user (ints as their decimal text)."""
    return _config().client.for_user(user_id)


# ---- conversions -----------------------------------------------------------------

def _local_iso(stamp):
    """RFC 3339 UTC -> the seed's naive local ``isoformat()``; None
    stays None."""
    if not stamp:
        return None
    try:
        dt = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return dt.astimezone().replace(tzinfo=None).isoformat()


def _user_dir(user_id):
    name = str(user_id)
    if name.strip(".") == "":  # "." and ".." are valid X-User-Ids
        name = name.replace(".", "%2E")
    return name


def _mirror_path(user_id, file_id, filename):
    """The seed's layout: <dir>/<user>/<file_id><ext>, ``.txt`` when the
    name has no extension."""
    ext = os.path.splitext(filename or "")[1] or ".txt"
    return os.path.join(_config().files_dir, _user_dir(user_id),
                        file_id + ext)


def _mirror_write(user_id, file_id, filename, data):
    """Write the local copy (atomically); a failure is logged, not
    raised: interpd has the file."""
    path = _mirror_path(user_id, file_id, filename)
    tmp = "%s.%d.tmp" % (path, threading.get_ident())
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        logger.warning("could not write the local copy %s: %s", path, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return path


def _mirror_remove(user_id, file_id, filename):
    try:
        os.unlink(_mirror_path(user_id, file_id, filename))
    except FileNotFoundError:
        pass
    except OSError as e:
        logger.warning("could not remove the local copy of %s: %s",
                       file_id, e)


def _metadata(f, user_id, file_type=None):
    """An interpd File -> the seed's metadata document."""
    return {
        "file_id": f["file_id"],
        "user_id": user_id,
        "filename": f["filename"],
        "file_path": _mirror_path(user_id, f["file_id"], f["filename"]),
        "file_size": f["size"],
        "file_type": file_type or f.get("file_type") or "binary",
        "uploaded_at": _local_iso(f.get("created_at")),
        "expires_at": _local_iso(f.get("expires_at")),
    }


def _category(filename):
    ext = os.path.splitext(filename)[1].lower()
    for name, exts in _CATEGORIES:
        if ext in exts:
            return name
    return "file"


def _whole(x):
    """48.0 -> 48 (the seed's ints); 0.5 stays 0.5."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


# ---- execute_code ----------------------------------------------------------------

def _install(c, packages):
    """``POST /v1/packages``: (installed names, [(name, message)])."""
    packages = [str(p) for p in packages]
    try:
        results = c.install_packages(packages)
    except Forbidden:
        # A non-admin key may not change an installed version: the whole
        # request is refused, so ask for each alone to keep the others.
        results = []
        for p in packages:
            try:
                results.extend(c.install_packages([p]))
            except InterpdError as e:
                results.append({"package": p, "status": "failed",
                                "message": e.message})
    except InterpdError as e:
        return [], [(p, "Installation error: %s" % e) for p in packages]
    installed, failed = [], []
    for p, res in zip(packages, results):
        if res.get("status") in ("installed", "already_installed"):
            installed.append(p)
        else:
            failed.append((p, res.get("message") or res.get("status")))
    return installed, failed


def _with_helpers(code):
    """The code to send, and how many lines were put before it."""
    if ("get_file_path" not in code or "def get_file_path" in code or
            "from __future__" in code):
        return code, 0
    return "exec(%r)\n%s" % (_GET_FILE_PATH, code), 1


def _own_lines(text, shift):
    """Tracebacks with the code's own line numbers."""
    if not shift or not text:
        return text
    return _CODE_LINE.sub(
        lambda m: m.group(1) + str(max(1, int(m.group(2)) - shift)), text)


def _live_ids(c, ids, user_id):
    """The ids of ``ids`` the user still has (the seed skipped the
    others)."""
    live = []
    for fid in ids:
        try:
            c.get_file(fid)
            live.append(fid)
        except NotFound:
            logger.warning("File %s not found or expired for user %s", fid,
                           user_id)
    return live


def _run(c, code, ids, timeout, user_id):
    try:
        return c.run(code, files=ids, timeout=timeout)
    except NotFound:
        if not ids:
            raise
        return c.run(code, files=_live_ids(c, ids, user_id),
                     timeout=timeout)


def _stored_bytes(c, g):
    """A generated file's bytes: inline, else downloaded when stored;
    None when interpd kept neither (over the limits)."""
    data = g.data
    if data is None and g.get("stored") and g.get("file_id"):
        data = c.download(g["file_id"])
    return data


def _generated(c, r, user_id):
    """The seed's ``generated_files`` and ``generated_file_ids``."""
    files, ids = [], []
    for g in r.get("generated_files") or []:
        try:
            data = _stored_bytes(c, g)
        except InterpdError as e:
            logger.warning("Failed to process generated file %s: %s",
                           g.get("filename"), e)
            continue
        if data is None:
            logger.warning("Generated file %s skipped: %s",
                           g.get("filename"), g.get("message"))
            continue
        fid = g.get("file_id") if g.get("stored") else None
        if fid:
            ids.append(fid)
            _mirror_write(user_id, fid, g["filename"], data)
        files.append({"filename": g["filename"], "data": data,
                      "type": _category(g["filename"]),
                      "size": g.get("size", len(data)), "file_id": fid})
    files.extend(_shown_images(r, {f["filename"] for f in files}))
    return files, ids


def _shown_images(r, taken):
    """Charts shown with plt.show() (interpd's display), as files."""
    out, n = [], 0
    for bundle in r.get("display") or []:
        png = bundle.get("image/png") if isinstance(bundle, dict) else None
        if not isinstance(png, str):
            continue
        n += 1
        while "display_%d.png" % n in taken:
            n += 1
        data = base64.b64decode(png)
        out.append({"filename": "display_%d.png" % n, "data": data,
                    "type": "image", "size": len(data), "file_id": None})
    return out


def _error_text(r, shift):
    text = _own_lines(r.get("stderr") or "", shift)
    err = r.get("error")
    if isinstance(err, dict):
        if not text:
            text = "%s: %s" % (err.get("type"), err.get("message"))
        elif r.get("stderr_truncated") and err.get("traceback"):
            text += "\n" + _own_lines(err["traceback"], shift)
    return text


def _output_text(r):
    out = r.get("stdout") or ""
    if len(out) > MAX_OUTPUT_SIZE:
        return out[:MAX_OUTPUT_SIZE] + _TRUNCATED
    if r.get("stdout_truncated"):
        return out + _TRUNCATED
    return out


def _auto_installed(r):
    auto = r.get("auto_installed")
    if not auto:
        return []
    return [auto] if isinstance(auto, str) else [str(a) for a in auto]


def _execute(code, user_id, user_files, install_packages, timeout):
    start = time.monotonic()
    c = _client(user_id)
    installed, failed = [], []
    if install_packages:
        installed, failed = _install(c, install_packages)
    sent, shift = _with_helpers(code)
    ids = list(dict.fromkeys(str(f) for f in user_files or []))
    r = _run(c, sent, ids, timeout, user_id)
    if r.get("timed_out"):
        return {"success": False, "output": "",
                "error": "Execution timeout after %s seconds" % timeout,
                "execution_time": timeout, "return_code": -1}
    generated, generated_ids = _generated(c, r, user_id)
    result = {
        "success": bool(r.get("success")),
        "output": _output_text(r),
        "error": _error_text(r, shift),
        "execution_time": time.monotonic() - start,
        "return_code": r.get("exit_code"),
        "generated_files": generated,
        "generated_file_ids": generated_ids,
    }
    installed += _auto_installed(r)
    if installed:
        result["installed_packages"] = installed
    if failed:
        result["failed_packages"] = failed
    return result


async def execute_code(code, user_id, user_files=None, install_packages=None,
                       timeout=EXECUTION_TIMEOUT, db_handler=None):
    """Run ``code`` for ``user_id`` with the files ``user_files`` (ids)
    and the packages ``install_packages``.

    Returns the seed's dict: ``success``, ``output`` (stdout), ``error``
    (stderr), ``execution_time`` (seconds, installs included),
    ``return_code``, ``generated_files`` (``[{filename, data (bytes),
    type, size, file_id}]``), ``generated_file_ids``, and
    ``installed_packages`` / ``failed_packages`` when there are any.  A
    timeout: ``{success: False, output: "", error: "Execution timeout
    after N seconds", execution_time: N, return_code: -1}``.  Anything
    else that fails: ``{success: False, output: "", error: "Code
    interpreter error: ...", execution_time: 0}``."""
    try:
        return await asyncio.to_thread(_execute, code, user_id, user_files,
                                       install_packages, timeout)
    except Exception as e:  # the seed never raises; neither does this
        logger.error("Error in execute_code: %s", e)
        return {"success": False, "output": "",
                "error": "Code interpreter error: %s" % e,
                "execution_time": 0}


# ---- files -------------------------------------------------------------------------

def _too_large(e):
    m = _SIZE_LIMIT.search(e.message or "")
    if not m:
        return "File too large. %s" % e.message
    limit = int(m.group(1))
    if limit >= 1024 * 1024:
        return "File too large. Maximum size is %dMB" % (limit //
                                                         (1024 * 1024))
    return "File too large. Maximum size is %d bytes" % limit


def _upload(user_id, file_data, filename, file_type):
    if not isinstance(file_data, (bytes, bytearray, memoryview)):
        # interpd_client would read a str as a path on this host.
        raise TypeError("file_data must be bytes, not %s" %
                        type(file_data).__name__)
    try:
        f = _client(user_id).upload(bytes(file_data), filename=filename)
    except PayloadTooLarge as e:
        return {"success": False, "error": _too_large(e)}
    meta = _metadata(f, user_id, file_type)
    _mirror_write(user_id, f["file_id"], f["filename"], file_data)
    logger.info("Saved file %s for user %s: %s", f["filename"], user_id,
                f["file_id"])
    return {"success": True, "file_id": f["file_id"],
            "file_path": meta["file_path"], "metadata": meta}


async def upload_file(user_id, file_data, filename, file_type=None,
                      db_handler=None):
    """Store ``file_data`` (bytes) as ``filename`` for ``user_id``:
    ``{success: True, file_id, file_path, metadata}``, or ``{success:
    False, error}`` (``"File too large. Maximum size is NMB"`` over
    interpd's limit, the service's message otherwise)."""
    try:
        return await asyncio.to_thread(_upload, user_id, file_data, filename,
                                       file_type)
    except Exception as e:
        logger.error("Error uploading file: %s", e)
        return {"success": False, "error": str(e)}


async def upload_discord_attachment(attachment, user_id, db_handler=None):
    """Read a discord.py Attachment (``await attachment.read()``,
    ``attachment.filename``) and store it as :func:`upload_file` does;
    the same result."""
    try:
        file_data = await attachment.read()
        return await upload_file(user_id=user_id, file_data=file_data,
                                 filename=attachment.filename,
                                 db_handler=db_handler)
    except Exception as e:
        logger.error("Error uploading Discord attachment: %s", e)
        return {"success": False, "error": str(e)}


def _load(file_id, user_id):
    c = _client(user_id)
    try:
        f = c.get_file(file_id)
        data = c.download(f)
    except NotFound:
        return {"success": False, "error": "File not found or expired"}
    meta = _metadata(f, user_id)
    _mirror_write(user_id, f["file_id"], f["filename"], data)
    return {"success": True, "file_id": file_id,
            "filename": meta["filename"], "file_type": meta["file_type"],
            "file_size": meta["file_size"], "data": data,
            "uploaded_at": meta["uploaded_at"],
            "expires_at": meta["expires_at"]}


async def load_file(file_id, user_id, db_handler=None):
    """A file's metadata and bytes: ``{success: True, file_id, filename,
    file_type, file_size, data, uploaded_at, expires_at}``, or ``{success:
    False, error: "File not found or expired"}``."""
    try:
        return await asyncio.to_thread(_load, file_id, user_id)
    except Exception as e:
        logger.error("Error loading file %s: %s", file_id, e)
        return {"success": False, "error": str(e)}


def _list(user_id):
    return [_metadata(f, user_id) for f in _client(user_id).iter_files()]


async def list_user_files(user_id, db_handler=None):
    """Every live file of ``user_id``, newest first: a list of metadata
    dicts; ``[]`` on any failure."""
    try:
        files = await asyncio.to_thread(_list, user_id)
        logger.info("Listed %d files for user %s", len(files), user_id)
        return files
    except Exception as e:
        logger.error("Error listing user files: %s", e)
        return []


def _get_meta(file_id, user_id):
    try:
        return _metadata(_client(user_id).get_file(file_id), user_id)
    except NotFound:
        return None


async def get_file_metadata(file_id, user_id, db_handler=None):
    """The metadata dict of one of the user's files, or None."""
    try:
        return await asyncio.to_thread(_get_meta, file_id, user_id)
    except Exception as e:
        logger.error("Error getting file metadata: %s", e)
        return None


def _delete(file_id, user_id):
    """Delete it: its metadata, or None when the user has no such file
    (a delete that loses a race is that too)."""
    c = _client(user_id)
    try:
        f = c.get_file(file_id)
        c.delete_file(file_id)
    except NotFound:
        return None
    _mirror_remove(user_id, f["file_id"], f["filename"])
    logger.info("Deleted file %s", file_id)
    return f


async def delete_user_file(file_id, user_id, db_handler=None):
    """Delete one of the user's files: True, or False when there was no
    such file or it could not be deleted."""
    try:
        return await asyncio.to_thread(_delete, file_id, user_id) is not None
    except Exception as e:
        logger.error("Error deleting file: %s", e)
        return False


async def delete_file(file_id, user_id, db_handler=None):
    """Delete one of the user's files: ``{success: True, message: "Deleted
    file: NAME"}`` or ``{success: False, error}``."""
    try:
        f = await asyncio.to_thread(_delete, file_id, user_id)
    except Exception as e:
        logger.error("Error deleting file: %s", e)
        return {"success": False, "error": str(e)}
    if f is None:
        return {"success": False, "error": "File not found or you don't "
                "have permission to delete it"}
    return {"success": True, "message": "Deleted file: %s" % f["filename"]}


def _delete_all(user_id):
    c = _client(user_id)
    files = list(c.iter_files())
    if not files:
        return {"success": True, "deleted_count": 0,
                "message": "No files to delete"}
    deleted = failed = 0
    for f in files:
        try:
            c.delete_file(f["file_id"])
        except NotFound:
            pass  # gone meanwhile (expired): deleted all the same
        except InterpdError as e:
            logger.error("Error deleting file %s: %s", f["file_id"], e)
            failed += 1
            continue
        _mirror_remove(user_id, f["file_id"], f["filename"])
        deleted += 1
    return {"success": True, "deleted_count": deleted,
            "failed_count": failed,
            "message": "Deleted %d file(s)" % deleted +
            (" (%d failed)" % failed if failed else "")}


async def delete_all_user_files(user_id, db_handler=None):
    """Delete every file of the user: ``{success: True, deleted_count,
    failed_count, message}`` (``{success: True, deleted_count: 0,
    message: "No files to delete"}`` when there were none), or
    ``{success: False, error, deleted_count: 0}``."""
    try:
        return await asyncio.to_thread(_delete_all, user_id)
    except Exception as e:
        logger.error("Error deleting all user files: %s", e)
        return {"success": False, "error": str(e), "deleted_count": 0}


# ---- maintenance -------------------------------------------------------------------

def _admin_client(cfg):
    """The admin key's client, else the bot's key (which may be an admin
    key itself; a tenant key gets Forbidden)."""
    return cfg.admin or cfg.client


def _prune_user_dir(cfg, name):
    """Remove the copies in one user's mirror folder whose file interpd
    no longer has; how many."""
    folder = os.path.join(cfg.files_dir, name)
    user = name.replace("%2E", ".")
    listed_at = time.time()
    live = {f["file_id"] for f in cfg.client.for_user(user).iter_files()}
    removed = 0
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if os.path.splitext(entry)[0] in live or entry.endswith(".tmp"):
            continue
        try:
            if os.stat(path).st_mtime >= listed_at - 1:
                continue  # written after the listing: a new upload
            os.unlink(path)
            removed += 1
        except OSError as e:
            logger.warning("Failed to delete %s: %s", path, e)
    try:
        os.rmdir(folder)  # only when empty, as the seed did
    except OSError:
        pass
    return removed


def _prune_mirror(cfg):
    try:
        names = os.listdir(cfg.files_dir)
    except FileNotFoundError:
        return 0
    removed = 0
    for name in names:
        if not os.path.isdir(os.path.join(cfg.files_dir, name)):
            continue
        try:
            removed += _prune_user_dir(cfg, name)
        except InterpdError as e:
            logger.warning("could not check the copies of user %s: %s",
                           name, e)
    return removed


def _cleanup():
    cfg = _config()
    swept = None
    try:
        swept = _admin_client(cfg).admin_cleanup().get("deleted_files", 0)
    except Forbidden:
        logger.debug("no admin key: interpd expires files by itself")
    pruned = _prune_mirror(cfg)
    count = pruned if swept is None else swept
    if count:
        logger.info("Cleaned up %d expired files", count)
    return count


async def cleanup_expired_files(db_handler=None):
    """How many expired files were removed: interpd's sweep (with an
    admin key), else the local copies of files interpd no longer has;
    0 on any failure."""
    try:
        return await asyncio.to_thread(_cleanup)
    except Exception as e:
        logger.error("Error cleaning up files: %s", e)
        return 0


def _admin_status(s):
    names = [p["name"] if isinstance(p, dict) else str(p)
             for p in s.get("installed_packages") or []]
    last = s.get("last_cleanup")
    hours = s.get("file_expiration_hours")
    return {
        "venv_exists": bool(s.get("venv_exists")),
        "python_path": s.get("python_path") or "",
        "installed_packages": names,
        "package_count": s.get("package_count", len(names)),
        "last_cleanup": _local_iso(last.get("at"))
        if isinstance(last, dict) else None,
        "total_user_files": s.get("total_user_files") or 0,
        "total_file_size_mb": round(s.get("total_file_size_mb") or 0, 2),
        "file_expiration_hours": -1 if hours is None else _whole(hours),
        "max_file_size_mb": int(s.get("max_file_size_mb") or 0),
    }


def _tenant_status(cfg):
    p = cfg.client.packages()
    names = [i["name"] for i in p.get("installed") or []]
    venv = p.get("venv") or {}
    return {
        "venv_exists": venv.get("created_at") is not None,
        "python_path": "",
        "installed_packages": names,
        "package_count": len(names),
        "last_cleanup": None,
        "total_user_files": 0,
        "total_file_size_mb": 0.0,
        "file_expiration_hours": int(os.getenv("FILE_EXPIRATION_HOURS",
                                               "48")),
        "max_file_size_mb": 50,
    }


def _status():
    cfg = _config()
    try:
        return _admin_status(_admin_client(cfg).admin_status())
    except Forbidden:
        return _tenant_status(cfg)


async def get_interpreter_status(db_handler=None):
    """The seed's status dict: ``venv_exists``, ``python_path``,
    ``installed_packages`` (names), ``package_count``, ``last_cleanup``,
    ``total_user_files``, ``total_file_size_mb``,
    ``file_expiration_hours``, ``max_file_size_mb``; ``{error}`` on any
    failure."""
    try:
        return await asyncio.to_thread(_status)
    except Exception as e:
        logger.error("Error getting status: %s", e)
        return {"error": str(e)}
