"""Fixtures shared by every behaviour test.

``loop`` is parametrised over rsloop's native backends (``uring``, ``poll``), its
pure-asyncio fallback and stdlib asyncio itself: every behaviour test runs on each, so a
difference from asyncio shows up as a failure. Backends this machine cannot run are
skipped with the reason, except in CI (``CI=true``): there a uring or poll backend that
cannot be made fails the test, unless ``RSLOOP_EXPECT_NO_URING=1`` declares that the
machine has no io_uring (then uring cases skip, and .ci/tally.py allows exactly those).

With ``RSLOOP_TALLY_DIR`` set, each pytest run writes one JSON file there: every test's
outcome, the backend it ran on and, for a skip, the reason. ``.ci/tally.py`` adds them up
per backend and fails on a uring/poll skip that is not on ``.ci/skips-allowed.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import pytest
from hypothesis import HealthCheck, settings

import rsloop
from rsloop import _backend

# `nox -s package` runs the suite against an installed wheel: the package must then come
# from site-packages, not from this source tree.
if os.environ.get("RSLOOP_TEST_INSTALLED") == "1":
    _tree_pkg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rsloop")
    _where = os.path.dirname(os.path.abspath(rsloop.__file__))
    if _where == _tree_pkg or "site-packages" not in _where or _backend.NATIVE_ERROR is not None:
        raise RuntimeError(
            f"RSLOOP_TEST_INSTALLED=1, but rsloop is {_where}: {_backend.NATIVE_ERROR}"
        )

settings.register_profile(
    "fast", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "slow", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

# Ctrl-C tests (tests/test_signals.py) send SIGINT to child interpreters. A launcher that
# ignores SIGINT (a background job of a shell without job control) passes that on through
# exec, and the children would never see it; take back the default an interactive shell
# gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ("pytester",)  # tests/test_ecosystem.py runs inner pytest sessions

BACKENDS = ("uring", "poll", "fallback", "asyncio")


def _selected_backends() -> tuple[str, ...]:
    only = os.environ.get("RSLOOP_TEST_BACKENDS")
    if not only:
        return BACKENDS
    return tuple(b for b in only.split(",") if b)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _expect_no_uring() -> bool:
    return os.environ.get("RSLOOP_EXPECT_NO_URING", "") == "1"


def unavailable(kind: str, why: str):
    """Skip a case whose backend this machine cannot run; in CI, fail it instead, unless
    the machine is declared to have no io_uring and the backend is uring."""
    if _in_ci() and not (kind == "uring" and _expect_no_uring()):
        pytest.fail(
            f"CI: {kind} backend unavailable ({why}); a backend this machine supports must "
            "run, not skip (set RSLOOP_EXPECT_NO_URING=1 on a machine without io_uring)",
            pytrace=False,
        )
    pytest.skip(f"{kind} backend unavailable here: {why}")


# Where asyncio's default loop has no fd watchers (Windows: the Proactor loop), nor does
# rsloop's fallback (that loop subclassed, what `auto` gives there).
DEFAULT_LOOP_HAS_NO_WATCHERS = sys.platform == "win32"


def stdlib_loop(selector: bool = False) -> asyncio.AbstractEventLoop:
    """asyncio's own loop: its default, or with ``selector`` its ``SelectorEventLoop``. They
    differ on Windows only, where the default is the Proactor loop, which has no fd
    watchers (``add_reader`` raises NotImplementedError); the selector loop has them, on
    sockets (``select()``), and is the control of the cases about them."""
    if selector and DEFAULT_LOOP_HAS_NO_WATCHERS:
        return asyncio.SelectorEventLoop()
    return asyncio.new_event_loop()


def make_loop(kind: str, selector: bool = False) -> asyncio.AbstractEventLoop:
    """A fresh loop of one test backend, or pytest.skip with the reason (a failure in CI).
    ``selector``: the case is about fd watchers, and asyncio's control is its selector loop
    (``@pytest.mark.selector_control``; see `stdlib_loop`)."""
    if kind == "asyncio":
        return stdlib_loop(selector)
    if kind == "fallback":
        if selector and DEFAULT_LOOP_HAS_NO_WATCHERS:
            pytest.skip(
                "fd watchers: rsloop's fallback here is asyncio's Proactor loop, which has "
                "none (NotImplementedError); this case's control is asyncio's SelectorEventLoop"
            )
        from rsloop._fallback import FallbackLoop

        return FallbackLoop("test: forced fallback")
    if _backend.NATIVE_ERROR is not None:
        unavailable(kind, _backend.NATIVE_ERROR)
    from rsloop._loop import Loop

    try:
        return Loop(backend=kind)
    except OSError as exc:
        unavailable(kind, str(exc))


def is_rsloop_native(loop) -> bool:
    return getattr(loop, "backend", None) in ("uring", "poll")


@pytest.fixture(params=_selected_backends())
def loop_kind(request) -> str:
    return request.param


class ExceptionLog(list):
    """Contexts passed to the loop's exception handler during a test."""

    def take(self) -> list:
        out = list(self)
        self.clear()
        return out


