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
    }
    good = {
        'storage/ok.c': '#include "../service/common/ipd.h"\n#include "meta.h"\n'
                        'static int f(void)\n{\n' + '    x();\n' * 80 + '}\n',
        'api/ok.c': '#include <microhttpd.h>\n#include "../service/config.h"\n',
        'venv/ok.c': '#include <stdio.h>\n#include <sys/stat.h>\n'
                     '#include <service/common/ipd.h>\n',
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
