# The prelude's library (prelude.py): everything a run needs only
# sometimes (the job's files and variables, load_file's readers, display,
# figures, the variables listing, tracebacks, matplotlib's font cache).
#
# Not a module to import: prelude.py's _lib() compiles this file into the
# prelude's own globals the first time one of these is needed (the zygote
# does it once, before it forks: zygote.py, _warm), so the names here and
# the prelude's share one namespace, and the success path of print(1)
# never reads this file.  It lives next to prelude.py in /opt/interpd,
# which is not on sys.path (python -I): the code cannot import it, and
# the user's __main__ gains no name from it.
#
# (Comments, not a docstring: a docstring would become the prelude's
# __doc__.)

# ----------------------------------------------------------------- the job

class PreludeError(Exception):
    """The job's inputs are unusable: the executor's fault, not the code's."""


def _apply_job(ns, files_raw, variables_raw):
    """FILES from files.json and the globals of variables.json."""
    import json
    try:
        files = json.loads(files_raw.decode("utf-8") or "[]")
        variables = json.loads(variables_raw.decode("utf-8") or "{}")
    except ValueError as e:
        raise PreludeError("files.json or variables.json: %s" % e) from None
    if not isinstance(files, list):
        raise PreludeError("files.json: not a list")
    for f in files:
        if not (isinstance(f, dict) and isinstance(f.get("file_id"), str)
                and isinstance(f.get("filename"), str)
                and isinstance(f.get("path"), str)):
            raise PreludeError("files.json: an entry lacks a file_id, "
                               "filename or path string")
    if not isinstance(variables, dict):
        raise PreludeError("variables.json: not an object")
    # Ids always work; a filename that two files share names neither:
    # FILES[name] and load_file(name) fail, listing the ids to use.
    paths = ns["FILES"]
    by_name = {}
    for f in files:
        by_name.setdefault(f["filename"], []).append(f)
        _ENTRIES[f["path"]] = f
    for name, same in by_name.items():
        if len(same) == 1:
            paths[name] = same[0]["path"]
            _ENTRIES[name] = same[0]
        else:
            _AMBIGUOUS[name] = [f["file_id"] for f in same]
    for f in files:
        paths[f["file_id"]] = f["path"]
        _ENTRIES[f["file_id"]] = f
    import keyword
    for name, value in variables.items():
        if (not name.isidentifier() or keyword.iskeyword(name)
                or name.startswith("__")):
            _stderr("interpd: variable %r ignored: not a usable Python "
                    "name\n" % (name,))
            continue
        ns[name] = value


def _reseed():
    """Fresh seeds for random and numpy when they were imported already."""
    r = sys.modules.get("random")
    if r is not None:
        r.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


# ------------------------------------------------------------ import hooks

