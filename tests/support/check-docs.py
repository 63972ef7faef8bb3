#!/usr/bin/python3
"""The docs against the code (ctest: unit/docs_drift).

    check-docs.py SRC_ROOT INTERPD_BIN
    check-docs.py --selftest

Every check derives what is true from the code, so an option, a command or
a message added later with its docs keeps it passing, and one added without
them (or docs left behind by a change) fails it:

- options: every option of service/config.c's table (opts[]) has a row in
  docs/API.md's options table, and every row names an option the server
  knows; the row's environment variable is INTERPD_<NAME>, and a default
  written as one literal (`50M`) is the table's default.  Every policy
  field of config.c (policy_fields[]) is named in `interpd help`.  The
  option tables of docs/DEPLOYMENT.md (a subset) name only options the
  server knows, with its defaults, and every `--name` in the prose of
  both is an option or flag of the server (or another program's, listed
  in OTHER_FLAGS).  Every `interpd COMMAND ...` line in their fenced blocks
  is a command the CLI accepts with options and flags it knows, and every
  `name = value` line of their ini blocks names an option or policy field.
- the command line: every command and flag the CLI parser accepts
  (service/main.c and service/cli_keys.c: the words compared with strcmp)
  appears in `interpd help`, and every command and flag `interpd help`
  shows is accepted; the same both ways for the command block under
  "## Command line" in docs/API.md.
- messages: every double-quoted sentence (three words or more) in the prose
  of docs/API.md and docs/DEPLOYMENT.md must be a string the server can
  write: it matches a string literal of the C or Python sources (printf
  conversions match any text, numbers match a number or a one-letter
  placeholder such as N, `...` in the docs stands for any rest).  A
  parenthesised reason of three words or more that fills a %s must itself
  be such a string.  The same for the server messages in docs/openapi.json's
  examples (an error body's `message`, a `message` property's `examples`).
  Quotes the check cannot vouch for are listed in NOT_MESSAGES with the
  reason.

Messages quoted in a response block of an example are compared with the
real reply by tests/support/api-examples.py instead.
"""
import json
import os
import re
import subprocess
import sys

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


# ---- the code -----------------------------------------------------------------

