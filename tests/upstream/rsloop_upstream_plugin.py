"""pytest plugin that puts a third-party test suite on the loop under test.

Loaded by tests/upstream/run.py as ``-p rsloop_upstream_plugin`` (this folder on
PYTHONPATH). ``RSLOOP_UPSTREAM_LOOP`` names the loop: ``asyncio`` (the stdlib control),
``uring`` or ``poll`` (rsloop, with ``RSLOOP_BACKEND`` set to the same driver).

On rsloop it installs ``rsloop.EventLoopPolicy`` as the process-wide policy before any
suite code runs, and rebinds ``asyncio.DefaultEventLoopPolicy`` to it, because aiohttp's
``loop`` fixture installs a fresh ``asyncio.DefaultEventLoopPolicy()`` for every test.
pytest-asyncio, anyio's plugin (``asyncio.Runner``) and ``asyncio.new_event_loop`` all
go through the policy.

It checks which loop actually runs: at session start the policy's loop must be of the
expected class and driver, and every loop made during the run is counted by class; a run
on rsloop that made no rsloop loop fails. Each test's outcome is written as JSON to
``RSLOOP_UPSTREAM_RESULTS`` for run.py to compare with tests/upstream/expected.toml.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
from typing import Any

import pytest

LOOP = os.environ.get("RSLOOP_UPSTREAM_LOOP", "")
_COUNTS: collections.Counter[str] = collections.Counter()
_OUTCOMES: dict[str, str] = {}


def _count_inits(cls: type, label: str) -> None:
    init = cls.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        _COUNTS[label] += 1
        init(self, *args, **kwargs)

    cls.__init__ = counted  # type: ignore[misc]


def _install() -> None:
    if LOOP not in ("asyncio", "uring", "poll"):
        raise pytest.UsageError(f"RSLOOP_UPSTREAM_LOOP must be asyncio, uring or poll: {LOOP!r}")
    import asyncio.selector_events

    _count_inits(asyncio.selector_events.BaseSelectorEventLoop, "stdlib-selector")
    if LOOP == "asyncio":
        return
    if os.environ.get("RSLOOP_BACKEND") != LOOP:
        raise pytest.UsageError(f"RSLOOP_BACKEND must be {LOOP} when RSLOOP_UPSTREAM_LOOP is")
    import rsloop
    from rsloop._loop import Loop

    _count_inits(Loop, "rsloop")
    policy_cls = rsloop.EventLoopPolicy
    asyncio.set_event_loop_policy(policy_cls())
    asyncio.DefaultEventLoopPolicy = policy_cls  # type: ignore[misc]
    if sys.platform != "win32":
        asyncio.events.DefaultEventLoopPolicy = policy_cls  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _install()


def pytest_sessionstart(session: pytest.Session) -> None:
    loop = asyncio.new_event_loop()
    try:
        kind = type(loop).__module__ + "." + type(loop).__qualname__
        backend = getattr(loop, "backend", None)
        if LOOP == "asyncio":
            assert backend is None and isinstance(loop, asyncio.SelectorEventLoop), kind
        else:
            assert type(loop).__module__ == "rsloop._loop", kind
            assert backend == LOOP, f"{kind} runs on {backend}, expected {LOOP}"
    finally:
        loop.close()
    _COUNTS.clear()
    session.config.stash[_LABEL] = f"{kind} (backend {backend or 'stdlib'})"


_LABEL = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> str:
    return f"rsloop upstream harness: loop={LOOP}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    prev = _OUTCOMES.get(report.nodeid)
    if report.when == "setup":
        if report.skipped:
            _OUTCOMES[report.nodeid] = "skipped"
        elif report.failed:
            _OUTCOMES[report.nodeid] = "error"
        else:
            _OUTCOMES[report.nodeid] = "pending"
        return
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = report.outcome  # passed / failed
        _OUTCOMES[report.nodeid] = outcome
        return
    # teardown: an error here fails a test that had passed
    if report.failed and prev != "failed":
        _OUTCOMES[report.nodeid] = "error"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    label = session.config.stash.get(_LABEL, "?")
    counts = {k: v for k, v in _COUNTS.items() if v}
    ran = sum(1 for o in _OUTCOMES.values() if o not in ("skipped",))
    if LOOP != "asyncio" and ran and not counts.get("rsloop"):
        # Nothing made an rsloop loop: the suite ran on something else. Say so loudly.
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    path = os.environ.get("RSLOOP_UPSTREAM_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(
                {"loop": LOOP, "policy_loop": label, "loops_made": counts, "tests": _OUTCOMES},
                f,
                indent=0,
            )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counts = {k: v for k, v in _COUNTS.items() if v}
    terminalreporter.write_line(f"rsloop upstream harness: loop={LOOP}; loops made: {counts}")