class _AfterLoader:
    """Wraps a loader to call a function once the module has executed."""

    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        try:
            self._after(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _hooked_find_spec(hooks, name, path, target):
    before = hooks.before.pop(name, None)
    after = hooks.after.pop(name, None)
    if not hooks.before and not hooks.after:
        try:
            sys.meta_path.remove(hooks)
        except ValueError:
            pass
    if before is not None:
        try:
            globals()[before]()
        except Exception:
            pass
    if after is None:
        return None
    spec = None
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is hooks or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            break
    if spec is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _AfterLoader(spec.loader, globals()[after])
    return spec


def _call_hook(name, module):
    try:
        globals()[name](module)
    except Exception:
        pass


def _register_source(linecache):
    # mtime None: linecache.checkcache leaves the entry alone.
    if _SOURCE_LINES:
        linecache.cache[_CODE_NAME] = (sum(map(len, _SOURCE_LINES)), None,
                                       list(_SOURCE_LINES), _CODE_NAME)


# --------------------------------------------------------------- load_file

_KINDS = {
    "csv", "tsv", "excel", "json", "jsonl", "parquet", "yaml", "notebook",
    "text", "markdown", "python", "xml", "html", "image",
}

_EXT_KINDS = {
    ".csv": "csv", ".tsv": "tsv", ".tab": "tsv",
    ".xlsx": "excel", ".xlsm": "excel", ".xls": "excel", ".ods": "excel",
    ".json": "json", ".geojson": "json", ".ipynb": "notebook",
    ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".pq": "parquet",
    ".yaml": "yaml", ".yml": "yaml",
    ".txt": "text", ".log": "text", ".rst": "text", ".ini": "text",
    ".cfg": "text", ".toml": "text", ".sql": "text",
    ".md": "markdown", ".markdown": "markdown",
    ".py": "python", ".xml": "xml", ".svg": "xml",
    ".html": "html", ".htm": "html",
    ".png": "image", ".jpg": "image", ".jpeg": "image", ".gif": "image",
    ".bmp": "image", ".webp": "image", ".tif": "image", ".tiff": "image",
    ".ico": "image",
}

_PANDAS_KINDS = {"csv", "tsv", "excel", "parquet"}
_TEXT_KINDS = {"text", "markdown", "python", "xml", "html"}


def _kind_of(entry):
    """How to load a file: its file_type when we know that category, else
    (missing, "binary", ...) by extension; "bytes" when neither helps."""
    ext = os.path.splitext(entry["filename"])[1].lower()
    kind = entry.get("file_type")
    if kind not in _KINDS:
        kind = _EXT_KINDS.get(ext, kind)
    if kind == "image" and (ext == ".svg"
                            or entry.get("mime_type") == "image/svg+xml"):
        kind = "xml"
    return kind if kind in _KINDS else "bytes"


def _need_pandas(label, what):
    try:
        import pandas
    except ImportError:
        raise ImportError("%s: reading %s needs pandas, which is not "
                          "installed" % (label, what), name="pandas") from None
    return pandas


def _decode_text(data):
    """UTF-8 (BOM dropped), else Windows-1252, else Latin-1."""
    try:
        text = data.decode("utf-8")
        return text[1:] if text.startswith("\ufeff") else text
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _sniff_sep(path):
    """A CSV's delimiter: "," unless its first line has none and has ; tab
    or | (the commonest of them)."""
    with open(path, "rb") as f:
        line = f.read(65536).split(b"\n", 1)[0]
    if b"," in line:
        return ","
    best, count = ",", 0
    for sep in (";", "\t", "|"):
        n = line.count(sep.encode())
        if n > count:
            best, count = sep, n
    return best


def _read_csv(path, label, what, sep, kwargs):
    pd = _need_pandas(label, what)
    kw = dict(kwargs)
    if "sep" not in kw and "delimiter" not in kw:
        kw["sep"] = sep or _sniff_sep(path)
    encodings = ([kw.pop("encoding")] if "encoding" in kw
                 else ["utf-8", "cp1252", "latin-1"])
    for i, enc in enumerate(encodings):
        try:
            return pd.read_csv(path, encoding=enc, **kw)
        except UnicodeDecodeError as e:
            if i + 1 == len(encodings):
                raise ValueError("%s: could not parse as %s: %s"
                                 % (label, what, e)) from None
        except (OSError, ImportError, MemoryError, TypeError):
            raise
        except Exception as e:
            raise ValueError("%s: could not parse as %s: %s"
                             % (label, what, e)) from None


def _read_pandas(path, label, kind, kwargs):
    what = "Excel" if kind == "excel" else "Parquet"
    pd = _need_pandas(label, what)
    reader = pd.read_excel if kind == "excel" else pd.read_parquet
    try:
        return reader(path, **kwargs)
    except ImportError as e:
        raise ImportError("%s: cannot read %s: %s" % (label, what, e),
                          name=getattr(e, "name", None)) from None
    except (OSError, MemoryError, TypeError):
        raise
    except Exception as e:
        raise ValueError("%s: could not parse as %s: %s"
                         % (label, what, e)) from None


def _utf8(data, label, what):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("%s: could not parse as %s: not UTF-8: %s"
                         % (label, what, e)) from None
    return text[1:] if text.startswith("\ufeff") else text


def _read_json_value(data, label):
    import json
    try:
        return json.loads(_utf8(data, label, "JSON"))
    except ValueError as e:
        if str(e).startswith(label):
            raise
        raise ValueError("%s: could not parse as JSON: %s"
                         % (label, e)) from None


def _read_jsonl(data, label):
    import json
    records = []
    for n, line in enumerate(_utf8(data, label, "JSON Lines").splitlines(),
                             1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError as e:
                raise ValueError("%s: could not parse as JSON Lines: line "
                                 "%d: %s" % (label, n, e)) from None
    return _need_pandas(label, "JSON Lines").DataFrame(records)


def _read_yaml(data, label):
    try:
        import yaml
    except ImportError:
        raise ImportError("%s: reading YAML needs PyYAML, which is not "
                          "installed" % label, name="yaml") from None
    try:
        docs = list(yaml.safe_load_all(_utf8(data, label, "YAML")))
    except yaml.YAMLError as e:
        raise ValueError("%s: could not parse as YAML: %s"
                         % (label, e)) from None
    if not docs:
        return None
    return docs[0] if len(docs) == 1 else docs


def _read_image(path, data, label):
    try:
        from PIL import Image
    except ImportError:
        return data
    try:
        img = Image.open(path)
        img.load()
    except (MemoryError, FileNotFoundError, PermissionError):
        raise
    except Exception as e:
        raise ValueError("%s: could not open as an image: %s"
                         % (label, e)) from None
    return img


def _load_file(name, kwargs):
    key = name if isinstance(name, str) else os.fspath(name)
    entry = _ENTRIES.get(key) if isinstance(key, str) else None
    if entry is None and isinstance(key, str) and key in _AMBIGUOUS:
        raise _ambiguous("load_file(%r)" % (key,), key)
    if entry is None:
        seen = []
        for e in _ENTRIES.values():
            if e not in seen:
                seen.append(e)
        if seen:
            msg = "load_file(%r): no such file; available: %s" % (
                key, ", ".join("%r (id %s)" % (e["filename"], e["file_id"])
                               for e in seen))
        else:
            msg = ("load_file(%r): no such file; no files were provided to "
                   "this execution" % (key,))
        raise FileNotFoundError(msg)
    label = "load_file(%r)" % entry["filename"]
    kind = _kind_of(entry)
    path = entry["path"]
    if kwargs and kind not in _PANDAS_KINDS:
        raise TypeError("%s: keyword arguments go to pandas' reader, which "
                        "is used for csv, tsv, excel and parquet files only"
                        % label)
    if kind == "csv":
        return _read_csv(path, label, "CSV", None, kwargs)
    if kind == "tsv":
        return _read_csv(path, label, "TSV", "\t", kwargs)
    if kind in ("excel", "parquet"):
        return _read_pandas(path, label, kind, kwargs)
    data = _read_bytes(path)
    if kind in ("json", "notebook"):
        obj = _read_json_value(data, label)
        if (kind == "json" and isinstance(obj, list) and obj
                and all(isinstance(x, dict) for x in obj)):
            return _need_pandas(label, "JSON records").DataFrame(obj)
        return obj
    if kind == "jsonl":
        return _read_jsonl(data, label)
    if kind == "yaml":
        return _read_yaml(data, label)
    if kind in _TEXT_KINDS:
        return _decode_text(data)
    if kind == "image":
        return _read_image(path, data, label)
    return data


# ----------------------------------------------------------------- figures

_next_figure = [1]
_saved_figures = []     # [WeakSet of the figures that came back: the code
                        # saved them to a file, or they were shown]
_DISPLAY_ENTRIES_MAX = 1000   # bundles the service keeps (display.h)
_display_count = [0, 0]       # bundles this call appended, and the
                              # image/png bytes the service keeps of them


def _figure_name():
    n = _next_figure[0]
    while os.path.lexists(os.path.join(_OUTPUT, "figure_%d.png" % n)):
        n += 1
    _next_figure[0] = n + 1
    return "figure_%d.png" % n


def _came_back(fig):
    """fig came back already, unchanged: it was shown (_show_figure) or
    saved into the output directory, and its stale flag is False (the
    show or the save drew it whole; any change of its artists sets it)."""
    try:
        fig.stale = False
    except Exception:
        return
    if not _saved_figures:
        import weakref
        _saved_figures.append(weakref.WeakSet())
    _saved_figures[0].add(fig)


def _saved_unchanged(fig):
    """The code saved fig into the output directory, or it was shown, and
    it has not changed since (its stale flag turns True on any change of
    its artists)."""
    try:
        return bool(_saved_figures) and fig in _saved_figures[0] \
            and not fig.stale
    except Exception:
        return False


def _open_figures(plt):
    """(number, figure) of each open pyplot figure, in number order; none
    when pyplot cannot list them, a figure it cannot give skipped."""
    try:
        nums = plt.get_fignums()
    except Exception:
        return
    for num in nums:
        try:
            fig = plt.figure(num)
        except Exception:
            continue
        yield num, fig


def _save_figures():
    """Save every open pyplot figure as the next free figure_N.png, but
    one the code saved itself and did not change afterwards, then close
    them all."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num, fig in _open_figures(plt):
        if _saved_unchanged(fig):
            continue
        name = _figure_name()
        try:
            # A tight box keeps axis labels and legends inside the image.
            fig.savefig(os.path.join(_OUTPUT, name), format="png",
                        bbox_inches="tight")
            _FIGURES.append(name)
        except Exception as e:
            try:
                os.unlink(os.path.join(_OUTPUT, name))
            except OSError:
                pass
            _stderr("interpd: could not save figure %s: %s: %s\n"
                    % (num, type(e).__name__, e))
    try:
        plt.close("all")
    except Exception:
        pass


def _png_left():
    """What is left of the service's image budget for this call's display
    (its --inline-image-max, which the service writes into the job as
    display.json: {"inline_image_max": bytes}; the service keeps each
    image/png, in order, only while the decoded PNGs fit in it together,
    display.c); None when the job does not say (no limit known)."""
    try:
        raw = _read_bytes(os.path.join(_JOB, "display.json"))
        import json
        total = json.loads(raw.decode("utf-8"))["inline_image_max"]
    except (OSError, ValueError, LookupError, TypeError):
        return None
    if type(total) is not int:
        return None
    return max(total, 0) - _display_count[1]


def _charge_png(n):
    """A bundle with n bytes of PNG was appended: the service keeps it,
    and charges it, when it fits in what is left (as display.c's
    png_fits does)."""
    left = _png_left()
    if left is None or n <= left:
        _display_count[1] += n


def _keep_as_file(fig, png, left):
    """A shown figure whose PNG is over what is left of the image budget:
    the PNG saved as the next free figure_N.png (as an automatic save),
    and a text/plain bundle that names the file, so the chart is neither
    lost nor doubled.  Whether the file was written."""
    name = _figure_name()
    path = os.path.join(_OUTPUT, name)
    fd = -1
    try:
        # O_EXCL: a file of the code's own, made since _figure_name
        # looked, is neither overwritten nor removed.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        data = png
        while data:
            data = data[os.write(fd, data):]
    except OSError as e:
        if fd >= 0:
            try:
                os.unlink(path)
            except OSError:
                pass
        _stderr("interpd: could not save figure %s: %s: %s\n"
                % (name, type(e).__name__, e))
        return False
    finally:
        if fd >= 0:
            os.close(fd)
    _FIGURES.append(name)
    text = ("%s saved as %s: its PNG (%d bytes) is over what is left of "
            "the service's inline image limit (%d bytes)"
            % (_text_plain(fig), name, len(png), max(left, 0)))
    _append_display(("{\"text/plain\": %s}\n" % _jstr(text)).encode("utf-8"))
    return True


def _show_figure(plt, fig):
    """Show one figure (plt.show() for each open one, fig.show()): one
    display bundle with its PNG, in order with the other display output,
    then closed; a figure the code saved into the output directory and
    did not change since, or shown and not changed since (fig.show()
    twice), is only closed (it came back once already); one whose
    PNG is over what is left of the service's image budget is saved as
    figure_N.png instead, the bundle naming it (_keep_as_file).  None
    when the display channel is full (its 8 MiB or the service's bundle
    count: the figure stays open and is saved at the end, as display(fig)
    of it would leave it), False when no PNG could be made (the same),
    True once it is closed."""
    if not _saved_unchanged(fig):
        if _display_full or _display_count[0] >= _DISPLAY_ENTRIES_MAX:
            return None
        png = _png_bytes(fig)
        if png is None:
            return False
        left = _png_left()
        if left is not None and len(png) > left:
            if not _keep_as_file(fig, png, left):
                return False
        elif _append_display(_bundle_line(fig, png)):
            _charge_png(len(png))
        else:
            return False
        _came_back(fig)
    try:
        if plt is not None:
            plt.close(fig)
    except Exception:
        pass
    return True


def _show_figures(plt):
    """plt.show(): each open figure shown as _show_figure does, as a
    notebook's inline backend does."""
    for num, fig in _open_figures(plt):
        if _show_figure(plt, fig) is None:
            return


def _in_output(fname):
    """fname (savefig's: a path, or a file object, maybe with a name) is
    a file under the output directory, which comes back to the caller."""
    name = fname
    if not isinstance(fname, (str, bytes)) and \
            not hasattr(fname, "__fspath__"):
        name = getattr(fname, "name", None)     # a file object's path
    try:
        path = os.fsdecode(os.fspath(name))
        base = os.path.realpath(_OUTPUT)
        path = os.path.realpath(path)
        return os.path.commonpath([base, path]) == base and path != base
    except (TypeError, ValueError, OSError):
        return False


def _patch_figure(figure_cls):
    """Figure.savefig records the figures the code saved into the output
    directory (a buffer or a file elsewhere does not count: that chart
    would not come back), and clears the figure's stale flag: savefig
    drew the whole figure, and only restoring its own face and edge
    colours set the flag again (matplotlib 3.6), so a later change of
    the figure is what sets it.  Any other save (display(fig)'s into a
    buffer) leaves the flag as it was."""
    _patch_figure_show(figure_cls)
    savefig = figure_cls.savefig
    if getattr(savefig, "_interpd", False):
        return   # a session's later call: patched already

    def wrapped(self, fname, *args, **kwargs):
        was_stale = getattr(self, "stale", True)
        result = savefig(self, fname, *args, **kwargs)
        saved = _in_output(fname)
        if saved:
            if not _saved_figures:
                import weakref
                _saved_figures.append(weakref.WeakSet())
            _saved_figures[0].add(self)
        if saved or not was_stale:  # a save into a buffer changes nothing
            try:
                self.stale = False
            except Exception:
                pass
        return result
    wrapped._interpd = True
    wrapped.__wrapped__ = savefig
    wrapped.__doc__ = savefig.__doc__
    wrapped.__name__ = savefig.__name__
    wrapped.__qualname__ = savefig.__qualname__
    figure_cls.savefig = wrapped


def _patch_figure_show(figure_cls):
    """Figure.show (fig.show()) shows that one figure in display and
    closes it, as plt.show() does for all (_show_figure); matplotlib's
    own, under Agg, only warns that the canvas is non-interactive."""
    if getattr(figure_cls.show, "_interpd", False):
        return   # a session's later call: patched already
    original = figure_cls.show

    def show(self, *args, **kwargs):
        """Show this figure in the result's display list and close it
        (interpd)."""
        _show_figure(sys.modules.get("matplotlib.pyplot"), self)
    show._interpd = True
    show.__wrapped__ = original
    figure_cls.show = show


def _patch_pyplot(plt):
    """plt.show() shows the open figures in display and closes them, as a
    notebook's inline backend does (_show_figures), fig.show() that one
    (_patch_figure_show); Figure.savefig records what the code saved
    (_patch_figure)."""
    _patch_figure(sys.modules["matplotlib.figure"].Figure)

    def show(*args, **kwargs):
        """Show the open figures in the result's display list and close
        them (interpd)."""
        _show_figures(plt)
    if getattr(plt.show, "_interpd", False):
        return   # a session's later call: patched already
    show._interpd = True
    show.__wrapped__ = plt.show
    plt.show = show


def _seed_mpl_cache():
    """Copy the prepared font cache into $MPLCONFIGDIR (before matplotlib's
    first import)."""
    dst = os.environ.get("MPLCONFIGDIR")
    if not dst:
        return
    try:
        entries = list(os.scandir(_MPLCACHE))
    except OSError:
        return
    os.makedirs(dst, 0o700, exist_ok=True)
    for e in entries:
        target = os.path.join(dst, e.name)
        if not e.is_file(follow_symlinks=False) or os.path.lexists(target):
            continue
        tmp = target + ".%d.tmp" % os.getpid()
        try:
            data = _read_bytes(e.path)
            with open(tmp, "xb") as f:
                f.write(data)
            os.replace(tmp, target)
        except OSError:
            pass


# ----------------------------------------------------------------- display

_DISPLAY_FILE = "display.jsonl"
_DISPLAY_TEXT_MAX = 256 * 1024          # characters of one text value
_DISPLAY_FILE_MAX = 8 * 1024 * 1024     # bytes of display.jsonl
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_display_full = []                       # [True] once the file is full


def _describe_failure(obj, what, e):
    try:
        detail = "%s: %s" % (type(e).__name__, e)
    except Exception:
        detail = type(e).__name__
    return "<%s object: %s failed: %s>" % (type(obj).__name__, what, detail)


def _text_plain(obj):
    """repr(obj) as an exact str: a subclass's __len__, encode or
    translate could lie about its text (str.__str__ copies the real one)."""
    try:
        return str.__str__(repr(obj))
    except Exception as e:
        return _describe_failure(obj, "repr()", e)


def _repr_method(obj, name):
    """What obj._repr_*_() returns (the data of a (data, metadata) pair);
    None when obj is a class, has no such method or it fails."""
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
        if not callable(method):
            return None
        value = method()
    except Exception:
        return None
    if isinstance(value, tuple) and value:
        value = value[0]
    return value


def _png_bytes(obj):
    """PNG bytes of a matplotlib figure, a PIL image or an object with
    _repr_png_; None otherwise or when it fails."""
    if isinstance(obj, type):
        return None
    import io
    data = None
    figure = sys.modules.get("matplotlib.figure")
    image = sys.modules.get("PIL.Image")
    try:
        if figure is not None and isinstance(obj, figure.Figure):
            buf = io.BytesIO()
            obj.savefig(buf, format="png", bbox_inches="tight")
            data = buf.getvalue()
        elif image is not None and isinstance(obj, image.Image):
            buf = io.BytesIO()
            try:
                obj.save(buf, format="PNG")
            except (OSError, ValueError):   # a mode PNG cannot hold
                buf = io.BytesIO()
                obj.convert("RGBA").save(buf, format="PNG")
            data = buf.getvalue()
        else:
            data = _repr_method(obj, "_repr_png_")
    except Exception:
        return None
    if isinstance(data, (bytes, bytearray)) and \
            bytes(data[:8]) == _PNG_SIGNATURE:
        return bytes(data)
    return None


def _bundle_line(obj, png=None):
    """obj's MIME bundle as one line of JSON (bytes); png: its image,
    made already (b"": none)."""
    import binascii
    cut = False
    text = _text_plain(obj)
    if len(text) > _DISPLAY_TEXT_MAX:
        text = text[:_DISPLAY_TEXT_MAX] + "\n... (%d characters omitted)" % (
            len(text) - _DISPLAY_TEXT_MAX)
        cut = True
    parts = ['"text/plain": ' + _jstr(text)]
    html = _repr_method(obj, "_repr_html_")
    if isinstance(html, str):
        html = str.__str__(html)    # its real text, as _text_plain
        if len(html) <= _DISPLAY_TEXT_MAX:
            parts.append('"text/html": ' + _jstr(html))
        else:
            cut = True
    if png is None:
        png = _png_bytes(obj)
    if png:
        parts.append('"image/png": "%s"' % binascii.b2a_base64(
            png, newline=False).decode("ascii"))
    if cut:
        parts.append('"truncated": true')
    return ("{" + ", ".join(parts) + "}\n").encode("utf-8")


def _append_display(line):
    """Append line to .interpd/display.jsonl (a regular file only; never
    through a symlink); past _DISPLAY_FILE_MAX a {"truncated": true} line
    instead, once, then nothing.  Whether line was appended."""
    if _display_full:
        return False
    d = os.path.join(_OUTPUT, ".interpd")
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
             | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            pass
        fd = os.open(os.path.join(d, _DISPLAY_FILE), flags, 0o644)
    except OSError:
        return False
    written = False
    try:
        import stat
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if st.st_size + len(line) > _DISPLAY_FILE_MAX:
            _display_full.append(True)
            line = b'{"truncated": true}\n'
        else:
            written = True
        data = line
        while data:
            data = data[os.write(fd, data):]
        _display_count[0] += written
    except OSError:
        written = False
    finally:
        os.close(fd)
    if written and _CALLS:
        _send_display(line)
    return written


def _show(objs):
    """display(*objs): a bundle per object, in order."""
    for obj in objs:
        if _display_full:
            return
        png = _png_bytes(obj)
        if _append_display(_bundle_line(obj, png or b"")) and png:
            _charge_png(len(png))


_VARIABLES_MAX = 1000      # listed by a session's variables call
_VARIABLE_NAME_MAX = 256   # bytes of a name (a longer one is left out)
_VARIABLE_TYPE_MAX = 256   # characters of a type name
_VARIABLE_REPR_MAX = 500   # characters of each repr
_VARIABLES_BYTES = 1000000 # of the file (the service reads 1 MiB)


def _real_text(text, limit):
    """text (a str, maybe of a subclass whose methods lie) as a plain str
    of at most limit characters: str.__str__ makes the exact copy whose
    length and slices are real; NUL and lone surrogates, which the
    service's JSON parser refuses, are written as escapes."""
    text = str.__str__(text)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = text.replace("\0", "\\x00")
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text


def _variable_entry(name, value):
    """{"name", "type", "repr"} of one variable (the code's own __repr__
    runs here)."""
    try:
        text = repr(value)
    except BaseException as e:
        text = "<repr failed: %s>" % type(e).__name__
    if not isinstance(text, str):
        text = "<repr failed: not a str>"
    tname = type.__dict__["__name__"].__get__(type(value))
    return {"name": name,
            "type": _real_text(tname, _VARIABLE_TYPE_MAX),
            "repr": _real_text(text, _VARIABLE_REPR_MAX)}


def _write_variables(ns):
    """A session's user variables as .interpd/variables.json:
    {"variables": [{"name", "type", "repr"}], "truncated"}; modules,
    names starting with "_", keys that are not identifiers and the
    prelude's own names are left out.  Within the caps of
    service/exec/varlist.h, which checks the file again (this runs in the
    code's own interpreter: the service trusts none of it)."""
    import json
    import types
    pid = os.getpid()
    names = sorted(str.__str__(k) for k in list(ns)
                   if isinstance(k, str) and str.isidentifier(k))
    out, truncated, size = [], False, 40
    for name in names:
        value = ns.get(name)
        if (name.startswith("_") or name in ("FILES", "load_file")
                or isinstance(value, types.ModuleType)):
            continue
        if (len(out) >= _VARIABLES_MAX
                or len(name.encode("utf-8")) > _VARIABLE_NAME_MAX):
            truncated = True
            if len(out) >= _VARIABLES_MAX:
                break
            continue
        entry = _variable_entry(name, value)
        size += len(json.dumps(entry, ensure_ascii=True)) + 1
        if size > _VARIABLES_BYTES:
            truncated = True
            break
        out.append(entry)
    if os.getpid() != pid:   # a __repr__ forked: its child writes nothing
        os._exit(0)
    data = json.dumps({"variables": out, "truncated": truncated},
                      ensure_ascii=True)
    path = os.path.join(_OUTPUT, ".interpd", "variables.json")
    tmp = path + ".%d.tmp" % os.getpid()
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, path)


def _patch_ipython(module):
    """IPython.display.display is the prelude's display."""
    module.display = display


# ------------------------------------------------------------------ errors

def _cap(text, limit, keep_tail):
    if len(text) <= limit:
        return text
    omitted = "\n... (%d characters omitted) ...\n" % (len(text) - limit)
    if keep_tail:
        head = limit // 8
        return text[:head] + omitted + text[len(text) - (limit - head):]
    return text[:limit] + omitted


def _format_exception(exc):
    """The traceback as Python prints it, without this file's frames."""
    import linecache
    import traceback
    _register_source(linecache)
    self_files = (_lib.__code__.co_filename, _LIB_PATH)
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__,
                                      compact=True)
    todo, seen = [te], set()
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list(
            [f for f in t.stack if f.filename not in self_files])
        todo.append(t.__cause__)
        todo.append(t.__context__)
        todo.extend(getattr(t, "exceptions", None) or ())
    return "".join(te.format())


