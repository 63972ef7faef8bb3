#!/usr/bin/python3
"""check-docker.py - static checks of docker/Dockerfile and docker/compose.yaml.

usage: /usr/bin/python3 check-docker.py REPO_ROOT
       /usr/bin/python3 check-docker.py --self-test [REPO_ROOT]

No Docker engine is needed (the development machines have none), so this
checks what can be checked without one: that the compose file has the shape
docs/DEPLOYMENT.md describes, that every file the Dockerfile copies exists in
the build context the compose file declares (and is not excluded by the
.dockerignore in force), that the build stage copies every path the root
CMakeLists.txt reads and installs the -dev packages of
scripts/install-deps.sh, that --from names existing stages, and that the
final stage installs the runtime packages, runs as a non-root user and has a
HEALTHCHECK on /healthz.  Exit status 0 when all pass, 1 otherwise, with one
line per problem.

--self-test copies docker/ into a temporary tree (the rest of the repository
linked), feeds broken variants of the files and asserts each is rejected
with the expected message; it ends with the line "N passed, N failed".

Needs PyYAML (Debian's python3-yaml): run it with /usr/bin/python3.
"""
import copy
import glob
import json
import os
import re
import shutil
import sys
import tempfile

try:
    import yaml
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("check-docker: PyYAML is missing: apt-get install python3-yaml, "
             "and run this with /usr/bin/python3")

COMPOSE = "docker/compose.yaml"
COMPOSE_OVERRIDES = ["docker/compose.sandbox.yaml"]  # checked when present

# What the runtime stage must install (Debian 12 package names).
RUNTIME_PACKAGES = [
    "python3", "python3-venv", "python3-numpy", "python3-pandas",
    "python3-matplotlib", "python3-scipy", "python3-openpyxl", "python3-pil",
    "python3-yaml", "libmicrohttpd12", "libjansson4", "libmagic1", "libcurl4",
    "libsqlite3-0", "libssl3", "libseccomp2", "libmongoc-1.0-0",
    "libbson-1.0-0",
]
# install-deps.sh's Python packages the image does not need (bench/warm.sh's
# Jupyter baseline; pip for ctest clients/python, which installs the client;
# discord.py for ctest clients/discord, the example bot's tests).
PYTHON_PACKAGES_NOT_FOR_IMAGE = ("python3-ipykernel", "python3-jupyter-client",
                                 "python3-pip", "python3-discord")
# install-deps.sh -dev packages the image does not need (sanitizer runtime).
DEV_PACKAGES_NOT_FOR_IMAGE = re.compile(r"^libclang-rt-")
# compose security options the sandbox needs (docs/DEPLOYMENT.md, "Docker").
SECURITY_OPTS = ["seccomp", "apparmor", "systempaths"]


# ---- Dockerfile ------------------------------------------------------------

class Instr:
    def __init__(self, line, cmd, args):
        self.line = line  # 1-based line where the instruction starts
        self.cmd = cmd    # upper case
        self.args = args  # the rest, continuation lines joined


class Stage:
    def __init__(self, index, name, base, line):
        self.index = index
        self.name = name  # lower case, or None
        self.base = base
        self.line = line
        self.instrs = []