@pytest.fixture
def handler_log() -> ExceptionLog:
    return ExceptionLog()


@pytest.fixture
def loop(request, loop_kind, handler_log):
    """A new loop per test; fails the test if anything reached the exception handler and
    the test did not take it (``handler_log.take()``). ``@pytest.mark.debug_mode(False)``
    pins the debug flag for tests about one mode (the suite also runs under
    PYTHONASYNCIODEBUG=1). ``@pytest.mark.selector_control``: see `make_loop`."""
    selector = request.node.get_closest_marker("selector_control") is not None
    lp = make_loop(loop_kind, selector)
    marker = request.node.get_closest_marker("debug_mode")
    if marker is not None:
        lp.set_debug(marker.args[0])
    lp.set_exception_handler(lambda _loop, ctx: handler_log.append(ctx))
    asyncio.set_event_loop(lp)
    try:
        yield lp
    finally:
        asyncio.set_event_loop(None)
        if not lp.is_closed():
            if not lp.is_running():
                lp.run_until_complete(lp.shutdown_default_executor())
            lp.close()
    unexpected = handler_log.take()
    assert not unexpected, f"unexpected exception-handler calls: {unexpected!r}"


@pytest.fixture
def rsloop_module():
    return rsloop


# --- the per-backend tally (RSLOOP_TALLY_DIR) -------------------------------------------

_TALLY_BACKEND: dict[str, str] = {}
_TALLY: dict[str, dict] = {}


def pytest_collection_modifyitems(items) -> None:
    # The backend a case runs on: the ``loop`` fixture's parameter, or a test's own
    # ``backend`` / ``choice`` parameter naming one (subprocess tests); "-" for neither.
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        kind = "-"
        for name in ("loop_kind", "backend", "choice"):
            value = params.get(name)
            if isinstance(value, str) and value in BACKENDS:
                kind = value
                break
        _TALLY_BACKEND[item.nodeid] = kind


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report) -> None:
    if not os.environ.get("RSLOOP_TALLY_DIR"):
        return
    entry = _TALLY.setdefault(
        report.nodeid,
        {"backend": _TALLY_BACKEND.get(report.nodeid, "-"), "outcome": None, "reason": None},
    )
    if report.failed:
        entry["outcome"] = "failed"
        # What failed, in a line (nox -s windows tells the platform's known gaps apart).
        crash = getattr(report.longrepr, "reprcrash", None)
        entry["reason"] = (crash.message if crash is not None else str(report.longrepr))[:2000]
    elif entry["outcome"] == "failed":
        return
    elif report.skipped:
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed"
        else:
            entry["outcome"] = "skipped"
            entry["reason"] = _skip_reason(report)
    elif report.when == "call":
        entry["outcome"] = "xpassed" if hasattr(report, "wasxfail") else "passed"


def pytest_sessionfinish(session, exitstatus) -> None:
    where = os.environ.get("RSLOOP_TALLY_DIR")
    if not where or not _TALLY:
        return
    os.makedirs(where, exist_ok=True)
    env_keys = sorted(k for k in os.environ if k.startswith("RSLOOP_") and k != "RSLOOP_TALLY_DIR")
    record = {
        "python": sys.version.split()[0],
        "args": [str(a) for a in session.config.invocation_params.args],
        "env": {k: os.environ[k] for k in env_keys}
        | {k: os.environ[k] for k in ("PYTHONASYNCIODEBUG",) if k in os.environ},
        "exitstatus": int(exitstatus),
        "tests": _TALLY,
    }
    name = f"py{sys.version_info[0]}{sys.version_info[1]}-{time.time_ns()}-{os.getpid()}.json"
    with open(os.path.join(where, name), "w") as f:
        json.dump(record, f, indent=0)
