"""Fixtures shared by every behaviour test.

``loop`` is parametrised over rsloop's native backends (``uring``, ``poll``), its
pure-asyncio fallback and stdlib asyncio itself: every behaviour test runs on each, so a
difference from asyncio shows up as a failure. Backends this machine cannot run are
skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from hypothesis import HealthCheck, settings

import rsloop
from rsloop import _backend

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


def make_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A fresh loop of one test backend, or pytest.skip with the reason."""
    if kind == "asyncio":
        return asyncio.new_event_loop()
    if kind == "fallback":
        from rsloop._fallback import FallbackLoop

        return FallbackLoop("test: forced fallback")
    if _backend.NATIVE_ERROR is not None:
        pytest.skip(_backend.NATIVE_ERROR)
    from rsloop._loop import Loop

    try:
        return Loop(backend=kind)
    except OSError as exc:
        pytest.skip(f"{kind} backend unavailable here: {exc}")


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
    PYTHONASYNCIODEBUG=1)."""
    lp = make_loop(loop_kind)
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