def parse_dockerfile(text):
    """Instructions of a Dockerfile: directives, comments, line
    continuations and RUN/COPY heredocs handled as BuildKit does."""
    lines = text.split("\n")
    escape = "\\"
    i = 0
    # Parser directives: "# name=value" lines at the very top.
    while i < len(lines):
        m = re.match(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", lines[i])
        if not m:
            break
        if m.group(1).lower() == "escape":
            escape = m.group(2)
        i += 1
    out = []
    while i < len(lines):
        raw = lines[i]
        start = i + 1
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        buf = raw
        while buf.rstrip().endswith(escape):
            buf = buf.rstrip()[:-1]
            while i < len(lines) and (lines[i].lstrip().startswith("#")
                                      or not lines[i].strip()):
                i += 1  # comments and blank lines inside a continuation
            if i >= len(lines):
                break
            buf += " " + lines[i]
            i += 1
        m = re.match(r"^\s*(\S+)\s*(.*)$", buf)
        cmd, args = m.group(1).upper(), m.group(2).strip()
        # Heredocs (<<EOF, <<-"EOF"): the body runs to the terminator line.
        for hd in re.finditer(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2",
                              args):
            body = []
            while i < len(lines):
                line = lines[i]
                i += 1
                check = line.lstrip("\t") if hd.group(1) else line
                if check == hd.group(3):
                    break
                body.append(line)
            args += "\n" + "\n".join(body)
        out.append(Instr(start, cmd, args))
    return out


def split_flags(args):
    """("--a=b --c rest...") -> ({"a": "b", "c": True}, "rest...")."""
    flags = {}
    while True:
        m = re.match(r"^--([a-zA-Z-]+)(?:=(\S*))?\s*", args)
        if not m:
            return flags, args
        flags[m.group(1).lower()] = m.group(2) if m.group(2) is not None else True
        args = args[m.end():]


def json_or_words(args):
    """A JSON array form, or the words of the shell form."""
    a = args.strip()
    if a.startswith("["):
        try:
            v = json.loads(a)
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return v, True
        except ValueError:
            pass
    return a.split(), False


def stages_of(instrs):
    stages = []
    for ins in instrs:
        if ins.cmd == "FROM":
            _, rest = split_flags(ins.args)
            words = rest.split()
            name = None
            if len(words) >= 3 and words[1].lower() == "as":
                name = words[2].lower()
            base = words[0] if words else ""
            stages.append(Stage(len(stages), name, base, ins.line))
        elif stages:
            stages[-1].instrs.append(ins)
    return stages


def copy_parts(ins):
    """(flags, sources, dest) of a COPY/ADD; heredoc sources dropped."""
    flags, rest = split_flags(ins.args)
    first = rest.split("\n", 1)[0]
    words, _ = json_or_words(first)
    if len(words) < 2:
        return flags, [], words[0] if words else ""
    srcs = [w for w in words[:-1] if not w.startswith("<<")]
    return flags, srcs, words[-1]


def apt_packages(stage):
    """Words after apt-get/apt install in the stage's RUN lines."""
    pkgs = set()
    for ins in stage.instrs:
        if ins.cmd != "RUN":
            continue
        for m in re.finditer(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b(.*?)"
                             r"(?:&&|;|\|\||$)", ins.args, re.S):
            for w in m.group(1).split():
                if not w.startswith("-") and re.match(r"^[a-z0-9][a-z0-9.+:=~-]*$", w):
                    pkgs.add(w.split("=")[0])
    return pkgs


# ---- .dockerignore ---------------------------------------------------------

def ignore_regex(pattern):
    """A moby/patternmatcher pattern as a regex over slash paths."""
    rx, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
                rx += "(?:.*/)?"
            else:
                rx += ".*"
            continue
        if c == "*":
            rx += "[^/]*"
        elif c == "?":
            rx += "[^/]"
        elif c == "[":
            j = pattern.find("]", i)
            if j < 0:
                rx += re.escape(c)
            else:
                rx += "[" + pattern[i + 1:j].replace("\\", "\\\\") + "]"
                i = j
        else:
            rx += re.escape(c)
        i += 1
    return re.compile("^" + rx + "$")


def load_ignore(path):
    rules = []
    if not path or not os.path.isfile(path):
        return rules
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            p = os.path.normpath(line[1:].strip() if neg else line).lstrip("/")
            rules.append((neg, ignore_regex(p), line))
    return rules


def ignored(rules, rel):
    """True when rel (a slash path in the context) is excluded: the last
    rule matching it or one of its parent directories wins."""
    parts = rel.split("/")
    excluded = False
    for neg, rx, _ in rules:
        for k in range(1, len(parts) + 1):
            if rx.match("/".join(parts[:k])):
                excluded = not neg
                break
    return excluded


def ignored_everything_under(rules, root, rel):
    """True when rel is excluded, or is a directory all of whose files are."""
    if ignored(rules, rel):
        return True
    full = os.path.join(root, rel)
    if not os.path.isdir(full):
        return False
    for d, _, files in os.walk(full):
        for f in files:
            r = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            if not ignored(rules, r):
                return False
    return True


# ---- the checks ------------------------------------------------------------

class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.errors = []
        self.checks = 0

    def ok(self, cond, msg):
        self.checks += 1
        if not cond:
            self.errors.append(msg)
        return cond

    # -- compose --
    def load_compose(self, rel):
        path = os.path.join(self.root, rel)
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            self.ok(False, "%s: cannot parse: %s" % (rel, e))
            return None
        if not self.ok(isinstance(doc, dict), "%s: not a YAML mapping" % rel):
            return None
        return doc

    @staticmethod
    def env_of(svc):
        env = svc.get("environment") or {}
        if isinstance(env, list):
            out = {}
            for item in env:
                k, _, v = str(item).partition("=")
                out[k] = v
            return out
        return {str(k): "" if v is None else str(v) for k, v in env.items()}

    @staticmethod
    def volume_entries(svc):
        """(source, target, is_named) of a service's volumes."""
        out = []
        for v in svc.get("volumes") or []:
            if isinstance(v, dict):
                src, tgt = v.get("source"), v.get("target")
                named = v.get("type", "volume") == "volume" and bool(src)
            else:
                parts = str(v).split(":")
                if len(parts) == 1:
                    src, tgt, named = None, parts[0], False  # anonymous
                else:
                    src, tgt = parts[0], parts[1]
                    named = not src.startswith(("/", ".", "~", "$"))
            out.append((src, tgt, named))
        return out

    def check_compose(self):
        doc = self.load_compose(COMPOSE)
        if doc is None:
            return None
        services = doc.get("services")
        if not self.ok(isinstance(services, dict),
                       "%s: no services mapping" % COMPOSE):
            return None
        declared = doc.get("volumes") or {}
        if not isinstance(declared, dict):
            self.ok(False, "%s: top-level volumes must be a mapping" % COMPOSE)
            declared = {}
        for name in ("interpd", "mongo"):
            self.ok(isinstance(services.get(name), dict),
                    "%s: no service %r" % (COMPOSE, name))
        for name, svc in services.items():
            if not isinstance(svc, dict):
                continue
            for src, tgt, named in self.volume_entries(svc):
                if named:
                    self.ok(src in declared,
                            "%s: service %s mounts volume %r, which is not "
                            "declared under the top-level volumes"
                            % (COMPOSE, name, src))
            hc = svc.get("healthcheck")
            if name in ("interpd", "mongo"):
                test = hc.get("test") if isinstance(hc, dict) else None
                self.ok(bool(test) and not hc.get("disable")
                        and test != ["NONE"],
                        "%s: service %s has no healthcheck test"
                        % (COMPOSE, name))
        mongo = services.get("mongo")
        if isinstance(mongo, dict):
            self.ok(str(mongo.get("image", "")).startswith("mongo:7"),
                    "%s: mongo must use the image mongo:7, not %r"
                    % (COMPOSE, mongo.get("image")))
            hc = mongo.get("healthcheck")
            test = hc.get("test") if isinstance(hc, dict) else None
            text = " ".join(test) if isinstance(test, list) else str(test)
            self.ok("mongosh" in text and "ping" in text,
                    "%s: the mongo healthcheck must ping with mongosh"
                    % COMPOSE)
            self.ok(any(n and t == "/data/db"
                        for _, t, n in self.volume_entries(mongo)),
                    "%s: mongo's /data/db must be on a named volume" % COMPOSE)
        ipd = services.get("interpd")
        if not isinstance(ipd, dict):
            return None
        dep = ipd.get("depends_on")
        cond = None
        if isinstance(dep, dict) and isinstance(dep.get("mongo"), dict):
            cond = dep["mongo"].get("condition")
        self.ok(cond == "service_healthy",
                "%s: interpd must depend on mongo with condition "
                "service_healthy (got %r)" % (COMPOSE, dep))
        env = self.env_of(ipd)
        uri = env.get("INTERPD_MONGO_URI", "")
        self.ok(re.match(r"^mongodb(\+srv)?://([^@/]*@)?mongo[:/]", uri),
                "%s: interpd needs INTERPD_MONGO_URI pointing at the mongo "
                "service (got %r)" % (COMPOSE, uri))
        self.ok(env.get("INTERPD_LISTEN") == "0.0.0.0:8080",
                "%s: interpd needs INTERPD_LISTEN=0.0.0.0:8080 (got %r)"
                % (COMPOSE, env.get("INTERPD_LISTEN")))
        data_dir = env.get("INTERPD_DATA_DIR", "/var/lib/interpd")
        self.ok(any(n and t == data_dir
                    for _, t, n in self.volume_entries(ipd)),
                "%s: interpd's data dir %s must be on a named volume"
                % (COMPOSE, data_dir))
        opts = [str(o) for o in ipd.get("security_opt") or []]
        for want in SECURITY_OPTS:
            have = [o for o in opts if re.match(r"^%s[=:]" % want, o)]
            self.ok(have, "%s: interpd needs security_opt %s=... (the "
                    "sandbox's namespaces; see docs/DEPLOYMENT.md)"
                    % (COMPOSE, want))
            for o in have:
                val = re.split(r"[=:]", o, 1)[1]
                if want == "seccomp" and val != "unconfined":
                    self.ok(os.path.isfile(os.path.join(
                        self.root, os.path.dirname(COMPOSE), val)),
                        "%s: seccomp profile %s does not exist" % (COMPOSE, val))
                if want == "systempaths":
                    self.ok(val == "unconfined", "%s: systempaths must be "
                            "unconfined (a fresh /proc)" % COMPOSE)
        self.ok(ipd.get("cgroup") == "private",
                "%s: interpd needs cgroup: private" % COMPOSE)
        ports = [str(p.get("target") if isinstance(p, dict) else p)
                 for p in ipd.get("ports") or []]
        self.ok(any(p == "8080" or p.endswith(":8080") or
                    p.endswith(":8080/tcp") for p in ports),
                "%s: interpd must publish container port 8080" % COMPOSE)
        for rel in COMPOSE_OVERRIDES:
            if os.path.exists(os.path.join(self.root, rel)):
                o = self.load_compose(rel)
                if o is not None:
                    extra = set((o.get("services") or {})) - set(services)
                    self.ok(not extra, "%s: overrides unknown services %s"
                            % (rel, sorted(extra)))
                    self.ok(not (set(o) - {"services", "volumes", "name"}),
                            "%s: unexpected top-level keys %s"
                            % (rel, sorted(set(o) - {"services", "volumes",
                                                     "name"})))
        return ipd

    # -- Dockerfile --
    def build_context(self, ipd):
        """(context dir, Dockerfile path) from the compose file's build."""
        base = os.path.join(self.root, os.path.dirname(COMPOSE))
        build = ipd.get("build") if ipd else None
        if isinstance(build, str):
            build = {"context": build}
        if not self.ok(isinstance(build, dict),
                       "%s: interpd has no build section" % COMPOSE):
            return None, None
        ctx = os.path.normpath(os.path.join(base, build.get("context", ".")))
        dockerfile = os.path.normpath(os.path.join(
            ctx, build.get("dockerfile", "Dockerfile")))
        self.ok(os.path.isdir(ctx), "%s: build context %s is not a directory"
                % (COMPOSE, build.get("context")))
        if not self.ok(os.path.isfile(dockerfile),
                       "%s: build.dockerfile %r does not exist in the context "
                       "%r" % (COMPOSE, build.get("dockerfile"),
                               build.get("context"))):
            return ctx, None
        return ctx, dockerfile

    def check_dockerfile(self, ctx, path):
        rel = os.path.relpath(path, self.root)
        with open(path) as f:
            instrs = parse_dockerfile(f.read())
        stages = stages_of(instrs)
        if not self.ok(stages, "%s: no FROM" % rel):
            return
        ign_path = path + ".dockerignore"
        if not os.path.isfile(ign_path):
            ign_path = os.path.join(ctx, ".dockerignore")
        rules = load_ignore(ign_path)
        ign_rel = os.path.relpath(ign_path, self.root)
        self.ok(len(stages) >= 2, "%s: expected a build stage and a runtime "
                "stage" % rel)
        for s in stages:
            self.ok(s.base.startswith("debian:bookworm") or
                    s.base.lower() in [t.name for t in stages[:s.index]],
                    "%s:%d: stage %s is not based on debian:bookworm-slim"
                    % (rel, s.line, s.name or s.index))
        names = {}
        for s in stages:
            for ins in s.instrs:
                if ins.cmd not in ("COPY", "ADD"):
                    continue
                flags, srcs, dest = copy_parts(ins)
                src_stage = flags.get("from")
                if src_stage:
                    ref = str(src_stage).lower()
                    if ref.isdigit():
                        self.ok(int(ref) < s.index, "%s:%d: --from=%s: no "
                                "earlier stage with that index"
                                % (rel, ins.line, ref))
                    elif not re.search(r"[/:@.]", ref):
                        self.ok(ref in names and names[ref] < s.index,
                                "%s:%d: --from=%s names no earlier stage "
                                "(stages: %s)" % (rel, ins.line, src_stage,
                                                  ", ".join(sorted(names))
                                                  or "none"))
                    continue
                self.ok(srcs, "%s:%d: %s without a source" % (rel, ins.line,
                                                              ins.cmd))
                for src in srcs:
                    if ins.cmd == "ADD" and re.match(r"^(https?|git)[:@]", src):
                        continue
                    norm = os.path.normpath(src.lstrip("/"))
                    if not self.ok(not norm.startswith(".."),
                                   "%s:%d: %s leaves the build context"
                                   % (rel, ins.line, src)):
                        continue
                    matches = glob.glob(os.path.join(ctx, norm))
                    if not self.ok(matches, "%s:%d: %s source %s does not "
                                   "exist in the build context %s"
                                   % (rel, ins.line, ins.cmd, src,
                                      os.path.relpath(ctx, self.root))):
                        continue
                    for m in matches:
                        r = os.path.relpath(m, ctx).replace(os.sep, "/")
                        self.ok(r == "." or not ignored_everything_under(
                            rules, ctx, r), "%s:%d: %s is excluded by %s"
                            % (rel, ins.line, src, ign_rel))
            if s.name:
                names[s.name] = s.index
        self.check_build_stage(rel, stages, ctx)
        self.check_final_stage(rel, stages[-1], ctx)

    def check_build_stage(self, rel, stages, ctx):
        build = None
        for s in stages:
            if any(i.cmd == "RUN" and re.search(r"\bcmake\b", i.args)
                   for i in s.instrs):
                build = s
        if not self.ok(build is not None and build is not stages[-1],
                       "%s: no build stage (a stage before the last that runs "
                       "cmake)" % rel):
            return
        runs = " ".join(i.args for i in build.instrs if i.cmd == "RUN")
        self.ok("-DIPD_INSTALLED_PRELUDE=ON" in runs,
                "%s: the build must configure with -DIPD_INSTALLED_PRELUDE=ON"
                % rel)
        self.ok(re.search(r"cmake\s+--install", runs),
                "%s: the build must install with cmake --install" % rel)
        self.ok(re.search(r"-DCMAKE_BUILD_TYPE=Release\b", runs),
                "%s: the build must use -DCMAKE_BUILD_TYPE=Release" % rel)
        # The -dev packages scripts/install-deps.sh installs.
        deps = os.path.join(self.root, "scripts/install-deps.sh")
        if os.path.isfile(deps):
            with open(deps) as f:
                m = re.search(r"packages=\((.*?)\)", f.read(), re.S)
            want = [p for p in (m.group(1).split() if m else [])
                    if p.endswith("-dev") and
                    not DEV_PACKAGES_NOT_FOR_IMAGE.match(p)]
            have = apt_packages(build)
            missing = [p for p in want if p not in have]
            self.ok(not missing, "%s: the build stage does not install %s "
                    "(from scripts/install-deps.sh)" % (rel, " ".join(missing)))
        # Every path the root CMakeLists.txt reads is copied to WORKDIR/path.
        workdir, copies = "/", []
        for ins in build.instrs:
            if ins.cmd == "WORKDIR":
                workdir = os.path.normpath(os.path.join(workdir, ins.args))
            elif ins.cmd in ("COPY", "ADD"):
                flags, srcs, dest = copy_parts(ins)
                if flags.get("from"):
                    continue
                d = os.path.normpath(os.path.join(workdir, dest))
                for src in srcs:
                    s = os.path.normpath(src.lstrip("/"))
                    if s == ".":
                        placed = d
                    elif os.path.isdir(os.path.join(ctx, s)):
                        placed = d  # the directory's content goes to dest
                    elif dest.endswith("/") or len(srcs) > 1 or dest in (".", "./"):
                        placed = os.path.join(d, os.path.basename(s))
                    else:
                        placed = d
                    copies.append((s, placed))
        cm = os.path.join(ctx, "CMakeLists.txt")
        if not self.ok(os.path.isfile(cm), "no CMakeLists.txt in the build "
                       "context"):
            return
        with open(cm) as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        needed = set()
        for m in re.finditer(r"\$\{CMAKE_SOURCE_DIR\}/([^\s\)\"]+)", text):
            needed.add(m.group(1))
        for m in re.finditer(r"add_subdirectory\s*\(\s*([^\s\)]+)", text):
            needed.add(m.group(1))
        for m in re.finditer(r"install\s*\(\s*FILES\s+(.*?)\s+DESTINATION",
                             text, re.S):
            needed.update(w for w in m.group(1).split() if "$" not in w)
        needed.add("CMakeLists.txt")
        for p in sorted(needed):
            parts = []
            for part in p.split("/"):
                if re.search(r"[*?\[$]", part):
                    break
                parts.append(part)
            p = "/".join(parts)
            if not p:
                continue
            target = os.path.normpath(os.path.join(workdir, p))
            covered = False
            for s, placed in copies:
                if s == "." or p == s or p.startswith(s + "/"):
                    rest = os.path.relpath(p, s) if s != "." else p
                    covered = covered or os.path.normpath(
                        os.path.join(placed, rest) if rest != "." else placed
                    ) == target
            self.ok(covered, "%s: the build stage does not copy %s to %s, "
                    "which CMakeLists.txt reads" % (rel, p, target))

    def check_final_stage(self, rel, final, ctx):
        pkgs = apt_packages(final)
        missing = [p for p in RUNTIME_PACKAGES if p not in pkgs]
        # The Python modules install-deps.sh gives the sandboxed code (the
        # data stack, issue 26): the image must give them too.
        deps = os.path.join(self.root, "scripts/install-deps.sh")
        if os.path.isfile(deps):
            with open(deps) as f:
                text = re.sub(r"#[^\n]*", "", f.read())
            m = re.search(r"packages=\((.*?)\)", text, re.S)
            missing += [p for p in (m.group(1).split() if m else [])
                        if p.startswith("python3-") and
                        p not in PYTHON_PACKAGES_NOT_FOR_IMAGE and
                        p not in pkgs and p not in missing]
        self.ok("python3-venv" in pkgs, "%s: the runtime stage must install "
                "python3-venv" % rel)
        self.ok(not missing, "%s: the runtime stage does not install %s"
                % (rel, " ".join(missing)))
        users = [i for i in final.instrs if i.cmd == "USER"]
        user = users[-1].args.split(":")[0].strip() if users else "root"
        self.ok(user not in ("root", "0", ""),
                "%s: the final stage must run as a non-root USER (got %s)"
                % (rel, user if users else "no USER"))
        if users and not user.isdigit():
            created = any(i.cmd == "RUN" and re.search(
                r"\b(useradd|adduser)\b[^&;]*\b%s\b" % re.escape(user), i.args)
                for i in final.instrs)
            self.ok(created, "%s: USER %s is not created (useradd) in the "
                    "final stage" % (rel, user))
        # Files the final stage copies from the context: image path -> source.
        copied = {}
        for ins in final.instrs:
            if ins.cmd not in ("COPY", "ADD"):
                continue
            flags, srcs, dest = copy_parts(ins)
            if flags.get("from"):
                continue
            for src in srcs:
                s = os.path.normpath(src.lstrip("/"))
                if dest.endswith("/") or len(srcs) > 1:
                    copied[os.path.join(dest, os.path.basename(s))] = s
                else:
                    copied[dest] = s
        copied_dirs = {os.path.dirname(p) for p in copied}

        def refs_ok(words, what, line):
            for w in words:
                if w.startswith("/") and os.path.dirname(w) in copied_dirs:
                    self.ok(w in copied, "%s:%d: %s runs %s, which the final "
                            "stage does not copy" % (rel, line, what, w))

        hcs = [i for i in final.instrs if i.cmd == "HEALTHCHECK"]
        hc = hcs[-1] if hcs else None
        if self.ok(hc is not None and not hc.args.upper().startswith("NONE"),
                   "%s: the final stage has no HEALTHCHECK" % rel):
            _, rest = split_flags(hc.args)
            m = re.match(r"^CMD\s+(.*)$", rest, re.S)
            if self.ok(m, "%s:%d: HEALTHCHECK without CMD" % (rel, hc.line)):
                words, _ = json_or_words(m.group(1))
                refs_ok(words, "HEALTHCHECK", hc.line)
                text = m.group(1)
                for w in words:
                    if w in copied:
                        with open(os.path.join(ctx, copied[w])) as f:
                            text += f.read()
                self.ok("/healthz" in text and "/readyz" not in m.group(1),
                        "%s:%d: the HEALTHCHECK must probe /healthz (directly "
                        "or in the script it runs)" % (rel, hc.line))
        self.final_copied = copied
        for ins in final.instrs:
            if ins.cmd in ("ENTRYPOINT", "CMD"):
                words, is_json = json_or_words(ins.args)
                refs_ok(words, ins.cmd, ins.line)

    def run(self):
        self.final_copied = {}
        ipd = self.check_compose()
        ctx, dockerfile = self.build_context(ipd)
        if dockerfile:
            self.ok(os.path.normpath(dockerfile) == os.path.normpath(
                os.path.join(self.root, "docker/Dockerfile")),
                "%s: interpd builds %s, not docker/Dockerfile"
                % (COMPOSE, os.path.relpath(dockerfile, self.root)))
            self.check_dockerfile(ctx, dockerfile)
            hc = (ipd or {}).get("healthcheck") or {}
            test = hc.get("test") if isinstance(hc, dict) else None
            if isinstance(test, list):
                for w in test:
                    if w.startswith("/usr/local/libexec/"):
                        self.ok(w in self.final_copied, "%s: the interpd "
                                "healthcheck runs %s, which the image does "
                                "not contain" % (COMPOSE, w))
        return not self.errors


def check(root, quiet=False):
    c = Checker(root)
    good = c.run()
    if not quiet:
        for e in c.errors:
            print("check-docker: FAIL: " + e)
        if good:
            print("check-docker: ok: %d checks of docker/Dockerfile and "
                  "docker/compose.yaml passed" % c.checks)
    return c


# ---- self-test -------------------------------------------------------------

def text_edit(rel, old, new, count=1):
    def f(root):
        p = os.path.join(root, rel)
        with open(p) as fh:
            s = fh.read()
        if old not in s:
            raise AssertionError("self-test: %r not found in %s" % (old, rel))
        with open(p, "w") as fh:
            fh.write(s.replace(old, new, count))
    return f


def regex_edit(rel, pattern, new):
    def f(root):
        p = os.path.join(root, rel)
        with open(p) as fh:
            s = fh.read()
        s2, n = re.subn(pattern, new, s, flags=re.M | re.S)
        if not n:
            raise AssertionError("self-test: /%s/ not found in %s"
                                 % (pattern, rel))
        with open(p, "w") as fh:
            fh.write(s2)
    return f


def yaml_edit(fn, rel=COMPOSE):
    def f(root):
        p = os.path.join(root, rel)
        with open(p) as fh:
            doc = yaml.safe_load(fh)
        doc = copy.deepcopy(doc)
        fn(doc)
        with open(p, "w") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False)
    return f


