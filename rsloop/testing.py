"""Virtual time for tests: sleeps and timeouts that take no real time.

    clock = rsloop.testing.VirtualClock()          # autojump=0.0
    loop = rsloop.new_event_loop(clock=clock)      # loop.time() reads clock.now

When the loop has nothing to run it waits ``autojump`` real seconds for I/O and, if
nothing arrives, jumps the clock to the next timer's deadline. It never jumps while real
work is in flight (an executor job, a DNS lookup, a child process, a cross-thread
``call_soon_threadsafe`` not yet run). ``autojump=None`` never jumps: only ``await
clock.advance(seconds)`` moves the clock. See docs/virtual-time.md.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from typing import Any

from . import _backend

__all__ = ["VirtualClock"]


def _check_autojump(autojump: Any) -> float | None:
    if autojump is None:
        return None
    if isinstance(autojump, bool) or not isinstance(autojump, (int, float)):
        raise TypeError(f"autojump must be None or a number of seconds, not {autojump!r}")
    value = float(autojump)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"autojump must be None or a finite number of seconds >= 0, got {value}")
    return value


class _PyClockState:
    """The clock's state where the native module is missing (the stdlib-based loop only);
    the same rules as ``rust/src/core/clock.rs``."""

    def __init__(self, start: float, autojump: float | None) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite number of seconds, got {start}")
        self.now = start
        self.jumps = 0
        self.pending = 0
        self._autojump = autojump
        self._advance_to: float | None = None

    @property
    def autojump(self) -> float | None:
        return self._autojump

    def set_autojump(self, autojump: float | None) -> None:
        self._autojump = _check_autojump(autojump)

    @property
    def advancing(self) -> bool:
        return self._advance_to is not None

    def start_advance(self, target: float) -> None:
        if math.isnan(target):
            raise ValueError("cannot advance to NaN")
        self._advance_to = max(target, self.now)

    def stop_advance(self) -> None:
        self._advance_to = None

    def _work(self, delta: int) -> None:
        self.pending = self.pending + 1 if delta > 0 else max(0, self.pending - 1)

    def _plan(self, next_deadline: float | None):
        now = self.now
        if next_deadline == math.inf:  # call_at(inf) never falls due: never jump there
            next_deadline = None
        if next_deadline is not None and not next_deadline > now:
            return 0.0, None, False, False
        if self.pending > 0:
            return None, None, False, False
        if self._advance_to is not None:
            if next_deadline is not None and next_deadline <= self._advance_to:
                return 0.0, next_deadline, False, False
            return 0.0, self._advance_to, False, True
        if self._autojump is not None and next_deadline is not None:
            return self._autojump, next_deadline, True, False
        return None, None, False, False

    def _jump(self, jump_to: float | None, counted: bool, finishes_advance: bool) -> bool:
        if jump_to is None:
            return False
        if jump_to > self.now:
            self.now = jump_to
        if counted:
            self.jumps += 1
        if finishes_advance:
            self._advance_to = None
        return finishes_advance


class VirtualClock:
    """A clock for one event loop: pass it as ``rsloop.new_event_loop(clock=...)``.

    ``autojump``: real seconds an idle loop waits for I/O before it jumps to the next timer
    (``0.0``: at once; ``None``: never, only :meth:`advance` moves the clock).
    ``start``: the clock's first reading (default: ``time.monotonic()`` now).
    """

    def __init__(self, autojump: float | None = 0.0, start: float | None = None) -> None:
        autojump = _check_autojump(autojump)
        if start is None:
            start = time.monotonic()
        elif isinstance(start, bool) or not isinstance(start, (int, float)):
            raise TypeError(f"start must be a number of seconds, not {start!r}")
        state: Any
        if _backend.NATIVE_ERROR is None:
            from ._rsloop import ClockState

            state = ClockState(float(start), autojump)
        else:
            state = _PyClockState(float(start), autojump)
        self._state = state
        self._loop_ref: weakref.ref | None = None

    def __repr__(self) -> str:
        return f"<VirtualClock now={self.now!r} autojump={self.autojump!r} jumps={self.jumps}>"

    @property
    def now(self) -> float:
        """The virtual time: what ``loop.time()`` returns."""
        return self._state.now

    @property
    def jumps(self) -> int:
        """How many times the clock jumped on its own (``advance`` steps not included)."""
        return self._state.jumps

    @property
    def pending(self) -> int:
        """Pieces of real work in flight that hold the clock back."""
        return self._state.pending

    @property
    def autojump(self) -> float | None:
        return self._state.autojump

    @autojump.setter
    def autojump(self, value: float | None) -> None:
        self._state.set_autojump(_check_autojump(value))

    def loop_factory(self) -> asyncio.AbstractEventLoop:
        """A new rsloop loop on this clock: for ``asyncio.Runner(loop_factory=...)``,
        ``asyncio.run(..., loop_factory=...)`` and AnyIO's ``loop_factory`` option."""
        from ._runner import new_event_loop

        return new_event_loop(clock=self)

    def _attach(self, loop: Any) -> None:
        current = self._loop_ref() if self._loop_ref is not None else None
        if current is not None and current is not loop and not current.is_closed():
            raise RuntimeError(f"{self!r} already drives {current!r}; a clock serves one loop")
        self._loop_ref = weakref.ref(loop)

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward as if that time had passed: every timer that
        falls due runs, in deadline order, with the clock at its deadline, and so does
        everything it makes ready at that moment. Returns with the clock at the end."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"seconds must be a number, not {seconds!r}")
        seconds = float(seconds)
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds}")
        loop = asyncio.get_running_loop()
        if getattr(loop, "_clock", None) is not self:
            raise RuntimeError(f"{self!r} does not drive the running loop {loop!r}")
        if self._state.advancing:
            raise RuntimeError("another advance() of this clock is in progress")
        waiter = loop.create_future()
        loop._virtual_advance_waiter = waiter  # type: ignore[attr-defined]
        self._state.start_advance(self._state.now + seconds)
        try:
            await waiter
        finally:
            if waiter.cancelled() or not waiter.done():
                # Cancelled: the clock stays where it got to.
                self._state.stop_advance()
                loop._virtual_advance_waiter = None  # type: ignore[attr-defined]


