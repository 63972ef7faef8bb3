#!/usr/bin/python3
"""The adaptive warm set's zygote side: zygote.py's _probe and _adapt
(service/exec/python/zygote.py), run for real in this process against
throwaway modules written into a temp dir on sys.path: one that imports
(and allocates), one that raises, ones that exit or die of a signal, one
that starts a thread, one that hangs past PROBE_TIMEOUT, standard library
names, one over the budget, one already imported, and known costs.  Every
refused candidate is tried in a child only: this process ends with none of
them imported, one thread and no child left.

    /usr/bin/python3 test_warm_adapt.py ZYGOTE_PY

Ends with "N passed, N failed" and exits non-zero when anything failed.
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

ZYGOTE = None       # the module under test (main() loads it)
_tmp = None         # the modules' dir, on sys.path
PREFIX = "ipdwt_"   # every module the test writes

# Each writes its pid to <name>.pids when its import starts: which
# process imported it, and how many times.
MODULES = {
    "fine": "X = b'x' * (5 * 1024 * 1024)\n",
    "small": "X = 1\n",
    "tiny": "X = 1\n",
    "known": "X = b'k' * (1024 * 1024)\n",
    "known_big": "X = 1\n",
    "raises": "raise ValueError('not here')\n",
    "sysexit": "raise SystemExit(0)\n",
    "exits": "import os\nos._exit(3)\n",
    "sigkill": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "segv": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "thread": ("import threading, time\n"
               "threading.Thread(target=time.sleep, args=(60,),"
               " daemon=True).start()\n"),
    "slow": "import time\ntime.sleep(60)\n",
    "big": "X = b'b' * (8 * 1024 * 1024)\n",
    "pre": "X = 1\n",
    "pkg/__init__": "X = 1\n",
    "pkg/sub": "Y = 2\n",
}
REFUSED = ("raises", "sysexit", "exits", "sigkill", "segv", "thread",
           "slow")


def mod(short):
    return PREFIX + short


def importers(short):
    """The pids that imported the module (in order)."""
    path = os.path.join(_tmp, mod(short).replace(".", "_") + ".pids")
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def setUpModule():
    global _tmp
    _tmp = tempfile.mkdtemp(prefix="ipd-warm-adapt-")
    for short, body in MODULES.items():
        path = os.path.join(_tmp, mod(short) + ".py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        key = mod(short.replace("/__init__", "").replace("/", "."))
        marker = os.path.join(_tmp, key.replace(".", "_") + ".pids")
        with open(path, "w") as f:
            f.write("import os as _os\n"
                    "with open(%r, 'a') as _f:\n"
                    "    _f.write('%%d\\n' %% _os.getpid())\n" % marker)
            f.write(body)
    sys.path.insert(0, _tmp)
    importlib.invalidate_caches()
    __import__(mod("pre"))


def tearDownModule():
    shutil.rmtree(_tmp, ignore_errors=True)


class AdaptCase(unittest.TestCase):

    def setUp(self):
        for f in os.listdir(_tmp):
            if f.endswith(".pids"):
                os.unlink(os.path.join(_tmp, f))
        self.saved_timeout = ZYGOTE.PROBE_TIMEOUT
        # Short, yet long enough for a probe on a busy host.
        ZYGOTE.PROBE_TIMEOUT = 3.0

    def tearDown(self):
        ZYGOTE.PROBE_TIMEOUT = self.saved_timeout
        self.assert_intact()

    def assert_intact(self):
        """No refused module here, one thread, no child left."""
        for short in REFUSED:
            self.assertNotIn(mod(short), sys.modules)
            self.assertNotIn(os.getpid(), importers(short), short)
        self.assertEqual(threading.active_count(), 1)
        self.assertEqual(ZYGOTE._threads(), 1)
        with self.assertRaises(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)


class TestProbe(AdaptCase):

    def probe(self, short):
        t0 = time.monotonic()
        state, kib = ZYGOTE._probe(mod(short))
        return state, kib, time.monotonic() - t0

    def test_imports_and_measures(self):
        state, kib, _ = self.probe("big")
        self.assertEqual(state, "ok")
        self.assertGreaterEqual(kib, 8 * 1024 - 256)
        self.assertLess(kib, 64 * 1024)
        # Imported in a child only.
        self.assertNotIn(mod("big"), sys.modules)
        pids = importers("big")
        self.assertEqual(len(pids), 1)
        self.assertNotEqual(pids[0], os.getpid())

    def test_refusals(self):
        want = {"raises": "not_importable", "sysexit": "not_importable",
                "exits": "crashed", "sigkill": "crashed", "segv": "crashed",
                "thread": "threads"}
        for short, why in want.items():
            state, _, _ = self.probe(short)
            self.assertEqual(state, why, short)

    def test_timeout(self):
        state, kib, secs = self.probe("slow")
        self.assertEqual((state, kib), ("timeout", 0))
        self.assertGreaterEqual(secs, ZYGOTE.PROBE_TIMEOUT)
        self.assertLess(secs, ZYGOTE.PROBE_TIMEOUT + 10)

    def test_cost_is_what_the_import_adds(self):
        # A module that allocates nothing costs next to nothing.  (The
        # child's resident size also grows by the file-backed pages it
        # faults in again after the fork, shared libraries' text this
        # process already has resident: not a cost of the module.)
        state, kib, _ = self.probe("tiny")
        self.assertEqual(state, "ok")
        self.assertLess(kib, 600)

    def test_missing(self):
        state, _, _ = self.probe("no_such_module")
        self.assertEqual(state, "not_importable")


class TestAdapt(AdaptCase):

    def test_every_kind(self):
        cands = ",".join([
            mod("raises"), mod("exits"), mod("sigkill"), mod("segv"),
            mod("thread"), mod("slow"), mod("sysexit"), "json", "os.path",
            "_thread", mod("pre"), mod("fine"), mod("known") + "=123",
            mod("known_big") + "=999999", mod("pkg.sub"),
            mod("no_such_module")])
        out = ZYGOTE._adapt(50000, cands)
        got = {name: (state, kib) for name, state, kib in out}
        self.assertEqual(len(out), 16)
        self.assertEqual([m[0] for m in out],
                         [c.partition("=")[0] for c in cands.split(",")])
        for short, why in (("raises", "not_importable"),
                           ("sysexit", "not_importable"),
                           ("no_such_module", "not_importable"),
                           ("exits", "crashed"), ("sigkill", "crashed"),
                           ("segv", "crashed"), ("thread", "threads"),
                           ("slow", "timeout")):
            self.assertEqual(got[mod(short)][0], why, short)
        for name in ("json", "os.path", "_thread"):
            self.assertEqual(got[name], ("stdlib", 0), name)
        self.assertEqual(got[mod("pre")], ("loaded", 0))
        # Probed in a child, then imported here, its real cost measured.
        state, kib = got[mod("fine")]
        self.assertEqual(state, "warm")
        self.assertGreaterEqual(kib, 5 * 1024 - 256)
        self.assertIn(mod("fine"), sys.modules)
        pids = importers("fine")
        self.assertEqual(len(pids), 2, pids)
        self.assertNotEqual(pids[0], os.getpid())
        self.assertEqual(pids[1], os.getpid())
        # A known cost: imported here directly, no probe.
        self.assertEqual(got[mod("known")][0], "warm")
        self.assertGreater(got[mod("known")][1], 0)
        self.assertEqual(importers("known"), [os.getpid()])
        # A known cost over what is left: not imported at all.
        self.assertEqual(got[mod("known_big")], ("over_budget", 999999))
        self.assertEqual(importers("known_big"), [])
        self.assertNotIn(mod("known_big"), sys.modules)
        # A submodule.
        self.assertEqual(got[mod("pkg.sub")][0], "warm")
        self.assertIn(mod("pkg.sub"), sys.modules)
        for name, state, kib in out:
            self.assertIsInstance(kib, int)
            self.assertGreaterEqual(kib, 0)

    def test_over_budget(self):
        # big costs some 8 MiB: over a 4000 KiB budget (measured by its
        # probe, never imported here); small fits what is left.
        out = ZYGOTE._adapt(4000, mod("big") + "," + mod("small"))
        self.assertEqual(out[0][:2], [mod("big"), "over_budget"])
        self.assertGreaterEqual(out[0][2], 8 * 1024 - 256)
        self.assertNotIn(mod("big"), sys.modules)
        self.assertNotIn(os.getpid(), importers("big"))
        self.assertEqual(out[1][:2], [mod("small"), "warm"])
        self.assertIn(mod("small"), sys.modules)

    def test_at_most_16(self):
        out = ZYGOTE._adapt(1000, ",".join(["json"] * 20))
        self.assertEqual(len(out), 16)
        self.assertEqual(ZYGOTE._adapt(1000, ""), [])
        self.assertEqual(ZYGOTE._adapt(1000, " , ,"), [])


class TestRehearse(unittest.TestCase):
    """A parked child's rehearsal (_rehearse): every step while nothing
    has come, none once go is there, and it leaves nothing behind."""

    def setUp(self):
        self.r, self.w = os.pipe()
        self.saved = ZYGOTE._rehearsal_steps

    def tearDown(self):
        ZYGOTE._rehearsal_steps = self.saved
        os.close(self.r)
        os.close(self.w)

    def counted(self, ran):
        real = self.saved

        def steps(mods, wanted=ZYGOTE.REHEARSAL_GROUPS):
            for step in real(mods, wanted):
                def counted_step(step=step):
                    step()
                    ran.append(step.__name__)
                yield counted_step
        ZYGOTE._rehearsal_steps = steps

    def rehearse_captured(self, wanted=None):
        """_rehearse (of the groups wanted; None: every group) with fds 1
        and 2 on a pipe and warnings recorded: (what it printed, the
        warnings it raised)."""
        import warnings
        out_r, out_w = os.pipe()
        saved = os.dup(1), os.dup(2)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                if wanted is None:
                    ZYGOTE._rehearse(self.r)
                else:
                    ZYGOTE._rehearse(self.r, wanted)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.close(out_w)
        printed = os.read(out_r, 4096)
        os.close(out_r)
        return printed, seen

    def test_every_step_then_nothing_left(self):
        os.environ.setdefault("MPLBACKEND", "Agg")
        import numpy  # noqa: F401
        import pandas  # noqa: F401
        import matplotlib.pyplot as plt
        ran = []
        self.counted(ran)
        printed, _ = self.rehearse_captured()
        self.assertEqual(ran[:4], ["frame", "summary", "group", "chart"])
        self.assertEqual(printed, b"")
        self.assertEqual(plt.get_fignums(), [])

    def test_warm_modules_rehearsed_quietly(self):
        """With the adaptive set's usual modules imported, each has its
        step; none prints, warns or leaves a figure."""
        os.environ.setdefault("MPLBACKEND", "Agg")
        import matplotlib.pyplot as plt
        import scipy.stats  # noqa: F401
        import seaborn  # noqa: F401
        import sklearn.linear_model  # noqa: F401
        import sklearn.metrics  # noqa: F401
        import sklearn.model_selection  # noqa: F401
        import statsmodels.formula.api  # noqa: F401
        import sympy  # noqa: F401
        ran = []
        self.counted(ran)
        fds = sorted(os.listdir("/proc/self/fd"))
        printed, seen = self.rehearse_captured()
        self.assertEqual(ran, ["frame", "summary", "group", "chart",
                               "_rehearse_scipy_stats", "_rehearse_sympy",
                               "_rehearse_seaborn", "_rehearse_sklearn",
                               "_rehearse_statsmodels"])
        self.assertEqual(printed, b"")
        self.assertEqual(seen, [])
        self.assertEqual(plt.get_fignums(), [])
        # No descriptor left open (a cold run has none: test_warm's
        # same_view_warm_and_cold).
        self.assertEqual(sorted(os.listdir("/proc/self/fd")), fds)

    def test_only_the_groups_wanted(self):
        """The service names the groups recent runs used (warmset.c,
        ipd_warmset_rehearsal): only those run, in their order."""
        os.environ.setdefault("MPLBACKEND", "Agg")
        import numpy  # noqa: F401
        import pandas  # noqa: F401
        import matplotlib.pyplot  # noqa: F401
        import sympy  # noqa: F401
        for wanted, want in ((frozenset(), []),
                             (frozenset({"chart"}), ["chart"]),
                             (frozenset({"sympy", "pandas"}),
                              ["frame", "summary", "group",
                               "_rehearse_sympy"]),
                             (frozenset({"nonsense"}), [])):
            ran = []
            self.counted(ran)
            printed, _ = self.rehearse_captured(wanted)
            self.assertEqual(ran, want, wanted)
            self.assertEqual(printed, b"")

    def test_go_first_stops_it(self):
        ran = []
        self.counted(ran)
        os.write(self.w, b"G")
        ZYGOTE._rehearse(self.r)
        self.assertEqual(ran, [])
        self.assertEqual(os.read(self.r, 1), b"G")  # go is left to read

    def test_a_failing_step_is_harmless(self):
        ran = []

        def steps(mods, wanted=None):
            def boom():
                raise RuntimeError("x")

            def after():
                ran.append("after")
            yield boom
            yield after
        ZYGOTE._rehearsal_steps = steps
        ZYGOTE._rehearse(self.r)
        self.assertEqual(ran, [])


class _CountingResult(unittest.TextTestResult):
    pass


def main():
    global ZYGOTE
    if len(sys.argv) < 2:
        sys.exit("usage: test_warm_adapt.py ZYGOTE_PY [-v] [TestName ...]")
    spec = importlib.util.spec_from_file_location("_ipd_zygote", sys.argv[1])
    ZYGOTE = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ZYGOTE)
    argv = [a for a in sys.argv[2:] if a != "-v"]
    runner = unittest.TextTestRunner(resultclass=_CountingResult,
                                     verbosity=2 if "-v" in sys.argv else 1,
                                     # The mutation check's: stop at the
                                     # first failure (a killed mutant).
                                     failfast=bool(os.environ.get(
                                         "IPD_TEST_STOP_ON_FAIL")))
    loader = unittest.defaultTestLoader
    if argv:
        suite = loader.loadTestsFromNames(argv, sys.modules[__name__])
    else:
        suite = loader.loadTestsFromModule(sys.modules[__name__])
    result = runner.run(suite)
    failed = (len(result.failures) + len(result.errors)
              + len(result.unexpectedSuccesses))
    passed = result.testsRun - failed - len(result.skipped)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(0 if failed == 0 and not result.skipped and result.testsRun > 0
             else 1)


if __name__ == "__main__":
    main()
