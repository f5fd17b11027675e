#!/usr/bin/env python
"""Run CPython's own ``test.test_asyncio`` suites against rsloop's loop.

    python tests/conformance/run_cpython.py                    # backends uring and poll
    python tests/conformance/run_cpython.py --backend poll     # one backend
    python tests/conformance/run_cpython.py --backend asyncio  # the harness on stdlib's loop
    python tests/conformance/run_cpython.py -m test_tasks -v   # one module, show failures

Exit status: 0 when every test that ran on the loop under test either passed, was
skipped by CPython itself, or is listed as pending or as a known rsloop bug in
``expected_failures.py`` (known bugs are listed loudly on every run); also 0
(with a SKIP line) when this Python ships no ``test`` package. 1 when any other test
failed or errored, a module crashed or hung, or a sanity check found that the loop
under test was not rsloop's. 2 for a usage or environment error (e.g. the native
module cannot be imported for the requested backend).

How the tests are pointed at rsloop (``_install_harness``):

* ``asyncio.set_event_loop_policy(rsloop.EventLoopPolicy())``, and
  ``asyncio.DefaultEventLoopPolicy`` is rebound to it, so the modules' own
  ``set_event_loop_policy(None)`` resets (test_runners does one per test) come back to
  rsloop. ``asyncio.new_event_loop()``, ``asyncio.run()`` and
  ``unittest.IsolatedAsyncioTestCase`` then all make rsloop loops.
* ``test_utils.TestCase.new_test_loop()`` without a time generator returns an rsloop
  loop (CPython's ``TestLoop`` is a ``BaseEventLoop`` with a fake clock; without a
  generator it cannot run timers at all, so such tests only need *a* loop). Tests that
  pass a generator need the virtual clock and stay on ``TestLoop``: they are reported
  as ``n/a`` (not on rsloop), never as passes.
* test_events: ``RsloopEventLoopTests(EventLoopTestsMixin)`` and
  ``RsloopSubprocessTests(UnixEventLoopTestsMixin, SubprocessTestsMixin)`` whose
  ``create_event_loop`` is ``rsloop.new_event_loop`` (as CPython's own
  ``EPollEventLoopTests`` and uvloop's test-suite do).
* test_runners: ``BaseTest.new_loop`` (a mocked ``BaseEventLoop``) returns an rsloop
  loop carrying the same ``shutdown_asyncgens`` probe.
* Networking modules that run one class per stdlib loop get an rsloop class the same
  way (``_PER_LOOP_CLASSES``): test_sock_lowlevel and test_sendfile
  ``RsloopEventLoopTests``, test_server ``RsloopStartServerTests``, test_buffered_proto
  ``RsloopBufferedProtocolTests``, test_sslproto ``RsloopStartTLSTests``, test_unix_events
  ``RsloopUnixSocketTests``. test_streams, test_ssl and test_sslproto's handshake tests
  call ``asyncio.new_event_loop()`` and need nothing. The stdlib classes, and the tests
  of stdlib transport/selector internals on mocked sockets (test_selector_events, the
  pipe-transport and child-watcher tests of test_unix_events), are n/a.

Every loop constructed or run during a test is recorded; a test counts for rsloop only
if a loop of the class under test ran (or was made and nothing else ran). Each module
starts with a sanity check that ``asyncio.new_event_loop()``, ``asyncio.run()`` and an
``IsolatedAsyncioTestCase`` really run on the loop under test with the requested backend.

Each module runs in its own interpreter (crash and hang isolation): a test that
hangs longer than ``--test-timeout`` is dumped with faulthandler, recorded as an error,
and the module resumes after it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import importlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "test.test_asyncio."

# Set by --fast-streams for the module children (see _install_harness).
FAST_STREAMS_ENV = "RSLOOP_CONFORMANCE_FAST_STREAMS"

# (module, minimum Python) -- the modules that exercise a real loop.
MODULES: list[tuple[str, tuple[int, int]]] = [
    ("test_events", (3, 10)),
    ("test_futures", (3, 10)),
    ("test_futures2", (3, 10)),
    ("test_tasks", (3, 10)),
    ("test_base_events", (3, 10)),
    ("test_locks", (3, 10)),
    ("test_queues", (3, 10)),
    ("test_timeouts", (3, 11)),
    ("test_taskgroups", (3, 11)),
    ("test_runners", (3, 10)),
    ("test_waitfor", (3, 10)),
    ("test_context", (3, 10)),
    ("test_pep492", (3, 10)),
    ("test_threads", (3, 10)),
    ("test_staggered", (3, 12)),
    ("test_eager_task_factory", (3, 12)),
    # networking
    ("test_sock_lowlevel", (3, 10)),
    ("test_streams", (3, 10)),
    ("test_server", (3, 10)),
    ("test_buffered_proto", (3, 10)),
    ("test_sendfile", (3, 10)),
    ("test_ssl", (3, 11)),
    ("test_sslproto", (3, 10)),
    ("test_unix_events", (3, 10)),
    ("test_selector_events", (3, 10)),
    ("test_protocols", (3, 10)),
    ("test_transports", (3, 10)),
    # pipes, subprocesses, signals
    ("test_subprocess", (3, 10)),
]

BACKENDS = ("uring", "poll")

# The slowest modules, started first so the parallel jobs finish together.
_SLOW_FIRST = (
    "test_tasks",
    "test_ssl",
    "test_futures",
    "test_events",
    "test_taskgroups",
    "test_sslproto",
)

# ---------------------------------------------------------------------------------
# Classification data


def _load_classification():
    sys.path.insert(0, HERE)
    try:
        import expected_failures as ef
    finally:
        sys.path.remove(HERE)
    return ef


def _match_pending(ef, test_id: str) -> str | None:
    for area, patterns in ef.PENDING.items():
        for pattern in patterns:
            if fnmatch.fnmatchcase(test_id, pattern):
                return area
    return None


def _match_known(ef, test_id: str) -> tuple[str, bool] | None:
    for pattern, what, hangs in getattr(ef, "KNOWN_BUGS", ()):
        if fnmatch.fnmatchcase(test_id, pattern):
            return what, hangs
    return None


def _match_not_applicable(ef, test_id: str) -> str | None:
    for pattern, reason in ef.NOT_APPLICABLE:
        if fnmatch.fnmatchcase(test_id, pattern):
            return reason
    return None


# ---------------------------------------------------------------------------------
# Child: run one module in this interpreter


class _Tracker:
    """Loops constructed and run during the current test."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.created: dict[int, str] = {}
        self.ran: dict[int, str] = {}


