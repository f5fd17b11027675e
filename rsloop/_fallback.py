"""The pure-asyncio loop rsloop hands out when the native core is unavailable or
``RSLOOP_BACKEND=asyncio``: a stdlib loop with rsloop's extras (``backend``,
``backend_reason``, ``stats()``), so code written against rsloop keeps working."""

from __future__ import annotations

import asyncio
import sys

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

    def __init__(self, reason: str | None = None) -> None:
        super().__init__()
        self._rsloop_reason = reason

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
