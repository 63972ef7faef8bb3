#!/usr/bin/python3
"""Build the test suite's own small Python packages into OUTDIR.

    /usr/bin/python3 tests/support/make-wheels.py OUTDIR

Only the standard library is used (zipfile, tarfile): no setuptools, no build
tools, no network.  The output is deterministic: every archive entry has a
fixed timestamp and mode, entries are written in a fixed order and the "big"
payload comes from a seeded generator, so a rerun produces byte-identical
files.

Wheels (py3-none-any, pure Python), by distribution name [top-level module]:
  ipdtest-alpha 1.0, 2.0  [ipdtest_alpha]  VERSION, hello() -> "alpha <version>"
  ipdtest-withdep 1.0     [ipdtest_withdep] Requires-Dist: ipdtest-dep;
                                            imports ipdtest_dep at import time
  ipdtest-dep 1.0         [ipdtest_dep]
  ipdtest-baddep 1.0      [ipdtest_baddep]  Requires-Dist: ipdtest-forbidden
  ipdtest-forbidden 1.0   [ipdtest_forbidden]
  ipdtest-broken 1.0      [ipdtest_broken]  raises ImportError("deliberately
                                            broken") when imported
  ipdtest-mapped 1.0      [ipdmapped]       import name differs from the
                                            distribution name
  ipdtest-big 1.0         [ipdtest_big]     package with a 5 MiB incompressible
                                            data file (ipdtest_big/payload.bin)
Source distribution only:
  ipdtest-sdistonly 1.0   ipdtest_sdistonly-1.0.tar.gz, whose setup.py, when
                          executed, writes the marker file named by
                          $IPDTEST_SDIST_MARKER (default /tmp/ipdtest-sdist-ran)
                          before anything else.  --only-binary=:all: must
                          refuse it, so the marker must never appear.
  ipdtest-evil 1.0        an sdist whose build (allowed with
                          --pip-allow-sdist 1) attacks the generation it is
                          built into, at /opt/venv in the sandbox: plants
                          .interpd.json.tmp as a symlink to the host path
                          /tmp/ipdtest-evil-written and replaces .inuse by
                          a fifo.  Installs fine otherwise.
  ipdtest-tamper 1.0      an sdist whose build appends "TAMPERED = True" to
                          every ipdtest_alpha/__init__.py in /opt/venv (in
                          place: through a hard link it would reach the
                          current generation), then fails the build.
"""

import base64
import gzip
import hashlib
import io
import os
import sys
import tarfile
import zipfile

# Zip cannot store dates before 1980; any fixed value makes builds repeatable.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
TAR_MTIME = 315532800  # 1980-01-01T00:00:00Z
BIG_SIZE = 5 * 1024 * 1024
GENERATOR = "ipdtest-make-wheels 1"


def wheel_name_part(dist):
    """Distribution name as it appears in file names (PEP 427/491)."""
    return dist.replace("-", "_").replace(".", "_")


def big_payload():
    # SHA-256 in counter mode: incompressible, and the same bytes on every
    # machine and Python version.
    out = bytearray()
    counter = 0
    seed = b"ipdtest-big payload v1"
    while len(out) < BIG_SIZE:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:BIG_SIZE])


def record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def metadata_text(dist, version, summary, requires):
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + dist,
        "Version: " + version,
        "Summary: " + summary,
        "License: MIT",
        "Requires-Python: >=3.7",
    ]
    lines += ["Requires-Dist: " + r for r in requires]
    return "\n".join(lines) + "\n\n" + summary + "\n"