TRACK = _Tracker()
UNDER_TEST: type | None = None


def _describe(loop) -> str:
    cls = type(loop)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if UNDER_TEST is not None and isinstance(loop, UNDER_TEST):
        try:
            name += f"[{loop.backend}]"
        except Exception:  # noqa: BLE001 - description only
            pass
    return name


def _wrap_loop_class(cls) -> None:
    orig_init = cls.__init__
    orig_run_forever = cls.run_forever

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        TRACK.created[id(self)] = _describe(self)

    def run_forever(self, *args, **kwargs):
        TRACK.ran[id(self)] = _describe(self)
        return orig_run_forever(self, *args, **kwargs)

    __init__.__wrapped__ = orig_init  # type: ignore[attr-defined]
    run_forever.__wrapped__ = orig_run_forever  # type: ignore[attr-defined]
    cls.__init__ = __init__
    cls.run_forever = run_forever


def _install_harness(backend: str) -> type:
    """Point asyncio and test.test_asyncio at rsloop; returns the loop class under test."""
    global UNDER_TEST
    import asyncio
    from asyncio import base_events

    from test.test_asyncio import utils as test_utils

    import rsloop

    probe = rsloop.new_event_loop()
    UNDER_TEST = type(probe)
    got = getattr(probe, "backend", None)
    probe.close()
    if got != backend:
        raise SystemExit(
            f"sanity: rsloop.new_event_loop() gave backend {got!r}, wanted {backend!r}"
        )

    _wrap_loop_class(base_events.BaseEventLoop)  # stdlib loops, TestLoop, FallbackLoop
    if not issubclass(UNDER_TEST, base_events.BaseEventLoop):
        _wrap_loop_class(UNDER_TEST)

    if os.environ.get(FAST_STREAMS_ENV) == "1":
        # --fast-streams: rsloop's own RSLOOP_FAST_STREAMS=1 (set by the parent) rebinds
        # the classes when rsloop._loop is imported, so every StreamReader / StreamWriter
        # the tests make, or asyncio makes for them, is rsloop's. Checked, not
        # done here, so the configuration under test is the one users get.
        import asyncio.streams

        if not (
            asyncio.StreamReader is asyncio.streams.StreamReader is rsloop.StreamReader
            and asyncio.StreamWriter is asyncio.streams.StreamWriter is rsloop.StreamWriter
        ):
            raise SystemExit("sanity: RSLOOP_FAST_STREAMS=1 did not rebind the stream classes")

    policy_cls = rsloop.EventLoopPolicy
    from asyncio import unix_events

    if hasattr(unix_events, "_DefaultEventLoopPolicy"):
        # 3.14+ (probed) make the default policy from unix_events' private name, and
        # asyncio.DefaultEventLoopPolicy is a deprecated lookup of that name: rebinding
        # only the private one keeps the lookup's warning, which test_events checks.
        unix_events._DefaultEventLoopPolicy = policy_cls
    else:
        asyncio.DefaultEventLoopPolicy = policy_cls  # set_event_loop_policy(None) -> rsloop
    asyncio.set_event_loop_policy(policy_cls())

    orig_new_test_loop = test_utils.TestCase.new_test_loop

    def new_test_loop(self, gen=None):
        if gen is not None:
            return orig_new_test_loop(self, gen)  # virtual clock: stays on TestLoop
        loop = rsloop.new_event_loop()
        self.set_event_loop(loop)
        return loop

    test_utils.TestCase.new_test_loop = new_test_loop

    # Tests observe the loop's error logging with mock.patch('asyncio.base_events.logger').
    # rsloop logs to the same "asyncio" logger through its own module global, which that
    # patch cannot reach; look the logger up where the tests patch it, at call time.
    rs_loop_mod = sys.modules.get("rsloop._loop")
    if rs_loop_mod is not None and hasattr(rs_loop_mod, "logger"):
        rs_loop_mod.logger = _LoggerProxy()
    return UNDER_TEST


class _LoggerProxy:
    """Forwards to ``asyncio.base_events.logger`` (the "asyncio" logger unless patched)."""

    def __getattr__(self, name):
        from asyncio import base_events

        return getattr(base_events.logger, name)


def _ready_count(loop) -> int:
    ready = getattr(loop, "_ready", None)
    if ready is not None:
        return len(ready)
    return loop.stats()["ready"]