def write_file(rel, content):
    def f(root):
        with open(os.path.join(root, rel), "w") as fh:
            fh.write(content)
    return f


def ipd(doc):
    return doc["services"]["interpd"]


DF = "docker/Dockerfile"
CASES = [
    # (name, mutation, expected message fragment)
    ("no HEALTHCHECK", regex_edit(DF, r"^HEALTHCHECK .*?\]\n", ""),
     "has no HEALTHCHECK"),
    ("HEALTHCHECK on /readyz",
     regex_edit(DF, r"^HEALTHCHECK .*?\]\n",
                'HEALTHCHECK CMD ["/usr/bin/python3", "-c", '
                '"import urllib.request as u; '
                'u.urlopen(\'http://127.0.0.1:8080/readyz\')"]\n'),
     "must probe /healthz"),
    ("HEALTHCHECK script not copied",
     text_edit(DF, "/usr/local/libexec/interpd/healthcheck.py\"]",
               "/usr/local/libexec/interpd/health.py\"]"),
     "does not copy"),
    ("USER root", regex_edit(DF, r"^USER interpd$", "USER root"),
     "non-root USER"),
    ("USER 0:0", regex_edit(DF, r"^USER interpd$", "USER 0:0"),
     "non-root USER"),
    ("no USER", regex_edit(DF, r"^USER interpd\n", ""), "non-root USER"),
    ("USER never created", regex_edit(DF, r"^USER interpd$", "USER nobody2"),
     "is not created"),
    ("--from names a missing stage",
     text_edit(DF, "--from=build", "--from=bulid"), "names no earlier stage"),
    ("--from names a later stage",
     text_edit(DF, "FROM debian:bookworm-slim AS build",
               "FROM debian:bookworm-slim AS build0"),
     "names no earlier stage"),
    ("COPY of a missing path",
     text_edit(DF, "COPY scheduler/ scheduler/", "COPY schedular/ scheduler/"),
     "does not exist"),
    ("COPY of a missing script",
     text_edit(DF, "docker/healthcheck.py /usr", "docker/healthcheck.sh /usr"),
     "does not exist"),
    ("COPY leaves the context",
     text_edit(DF, "COPY cmake/ cmake/", "COPY ../cmake/ cmake/"),
     "leaves the build context"),
    ("source excluded by the dockerignore",
     write_file("docker/Dockerfile.dockerignore", "service\n"),
     "is excluded by"),
    ("CMake input not copied",
     regex_edit(DF, r"^COPY venv/ venv/\n", ""), "does not copy venv"),
    ("CMake input copied to the wrong place",
     text_edit(DF, "COPY storage/ storage/", "COPY storage/ src/storage/"),
     "does not copy storage"),
    ("no python3-venv at run time",
     text_edit(DF, "python3 python3-venv python3-numpy",
               "python3 python3-numpy"), "must install python3-venv"),
    ("a runtime library missing",
     text_edit(DF, "libseccomp2 libmongoc-1.0-0", "libmongoc-1.0-0"),
     "does not install libseccomp2"),
    ("a -dev package of install-deps.sh missing",
     text_edit(DF, "libseccomp-dev ", ""), "does not install libseccomp-dev"),
    ("a Python module of install-deps.sh missing from the runtime stage",
     text_edit(DF, "python3-statsmodels ", ""),
     "does not install python3-statsmodels"),
    ("no IPD_INSTALLED_PRELUDE",
     text_edit(DF, "-DIPD_INSTALLED_PRELUDE=ON", ""),
     "IPD_INSTALLED_PRELUDE=ON"),
    ("no cmake --install",
     regex_edit(DF, r" \\\n && DESTDIR=/out cmake --install /build --strip",
                ""), "cmake --install"),
    ("single stage", regex_edit(DF, r"^FROM debian:bookworm-slim AS runtime\n",
                                ""), "build stage"),
    ("compose: invalid YAML", write_file(COMPOSE, "services: [\n"),
     "cannot parse"),
    ("compose: no mongo",
     yaml_edit(lambda d: (d["services"].pop("mongo"),
                          ipd(d).pop("depends_on"))), "no service 'mongo'"),
    ("compose: depends_on without condition",
     yaml_edit(lambda d: ipd(d).__setitem__("depends_on", ["mongo"])),
     "condition service_healthy"),
    ("compose: depends_on service_started",
     yaml_edit(lambda d: ipd(d)["depends_on"]["mongo"].__setitem__(
         "condition", "service_started")), "condition service_healthy"),
    ("compose: undeclared named volume",
     yaml_edit(lambda d: d["volumes"].pop("interpd-data")),
     "is not declared"),
    ("compose: data dir on a bind mount",
     yaml_edit(lambda d: ipd(d).__setitem__(
         "volumes", ["./data:/var/lib/interpd"])), "on a named volume"),
    ("compose: mongo without healthcheck",
     yaml_edit(lambda d: d["services"]["mongo"].pop("healthcheck")),
     "mongo has no healthcheck"),
    ("compose: interpd without healthcheck",
     yaml_edit(lambda d: ipd(d).pop("healthcheck")),
     "interpd has no healthcheck"),
    ("compose: healthcheck script missing from the image",
     yaml_edit(lambda d: ipd(d)["healthcheck"].__setitem__(
         "test", ["CMD", "/usr/local/libexec/interpd/hc.py"])),
     "does not contain"),
    ("compose: mongo 6",
     yaml_edit(lambda d: d["services"]["mongo"].__setitem__("image",
                                                           "mongo:6")),
     "mongo:7"),
    ("compose: no INTERPD_MONGO_URI",
     yaml_edit(lambda d: ipd(d)["environment"].pop("INTERPD_MONGO_URI")),
     "INTERPD_MONGO_URI"),
    ("compose: listen on loopback",
     yaml_edit(lambda d: ipd(d)["environment"].__setitem__(
         "INTERPD_LISTEN", "127.0.0.1:8080")), "INTERPD_LISTEN"),
    ("compose: no systempaths=unconfined",
     yaml_edit(lambda d: ipd(d)["security_opt"].remove(
         "systempaths=unconfined")), "systempaths"),
    ("compose: no seccomp option",
     yaml_edit(lambda d: ipd(d)["security_opt"].remove(
         "seccomp=unconfined")), "security_opt seccomp"),
    ("compose: no private cgroup namespace",
     yaml_edit(lambda d: ipd(d).pop("cgroup")), "cgroup: private"),
    ("compose: wrong build context",
     yaml_edit(lambda d: ipd(d)["build"].__setitem__("context", ".")),
     "does not exist in the context"),
    ("compose: override names an unknown service",
     write_file("docker/compose.sandbox.yaml",
                "services:\n  interpdd:\n    user: \"0:0\"\n"),
     "overrides unknown services"),
]