def _error_object(exc, print_traceback):
    """error for result.json; the traceback also goes to stderr when
    print_traceback (Python prints none for SystemExit)."""
    tb = _format_exception(exc)
    if print_traceback:
        _stderr(tb)
    if isinstance(exc, SystemExit):
        message = "" if exc.code is None else str(exc.code)
    else:
        try:
            message = str(exc)
        except Exception:
            message = "<exception str() failed>"
    return {"type": type(exc).__name__,
            "message": _cap(message, _MAX_MESSAGE, False),
            "traceback": _cap(tb, _MAX_TRACEBACK, True)}


# ------------------------------------------- calls from the code to its client
#
# docs/API.md "Calls".  A streamed run has job/calls.json, {"functions":
# [names], "max_bytes", "max_in_flight"}, and its end of the call socket
# as _CALL_FD (fd 3; a session's call: the descriptor its GO brought).
# Frames both ways: a 4-byte big-endian length, then one JSON object
# (service/common/calls.h): {"op": "call", "seq", "name", "args",
# "kwargs"} out, {"seq", "result"} or {"seq", "error": {"type",
# "message"}} back.  Any thread may call; whichever caller waits reads
# the socket for all of them (one reader at a time).  At most
# max_in_flight calls are sent before their answers come; a batch keeps
# that many going.