# Modules that run their tests once per stdlib loop class (a mixin plus one subclass per
# selector, each overriding the loop factory): module -> (name of the rsloop class to
# add, names of its bases in the module -- a mixin, or the stdlib class whose extra
# tests it inherits --, the factory method to override). The stdlib classes themselves
# are NOT_APPLICABLE in expected_failures.py.
_PER_LOOP_CLASSES: dict[str, list[tuple[str, tuple[str, ...], str]]] = {
    "test_sock_lowlevel": [("RsloopEventLoopTests", ("BaseSockTestsMixin",), "create_event_loop")],
    "test_sendfile": [("RsloopEventLoopTests", ("SendfileTestsBase",), "create_event_loop")],
    # SelectorStartServerTests adds test_start_unix_server_1 to BaseStartServer's tests
    "test_server": [("RsloopStartServerTests", ("SelectorStartServerTests",), "new_loop")],
    "test_buffered_proto": [
        ("RsloopBufferedProtocolTests", ("BufferedProtocolSelectorTests",), "new_loop")
    ],
    "test_sslproto": [("RsloopStartTLSTests", ("SelectorStartTLSTests",), "new_loop")],
}


def _add_rsloop_class(mod, cls_name: str, bases: tuple, attrs: dict) -> type:
    cls = type(cls_name, bases, attrs)
    cls.__module__ = mod.__name__
    cls.__qualname__ = cls_name
    setattr(mod, cls_name, cls)
    return cls


def _adapt_module(name: str, mod) -> None:
    """Module-specific wiring of the tests to rsloop."""
    import unittest

    import rsloop

    for cls_name, base_names, factory in _PER_LOOP_CLASSES.get(name, ()):
        from test.test_asyncio import utils as test_utils

        bases = tuple(getattr(mod, b) for b in base_names)
        if not any(issubclass(b, unittest.TestCase) for b in bases):
            bases += (test_utils.TestCase,)  # as CPython's per-selector classes
        _add_rsloop_class(mod, cls_name, bases, {factory: lambda self: rsloop.new_event_loop()})

    if name == "test_taskgroups" and hasattr(mod, "BaseTestTaskGroup"):
        # 3.14+: the module's own classes name asyncio.EventLoop as their loop_factory
        # (one with the eager task factory); the same tests on rsloop's loop.
        import asyncio

        def eager_rsloop():
            loop = rsloop.new_event_loop()
            loop.set_task_factory(asyncio.eager_task_factory)
            return loop

        case = unittest.IsolatedAsyncioTestCase
        _add_rsloop_class(
            mod,
            "RsloopTestTaskGroup",
            (mod.BaseTestTaskGroup, case),
            {"loop_factory": staticmethod(rsloop.new_event_loop)},
        )
        _add_rsloop_class(
            mod,
            "RsloopEagerTaskTaskGroup",
            (mod.BaseTestTaskGroup, case),
            {"loop_factory": staticmethod(eager_rsloop)},
        )

    if name == "test_unix_events":
        # SelectorEventLoopUnixSocketTests: create_unix_server/connection argument
        # checks and errors, on asyncio.SelectorEventLoop(); the same on rsloop.
        from test.test_asyncio import utils as test_utils

        def setUp(self):
            test_utils.TestCase.setUp(self)
            self.loop = rsloop.new_event_loop()
            self.set_event_loop(self.loop)

        _add_rsloop_class(
            mod, "RsloopUnixSocketTests", (mod.SelectorEventLoopUnixSocketTests,), {"setUp": setUp}
        )

    if name == "test_events":

        def create_event_loop(self):
            return rsloop.new_event_loop()

        from test.test_asyncio import utils as test_utils

        classes = {
            "RsloopEventLoopTests": (mod.EventLoopTestsMixin, test_utils.TestCase),
        }
        unix_mixin = getattr(mod, "UnixEventLoopTestsMixin", None)
        if unix_mixin is not None:
            classes["RsloopSubprocessTests"] = (
                unix_mixin,
                mod.SubprocessTestsMixin,
                test_utils.TestCase,
            )
        # GetEventLoopTestsMixin.setUp swaps asyncio's C running-loop functions for the
        # Python ones, then (3.10/3.11, Unix) attaches a child watcher, which needs
        # add_signal_handler. While that is pending, setUp raises and unittest skips
        # tearDown, leaving the Python and C halves mixed for every later test; undo the
        # swap when setUp fails.
        mixin = getattr(mod, "GetEventLoopTestsMixin", None)
        if mixin is not None:
            orig_setup = mixin.setUp

            def setUp(self, _orig=orig_setup):
                try:
                    _orig(self)
                except BaseException:
                    self.tearDown()
                    raise

            mixin.setUp = setUp
        for cls_name, bases in classes.items():
            cls = type(cls_name, bases, {"create_event_loop": create_event_loop})
            cls.__module__ = mod.__name__
            cls.__qualname__ = cls_name
            setattr(mod, cls_name, cls)
        # The subprocess class carries only SubprocessTestsMixin's tests (its Unix
        # mixin inherits EventLoopTestsMixin, whose tests RsloopEventLoopTests runs).
        sub = classes.get("RsloopSubprocessTests") and mod.RsloopSubprocessTests
        if sub is not None:
            own = {n for n in vars(mod.SubprocessTestsMixin) if n.startswith("test")}
            for n in dir(sub):
                if n.startswith("test") and n not in own:
                    setattr(sub, n, None)  # not collected by unittest's loader
    elif name == "test_tasks":
        # GatherTestsBase._run_loop polls the private BaseEventLoop._ready deque; rsloop
        # exposes the same number as stats()["ready"].
        from test.test_asyncio import utils as test_utils

        def _run_loop(self, loop):
            while _ready_count(loop):
                test_utils.run_briefly(loop)

        mod.GatherTestsBase._run_loop = _run_loop

        # test_issue46672 mocks asyncio.base_events.BaseEventLoop.call_exception_handler
        # and asserts it was not called; same body, mocking the loop class under test.
        if hasattr(mod.CoroutineGatherTests, "test_issue46672"):
            from unittest import mock

            def test_issue46672(self):
                with mock.patch.object(type(self.one_loop), "call_exception_handler"):

                    async def coro(s):
                        return s

                    c = coro("abc")

                    with self.assertRaises(TypeError):
                        self._gather(c, {})
                    self._run_loop(self.one_loop)
                    # NameError should not happen:
                    self.one_loop.call_exception_handler.assert_not_called()

            mod.CoroutineGatherTests.test_issue46672 = test_issue46672
    elif name == "test_pep492":
        # BaseTest makes a bare asyncio.BaseEventLoop with a mocked selector; the
        # tests only need a loop that runs coroutines.
        from test.test_asyncio import utils as test_utils

        def setUp(self):
            test_utils.TestCase.setUp(self)
            self.loop = rsloop.new_event_loop()
            self.set_event_loop(self.loop)

        mod.BaseTest.setUp = setUp
    elif name == "test_runners":

        def new_loop(self):
            loop = rsloop.new_event_loop()
            loop.shutdown_ag_run = False

            async def shutdown_asyncgens():
                loop.shutdown_ag_run = True

            loop.shutdown_asyncgens = shutdown_asyncgens
            return loop

        mod.BaseTest.new_loop = new_loop