def c_literal(text):
    """The value of the C string literal body text (between the quotes)."""
    out, i = [], 0
    esc = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'",
           "0": "\0"}
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(esc.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def options(root):
    """[(name, default literal or None, default is a plain literal)] of
    config.c's opts[]."""
    src = open(os.path.join(root, "service", "config.c")).read()
    m = re.search(r"static const struct opt opts\[\] = \{(.*?)\n\};", src,
                  re.S)
    if not m:
        fail("service/config.c: no `static const struct opt opts[]` table")
        return []
    out = []
    for om in re.finditer(r'\{"([a-z0-9-]+)",\s*OPT_\w+,\s*OFF\(\w+\),\s*'
                          r'(NULL|"(?:[^"\\]|\\.)*"\s*,|[^,]+,)', m.group(1)):
        d = om.group(2).rstrip(",").strip()
        if d == "NULL":
            out.append((om.group(1), None, True))
        elif re.fullmatch(r'"(?:[^"\\]|\\.)*"', d):
            out.append((om.group(1), c_literal(d[1:-1]), True))
        else:
            out.append((om.group(1), None, False))  # a macro: not compared
    if not out:
        fail("service/config.c: no option found in opts[]: the table changed "
             "shape; teach check-docs.py's options()")
    return out


def policy_fields(root):
    src = open(os.path.join(root, "service", "config.c")).read()
    m = re.search(r"\} policy_fields\[\] = \{(.*?)\n\};", src, re.S)
    if not m:
        fail("service/config.c: no policy_fields[] table")
        return []
    return re.findall(r'\{"([a-z0-9-]+)",\s*PF_', m.group(1))


def compared_words(path):
    """(expression, literal) of every strcmp/strncmp of a C file with a
    string literal."""
    src = open(path).read()
    return re.findall(r'\bstrn?cmp\(\s*([^,()]+(?:\([^()]*\))?[^,()]*),'
                      r'\s*"([^"]+)"', src)


def cli_accepts(root):
    """(top-level commands, keys subcommands, flags) the parser accepts:
    the words main.c compares argv[1] (or cmd) with, the words cli_keys.c
    compares args[0] with, and the --flags cli_keys.c compares with."""
    top, subs, flags = set(), set(), set()
    for expr, w in compared_words(os.path.join(root, "service", "main.c")):
        if expr.strip() in ("argv[1]", "cmd") and re.fullmatch(
                r"-{0,2}[a-z][a-z-]*", w):
            top.add(w)
    keys_c = os.path.join(root, "service", "cli_keys.c")
    for expr, w in compared_words(keys_c):
        if re.fullmatch(r"--[a-z][a-z-]*=?", w):
            flags.add(w.rstrip("="))
        elif expr.strip() in ("args[0]", "cmd") and re.fullmatch(
                r"[a-z][a-z-]*", w):
            subs.add(w)
    # The options of a keys subcommand: the names in its struct keys_opt
    # tables ({"tenant", &ka->tenant, NULL}), each taken as --name.
    for w in re.findall(r'\{"([a-z][a-z-]*)",\s*(?:&|NULL)',
                        open(keys_c).read()):
        flags.add("--" + w)
    if not top or not subs or not flags:
        fail("found no %s in service/main.c and service/cli_keys.c: the "
             "parser changed shape; teach check-docs.py's cli_accepts" %
             ("commands" if not top else "keys subcommands" if not subs
              else "flags"))
    return top, subs, flags


# ---- options ------------------------------------------------------------------

def section(doc, title):
    """The text of the section whose heading is title, up to the next
    heading of the same or a higher level."""
    m = re.search(r"^(#+) " + re.escape(title) + r"\s*$", doc, re.M)
    if not m:
        return None
    level = len(m.group(1))
    rest = doc[m.end():]
    end = re.search(r"^#{1,%d} " % level, rest, re.M)
    return rest[:end.start()] if end else rest


def check_options(root, api):
    opts = options(root)
    table = section(api, "Options")
    if table is None:
        fail("docs/API.md has no '### Options' section")
        return
    rows = {}
    for line in table.split("\n"):
        m = re.match(r"^\| `--([a-z0-9.A-Z-]+)` \|(.*)$", line)
        if m:
            cells = [c.strip() for c in m.group(2).split("|")]
            rows[m.group(1)] = cells
    names = {n for n, _, _ in opts}
    for name, default, plain in opts:
        if name not in rows:
            fail("option --%s (service/config.c) has no row in docs/API.md's "
                 "options table" % name)
            continue
        env, doc_default = rows[name][0], rows[name][1]
        want_env = "`INTERPD_%s`" % name.upper().replace("-", "_")
        if env != want_env:
            fail("docs/API.md options table: --%s's environment is %s, the "
                 "server reads %s" % (name, env, want_env))
        m = re.fullmatch(r"`([^`]*)`", doc_default)
        if plain and m and m.group(1) != default:
            fail("docs/API.md options table: --%s's default is %s, "
                 "service/config.c says %s" % (name, doc_default,
                                               default or "none (NULL)"))
    for name in rows:
        if name == "policy.NAME.FIELD":
            continue
        if name not in names:
            fail("docs/API.md's options table has --%s, which the server "
                 "does not know (service/config.c)" % name)
    limits = section(api, "Limits and defaults") or ""
    for line in limits.split("\n"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and re.fullmatch(r"`[a-z0-9-]+`", cells[3]):
            if cells[3].strip("`") not in names:
                fail("docs/API.md's limits table names %s, which the server "
                     "does not know" % cells[3])
    if policy_fields(root) and "policy.NAME.FIELD" not in rows:
        fail("docs/API.md's options table has no --policy.NAME.FIELD row")
    print("---- options: %d in service/config.c, %d rows in docs/API.md"
          % (len(opts), len(rows)), flush=True)


# ---- the command line ---------------------------------------------------------

def help_text(binary):
    p = subprocess.run([binary, "help"], capture_output=True, text=True,
                       timeout=30)
    if p.returncode != 0:
        fail("`interpd help` exited %d" % p.returncode)
    return p.stdout


def shown_commands(lines):
    """{command: set of flags} of usage lines such as
    `keys create --tenant NAME [--admin]` or `help, --help, -h` (three
    commands)."""
    shown = {}
    for line in lines:
        for alt in re.split(r",\s+", line.strip()):
            words = alt.split()
            if not words:
                continue
            cmd = words[0]
            if (cmd == "keys" and len(words) > 1 and
                    re.fullmatch(r"[a-z][a-z-]*", words[1])):
                cmd += " " + words[1]
            flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", alt))
            flags.discard(cmd)
            shown.setdefault(cmd, set()).update(flags)
    return shown


def help_commands(text):
    """The usage lines of `interpd help`: its "commands:" part, each
    command's first line (the ones indented by two)."""
    part = text.split("commands:", 1)[-1].split("\noptions", 1)[0]
    lines = []
    for line in part.split("\n"):
        if re.match(r"^  \S", line):
            lines.append(re.split(r"\s{2,}", line.strip())[0])
    return lines


def api_commands(api):
    sec = section(api, "Command line")
    m = re.search(r"```\n(.*?)```", sec or "", re.S)
    if not m:
        fail("docs/API.md's '## Command line' has no command block")
        return []
    return [re.sub(r"^interpd\s+", "", ln) for ln in m.group(1).split("\n")
            if ln.strip()]


def check_option_tables(root, name, text):
    """The tables of an operator's doc whose first column is `option`: each
    row names an option the server knows (or policy.NAME.FIELD), and a
    default written as one literal is the server's."""
    opts = {n: (d, plain) for n, d, plain in options(root)}
    n, in_table = 0, False
    for i, line in enumerate(text.split("\n"), 1):
        if re.match(r"^\| option \|", line):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        m = re.match(r"^\| `([a-zA-Z0-9.*-]+)` \| ([^|]*) \|", line)
        if not in_table or not m:
            continue
        n += 1
        opt, doc_default = m.group(1), m.group(2).strip()
        if opt.startswith("policy."):
            continue
        if opt not in opts:
            fail("%s:%d: the option table names %s, which the server does "
                 "not know (service/config.c)" % (name, i, opt))
            continue
        d, plain = opts[opt]
        lit = re.fullmatch(r"`([^`]*)`", doc_default)
        if plain and lit and lit.group(1) != d:
            fail("%s:%d: %s's default is %s, service/config.c says %s"
                 % (name, i, opt, doc_default, d or "none (NULL)"))
    print("---- options: %d rows of %s's option tables" % (n, name),
          flush=True)


# `--name` words of the docs' prose that are another program's flags (or
# a placeholder), not the server's: name -> whose.
OTHER_FLAGS = {
    "name": "the placeholder of `--name value`",
    "retries": "pip's", "no-index": "pip's", "version": "python3's",
    "bounding-set": "setpriv's", "install": "cmake's", "target": "cmake's",
    "prefix": "cmake --install's",
    "security-opt": "docker's", "cgroupns": "docker's",
    "privileged": "docker's", "cap-add": "docker's", "memory": "docker's",
    "pull": "docker compose's", "ppid": "ps's", "oplog": "mongodump's",
}


def check_prose_flags(root, name, text):
    """Every `--name` in the prose (outside fenced blocks) of an operator's
    or client's doc is an option or CLI flag of the server, a policy
    setting, or in OTHER_FLAGS: a renamed or removed option left in the
    docs fails."""
    known = {n for n, _, _ in options(root)} | {"policy"}
    known |= {f[2:] for f in cli_accepts(root)[2]}
    fenced, n = False, 0
    for i, line in enumerate(text.split("\n"), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in re.finditer(r"(?<![\w-])--([a-z][a-z0-9-]*)", line):
            n += 1
            if m.group(1) not in known and m.group(1) not in OTHER_FLAGS:
                fail("%s:%d: --%s is no option or flag of the server (nor "
                     "in check-docs.py's OTHER_FLAGS)" % (name, i,
                                                         m.group(1)))
    print("---- flags: %d in %s's prose" % (n, name), flush=True)


def fenced_blocks(text):
    """(info, first line number, lines) of text's fenced blocks."""
    out, cur = [], None
    for i, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*```(.*)$", line)
        if m and cur is None:
            cur = (m.group(1).strip(), i + 1, [])
        elif m:
            out.append(cur)
            cur = None
        elif cur is not None:
            cur[2].append(line)
    return out


def check_block_commands(root, name, text):
    """Every `interpd COMMAND ...` in a fenced block (a shell line, a unit's
    ExecStart=) is a command the CLI accepts, with options and flags it
    knows; every `name = value` line of an ini block (commented out or
    not) names an option or a policy field the server knows."""
    top, subs, flags = cli_accepts(root)
    opts = {n for n, _, _ in options(root)}
    fields = set(policy_fields(root))
    n = 0
    for info, first, lines in fenced_blocks(text):
        # A systemd unit is an ini block too: one with [Sections].
        unit = any(re.match(r"^\[[A-Za-z]+\]", ln) for ln in lines)
        for k, line in enumerate(lines):
            where = "%s:%d" % (name, first + k)
            if info.startswith("ini") and not unit:
                m = re.match(r"^#?\s*([A-Za-z][\w.-]*)\s*=", line)
                if not m:
                    continue
                n += 1
                key = m.group(1).lower().replace("_", "-")
                pm = re.fullmatch(r"policy\.[a-z0-9_-]+\.([a-z-]+)", key)
                if (key not in opts and not (pm and pm.group(1) in fields)):
                    fail("%s: the config line names %s, which the server "
                         "does not know" % (where, m.group(1)))
                continue
            code = line.split(" #", 1)[0]
            for m in re.finditer(r"(?:^|[\s=/])interpd\s+([a-z][a-z-]*)"
                                 r"((?:\s+[a-z][a-z-]*)?)(.*)$", code):
                cmd, sub, rest = m.group(1), m.group(2).strip(), m.group(3)
                if cmd not in top:
                    continue  # prose in a block ("interpd builds ...")
                n += 1
                if cmd == "keys" and sub not in subs:
                    fail("%s: `interpd keys %s` is no command of the CLI"
                         % (where, sub))
                for f in re.findall(r"(?<![\w-])--([a-z][a-z0-9.-]*)",
                                    sub + " " + rest):
                    f = f.split("=", 1)[0]
                    if (f not in opts and "--" + f not in flags and
                            "--" + f not in top and
                            not f.startswith("policy.")):
                        fail("%s: `interpd %s` with --%s, which the server "
                             "does not know" % (where, cmd, f))
    print("---- blocks: %d interpd commands and config lines in %s"
          % (n, name), flush=True)


def check_cli(root, binary, api):
    top, subs, flags = cli_accepts(root)
    known_opts = {"--" + n for n, _, _ in options(root)}
    accepted = set(top) | {"keys " + s for s in subs}
    for where, lines in (("`interpd help`", help_commands(help_text(binary))),
                         ("docs/API.md's command block", api_commands(api))):
        shown = shown_commands(lines)
        words = set(shown)
        for w in sorted(top):
            if w != "keys" and w not in words:
                fail("%s does not show the command %r (service/main.c "
                     "accepts it)" % (where, w))
        for s in sorted(subs):
            if "keys " + s not in words:
                fail("%s does not show `keys %s` (service/cli_keys.c "
                     "accepts it)" % (where, s))
        all_flags = set().union(*shown.values()) if shown else set()
        for f in sorted(flags):
            if f not in all_flags:
                fail("%s does not show the flag %s (service/cli_keys.c "
                     "accepts it)" % (where, f))
        for cmd, fl in sorted(shown.items()):
            if cmd not in accepted:
                fail("%s shows the command %r, which the parser does not "
                     "accept" % (where, cmd))
            for f in sorted(fl - flags - known_opts):
                fail("%s shows %s with %s, which the parser does not accept"
                     % (where, cmd, f))
        print("---- command line: %s shows %d commands" % (where, len(shown)),
              flush=True)
    text = help_text(binary)
    for field in policy_fields(root):
        if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(field), text):
            fail("`interpd help` does not name the policy field %s "
                 "(service/config.c)" % field)


# ---- messages -----------------------------------------------------------------

# Double-quoted sentences of the docs that are not the server's words.
NOT_MESSAGES = {
    "the tenant's storage quota is exhausted (at most 10000 files, at most "
    "10737418240 bytes for all of the tenant's users together)":
    "storage/meta.c builds it from five pieces (a format of conversions "
    "alone); its head is the literal \"the tenant's storage quota is "
    "exhausted\"",
    "not stored: it would pass the user's file quota (at most 100 files, at "
    "most 1073741824 bytes); its bytes are returned inline in data_base64":
    "service/exec/result.c builds it from two formats; API.md's generated "
    "files example shows the same text, which api-examples.py compares "
    "with the real reply word for word",
}

CONVERSION = re.compile(r"%[-+ #0]*(\*|[0-9]+)?(\.(\*|[0-9]+))?"
                        r"(hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcsp%])")
SOURCE_DIRS = ("api", "service", "storage", "venv", "scheduler")


def source_strings(root):
    """Every string literal of the sources, adjacent literals joined (C),
    as (text, is a printf format)."""
    out = []
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for name in files:
                path = os.path.join(dirpath, name)
                if name.endswith((".c", ".h")):
                    out += c_strings(open(path, errors="replace").read())
                elif name.endswith(".py"):
                    out += py_strings(open(path, errors="replace").read())
    return out


C_LITERALS = r'"(?:[^"\\\n]|\\.)*"(?:\s*"(?:[^"\\\n]|\\.)*")*'


def c_strings(src):
    """The literals of src; two separated by a comma alone (a message's
    head and tail in a table, as api/reply.c's failures[]) also as one
    format with a %s between them."""
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    out, prev_end, prev = [], -1, None
    for m in re.finditer(C_LITERALS, src):
        parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(0))
        text = c_literal("".join(parts))
        out.append((text, True))
        if prev is not None and re.fullmatch(r"\s*,\s*",
                                             src[prev_end:m.start()]):
            out.append((prev + "%s" + text, True))
        prev, prev_end = text, m.end()
    return out


def py_strings(src):
    out = []
    for m in re.finditer(r'(?<![\w])[fr]?("(?:[^"\\\n]|\\.)*"|'
                         r"'(?:[^'\\\n]|\\.)*')", src):
        s = m.group(1)[1:-1]
        # f-string fields and %-formats both stand for any text
        s = re.sub(r"\{[^{}]*\}", "%s", s)
        out.append((c_literal(s), True))
    return out


MIN_LETTERS = 8


def literal_letters(fmt):
    """How many letters fmt writes itself (outside its conversions)."""
    return sum(c.isalpha() for c in CONVERSION.sub("", fmt))


def format_regex(fmt):
    """A regex for what the printf format fmt writes: %s and the like any
    text (as a group), numbers a number or a one-letter placeholder."""
    out, at = [], 0
    for m in CONVERSION.finditer(fmt):
        out.append(re.escape(fmt[at:m.start()]))
        conv = m.group(5)
        if conv == "%":
            out.append("%")
        elif conv in "diouxX":
            out.append(r"(-?[0-9]+|[A-Z])")
        elif conv in "eEfgG":
            out.append(r"(-?[0-9.]+|[A-Z])")
        else:
            out.append(r"(.*)")
        at = m.end()
    out.append(re.escape(fmt[at:]))
    return "".join(out)


def prefixes_regex(fmt):
    """A regex matching every prefix of what fmt writes (for a quote that
    ends in `...`)."""
    pieces, at = [], 0
    for m in CONVERSION.finditer(fmt):
        pieces += [re.escape(c) for c in fmt[at:m.start()]]
        pieces.append(format_regex(m.group(0)))
        at = m.end()
    pieces += [re.escape(c) for c in fmt[at:]]
    rx = ""
    for p in reversed(pieces):
        rx = "(?:%s%s)?" % (p, rx)
    return rx


def inner_reasons(text):
    """The parenthesised parts of text (outermost), three words or more."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            if depth == 0:
                start = i + 1
            depth += 1
        elif c == ")" and depth:
            depth -= 1
            if depth == 0 and len(text[start:i].split()) >= 3:
                out.append(text[start:i])
    return out


class Messages:
    def __init__(self, strings):
        self.formats = []
        seen = set()
        for s in strings:
            s = " ".join(s.split())
            # "%s: %s" would vouch for anything: a format must say
            # something of its own.
            if literal_letters(s) >= MIN_LETTERS and s not in seen:
                seen.add(s)
                self.formats.append(s)
        # The most specific format first: its holes are the smallest.
        self.formats.sort(key=literal_letters, reverse=True)
        self.compiled = {}

    def _rx(self, fmt):
        rx = self.compiled.get(fmt)
        if rx is None:
            rx = self.compiled[fmt] = re.compile(format_regex(fmt), re.S)
        return rx

    def match(self, quote, depth=0):
        """None when the server can write quote, else why not."""
        if quote.endswith("..."):
            head = quote[:-3].rstrip()
            for fmt in self.formats:
                if fmt[:8] == head[:8] and re.fullmatch(
                        prefixes_regex(fmt), head, re.S):
                    return None
            return "no string of the server starts so"
        bad = None
        for fmt in self.formats:
            m = self._rx(fmt).fullmatch(quote)
            if not m:
                continue
            holes = [g.strip() for g in m.groups() if g]
            inner = [r for h in holes if depth < 3 and self.match(h, 3)
                     for r in inner_reasons(h) if self.match(r, depth + 1)]
            if not inner:
                return None
            bad = bad or inner[0]
        if bad:
            return "the reason (%s) is not the server's" % bad
        return "no string of the server matches it"


def prose_quotes(text):
    """(line, quote) of every double-quoted run of three words or more in
    text outside fenced blocks (in a code span or not), whitespace
    collapsed."""
    lines, out, fenced = text.split("\n"), [], False
    keep = []
    for i, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            keep.append((i, ""))
            continue
        keep.append((i, "" if fenced else line))
    joined = "\n".join(l for _, l in keep)
    for m in re.finditer(r'(?<![\w])"([^"`]{3,}?)"(?![\w:])', joined):
        q = " ".join(m.group(1).split())
        if len(q.split()) >= 3:
            out.append((joined.count("\n", 0, m.start()) + 1, q))
    return out


def openapi_messages(doc):
    """(where, message) of the server's messages in docs/openapi.json's
    examples: the `message` of every error body (an object with `code`)
    and every item of a `message` property's `examples`."""
    out = []

    def walk(node, where, in_example):
        if isinstance(node, dict):
            if (in_example and isinstance(node.get("message"), str) and
                    "code" in node):
                out.append((where + "/message", node["message"]))
            for k, v in node.items():
                sub = "%s/%s" % (where, k)
                if (k == "message" and isinstance(v, dict) and
                        isinstance(v.get("examples"), list)):
                    out.extend(("%s/examples/%d" % (sub, i), e)
                               for i, e in enumerate(v["examples"])
                               if isinstance(e, str))
                walk(v, sub, in_example or k in ("example", "examples"))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, "%s/%d" % (where, i), in_example)

    walk(doc, "#", False)
    return out