def make_tree(repo, tmp):
    """tmp/: docker/ copied, everything else of repo linked."""
    for entry in os.listdir(repo):
        if entry == "docker" or entry == ".git" or entry.startswith("build"):
            continue
        os.symlink(os.path.join(repo, entry), os.path.join(tmp, entry))
    shutil.copytree(os.path.join(repo, "docker"), os.path.join(tmp, "docker"))


def self_test(repo):
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="check-docker-") as base:
        clean = os.path.join(base, "clean")
        os.mkdir(clean)
        make_tree(repo, clean)
        c = check(clean, quiet=True)
        if c.errors:
            failed += 1
            print("self-test FAIL: the unchanged files are rejected:")
            for e in c.errors:
                print("    " + e)
        else:
            passed += 1
            print("self-test ok: the unchanged files pass (%d checks)"
                  % c.checks)
        for i, (name, mutate, want) in enumerate(CASES):
            tree = os.path.join(base, "case%d" % i)
            os.mkdir(tree)
            make_tree(repo, tree)
            try:
                mutate(tree)
                c = check(tree, quiet=True)
                hit = [e for e in c.errors if want in e]
                if hit:
                    passed += 1
                    print("self-test ok: %s: %s" % (name, hit[0]))
                else:
                    failed += 1
                    print("self-test FAIL: %s: not rejected with %r; errors: %s"
                          % (name, want, c.errors or "none"))
            except AssertionError as e:
                failed += 1
                print("self-test FAIL: %s: %s" % (name, e))
            shutil.rmtree(tree)
    print("%d passed, %d failed" % (passed, failed))
    return failed == 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        repo = argv[2] if len(argv) > 2 else os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..")
        return 0 if self_test(os.path.abspath(repo)) else 1
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 1
    if not os.path.isdir(os.path.join(argv[1], "docker")):
        print("check-docker: %s has no docker/ folder" % argv[1],
              file=sys.stderr)
        return 1
    return 0 if not check(argv[1]).errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
