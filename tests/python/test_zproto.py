"""The zygote protocol's two sides agree: the numbers zygote.py copies
(service/exec/python/zygote.py: CMD_*, CTL_*, VERB_*, PARK_FDS_MAX, the
_CTL and _DONE layouts) against service/sandbox/zproto.h, as compiled
into zproto_dump (its output: "<C name> <python name> <value>").  Fails
when either side changes a number, adds one the other lacks, or the
header gains a constant the dump does not print.

    test_zproto.py ZPROTO_DUMP ZYGOTE_PY ZPROTO_H
"""

import importlib.util
import re
import struct
import subprocess
import sys

FAILED = []


def check(ok, what):
    if not ok:
        FAILED.append(what)
        print("FAIL: " + what)


def load_zygote(path):
    spec = importlib.util.spec_from_file_location("_ipd_zygote", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def py_value(z, name):
    """zygote.py's value for a dump name: a constant (a one-byte bytes
    is its byte) or a struct's .size."""
    obj, _, attr = name.partition(".")
    if not hasattr(z, obj):
        return None
    v = getattr(z, obj)
    if attr:
        return getattr(v, attr)
    if isinstance(v, bytes) and len(v) == 1:
        return v[0]
    return v


def header_names(path):
    """Every enumerator and #define the header declares (its guard
    aside)."""
    text = open(path).read()
    names = set(re.findall(r"^\s*(IPD_ZPROTO_\w+)\s*=", text, re.M))
    names |= set(re.findall(r"^#define\s+(IPD_ZPROTO_\w+)\s+\S", text, re.M))
    return names


def main(dump, zygote_py, zproto_h):
    out = subprocess.run([dump], check=True, capture_output=True,
                         text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    z = load_zygote(zygote_py)
    layout = {}
    dumped_c, dumped_py = set(), set()
    for cname, pyname, value in rows:
        value = int(value)
        if cname == "-":
            layout[pyname] = value
            continue
        dumped_c.add(cname)
        dumped_py.add(pyname)
        got = py_value(z, pyname)
        check(got == value, "%s is %r in zproto.h, %r in zygote.py"
              % (cname, value, got))
    for name in sorted(header_names(zproto_h) - dumped_c):
        check(False, "zproto.h's %s is not compared (zproto_dump.c)" % name)
    ours = {n for n in vars(z) if re.match(r"(CMD|CTL|VERB)_[A-Z_]+$", n)}
    ours |= {"PARK_FDS_MAX", "REPORT_MAX"}
    for name in sorted(ours - dumped_py):
        check(False, "zygote.py's %s is not in zproto.h" % name)
    check(z._CTL.size == layout["_CTL.size"],
          "struct ipd_zproto_ctl: %d bytes, zygote.py's _CTL %d"
          % (layout["_CTL.size"], z._CTL.size))
    fmt = z._CTL.format
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    m = re.match(r"^=Ii(\d+)q(\d+)s$", fmt)
    check(m is not None, "_CTL's format %r is not =Ii<n>q<n>s" % fmt)
    if m:
        check(layout["ctl.kind"] == 0 and layout["ctl.status"] == 4 and
              layout["ctl.ru_all"] == 8,
              "struct ipd_zproto_ctl: kind, status, ru_all not at 0, 4, 8")
        check(int(m.group(1)) * 8 == layout["rusage.size"],
              "struct rusage is %d bytes, _CTL has %s words"
              % (layout["rusage.size"], m.group(1)))
        check(struct.calcsize("=Ii%sq" % m.group(1)) == layout["ctl.text"],
              "ipd_zproto_ctl.text at %d, _CTL puts it at %d"
              % (layout["ctl.text"], struct.calcsize("=Ii%sq" % m.group(1))))
    print("%d numbers compared, %d failed" % (len(rows), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