def check_messages(root, docs, openapi=None):
    msgs = Messages(s for s, _ in source_strings(root))
    n = 0
    for where, quote in openapi_messages(openapi or {}):
        quote = " ".join(quote.split())
        if quote in NOT_MESSAGES:
            continue
        n += 1
        why = msgs.match(quote)
        if why:
            fail('docs/openapi.json %s: "%s" is the example of a server '
                 "message, but %s (or list it in check-docs.py's "
                 "NOT_MESSAGES with a reason)" % (where, quote, why))
    for name, text in docs:
        for line, quote in prose_quotes(text):
            if quote in NOT_MESSAGES:
                continue
            n += 1
            why = msgs.match(quote)
            if why:
                fail('%s:%d: "%s" is quoted as the server\'s words, but %s '
                     "(or list it in check-docs.py's NOT_MESSAGES with a "
                     "reason)" % (name, line, quote, why))
    print("---- messages: %d quotes checked against the sources" % n,
          flush=True)


# ---- the checker's own refusals -----------------------------------------------

def selftest():
    msgs = Messages(["not ready:%s%s%s%s", "cannot stage a job: %s",
                     "disk space (%lld MiB free, below %lld MiB)",
                     "could not fetch: %s", "no such file", "%s: %s", "%s",
                     "a %s b %s c"])
    cases = [
        ("no such file", True),
        ("no such files", False),
        ("not ready: executions (cannot stage a job: mkdir: EPERM)", True),
        ("not ready: executions (cannot stage a job under /x: ENOTDIR)",
         False),
        ("disk space (N MiB free, below 1024 MiB)", True),
        ("disk space (some MiB free, below M MiB)", False),
        ("could not fetch: ...", True),
        ("could not get: ...", False),
        ("anything at all: really", False),
        ("not ready: disk space (N MiB free, below M MiB)", True),
    ]
    bad = 0
    for quote, ok in cases:
        got = msgs.match(quote) is None
        if got != ok:
            bad += 1
            print("FAIL selftest: %r matched=%s, want %s" % (quote, got, ok))
    pair = [t for t, _ in c_strings('{1, "out of space while ", "; retry"}')]
    if "out of space while %s; retry" not in pair:
        bad += 1
        print("FAIL selftest: c_strings gave %r" % pair)
    pair = [t for t, _ in c_strings('{1, "out of space while ", "; retry"}')]
    if "out of space while %s; retry" not in pair:
        bad += 1
        print("FAIL selftest: c_strings gave %r" % pair)
    shown = shown_commands(["keys create --tenant NAME [--admin]",
                            "help, --help, -h", "serve"])
    if shown != {"keys create": {"--tenant", "--admin"}, "help": set(),
                 "--help": set(), "-h": set(), "serve": set()}:
        bad += 1
        print("FAIL selftest: shown_commands gave %r" % shown)
    print("selftest: %d failures" % bad)
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--selftest"]:
        return selftest()
    if len(sys.argv) != 3:
        print("usage: check-docs.py SRC_ROOT INTERPD_BIN | --selftest",
              file=sys.stderr)
        return 2
    root, binary = sys.argv[1], sys.argv[2]
    api = open(os.path.join(root, "docs", "API.md")).read()
    dep = open(os.path.join(root, "docs", "DEPLOYMENT.md")).read()
    check_options(root, api)
    check_option_tables(root, "docs/DEPLOYMENT.md", dep)
    check_prose_flags(root, "docs/API.md", api)
    check_prose_flags(root, "docs/DEPLOYMENT.md", dep)
    check_block_commands(root, "docs/API.md", api)
    check_block_commands(root, "docs/DEPLOYMENT.md", dep)
    check_cli(root, binary, api)
    with open(os.path.join(root, "docs", "openapi.json")) as f:
        openapi = json.load(f)
    check_messages(root, [("docs/API.md", api), ("docs/DEPLOYMENT.md", dep)],
                   openapi)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
