#!/usr/bin/env python3
"""The layering rules of docs/ARCHITECTURE.md, checked on the source tree.

  check-layers.py SRC_ROOT            check; exit 1 naming every breach
  check-layers.py --selftest          the checker finds the breaches it must

Rules:
  * which folder may include which (ALLOWED below; a folder always sees
    itself and its own subfolders' headers only where listed), for
    quoted includes and for angle-bracket ones that name a project
    folder (<service/common/ipd.h>);
  * only api/ includes microhttpd.h (<microhttpd.h> or "microhttpd.h");
  * an enum ipd_err becomes an HTTP status only in api/reply.c: no other
    api/*.c has a `case IPD_ERR_...` or a hand mapping (`== IPD_ERR_X ?
    404`, or an `if (... == IPD_ERR_X)` that answers with ipd_reply_code);
  * no function in the product's sources is longer than FUNC_MAX lines.
"""
import os
import re
import sys
import tempfile

FUNC_MAX = 80

# folder -> folders whose headers it may include (besides its own)
COMMON = 'service/common'
ALLOWED = {
    'service/common': set(),
    'service/sandbox': {COMMON},
    'service/fetch': {COMMON},
    'storage': {COMMON},
    'venv': {COMMON},
    'scheduler': {COMMON, 'storage'},
    'service/exec': {COMMON, 'service/sandbox', 'service/fetch', 'storage',
                     'venv'},
    'api': {COMMON, 'service/exec', 'service/fetch', 'service/sandbox',
            'storage', 'venv', 'scheduler', 'service'},
    'service': {COMMON, 'service/sandbox', 'service/fetch', 'service/exec',
                'storage', 'venv', 'scheduler', 'api'},
}
FOLDERS = sorted(ALLOWED, key=len, reverse=True)
TOP = {f.split('/')[0] for f in ALLOWED}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]', re.M)
# The one file that maps enum ipd_err to HTTP statuses.
STATUS_MAP = 'api/reply.c'
CASE_ERR = re.compile(r'\bcase\s+IPD_ERR_\w+')
# `rc == IPD_ERR_X ? 404` / `? IPD_HE_...` / `? MHD_HTTP_...`
TERNARY_MAP = re.compile(r'IPD_ERR_\w+\s*\)?\s*\?\s*'
                         r'(?:[1-5]\d\d\b|IPD_HE_|MHD_HTTP_)')
# `if (rc == IPD_ERR_X)` whose branch answers with a chosen contract code
# within its first two statements.
IF_MAP = re.compile(r'\bif\s*\([^;{]*[=!]=\s*IPD_ERR_\w+[^;{]*\)\s*\{?'
                    r'\s*(?:[^;{}]*;\s*)?ipd_reply_code\s*\(')


def folder_of(rel):
    for f in FOLDERS:
        if rel.startswith(f + '/') and '/' not in rel[len(f) + 1:]:
            return f
    return None


def sources(root):
    for f in FOLDERS:
        d = os.path.join(root, f)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(('.c', '.h')):
                yield f + '/' + name


def check_includes(root, rel, text):
    errs = []
    me = folder_of(rel)
    for m in INCLUDE.finditer(text):
        kind, name = m.group(1), m.group(2)
        line = text.count('\n', 0, m.start()) + 1
        if os.path.basename(name) == 'microhttpd.h':
            if me != 'api':
                errs.append(f'{rel}:{line}: only api/ may include '
                            f'microhttpd.h')
            continue
        if kind == '<':
            # A system header, unless it names a project folder (the
            # build's include path could make <storage/meta.h> work).
            if name.split('/')[0] not in TOP:
                continue
            target = os.path.normpath(name)
        else:
            target = os.path.normpath(os.path.join(os.path.dirname(rel),
                                                   name))
        them = folder_of(target)
        if them is None:
            errs.append(f'{rel}:{line}: "{name}" is outside the known '
                        f'folders')
        elif them != me and them not in ALLOWED[me]:
            errs.append(f'{rel}:{line}: {me}/ may not include {them}/ '
                        f'("{name}")')
    return errs


def strip_comments(text):
    """text with each comment blanked (its newlines kept, so line numbers
    stay)."""
    return re.sub(r'/\*.*?\*/|//[^\n]*',
                  lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text,
                  flags=re.S)


def check_status_map(rel, text):
    if not rel.startswith('api/') or rel == STATUS_MAP:
        return []
    errs = []
    code = strip_comments(text)
    for pat, what in ((CASE_ERR, 'a case on an enum ipd_err'),
                      (TERNARY_MAP, 'an enum ipd_err mapped to a status'),
                      (IF_MAP, 'an enum ipd_err answered with '
                               'ipd_reply_code')):
        for m in pat.finditer(code):
            line = code.count('\n', 0, m.start()) + 1
            errs.append(f'{rel}:{line}: {what}: only {STATUS_MAP} turns '
                        f'an enum ipd_err into an HTTP status '
                        f'(ipd_reply_failure)')
    return errs