def _sanity(backend: str) -> tuple[dict, dict]:
    """The loop under test really is what asyncio, asyncio.run and unittest hand out.

    Returns (loop seen per entry point, error per entry point that crashed). A loop of
    the wrong class raises: nothing in the module would then test rsloop.
    """
    import asyncio
    import unittest

    seen: dict[str, str] = {}
    errors: dict[str, str] = {}

    def probe_new_event_loop():
        loop = asyncio.new_event_loop()
        seen["asyncio.new_event_loop"] = _describe(loop)
        loop.close()

    def probe_run():
        async def running():
            return _describe(asyncio.get_running_loop())

        seen["asyncio.run"] = asyncio.run(running())

    def probe_isolated():
        class Probe(unittest.IsolatedAsyncioTestCase):
            async def test_probe(self):
                seen["IsolatedAsyncioTestCase"] = _describe(asyncio.get_running_loop())

        result = unittest.TestResult()
        unittest.TestSuite([Probe("test_probe")]).run(result)
        if not result.wasSuccessful():
            raise AssertionError("".join(tb for _, tb in result.errors + result.failures))

    def probe_policy_reset():
        asyncio.set_event_loop_policy(None)
        loop = asyncio.new_event_loop()
        seen["policy after set_event_loop_policy(None)"] = _describe(loop)
        loop.close()

    for probe in (probe_new_event_loop, probe_run, probe_isolated, probe_policy_reset):
        try:
            probe()
        except Exception:  # noqa: BLE001 - reported as an error of the module
            errors[probe.__name__] = traceback.format_exc()
    want = _describe_class(backend)
    bad = {k: v for k, v in seen.items() if v != want}
    if bad:
        raise AssertionError(f"loop under test is not {want}: {bad}")
    return seen, errors


def _describe_class(backend: str) -> str:
    return f"{UNDER_TEST.__module__}.{UNDER_TEST.__qualname__}[{backend}]"


def _short_id(test) -> str:
    tid = test.id()
    return tid[len(PREFIX) :] if tid.startswith(PREFIX) else tid


def _iter_tests(suite):
    import unittest

    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _iter_tests(item)
        else:
            yield item