_CALL_TYPES = {}     # an error type of the client's -> its CallError class


def _call_error(err):
    """The exception the code sees for an answer's error object."""
    import builtins
    t = err.get("type") if isinstance(err, dict) else None
    msg = err.get("message") if isinstance(err, dict) else None
    if not isinstance(msg, str):
        msg = ""
    if not isinstance(t, str) or not t.isidentifier():
        t = "CallError"
    b = getattr(builtins, t, None)
    if isinstance(b, type) and issubclass(b, Exception):
        return b(msg)
    cls = _CALL_TYPES.get(t)
    if cls is None:
        cls = _CALL_TYPES[t] = type(t, (CallError,), {"__module__": "interpd"})
    return cls(msg)


class _CallChannel:
    def __init__(self, fd, max_bytes, max_in_flight):
        import threading
        self.fd = fd
        self.max_bytes = max_bytes
        self.write_lock = threading.Lock()
        self.cv = threading.Condition()
        self.slots = threading.Semaphore(max(1, max_in_flight))
        self.seq = 0
        self.answers = {}      # seq -> the answer frame (a dict)
        self.reading = False   # a caller reads the socket for all
        self.broken = None     # why the socket is unusable
        self.buf = b""

    def send(self, name, args, kwargs):
        """Send one call (a slot taken already); its seq."""
        import json
        if not isinstance(name, str) or not name or \
                len(name.encode("utf-8", "surrogatepass")) > 256:
            raise ValueError("call_client: the name must be a non-empty "
                             "string of at most 256 bytes")
        enc = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                               separators=(",", ":"))
        a = enc.encode(list(args))
        k = enc.encode(kwargs)
        size = len(a.encode("utf-8")) + len(k.encode("utf-8"))
        if size > self.max_bytes:
            raise ValueError("call_client: the arguments are %d bytes of "
                             "JSON, over this run's %d" % (size,
                                                           self.max_bytes))
        with self.write_lock:
            self.seq += 1
            self._write(('{"op":"call","seq":%d,"name":%s,"args":%s,'
                         '"kwargs":%s}' % (self.seq, enc.encode(name), a,
                                           k)).encode("utf-8"))
            return self.seq

    def send_frame(self, body):
        with self.write_lock:
            self._write(body)

    def _write(self, body):
        """One frame (under write_lock)."""
        if self.broken:
            raise ConnectionError(self.broken)
        data = len(body).to_bytes(4, "big") + body
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as e:
            self.broken = "interpd: the call socket is gone (%s)" % e
            raise ConnectionError(self.broken) from None

    def _read_frame(self):
        import json
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return json.loads(body)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the service closed the call socket")
            self.buf += chunk

    def wait(self, seq):
        """The answer frame of call seq."""
        with self.cv:
            while True:
                if seq in self.answers:
                    return self.answers.pop(seq)
                if self.broken:
                    raise ConnectionError(self.broken)
                if not self.reading:
                    self.reading = True
                    break
                self.cv.wait()
        try:
            while True:
                frame = self._read_frame()
                with self.cv:
                    self.answers[frame["seq"]] = frame
                    self.slots.release()
                    self.cv.notify_all()
                    if seq in self.answers:
                        self.reading = False
                        return self.answers.pop(seq)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:
            with self.cv:
                self.reading = False
                self.broken = "interpd: the call socket is gone (%s)" % e
                self.cv.notify_all()
            raise ConnectionError(self.broken) from None
        except BaseException:
            with self.cv:
                self.reading = False
                self.cv.notify_all()
            raise