def check_functions(rel, text):
    """A function body: a '{' alone at column 0 right after a declarator
    that ends in ')', to the next '}' at column 0."""
    errs = []
    lines = text.split('\n')
    i = 0
    while i < len(lines):
        if lines[i] == '{' and i > 0 and lines[i - 1].rstrip().endswith(')'):
            h = i - 1
            while h > 0 and lines[h][:1] in (' ', '\t'):
                h -= 1
            k = i + 1
            while k < len(lines) and lines[k] != '}':
                k += 1
            n = k - i - 1
            if n > FUNC_MAX:
                name = re.search(r'([A-Za-z_]\w*)\s*\(',
                                 ' '.join(lines[h:i]))
                errs.append(f'{rel}:{h + 1}: '
                            f'{name.group(1) if name else "function"} is '
                            f'{n} lines (at most {FUNC_MAX})')
            i = k
        i += 1
    return errs


def check(root):
    errs = []
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding='utf-8') as fh:
            text = fh.read()
        errs += check_includes(root, rel, text)
        if rel.endswith('.c'):
            errs += check_functions(rel, text)
            errs += check_status_map(rel, text)
    return errs


def selftest():
    cases = {
        'storage/a.c': ('#include "../service/config.h"\n', 'may not include'),
        'venv/b.c': ('#include "../api/http.h"\n', 'may not include'),
        'service/common/c.c': ('#include "../../storage/meta.h"\n',
                               'may not include'),
        'scheduler/d.c': ('#include <microhttpd.h>\n', 'microhttpd'),
        'service/sandbox/e.c': ('#include "../exec/executor.h"\n',
                                'may not include'),
        'storage/f.c': ('static int f(void)\n{\n' + '    x();\n' * 81 +
                        '}\n', 'is 81 lines'),
        'venv/g.c': ('#include <api/http.h>\n', 'may not include'),
        'storage/h.c': ('#include <service/exec/executor.h>\n',
                        'may not include'),
        'storage/i.c': ('#include "microhttpd.h"\n', 'microhttpd'),
        'api/j.c': ('static void f(int rc)\n{\n    switch (rc) {\n'
                    '    case IPD_ERR_GONE:\n        g();\n    }\n}\n',
                    'a case on an enum ipd_err'),
        'api/k.c': ('static void f(int rc)\n{\n    g(rc == IPD_ERR_BUSY ? '
                    '429 : 503);\n}\n', 'mapped to a status'),
        'api/l.c': ('static void f(int rc)\n{\n    g(rc == '
                    'IPD_ERR_NOT_FOUND\n          ? IPD_HE_NOT_FOUND : '
                    'IPD_HE_INTERNAL_ERROR);\n}\n', 'mapped to a status'),
        'api/m.c': ('static void f(struct ipd_req *r, int rc)\n{\n'
                    '    if (rc == IPD_ERR_BUSY) {\n'
                    '        r->retry_after_s = 5;\n'
                    '        ipd_reply_code(r, IPD_HE_TOO_MANY_REQUESTS, '
                    '"x");\n    }\n}\n', 'answered with ipd_reply_code'),
        'api/n.c': ('static void f(struct ipd_req *r, int rc)\n{\n'
                    '    if (!rc)\n        return;\n'
                    '    else if (rc == IPD_ERR_NOT_FOUND)\n'
                    '        ipd_reply_code(r, IPD_HE_NOT_FOUND, "x");\n'
                    '}\n', 'answered with ipd_reply_code'),
    }
    good = {
        'storage/ok.c': '#include "../service/common/ipd.h"\n#include "meta.h"\n'
                        'static int f(void)\n{\n' + '    x();\n' * 80 + '}\n',
        'api/ok.c': '#include <microhttpd.h>\n#include "../service/config.h"\n',
        'venv/ok.c': '#include <stdio.h>\n#include <sys/stat.h>\n'
                     '#include <service/common/ipd.h>\n',
        'api/reply.c': 'static int f(int rc)\n{\n    switch (rc) {\n'
                       '    case IPD_ERR_GONE:\n        return 410;\n'
                       '    }\n    return rc == IPD_ERR_BUSY ? 429 : 500;\n'
                       '}\n',
        'api/ok2.c': '/* case IPD_ERR_GONE: a comment is no code */\n'
                     'static void f(struct ipd_req *r, int rc)\n{\n'
                     '    if (rc == IPD_ERR_NOT_FOUND)\n'
                     '        ipd_reply_failure(r, rc, "no such x", "y");\n'
                     '    ipd_reply_failure(r, rc, rc == IPD_ERR_QUOTA ? '
                     '"full" : NULL, "y");\n'
                     '    if (!ok)\n        ipd_reply_code(r, '
                     'IPD_HE_INVALID_REQUEST, "bad");\n}\n',
    }
    failed = 0
    for rel, (text, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, os.path.dirname(rel)))
            with open(os.path.join(d, rel), 'w') as fh:
                fh.write(text)
            errs = check(d)
            if not any(want in e for e in errs):
                print(f'selftest: {rel} not refused ({want}): {errs}')
                failed += 1
    for rel, text in good.items():
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, os.path.dirname(rel)))
            with open(os.path.join(d, rel), 'w') as fh:
                fh.write(text)
            errs = check(d)
            if errs:
                print(f'selftest: {rel} refused: {errs}')
                failed += 1
    print(f'selftest: {len(cases) + len(good) - failed} of '
          f'{len(cases) + len(good)} cases right')
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ['--selftest']:
        return selftest()
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    errs = check(sys.argv[1])
    for e in errs:
        print(e)
    print(f'check-layers: {len(errs)} problem(s)')
    return 1 if errs else 0


if __name__ == '__main__':
    sys.exit(main())
