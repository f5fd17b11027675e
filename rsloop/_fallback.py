"""The pure-asyncio loop rsloop hands out when the native core is unavailable or
``RSLOOP_BACKEND=asyncio``: a stdlib loop with rsloop's extras (``backend``,
``backend_reason``, ``stats()``), so code written against rsloop keeps working."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

__all__ = ["FallbackLoop"]


def stdlib_loop_class(platform: str | None = None) -> type:
    """The stdlib loop class asyncio itself uses on ``platform`` (default: this one):
    Proactor on Windows (the only one with subprocesses and pipes there), else Selector."""
    if (sys.platform if platform is None else platform) == "win32":
        return asyncio.ProactorEventLoop  # type: ignore[attr-defined]
    return asyncio.SelectorEventLoop


_Base = stdlib_loop_class()


class FallbackLoop(_Base):  # type: ignore[misc,valid-type]
    """``asyncio.SelectorEventLoop`` (Proactor on Windows) with rsloop's extras."""

    _clock: Any = None
    _virtual_advance_waiter: Any = None

    def __init__(self, reason: str | None = None, clock: Any = None) -> None:
        super().__init__()
        self._rsloop_reason = reason
        if clock is not None:
            from .testing import install_fallback

            try:
                install_fallback(self, clock)
            except BaseException:
                self.close()
                raise

    # ----- Virtual time (rsloop.testing): real work in flight holds the clock back -----

    def _virtual_work(self, delta: int) -> None:
        if self._clock is None:
            return
        self._clock._state._work(delta)
        if delta < 0 and not self.is_closed():
            self._write_to_self()  # type: ignore[attr-defined]

    def _virtual_advance_done(self, _arg: Any = None) -> None:
        waiter, self._virtual_advance_waiter = self._virtual_advance_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def run_in_executor(self, executor, func, *args):
        future = super().run_in_executor(executor, func, *args)
        if self._clock is not None:
            self._virtual_work(1)
            # asyncio's wrap_future keeps no handle on the job: count down when the
            # loop-side future is done (by the worker's post, or cancelled).
            future.add_done_callback(lambda _f: self._virtual_work(-1))
        return future

    async def shutdown_default_executor(self, *args, **kwargs):  # type: ignore[override]
        # The thread that joins the executor's workers is real work too (counted down
        # by _do_shutdown once it posted its result).
        if self._clock is not None and self._default_executor is not None:  # type: ignore[attr-defined]
            self._virtual_work(1)
        return await super().shutdown_default_executor(*args, **kwargs)

    def _do_shutdown(self, *args):  # type: ignore[override]
        try:
            super()._do_shutdown(*args)  # type: ignore[misc]
        finally:
            self._virtual_work(-1)

    async def _make_subprocess_transport(self, *args, **kwargs):  # type: ignore[override]
        self._virtual_work(1)
        try:
            return await super()._make_subprocess_transport(*args, **kwargs)
        except BaseException:
            self._virtual_work(-1)
            raise

    def _child_watcher_callback(self, pid, returncode, transp):  # type: ignore[override]
        super()._child_watcher_callback(pid, returncode, transp)
        self._virtual_work(-1)

    @property
    def backend(self) -> str:
        return "asyncio"

    @property
    def backend_reason(self) -> str | None:
        return self._rsloop_reason

    def stats(self) -> dict:
        """What the stdlib loop can tell: its queue sizes (no counters)."""
        return {
            "backend": "asyncio",
            "ready": len(self._ready),  # type: ignore[attr-defined]
            "timers": len(self._scheduled),  # type: ignore[attr-defined]
        }