def _send_display(line):
    """A streamed run's display event as it is shown: the bundle's line
    on the call socket too (the service checks it as it checks the
    file's)."""
    try:
        _channel().send_frame(b'{"op":"display","bundle":' +
                              line.rstrip(b"\n") + b"}")
    except Exception:
        pass        # the file has it: the result shows it all the same


def _apply_calls(ns, raw):
    """calls.json: a streamed run's calls, and its functions defined."""
    import json
    try:
        spec = json.loads(raw.decode("utf-8"))
        names = spec["functions"]
        _CALLS[:] = [int(spec["max_bytes"]), int(spec["max_in_flight"]),
                     None]
    except (ValueError, KeyError, TypeError) as e:
        raise PreludeError("calls.json: %s" % e) from None
    for name in names:
        if isinstance(name, str) and name.isidentifier():
            ns[name] = _ClientFunction(name)
            _CALL_NAMES.append(name)


def _channel():
    if not _CALLS:
        raise RuntimeError(
            "call_client: this execution is not streamed, so no client is "
            "there to answer a call (run it with \"stream\": true)")
    if _CALLS[2] is None:
        _CALLS[2] = _CallChannel(_CALL_FD[0], _CALLS[0], _CALLS[1])
    return _CALLS[2]


def _answer(frame):
    if "error" in frame:
        raise _call_error(frame["error"])
    return frame.get("result")


