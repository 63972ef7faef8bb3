#!/usr/bin/python3
"""check-install.py - every file interpd reads from its share dir is installed.

usage: check-install.py REPO_ROOT SHARE_FILES
       check-install.py --self-test REPO_ROOT

SHARE_FILES is the list CMake installs into PREFIX/share/interpd (written by
the root CMakeLists.txt as BUILD_DIR/share-files.txt, one path a line).  The
program reads from that dir (the prelude dir and the package-list dir, both
PREFIX/share/interpd once installed):

  - in C: a string literal naming a file under the sandbox's view of it,
    "/opt/interpd/NAME" (IPD_VENV_TOOLS_MOUNT is "/opt/interpd" too), or
    following IPD_PRELUDE_DIR, IPD_VENV_DATA_DIR or IPD_VENV_TOOLS_MOUNT;
    a "%s/NAME.py" literal (a Python file in a dir given at run time: the
    prelude dir; the user's code.py is written, not read, by name only);
  - in the Python it runs: "/opt/interpd/NAME" literals.

Each such NAME must be the basename of a listed file, and no two listed
files may share a basename (they land in one dir).  Exit 0 when all hold,
else 1 with one line per problem.  --self-test checks the checker refuses a
list without zygote.py, and a C file naming a file nobody installs.
"""
import glob
import os
import re
import sys
import tempfile

C_DIRS = ["api", "service", "storage", "venv", "scheduler"]
PY_DIR = "service/exec/python"

NAME = r"([A-Za-z0-9_][A-Za-z0-9_.-]*\.[A-Za-z0-9]+)"
C_PATTERNS = [
    re.compile(r'"/opt/interpd/' + NAME + r'"'),
    re.compile(r'\b(?:IPD_PRELUDE_DIR|IPD_VENV_DATA_DIR|IPD_VENV_TOOLS_MOUNT)'
               r'\s*"/' + NAME + r'"'),
    re.compile(r'"%s/([A-Za-z0-9_][A-Za-z0-9_-]*\.py)"'),
]
PY_PATTERN = re.compile(r'["\']/opt/interpd/' + NAME + r'["\']')


def strip_c_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def names_read(root):
    """{basename: first place it is named}"""
    found = {}
    for d in C_DIRS:
        for path in sorted(glob.glob(os.path.join(root, d, "**", "*.[ch]"),
                                     recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = strip_c_comments(f.read())
            for pat in C_PATTERNS:
                for m in pat.finditer(text):
                    found.setdefault(m.group(1), os.path.relpath(path, root))
    for path in sorted(glob.glob(os.path.join(root, PY_DIR, "*.py"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("#"):
                    continue
                for m in PY_PATTERN.finditer(line):
                    found.setdefault(m.group(1), os.path.relpath(path, root))
    return found


def check(root, share_list):
    problems = []
    with open(share_list) as f:
        listed = [l.strip() for l in f if l.strip()]
    bases = {}
    for p in listed:
        b = os.path.basename(p)
        if b in bases:
            problems.append("%s and %s would both install as share/interpd/%s"
                            % (bases[b], p, b))
        bases[b] = p
        if not os.path.isfile(p):
            problems.append("%s is in the install list but does not exist" % p)
    for name, where in sorted(names_read(root).items()):
        if name not in bases:
            problems.append("%s names %s, which the program reads from its "
                            "share dir, but `cmake --install` does not install "
                            "it (CMakeLists.txt, IPD_SHARE_FILES)"
                            % (where, name))
    for p in problems:
        print("check-install: " + p)
    return not problems


def self_test(root):
    passed = failed = 0

    def expect(ok, what):
        nonlocal passed, failed
        print(("ok   " if ok else "FAIL ") + what)
        if ok:
            passed += 1
        else:
            failed += 1

    full = [os.path.join(root, "service/exec/python", n)
            for n in sorted(os.listdir(os.path.join(root, PY_DIR)))
            if n.endswith(".py")]
    full += sorted(glob.glob(os.path.join(root, "venv/data/*")))
    with tempfile.TemporaryDirectory() as tmp:
        lst = os.path.join(tmp, "list")
        with open(lst, "w") as f:
            f.write("\n".join(full) + "\n")
        expect(check(root, lst), "the tree's own files pass")
        with open(lst, "w") as f:
            f.write("\n".join(p for p in full
                              if not p.endswith("/zygote.py")) + "\n")
        expect(not check(root, lst), "a list without zygote.py is refused")
        # A copy of the C dirs with one more file read at run time.
        fake = os.path.join(tmp, "root")
        for d in C_DIRS + [PY_DIR, "venv/data"]:
            os.makedirs(os.path.join(fake, d), exist_ok=True)
        for d in C_DIRS:
            for path in glob.glob(os.path.join(root, d, "**", "*.[ch]"),
                                  recursive=True):
                dst = os.path.join(fake, os.path.relpath(path, root))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(path, "rb") as s, open(dst, "wb") as o:
                    o.write(s.read())
        for path in glob.glob(os.path.join(root, PY_DIR, "*.py")):
            dst = os.path.join(fake, os.path.relpath(path, root))
            with open(path, "rb") as s, open(dst, "wb") as o:
                o.write(s.read())
        with open(lst, "w") as f:
            f.write("\n".join(full) + "\n")
        with open(os.path.join(fake, "service/exec/extra.c"), "w") as f:
            f.write('static const char *argv[] = {"/opt/interpd/helper.py"};\n')
        expect(not check(fake, lst), "a C file naming /opt/interpd/helper.py "
               "(not installed) is refused")
        os.remove(os.path.join(fake, "service/exec/extra.c"))
        with open(os.path.join(fake, "venv/extra.c"), "w") as f:
            f.write('#define X IPD_VENV_DATA_DIR "/extra-list.txt"\n')
        expect(not check(fake, lst), "IPD_VENV_DATA_DIR \"/extra-list.txt\" "
               "(not installed) is refused")
    print("%d passed, %d failed" % (passed, failed))
    return failed == 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return 0 if self_test(argv[2]) else 1
    if len(argv) != 3:
        sys.exit(__doc__)
    return 0 if check(argv[1], argv[2]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
