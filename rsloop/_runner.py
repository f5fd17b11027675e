"""``rsloop.new_event_loop()`` and ``rsloop.run()``."""

from __future__ import annotations

import asyncio
from asyncio import coroutines, events, tasks
from typing import Any, Coroutine, TypeVar

from . import _backend, _compat
from ._fallback import FallbackLoop

T = TypeVar("T")

__all__ = ["new_event_loop", "run"]


def new_event_loop(*, clock: Any = None) -> asyncio.AbstractEventLoop:
    """A new loop on the backend ``RSLOOP_BACKEND`` asks for (default: the best one).
    ``clock``: an :class:`rsloop.testing.VirtualClock` that drives the loop's time."""
    choice = _backend.requested()
    kind, reason = _backend.select(choice)
    if kind == "asyncio":
        if choice == "auto":
            _backend.warn_fallback(reason or "")
        return FallbackLoop(reason, clock=clock)
    from ._loop import Loop

    if clock is None:
        return Loop(backend=choice)  # type: ignore[abstract]
    return Loop(backend=choice, clock=clock)  # type: ignore[abstract]


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None, clock: Any = None) -> T:
    """Run a coroutine on a new rsloop loop, like ``asyncio.run``; ``clock``: an
    :class:`rsloop.testing.VirtualClock` for the loop's time."""
    factory = new_event_loop if clock is None else clock.loop_factory
    if _compat.PY312:
        return asyncio.run(main, debug=debug, loop_factory=factory)  # type: ignore[call-arg]
    if _compat.PY311:
        with asyncio.Runner(debug=debug, loop_factory=factory) as runner:  # type: ignore[attr-defined]
            return runner.run(main)
    return _run_310(main, debug=debug, factory=factory)


def _run_310(main, *, debug, factory=new_event_loop):
    # asyncio.run of Python 3.10, with our loop instead of the policy's.
    if events._get_running_loop() is not None:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    if not coroutines.iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    loop = factory()
    try:
        events.set_event_loop(loop)
        if debug is not None:
            loop.set_debug(debug)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            events.set_event_loop(None)
            loop.close()


def _cancel_all_tasks(loop) -> None:
    pending = tasks.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(tasks.gather(*pending, return_exceptions=True))
    for task in pending:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during asyncio.run() shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