def child_main(args) -> int:
    import faulthandler
    import gc
    import unittest
    import warnings

    out = open(args.out, "a", buffering=1)

    def emit(**record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    backend = args.backend
    try:
        _install_harness(backend)
        seen, sanity_errors = _sanity(backend)
        mod = importlib.import_module(PREFIX + args.child)
        _adapt_module(args.child, mod)
        import asyncio

        import rsloop

        asyncio.set_event_loop_policy(rsloop.EventLoopPolicy())
        suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    except BaseException:  # noqa: BLE001 - reported to the parent
        emit(kind="module_error", detail=traceback.format_exc())
        return 3
    emit(kind="sanity", seen=seen, loop=_describe_class(backend))
    for probe, detail in sanity_errors.items():
        emit(
            kind="result",
            id=f"{args.child}.sanity.{probe}",
            outcome="error",
            detail=detail,
            loops=[],
            on="rsloop",
        )

    ef = _load_classification()
    skip = set()
    if args.skip_file:
        with open(args.skip_file) as f:
            skip = {line.strip() for line in f if line.strip()}

    tests = []
    for test in _iter_tests(suite):
        tid = _short_id(test)
        if tid in skip:
            continue
        reason = _match_not_applicable(ef, tid)
        if reason is not None:
            emit(kind="result", id=tid, outcome="na", detail=reason, loops=[], on="n/a")
            continue
        known = _match_known(ef, tid)
        if known is not None and known[1] and not args.run_known_hangs and backend != "asyncio":
            emit(
                kind="result",
                id=tid,
                outcome="known_hang",
                detail="not run: known rsloop bug that hangs (--run-known-hangs runs it)",
                loops=[],
                on="rsloop",
            )
            continue
        tests.append(test)

    class Result(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            TRACK.reset()
            self._outcome_rec = ("pass", "")
            self._t0 = time.monotonic()
            emit(kind="start", id=_short_id(test))
            faulthandler.dump_traceback_later(args.test_timeout, exit=True)

        def _set(self, outcome, detail=""):
            prev, prev_detail = self._outcome_rec
            if prev in ("error", "fail") and outcome in ("pass",):
                return
            if prev in ("error", "fail") and detail:
                detail = prev_detail + "\n" + detail
            self._outcome_rec = (outcome, detail)

        def addSuccess(self, test):
            super().addSuccess(test)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._set("fail", self._exc_info_to_string(err, test))

        def addError(self, test, err):
            super().addError(test, err)
            if isinstance(test, unittest.TestCase):
                self._set("error", self._exc_info_to_string(err, test))
            else:  # setUpClass / setUpModule / tearDownModule failure
                emit(
                    kind="result",
                    id=_fixture_id(test),
                    outcome="error",
                    detail=self._exc_info_to_string(err, test),
                    loops=[],
                    on="fixture",
                )

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                self._set(
                    "fail" if failed else "error",
                    f"[{subtest._subDescription()}] " + self._exc_info_to_string(err, test),
                )

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            if isinstance(test, unittest.TestCase):
                self._set("skip", reason)
            else:
                emit(
                    kind="result",
                    id=_fixture_id(test),
                    outcome="skip",
                    detail=reason,
                    loops=[],
                    on="fixture",
                )

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._set("skip", "CPython expectedFailure")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._set("fail", "unexpected success of a CPython expectedFailure")

        def stopTest(self, test):
            faulthandler.cancel_dump_traceback_later()
            super().stopTest(test)
            outcome, detail = self._outcome_rec
            if outcome == "error" and any(m in detail for m in ef.PENDING_MARKERS):
                # A test stopped by a pending area's NotImplementedError may leave what
                # the missing transport would have closed (test_streams'
                # test_read_all_from_pipe_reader: the pipe's file object). Collect it
                # now, quietly, so its ResourceWarning does not land in a later test
                # that counts ResourceWarnings (test_unclosed_resource_warnings).
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ResourceWarning)
                    gc.collect()
            ran_ut = [v for v in TRACK.ran.values() if _is_under_test_desc(v)]
            ran_other = [v for v in TRACK.ran.values() if not _is_under_test_desc(v)]
            made_ut = [v for v in TRACK.created.values() if _is_under_test_desc(v)]
            if ran_ut or (made_ut and not ran_other):
                on = "rsloop"
            elif ran_other or TRACK.created:
                on = "other"
            else:
                on = "none"
            loops = sorted(set(TRACK.created.values()) | set(TRACK.ran.values()))
            emit(
                kind="result",
                id=_short_id(test),
                outcome=outcome,
                detail=detail[-6000:],
                loops=loops,
                on=on,
                seconds=round(time.monotonic() - self._t0, 3),
            )

    def _is_under_test_desc(desc: str) -> bool:
        return desc.startswith(f"{UNDER_TEST.__module__}.{UNDER_TEST.__qualname__}[")

    def _fixture_id(holder) -> str:
        desc = getattr(holder, "description", str(holder))
        return desc.replace(PREFIX, "")

    result = Result()
    unittest.TestSuite(tests).run(result)
    faulthandler.cancel_dump_traceback_later()
    emit(kind="module_done")
    out.close()
    return 0


# ---------------------------------------------------------------------------------
# Parent: orchestrate modules, classify, report


class ModuleRun:
    def __init__(self, module: str, backend: str) -> None:
        self.module = module
        self.backend = backend
        self.results: dict[str, dict] = {}
        self.loop: str | None = None
        self.sanity: dict | None = None
        self.module_error: str | None = None
        self.crashes: list[str] = []
        self.seconds = 0.0


def run_module(module: str, backend: str, args) -> ModuleRun:
    run = ModuleRun(module, backend)
    t0 = time.monotonic()
    env = dict(os.environ)
    env["RSLOOP_BACKEND"] = backend
    env.pop("PYTHONASYNCIODEBUG", None)
    with tempfile.TemporaryDirectory(prefix=f"rsloop-conf-{module}-") as tmp:
        out_path = os.path.join(tmp, "results.jsonl")
        skip_path = os.path.join(tmp, "skip.txt")
        log_path = os.path.join(tmp, "stderr.log")
        open(skip_path, "w").close()
        for _attempt in range(args.max_restarts + 1):
            open(out_path, "w").close()
            cmd = [
                sys.executable,
                "-X",
                "faulthandler",
                os.path.abspath(__file__),
                "--child",
                module,
                "--backend",
                backend,
                "--out",
                out_path,
                "--skip-file",
                skip_path,
                "--test-timeout",
                str(args.test_timeout),
            ]
            if args.run_known_hangs:
                cmd.append("--run-known-hangs")
            remaining = args.module_timeout - (time.monotonic() - t0)
            with open(log_path, "w") as log:
                try:
                    proc = subprocess.run(
                        cmd,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=max(remaining, 1),
                        cwd=tmp,
                    )
                    rc = proc.returncode
                except subprocess.TimeoutExpired:
                    rc = "module-timeout"
            started = None
            done = False
            with open(out_path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    kind = rec["kind"]
                    if kind == "start":
                        started = rec["id"]
                    elif kind == "result":
                        run.results[rec["id"]] = rec
                        if rec["id"] == started:
                            started = None
                    elif kind == "sanity":
                        run.loop = rec["loop"]
                        run.sanity = rec["seen"]
                    elif kind == "module_error":
                        run.module_error = rec["detail"]
                    elif kind == "module_done":
                        done = True
            if done or run.module_error:
                break
            with open(log_path) as f:
                log_text = f.read()
            # faulthandler's dump (innermost frame first) is what explains a hang/crash
            marks = [log_text.rfind(m) for m in ("Timeout (", "Fatal Python error")]
            start = max(marks)
            log_tail = log_text[start : start + 4000] if start >= 0 else log_text[-4000:]
            if started is None:
                run.module_error = f"child exited with {rc} outside any test:\n{log_tail}"
                break
            why = "hung (per-test timeout)" if "Timeout (" in log_tail else f"crashed (rc={rc})"
            run.crashes.append(started)
            run.results[started] = dict(
                kind="result",
                id=started,
                outcome="error",
                on="rsloop",
                loops=[],
                crash=True,
                detail=f"test process {why}; output tail:\n{log_tail}",
            )
            if rc == "module-timeout":
                run.module_error = f"module exceeded --module-timeout={args.module_timeout}s"
                break
            with open(skip_path, "w") as f:
                f.write("\n".join(run.results) + "\n")
        else:
            run.module_error = f"gave up after {args.max_restarts} restarts"
    run.seconds = time.monotonic() - t0
    return run


COLUMNS = ("passed", "failed", "errors", "skipped", "pending", "xpass", "known", "n/a")


def classify(run: ModuleRun, ef) -> dict:
    """Counts for one module, plus the lists worth printing."""
    counts = dict.fromkeys(COLUMNS, 0)
    unexpected, xpass, pending, na_other, known, fixed = [], [], {}, [], [], []
    na_reasons: dict[str, int] = {}
    for tid, rec in sorted(run.results.items()):
        outcome = rec["outcome"]
        area = _match_pending(ef, tid)
        bug = _match_known(ef, tid)
        if outcome == "known_hang" or (outcome in ("fail", "error") and bug is not None):
            counts["known"] += 1
            known.append((rec, bug[0] if bug else rec["detail"]))
        elif outcome == "na":
            counts["n/a"] += 1
            na_reasons[rec["detail"]] = na_reasons.get(rec["detail"], 0) + 1
        elif outcome == "skip":
            counts["skipped"] += 1
        elif outcome == "pass":
            if rec.get("on") not in ("rsloop", "fixture"):
                counts["n/a"] += 1  # passed, but never ran the loop under test
                na_other.append(rec)
                why = _runtime_na_reason(rec)
                na_reasons[why] = na_reasons.get(why, 0) + 1
            elif area is not None:
                counts["xpass"] += 1
                xpass.append((tid, area))
            else:
                counts["passed"] += 1
                if bug is not None:
                    fixed.append(tid)
        else:  # fail / error
            markers = ef.PENDING_MARKERS + tuple(
                m
                for pattern, m in getattr(ef, "PENDING_CHILD_MARKERS", {}).items()
                if fnmatch.fnmatchcase(tid, pattern)
            )
            if area is not None and not any(m in rec["detail"] for m in markers):
                rec = dict(
                    rec,
                    detail=rec["detail"] + f"\n[listed as pending ({area}) but the "
                    "failure is not rsloop's NotImplementedError]",
                )
                area = None
            if area is not None:
                counts["pending"] += 1
                pending.setdefault(area, []).append(rec)
            else:
                counts["failed" if outcome == "fail" else "errors"] += 1
                unexpected.append(rec)
    return dict(
        counts=counts,
        unexpected=unexpected,
        xpass=xpass,
        pending=pending,
        na_other=na_other,
        na_reasons=na_reasons,
        known=known,
        fixed=fixed,
    )


def _runtime_na_reason(rec) -> str:
    loops = rec.get("loops") or []
    if any(d.endswith("utils.TestLoop") for d in loops):
        return "virtual-clock test: needs CPython's TestLoop (time generator), ran there"
    if not loops:
        return "uses no event loop (pure Future/Task/helper API)"
    return "ran only on " + ", ".join(loops)


def _loops_seen(run: ModuleRun) -> str:
    tally: dict[str, int] = {}
    for rec in run.results.values():
        for desc in rec.get("loops", []):
            tally[desc] = tally.get(desc, 0) + 1
    if not tally:
        return "-"
    return ", ".join(f"{k} x{v}" for k, v in sorted(tally.items(), key=lambda kv: -kv[1]))


def _trace_essence(detail: str, lines: int) -> str:
    text = detail.rstrip().splitlines()
    return "\n".join("      " + ln for ln in text[-lines:])


def report_backend(backend: str, runs: list[ModuleRun], ef, args) -> tuple[bool, dict]:
    width = max(len(r.module) for r in runs) + 2
    print(
        f"\n=== backend {backend}: CPython {platform.python_version()} test.test_asyncio "
        f"on {runs[0].loop or '?'} ==="
    )
    header = f"{'module':<{width}}" + "".join(f"{c:>9}" for c in COLUMNS) + f"{'secs':>8}"
    print(header)
    total = dict.fromkeys(COLUMNS, 0)
    ok = True
    summary: dict = {"backend": backend, "python": platform.python_version(), "modules": {}}
    details = []
    for run in runs:
        cl = classify(run, ef)
        for c in COLUMNS:
            total[c] += cl["counts"][c]
        flag = ""
        if run.module_error:
            flag = "  MODULE ERROR"
            ok = False
        if cl["unexpected"]:
            ok = False
        print(
            f"{run.module:<{width}}"
            + "".join(f"{cl['counts'][c]:>9}" for c in COLUMNS)
            + f"{run.seconds:>8.1f}{flag}"
        )
        summary["modules"][run.module] = dict(
            counts=cl["counts"],
            loop=run.loop,
            pending_by_area={a: len(v) for a, v in cl["pending"].items()},
            unexpected=[r["id"] for r in cl["unexpected"]],
            xpass=[t for t, _ in cl["xpass"]],
            known_bugs=[r["id"] for r, _ in cl["known"]],
            module_error=run.module_error,
        )
        details.append((run, cl))
    print(f"{'TOTAL':<{width}}" + "".join(f"{total[c]:>9}" for c in COLUMNS))
    summary["total"] = total

    print("\nloops seen per module (loop class x tests):")
    for run, _ in details:
        print(f"  {run.module}: {_loops_seen(run)}")

    pending_areas: dict[str, int] = {}
    for _, cl in details:
        for area, recs in cl["pending"].items():
            pending_areas[area] = pending_areas.get(area, 0) + len(recs)
    if pending_areas:
        print("\npending (expected to fail until the area lands; see expected_failures.py):")
        for area, n in sorted(pending_areas.items()):
            print(f"  {area:<12}{n:>5}  until: {ef.AREAS[area][1]}")
    summary["pending_by_area"] = pending_areas

    na_total: dict[tuple[str, str], int] = {}
    for run, cl in details:
        for why, n in cl["na_reasons"].items():
            na_total[(run.module, why)] = na_total.get((run.module, why), 0) + n
    if na_total:
        print("\nn/a (not run on the loop under test), by reason:")
        for (module, why), n in sorted(na_total.items()):
            print(f"  {module:<18}{n:>5}  {why}")
    summary["na_by_reason"] = {f"{m}: {w}": n for (m, w), n in sorted(na_total.items())}

    xp = [(run.module, t, a) for run, cl in details for t, a in cl["xpass"]]
    if xp and backend == "asyncio":
        print(f"\n{len(xp)} pending tests pass on the stdlib loop (expected for --backend asyncio)")
    elif xp:
        print("\nXPASS (listed as pending but passed; shrink expected_failures.py):")
        for _, tid, area in xp:
            print(f"  {tid}  [{area}]")

    known = [(rec, what) for _, cl in details for rec, what in cl["known"]]
    if known:
        print(
            f"\nKNOWN RSLOOP BUGS ({len(known)}; real differences to fix, listed in "
            "expected_failures.KNOWN_BUGS):"
        )
        for rec, what in known:
            tag = "not run (hangs)" if rec["outcome"] == "known_hang" else rec["outcome"].upper()
            print(f"  {tag}: {rec['id']}")
            print(f"      {what}")
            if args.verbose and rec["outcome"] != "known_hang":
                print(_trace_essence(rec["detail"], args.trace_lines))
    summary["known_bugs"] = [rec["id"] for rec, _ in known]
    fixed = [tid for _, cl in details for tid in cl["fixed"]]
    if fixed and backend == "asyncio":
        print(
            f"\n{len(fixed)} known rsloop bugs pass on the stdlib loop "
            "(expected for --backend asyncio)"
        )
    elif fixed:
        print("\nFIXED (listed in KNOWN_BUGS but passed; delete the entry):")
        for tid in fixed:
            print(f"  {tid}")

    for run, _cl in details:
        if run.module_error:
            print(f"\nMODULE ERROR {run.module}:\n{_trace_essence(run.module_error, 30)}")
    bad = [r for _, cl in details for r in cl["unexpected"]]
    if bad:
        print(f"\nUNEXPECTED FAILURES ({len(bad)}):")
        for rec in bad:
            loops = ", ".join(rec["loops"]) or "-"
            print(f"  {rec['outcome'].upper()}: {rec['id']}  (loops: {loops})")
            if args.verbose:
                if rec.get("crash"):  # the dump's head: the innermost frames
                    head = rec["detail"].splitlines()[: args.trace_lines]
                    print("\n".join("      " + ln for ln in head))
                else:
                    print(_trace_essence(rec["detail"], args.trace_lines))
    if args.show_pending:
        for _, cl in details:
            for area, recs in cl["pending"].items():
                for rec in recs:
                    last = rec["detail"].strip().splitlines()[-1:] or [""]
                    print(f"  PENDING[{area}] {rec['id']}: {last[0][:160]}")
    if args.show_na:
        for _, cl in details:
            for rec in cl["na_other"]:
                print(f"  N/A {rec['id']}: loops={rec['loops']}")
    summary["ok"] = ok
    return ok, summary


def _print_matrix(summaries: list[dict], modules: list[str]) -> None:
    """One line per module: passed/failed+errors/pending/known/n-a per backend."""
    cols = ("passed", "failed", "pending", "known", "n/a")
    cell = 24
    width = max(len(m) for m in modules) + 2
    print(f"\nsummary, {'/'.join(cols)} per backend (failed = failed + errors):")
    print(f"{'module':<{width}}" + "".join(f"{s['backend']:>{cell}}" for s in summaries))

    def fmt(c: dict) -> str:
        failed = c["failed"] + c["errors"]
        return f"{c['passed']}/{failed}/{c['pending']}/{c['known']}/{c['n/a']}"

    for m in modules:
        row = "".join(
            f"{fmt(s['modules'][m]['counts']) if m in s['modules'] else '-':>{cell}}"
            for s in summaries
        )
        print(f"{m:<{width}}{row}")
    print(f"{'TOTAL':<{width}}" + "".join(f"{fmt(s['total']):>{cell}}" for s in summaries))
    print(f"{'seconds':<{width}}" + "".join(f"{s['seconds']:>{cell}}" for s in summaries))


def parent_main(args) -> int:
    try:
        import test.test_asyncio  # noqa: F401
    except ImportError as exc:
        print(
            f"SKIP: Python {platform.python_version()} ({sys.executable}) ships no "
            f"test.test_asyncio package ({exc}); conformance not run"
        )
        return 0
    try:
        import rsloop
        from rsloop import _backend
    except ImportError as exc:
        print(f"ERROR: cannot import rsloop: {exc}", file=sys.stderr)
        return 2
    backends = args.backend or list(BACKENDS)
    if _backend.NATIVE_ERROR is not None and any(b != "asyncio" for b in backends):
        print(f"ERROR: rsloop native core unavailable: {_backend.NATIVE_ERROR}", file=sys.stderr)
        return 2
    ef = _load_classification()
    for area in ef.PENDING:
        if area not in ef.AREAS:
            print(
                f"ERROR: expected_failures.PENDING area {area!r} is not in AREAS", file=sys.stderr
            )
            return 2

    modules = []
    for name, minver in MODULES:
        if args.module and name not in args.module:
            continue
        if sys.version_info[:2] < minver:
            print(f"note: {name} needs Python >= {minver[0]}.{minver[1]}; not run")
            continue
        try:
            found = importlib.util.find_spec(PREFIX + name) is not None
        except ImportError:
            found = False
        if not found:
            print(f"note: {name} is not in this Python's test package; not run")
            continue
        modules.append(name)
    if not modules:
        print("ERROR: no modules to run", file=sys.stderr)
        return 2

    print(
        f"rsloop {rsloop.__version__} from {os.path.dirname(rsloop.__file__)}; "
        f"Python {platform.python_version()} ({sys.executable})"
    )
    overall = True
    summaries = []
    for backend in backends:
        os.environ["RSLOOP_BACKEND"] = backend
        try:
            probe = rsloop.new_event_loop()
        except Exception as exc:  # noqa: BLE001
            print(f"ERROR: backend {backend} unavailable: {exc!r}", file=sys.stderr)
            overall = False
            continue
        got = getattr(probe, "backend", None)
        probe.close()
        if got != backend:
            print(f"ERROR: RSLOOP_BACKEND={backend} gave a {got!r} loop", file=sys.stderr)
            overall = False
            continue
        t0 = time.monotonic()
        order = sorted(modules, key=lambda m: _SLOW_FIRST.index(m) if m in _SLOW_FIRST else 99)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futs = {m: pool.submit(run_module, m, backend, args) for m in order}
            runs = [futs[m].result() for m in modules]
        ok, summary = report_backend(backend, runs, ef, args)
        summary["seconds"] = round(time.monotonic() - t0, 1)
        print(f"\nbackend {backend}: {'OK' if ok else 'FAILED'} in {summary['seconds']}s")
        overall = overall and ok
        summaries.append(summary)
    if len(summaries) > 1:
        _print_matrix(summaries, modules)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summaries, f, indent=1)
    print(f"\nconformance: {'OK' if overall else 'FAILED'}")
    return 0 if overall else 1


def main(argv=None) -> int:
    # CPython's test_runners interrupt the main thread with SIGINT. A launcher that ignores
    # SIGINT (a background job of a shell without job control) would leave the workers
    # ignoring it too, and those tests would hang until the per-test timeout. Take back
    # the default an interactive shell gives (workers inherit it through exec).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--backend",
        action="append",
        choices=("uring", "poll", "asyncio"),
        help="backend to run (repeatable; default: uring and poll). 'asyncio' "
        "runs the same harness on rsloop's stdlib fallback loop, to tell "
        "rsloop bugs from harness or test issues",
    )
    p.add_argument(
        "-m", "--module", action="append", help="run only this module (repeatable), e.g. test_tasks"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="modules run in parallel (default: min(4, CPUs))",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the traceback tail of each unexpected failure",
    )
    p.add_argument("--trace-lines", type=int, default=25)
    p.add_argument(
        "--show-pending",
        action="store_true",
        help="list each pending (expected) failure with its last line",
    )
    p.add_argument(
        "--show-na",
        action="store_true",
        help="list tests that passed without running the loop under test",
    )
    p.add_argument(
        "--test-timeout",
        type=float,
        default=60.0,
        help="seconds before a single test counts as hung (default 60)",
    )
    p.add_argument(
        "--run-known-hangs",
        action="store_true",
        help="also run the KNOWN_BUGS entries marked as hanging (each costs --test-timeout)",
    )
    p.add_argument(
        "--fast-streams",
        action="store_true",
        help="run with RSLOOP_FAST_STREAMS=1 (asyncio.StreamReader / StreamWriter and "
        "asyncio.streams.StreamWriter rebound to rsloop's fast streams), so the stream "
        "tests run on them",
    )
    p.add_argument("--module-timeout", type=float, default=600.0)
    p.add_argument("--max-restarts", type=int, default=20)
    p.add_argument("--json", help="write the per-backend summary as JSON here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--skip-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fast_streams:
        os.environ[FAST_STREAMS_ENV] = "1"  # the children inherit both
        os.environ["RSLOOP_FAST_STREAMS"] = "1"
    if args.child:
        args.backend = args.backend[0]
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
