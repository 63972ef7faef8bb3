"""venv_check.py - the import check interpd runs, in the sandbox, on a venv
generation before switching to it (venv/venv.c).

Usage: python -I venv_check.py [--provided DIST=MOD[,MOD...]] ... [DIST ...]

For each distribution named, import every top-level module it installs
(from its RECORD, or top_level.txt).  Prints one JSON object on stdout:

  {"python_version": "3.11.2",
   "checked": {"<dist>": {"version": "1.0" | null, "ok": true,
                          "modules": ["pkg"], "error": null | "ImportError: ..."}},
   "installed": [["numpy", "1.24.2"], ...]}

"installed" lists every distribution the interpreter sees (the venv's
own and, with system site packages, Debian's), first one on sys.path wins.

System builds without metadata.  Debian installs some modules with no
.dist-info or .egg-info (python3-opencv's cv2): importlib.metadata does not
see them, though they import.  Each --provided DIST=MODULES (venv/venv.c
passes every allowlisted distribution with its import names: the import
map's, then its own name with "_" for "-" and ".") whose distribution has
no metadata counts as installed, with the module's __version__, when one
of its modules (the first such, in order) is found on sys.path (not the
standard library's), imports and has a version string: it is in
"installed", and a check of DIST answers for it ("modules": that one).
A module without a version string does not count (nothing says which
version is there).

Placeholder versions.  Some of Debian's builds carry a version their
build could not know: mpmath's egg-info says 0.0.0 (the package is 1.2.1,
mpmath.__version__).  A metadata version of 0.0.0 (or 0, 0.0) is replaced
by the top-level module's __version__ when that is a version string.
xarray's egg-info says 999, and so does xarray.__version__ (it reads the
metadata): no source in the interpreter knows better, so it stays 999
(docs/API.md, GET /v1/packages).

Exit status 0 whenever the JSON was printed, whatever the imports did.
"""
import importlib
import importlib.metadata as md
import json
import re
import sys


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_modules(dist):
    mods = set()
    text = dist.read_text("top_level.txt")
    if text:
        mods.update(line.strip() for line in text.splitlines() if line.strip())
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".data", ".egg-info")):
            continue
        if parts[0] == "__pycache__":
            continue
        if len(parts) == 1:
            name = parts[0]
            if name.endswith(".py"):
                mods.add(name[:-3])
            elif name.endswith((".so", ".pyd")):
                mods.add(name.split(".", 1)[0])
        elif parts[1] in ("__init__.py",) or parts[1].startswith("__init__."):
            mods.add(parts[0])
    return sorted(m for m in mods if m.isidentifier())


_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!_-]{0,63}\Z")
_PLACEHOLDERS = ("0", "0.0", "0.0.0")


def module_version(mod):
    """mod's __version__ once imported, when it is a version string;
    None otherwise (or when the import fails)."""
    try:
        v = getattr(importlib.import_module(mod), "__version__", None)
    except BaseException:  # SystemExit, KeyboardInterrupt included
        return None
    return v if isinstance(v, str) and _VERSION.match(v) else None


def dist_version(dist, name):
    """dist's version, but a placeholder's replaced (see above)."""
    v = dist.version
    if v in _PLACEHOLDERS:
        mods = top_level_modules(dist) or [name.replace("-", "_")]
        real = module_version(mods[0])
        if real and real not in _PLACEHOLDERS:
            return real
    return v


def system_provided(provided, seen):
    """{dist: [version, modules]} of the --provided distributions without
    metadata whose modules the interpreter imports (see above)."""
    import importlib.util
    stdlib = getattr(sys, "stdlib_module_names", ())
    out = {}
    for dist, mods in provided.items():
        if dist in seen:
            continue
        for mod in mods:
            if mod in stdlib:
                continue
            try:
                found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            version = module_version(mod) if found else None
            if version:
                out[dist] = [version, [mod]]
                break
    return out


def check(name, system):
    out = {"version": None, "ok": False, "modules": [], "error": None}
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        if normalize(name) in system:
            out["version"], out["modules"] = system[normalize(name)]
            out["ok"] = True
            return out
        out["error"] = "not installed"
        return out
    out["version"] = dist_version(dist, name)
    out["modules"] = top_level_modules(dist)
    try:
        for mod in out["modules"]:
            importlib.import_module(mod)
        out["ok"] = True
    except BaseException as e:  # SystemExit, KeyboardInterrupt included
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:400])
    return out


def parse_args(args):
    """(dists to check, {dist: [modules]} of --provided)."""
    dists, provided = [], {}
    it = iter(args)
    for a in it:
        if a == "--provided":
            dist, _, mods = next(it, "").partition("=")
            mods = [m for m in mods.split(",") if m.isidentifier()]
            if dist and mods:
                provided[normalize(dist)] = mods
        else:
            dists.append(a)
    return dists, provided


def main():
    dists, provided = parse_args(sys.argv[1:])
    seen = {}
    for dist in md.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name:
            continue
        key = normalize(name)
        if key not in seen:
            seen[key] = [key, dist_version(dist, key)]
    system = system_provided(provided, seen)
    for key, (version, _) in system.items():
        seen[key] = [key, version]
    checked = {n: check(n, system) for n in dists}
    v = sys.version_info
    json.dump({"python_version": "%d.%d.%d" % (v.major, v.minor, v.micro),
               "checked": checked,
               "installed": sorted(seen.values())}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
