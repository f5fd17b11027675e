"""``rsloop.EventLoopPolicy``: for ``asyncio.set_event_loop_policy`` (the legacy style)."""

from __future__ import annotations

import asyncio

from ._runner import new_event_loop

__all__ = ["EventLoopPolicy"]


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):  # type: ignore[misc,name-defined]
    """An event loop policy whose loops are rsloop loops."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()