# ----- The stdlib-based loop under virtual time (RSLOOP_BACKEND=asyncio) -----


class _VirtualSelector:
    """Wraps the stdlib loop's selector: an idle ``select`` waits and jumps as the clock
    says (the seam asynctest used: ``_run_once`` asks ``time()`` and then ``select``)."""

    def __init__(self, loop: Any, selector: Any, state: Any) -> None:
        self._loop = loop
        self._selector = selector
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)

    def select(self, timeout: float | None = None):
        if timeout == 0:
            return self._selector.select(0)
        loop = self._loop
        scheduled = loop._scheduled
        next_deadline = scheduled[0]._when if scheduled else None
        wait, jump_to, counted, finishes = self._state._plan(next_deadline)
        events = self._selector.select(wait)
        if events or loop._ready or jump_to is None:
            return events
        if self._state._jump(jump_to, counted, finishes):
            loop.call_soon(loop._virtual_advance_done)
        return events


def install_fallback(loop: Any, clock: VirtualClock) -> None:
    """Puts ``clock`` under a stdlib-based rsloop loop (``rsloop._fallback.FallbackLoop``)."""
    if not isinstance(clock, VirtualClock):
        raise TypeError(f"clock must be an rsloop.testing.VirtualClock, not {type(clock).__name__}")
    if not hasattr(loop, "_selector"):
        raise NotImplementedError(
            f"rsloop: a VirtualClock needs a selector loop; {type(loop).__name__} has none"
        )
    clock._attach(loop)
    state = clock._state
    loop._clock = clock
    loop._virtual_advance_waiter = None
    loop._virtual_state = state
    loop.time = lambda: state.now
    loop._selector = _VirtualSelector(loop, loop._selector, state)