def _call(name, args, kwargs):
    ch = _channel()
    ch.slots.acquire()
    try:
        seq = ch.send(name, args, kwargs)
    except BaseException:
        ch.slots.release()
        raise
    return _answer(ch.wait(seq))


def _call_batch(name, items, return_exceptions):
    """One call per item (its one argument), max_in_flight at a time;
    the results in order."""
    ch = _channel()
    items = list(items)
    results = [None] * len(items)
    sent = []           # (index, seq) sent, not yet answered, in order
    for i, item in enumerate(items):
        while not ch.slots.acquire(blocking=False):
            j, seq = sent.pop(0)
            results[j] = ch.wait(seq)
        try:
            sent.append((i, ch.send(name, (item,), {})))
        except BaseException:
            ch.slots.release()
            raise
    for j, seq in sent:
        results[j] = ch.wait(seq)
    out = []
    for frame in results:
        try:
            out.append(_answer(frame))
        except Exception as e:
            if not return_exceptions:
                raise
            out.append(e)
    return out


class _ClientFunction:
    """A name of the request's "functions": calling it calls the client
    (call_client(name, ...)); .batch(items) as call_client_batch;
    .call_async(...) as call_client_async."""

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        return _call(self.__name__, args, kwargs)

    def batch(self, items, return_exceptions=False):
        return _call_batch(self.__name__, items, return_exceptions)

    async def call_async(self, *args, **kwargs):
        return await call_client_async(self.__name__, *args, **kwargs)

    def __repr__(self):
        return "<function %s: answered by the client>" % self.__name__
