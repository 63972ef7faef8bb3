"""venv_check.py - the import check interpd runs, in the sandbox, on a venv
generation before switching to it (venv/venv.c).

Usage: python -I venv_check.py [DIST ...]

For each distribution named, import every top-level module it installs
(from its RECORD, or top_level.txt).  Prints one JSON object on stdout:

  {"python_version": "3.11.2",
   "checked": {"<dist>": {"version": "1.0" | null, "ok": true,
                          "modules": ["pkg"], "error": null | "ImportError: ..."}},
   "installed": [["numpy", "1.24.2"], ...]}

"installed" lists every distribution the interpreter sees (the venv's
own and, with system site packages, Debian's), first one on sys.path wins.
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


def check(name):
    out = {"version": None, "ok": False, "modules": [], "error": None}
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        out["error"] = "not installed"
        return out
    out["version"] = dist.version
    out["modules"] = top_level_modules(dist)
    try:
        for mod in out["modules"]:
            importlib.import_module(mod)
        out["ok"] = True
    except BaseException as e:  # SystemExit, KeyboardInterrupt included
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:400])
    return out


def main():
    checked = {n: check(n) for n in sys.argv[1:]}
    seen = {}
    for dist in md.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name:
            continue
        key = normalize(name)
        if key not in seen:
            seen[key] = [key, dist.version]
    v = sys.version_info
    json.dump({"python_version": "%d.%d.%d" % (v.major, v.minor, v.micro),
               "checked": checked,
               "installed": sorted(seen.values())}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
