#!/usr/bin/python3
"""check-prom.py - a strict checker of the Prometheus text exposition format
0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).

    /usr/bin/python3 tests/support/check-prom.py [--no-promtool] [FILE]

Reads FILE, or stdin without one or for "-".  Prints one line per problem,
"<file>:<line>: <message>", on stderr and exits 1 when there is any, 0 when
there is none, 2 on a usage or internal error.

Stricter than Prometheus where our output should be anyway: every sample
needs a TYPE line for its family; HELP and TYPE come at most once and before
the family's first sample; a family's lines are contiguous; no leading or
trailing blanks; floats are spelled as Go's ParseFloat reads them without
its lenient forms (only NaN, +Inf, -Inf as specials); counters and
histogram counts are never negative.  Histograms: every series has _bucket
lines with a parseable le in increasing order and cumulative (non-decreasing)
counts ending at le="+Inf", a _sum, and a _count equal to the +Inf bucket.

When promtool is on PATH, or named by the PROMTOOL environment variable, the
text also goes through `promtool check metrics` (parse errors and lint
problems) and any complaint of it fails the check; --no-promtool skips it.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import traceback

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|[+-]?Inf|NaN")
TIMESTAMP = re.compile(r"-?[0-9]+")
BLANKS = re.compile(r"[ \t]+")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
MAX_ERRORS = 100


class Problem(Exception):
    """A problem with the current line."""


def parse_float(s, what):
    if not FLOAT.fullmatch(s):
        raise Problem(f"{what} {s!r} is not a valid float")
    if s.endswith("Inf"):
        return float("-inf") if s.startswith("-") else float("inf")
    return float(s)


class Family:
    def __init__(self, name, first_line):
        self.name = name
        self.first_line = first_line
        self.type = None
        self.help = False
        self.samples = 0
        # histograms and summaries: label key -> {"buckets": [(le, value,
        # line)], "sum": line, "count": (value, line), "line": first line}
        self.groups = {}


class Checker:
    def __init__(self, filename):
        self.filename = filename
        self.errors = []
        self.families = {}
        self.current = None  # the family of the previous line
        self.closed = set()  # families whose lines have ended
        self.series = {}     # (name, labels) -> line, for duplicates

    def error(self, lineno, msg):
        self.errors.append(f"{self.filename}:{lineno}: {msg}")

    # ---- family bookkeeping ----------------------------------------------

    def enter(self, fam, lineno):
        """The family fam has a line here: its lines must be contiguous."""
        if self.current is fam:
            return
        if fam.name in self.closed:
            raise Problem(f"lines of metric family {fam.name!r} are not "
                          f"contiguous (it started on line {fam.first_line})")
        if self.current is not None:
            self.close(self.current)
        self.current = fam

    def close(self, fam):
        self.closed.add(fam.name)
        self.check_groups(fam)

    def family_for_comment(self, name, lineno):
        fam = self.families.get(name)
        if fam is None:
            fam = Family(name, lineno)
            self.families[name] = fam
        self.enter(fam, lineno)
        if fam.samples:
            raise Problem(f"HELP/TYPE for {name!r} after its samples")
        return fam

    def resolve(self, name):
        """The declared family a sample name belongs to, and its suffix."""
        fam = self.families.get(name)
        if fam is not None and fam.type is not None:
            return fam, ""
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix):
                base = self.families.get(name[: -len(suffix)])
                if (base is not None and base.type in SUFFIXES
                        and suffix in SUFFIXES[base.type]):
                    return base, suffix
        raise Problem(f"sample {name!r} has no TYPE line for its family")

    # ---- comment lines ---------------------------------------------------

    def comment(self, line, lineno):
        m = re.match(r"#[ \t]*(HELP|TYPE)(?:[ \t]+|$)", line)
        if not m:
            return  # an ordinary comment
        kind = m.group(1)
        rest = line[m.end():]
        m2 = METRIC_NAME.match(rest)
        if not m2:
            raise Problem(f"{kind} line without a valid metric name")
        name = m2.group(0)
        tail = rest[m2.end():]
        if tail and tail[0] not in " \t":
            raise Problem(f"{kind} line: invalid metric name "
                          f"{(name + tail).split()[0]!r}")
        tail = tail.lstrip(" \t")
        if kind == "HELP":
            self.help_line(name, tail, lineno)
        else:
            self.type_line(name, tail, lineno)

    def help_line(self, name, text, lineno):
        fam = self.family_for_comment(name, lineno)
        if fam.help:
            raise Problem(f"second HELP line for {name!r}")
        fam.help = True
        i = 0
        while i < len(text):
            if text[i] == "\\":
                if i + 1 >= len(text) or text[i + 1] not in "\\n":
                    raise Problem(f"invalid escape in HELP text at column "
                                  f"{i + 1} (only \\\\ and \\n)")
                i += 1
            i += 1

    def type_line(self, name, text, lineno):
        if text not in TYPES:
            raise Problem(f"TYPE {text!r} for {name!r} is not one of "
                          f"{', '.join(TYPES)}")
        for suffix in ("_bucket", "_sum", "_count"):
            base = self.families.get(name[: -len(suffix)]) \
                if name.endswith(suffix) else None
            if (base is not None and base.type in SUFFIXES
                    and suffix in SUFFIXES[base.type]):
                raise Problem(f"{name!r} collides with the samples of "
                              f"{base.type} {base.name!r}")
        if text in SUFFIXES:
            for suffix in SUFFIXES[text]:
                other = self.families.get(name + suffix)
                if other is not None and other.type is not None:
                    raise Problem(f"{text} {name!r} collides with family "
                                  f"{other.name!r}")
        fam = self.family_for_comment(name, lineno)
        if fam.type is not None:
            raise Problem(f"second TYPE line for {name!r}")
        fam.type = text

    # ---- sample lines ----------------------------------------------------

    def parse_labels(self, line, i):
        """Labels from line[i] == '{'; returns (labels, index after '}')."""
        labels = []
        i += 1
        while True:
            if i < len(line) and line[i] == "}":
                return labels, i + 1
            m = LABEL_NAME.match(line, i)
            if not m:
                raise Problem(f"invalid label name at column {i + 1}")
            lname = m.group(0)
            i = m.end()
            if line[i:i + 2] != '="':
                raise Problem(f'expected =" after label {lname!r} at '
                              f"column {i + 1}")
            i += 2
            value = []
            while True:
                if i >= len(line):
                    raise Problem(f"unterminated value of label {lname!r}")
                c = line[i]
                if c == '"':
                    break
                if c == "\\":
                    nxt = line[i + 1] if i + 1 < len(line) else ""
                    if nxt not in ("\\", '"', "n"):
                        raise Problem(f"invalid escape \\{nxt} in label "
                                      f"{lname!r} at column {i + 1}")
                    value.append("\n" if nxt == "n" else nxt)
                    i += 2
                    continue
                value.append(c)
                i += 1
            labels.append((lname, "".join(value)))
            i += 1
            if i < len(line) and line[i] == ",":
                i += 1
            elif i < len(line) and line[i] == "}":
                continue
            else:
                raise Problem(f"expected , or }} after label {lname!r} at "
                              f"column {i + 1}")

    def sample(self, line, lineno):
        m = METRIC_NAME.match(line)
        if not m:
            raise Problem("invalid metric name at the start of the line")
        name = m.group(0)
        i = m.end()
        labels = []
        if i < len(line) and line[i] == "{":
            labels, i = self.parse_labels(line, i)
        b = BLANKS.match(line, i)
        if not b:
            raise Problem(f"expected a blank and a value after {name!r} at "
                          f"column {i + 1}")
        fields = BLANKS.split(line[b.end():])
        if not fields[-1]:
            raise Problem("trailing blanks")
        if len(fields) > 2:
            raise Problem(f"unexpected text after the value: "
                          f"{' '.join(fields[2:])!r}")
        value = parse_float(fields[0], "value")
        if len(fields) == 2 and not TIMESTAMP.fullmatch(fields[1]):
            raise Problem(f"timestamp {fields[1]!r} is not an integer")

        fam, suffix = self.resolve(name)
        self.enter(fam, lineno)
        fam.samples += 1
        names = [n for n, _ in labels]
        for n in names:
            if n.startswith("__"):
                raise Problem(f"label name {n!r} is reserved")
            if names.count(n) > 1:
                raise Problem(f"label {n!r} appears twice")
        key = (name, tuple(sorted(labels)))
        if key in self.series:
            raise Problem(f"duplicate series (first on line "
                          f"{self.series[key]})")
        self.series[key] = lineno
        self.check_sample(fam, suffix, dict(labels), value, lineno)

    def check_sample(self, fam, suffix, labels, value, lineno):
        t = fam.type
        if t == "counter" and not value >= 0:
            raise Problem(f"counter value {value} is negative or NaN")
        if t == "histogram":
            if suffix == "":
                raise Problem(f"histogram {fam.name!r} sample needs a "
                              f"_bucket, _sum or _count suffix")
            self.histogram_sample(fam, suffix, labels, value, lineno)
        elif "le" in labels and t != "untyped":
            raise Problem(f"label 'le' on a {t}")
        if t == "summary":
            self.summary_sample(fam, suffix, labels, value, lineno)
        elif "quantile" in labels and t != "untyped":
            raise Problem(f"label 'quantile' on a {t}")

    def group(self, fam, labels, without, lineno):
        key = tuple(sorted((k, v) for k, v in labels.items() if k != without))
        g = fam.groups.get(key)
        if g is None:
            g = {"buckets": [], "sum": None, "count": None, "line": lineno}
            fam.groups[key] = g
        return g

    def histogram_sample(self, fam, suffix, labels, value, lineno):
        if suffix != "_sum" and not value >= 0:
            raise Problem(f"histogram {suffix} value {value} is negative "
                          f"or NaN")
        g = self.group(fam, labels, "le", lineno)
        if suffix == "_bucket":
            if "le" not in labels:
                raise Problem("_bucket sample without an le label")
            le = parse_float(labels["le"], "le")
            prev = g["buckets"][-1] if g["buckets"] else None
            g["buckets"].append((le, value, lineno, labels["le"]))
            if prev and not le > prev[0]:
                raise Problem(f"le={labels['le']!r} does not follow "
                              f"le={prev[3]!r} in increasing order")
            if prev and value < prev[1]:
                raise Problem(f"bucket le={labels['le']!r} count {value} is "
                              f"below the previous bucket's {prev[1]} (not "
                              f"cumulative)")
            return
        if "le" in labels:
            raise Problem(f"{suffix} sample with an le label")
        g["sum" if suffix == "_sum" else "count"] = (value, lineno)

    def summary_sample(self, fam, suffix, labels, value, lineno):
        g = self.group(fam, labels, "quantile", lineno)
        if suffix == "":
            if "quantile" not in labels:
                raise Problem("summary sample without a quantile label")
            q = parse_float(labels["quantile"], "quantile")
            if not 0 <= q <= 1:
                raise Problem(f"quantile {q} is outside [0, 1]")
            return
        if "quantile" in labels:
            raise Problem(f"{suffix} sample with a quantile label")
        if suffix == "_count" and not value >= 0:
            raise Problem(f"summary _count {value} is negative or NaN")
        g["sum" if suffix == "_sum" else "count"] = (value, lineno)

    def check_groups(self, fam):
        """At the end of a family: each histogram series is complete."""
        for g in fam.groups.values():
            where = g["line"]
            if g["sum"] is None:
                self.error(where, f"{fam.type} {fam.name!r} series has no "
                                  f"_sum")
            if g["count"] is None:
                self.error(where, f"{fam.type} {fam.name!r} series has no "
                                  f"_count")
            if fam.type != "histogram":
                continue
            buckets = g["buckets"]
            if not buckets or buckets[-1][0] != float("inf"):
                self.error(where, f"histogram {fam.name!r} series has no "
                                  f'le="+Inf" bucket')
                continue
            if g["count"] is not None and g["count"][0] != buckets[-1][1]:
                self.error(g["count"][1],
                           f"_count {g['count'][0]} differs from the +Inf "
                           f"bucket {buckets[-1][1]} (line {buckets[-1][2]})")

    # ---- the whole text --------------------------------------------------

    def check(self, data):
        if data and not data.endswith(b"\n"):
            self.error(data.count(b"\n") + 1, "no newline at the end")
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for lineno, raw in enumerate(lines, 1):
            if len(self.errors) >= MAX_ERRORS:
                self.errors.append(f"{self.filename}: too many errors")
                return
            try:
                self.line(raw, lineno)
            except Problem as e:
                self.error(lineno, str(e))
        if self.current is not None:
            self.close(self.current)

    def line(self, raw, lineno):
        try:
            line = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as e:
            raise Problem(f"invalid UTF-8 at byte {e.start + 1}") from None
        if "\r" in line:
            raise Problem("carriage return (lines end with \\n only)")
        if line == "":
            return
        if line[0] in " \t":
            raise Problem("leading blanks")
        if line[0] == "#":
            self.comment(line, lineno)
        else:
            self.sample(line, lineno)


def promtool_errors(data, filename):
    tool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not tool:
        return []
    try:
        p = subprocess.run([tool, "check", "metrics"], input=data,
                           capture_output=True, timeout=60)
    except OSError as e:
        return [f"{filename}: cannot run {tool}: {e}"]
    if p.returncode == 0:
        return []
    out = (p.stdout + p.stderr).decode("utf-8", "replace").strip()
    msgs = [f"{filename}: promtool check metrics exited {p.returncode}"]
    msgs += [f"{filename}: promtool: {l}" for l in out.splitlines()]
    return msgs


def main():
    ap = argparse.ArgumentParser(
        description="Check Prometheus text format 0.0.4 strictly.")
    ap.add_argument("file", nargs="?", default="-")
    ap.add_argument("--no-promtool", action="store_true",
                    help="don't run promtool check metrics even if present")
    args = ap.parse_args()
    if args.file == "-":
        data, filename = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as e:
            print(f"check-prom: {e}", file=sys.stderr)
            return 2
        filename = args.file
    c = Checker(filename)
    c.check(data)
    errors = c.errors
    if not args.no_promtool:
        errors = errors + promtool_errors(data, filename)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # a bug here must not read as "rejected"
        traceback.print_exc()
        sys.exit(2)