def write_wheel(outdir, dist, version, files, summary, requires=()):
    """files: list of (archive path, bytes, stored) for the package itself."""
    distinfo = "%s-%s.dist-info" % (wheel_name_part(dist), version)
    wheel_meta = (
        "Wheel-Version: 1.0\n"
        "Generator: %s\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n" % GENERATOR
    )
    entries = list(files)
    entries.append((distinfo + "/METADATA",
                    metadata_text(dist, version, summary, requires).encode(), False))
    entries.append((distinfo + "/WHEEL", wheel_meta.encode(), False))
    entries.append((distinfo + "/top_level.txt",
                    "".join(sorted({p.split("/")[0].split(".py")[0] + "\n"
                                    for p, _, _ in files})).encode(), False))
    record_lines = ["%s,%s,%d" % (path, record_hash(data), len(data))
                    for path, data, _ in entries]
    record_lines.append(distinfo + "/RECORD,,")
    entries.append((distinfo + "/RECORD", ("\n".join(record_lines) + "\n").encode(), False))

    filename = "%s-%s-py3-none-any.whl" % (wheel_name_part(dist), version)
    target = os.path.join(outdir, filename)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data, stored in entries:
            info = zipfile.ZipInfo(path, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            info.external_attr = (0o100644 << 16)
            info.create_system = 3  # Unix, so the mode above is honoured
            zf.writestr(info, data)
    write_atomically(target, buf.getvalue())
    return filename


EVIL_BUILD = """\
import os
root = '/opt/venv'
try:
    os.unlink(os.path.join(root, '.interpd.json.tmp'))
except FileNotFoundError:
    pass
os.symlink('/tmp/ipdtest-evil-written', os.path.join(root, '.interpd.json.tmp'))
os.unlink(os.path.join(root, '.inuse'))
os.mkfifo(os.path.join(root, '.inuse'))
"""

TAMPER_BUILD = """\
import glob
for path in glob.glob('/opt/venv/lib/python3*/site-packages/ipdtest_alpha/__init__.py'):
    with open(path, 'a') as f:
        f.write('TAMPERED = True\\n')
raise SystemExit('ipdtest-tamper: failing on purpose after tampering')
"""


def write_sdist(outdir, dist, version, summary, build_code=None):
    base = "%s-%s" % (wheel_name_part(dist), version)
    module = wheel_name_part(dist)
    pkg_info = metadata_text(dist, version, summary, ()).encode()
    if build_code is None:
        build_code = (
            "# Executing this file proves a source build ran: it must never\n"
            "# happen under --only-binary=:all:.\n"
            "import os\n"
            "marker = os.environ.get('IPDTEST_SDIST_MARKER', "
            "'/tmp/ipdtest-sdist-ran')\n"
            "with open(marker, 'w') as f:\n"
            "    f.write('setup.py of %s %s ran\\n')\n" % (dist, version))
    setup_py = (
        build_code +
        "from setuptools import setup\n"
        "setup(name=%r, version=%r, py_modules=[%r])\n"
        % (dist, version, module)
    ).encode()
    module_src = ('VERSION = "%s"\n' % version).encode()
    members = [
        (base + "/PKG-INFO", pkg_info),
        (base + "/setup.py", setup_py),
        (base + "/%s.py" % module, module_src),
    ]
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        dirinfo = tarfile.TarInfo(base)
        dirinfo.type = tarfile.DIRTYPE
        dirinfo.mode = 0o755
        dirinfo.mtime = TAR_MTIME
        tf.addfile(dirinfo)
        for path, data in members:
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = TAR_MTIME
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            tf.addfile(ti, io.BytesIO(data))
    gz_buf = io.BytesIO()
    # filename="" and a fixed mtime keep the gzip header repeatable.
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz_buf, mtime=TAR_MTIME) as gz:
        gz.write(tar_buf.getvalue())
    filename = base + ".tar.gz"
    write_atomically(os.path.join(outdir, filename), gz_buf.getvalue())
    return filename


def write_atomically(path, data):
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def src(text):
    return text.encode()


def build(outdir):
    os.makedirs(outdir, exist_ok=True)
    made = []
    for version in ("1.0", "2.0"):
        made.append(write_wheel(outdir, "ipdtest-alpha", version, [
            ("ipdtest_alpha/__init__.py", src(
                'VERSION = "%s"\n\n\ndef hello():\n    return "alpha " + VERSION\n' % version),
             False),
        ], "interpd test package alpha %s" % version))
    made.append(write_wheel(outdir, "ipdtest-dep", "1.0", [
        ("ipdtest_dep.py", src('VERSION = "1.0"\n\n\ndef value():\n    return "dep 1.0"\n'), False),
    ], "interpd test package: a dependency"))
    made.append(write_wheel(outdir, "ipdtest-withdep", "1.0", [
        ("ipdtest_withdep.py", src(
            'import ipdtest_dep\n\nVERSION = "1.0"\n\n\n'
            'def hello():\n    return "withdep 1.0 + " + ipdtest_dep.value()\n'), False),
    ], "interpd test package that requires ipdtest-dep", requires=["ipdtest-dep"]))
    made.append(write_wheel(outdir, "ipdtest-forbidden", "1.0", [
        ("ipdtest_forbidden.py", src('VERSION = "1.0"\n'), False),
    ], "interpd test package kept off the allowlist"))
    made.append(write_wheel(outdir, "ipdtest-baddep", "1.0", [
        ("ipdtest_baddep.py", src('import ipdtest_forbidden\n\nVERSION = "1.0"\n'), False),
    ], "interpd test package that requires ipdtest-forbidden",
        requires=["ipdtest-forbidden"]))
    made.append(write_wheel(outdir, "ipdtest-broken", "1.0", [
        ("ipdtest_broken.py", src('raise ImportError("deliberately broken")\n'), False),
    ], "interpd test package that installs but cannot be imported"))
    made.append(write_wheel(outdir, "ipdtest-mapped", "1.0", [
        ("ipdmapped/__init__.py", src(
            'VERSION = "1.0"\n\n\ndef hello():\n    return "mapped 1.0"\n'), False),
    ], "interpd test package whose import name is ipdmapped"))
    made.append(write_wheel(outdir, "ipdtest-big", "1.0", [
        ("ipdtest_big/__init__.py", src(
            'import os\n\nVERSION = "1.0"\nPAYLOAD = os.path.join('
            'os.path.dirname(__file__), "payload.bin")\nPAYLOAD_SIZE = %d\n' % BIG_SIZE),
         False),
        ("ipdtest_big/payload.bin", big_payload(), True),
    ], "interpd test package with a 5 MiB incompressible data file"))
    made.append(write_sdist(outdir, "ipdtest-sdistonly", "1.0",
                            "interpd test package published only as an sdist"))
    made.append(write_sdist(outdir, "ipdtest-evil", "1.0",
                            "interpd test sdist attacking its generation",
                            EVIL_BUILD))
    made.append(write_sdist(outdir, "ipdtest-tamper", "1.0",
                            "interpd test sdist writing through hard links",
                            TAMPER_BUILD))
    return made


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: make-wheels.py OUTDIR\n")
        return 2
    for name in build(argv[1]):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
