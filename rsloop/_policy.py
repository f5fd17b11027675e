"""``rsloop.EventLoopPolicy``: for ``asyncio.set_event_loop_policy`` (the legacy style).

Policies are deprecated from Python 3.14 (removed in 3.16); this class keeps older code
working without itself touching a deprecated name: its base is the platform's default
policy class, read where asyncio defines it (see :mod:`rsloop._compat`). On 3.14 the
user's own ``asyncio.set_event_loop_policy`` call warns; ``rsloop.run`` and
``asyncio.run(main, loop_factory=rsloop.new_event_loop)`` are the ways that do not.
"""

from __future__ import annotations

import asyncio

from ._compat import default_policy_class
from ._runner import new_event_loop

__all__ = ["EventLoopPolicy"]


class EventLoopPolicy(default_policy_class()):  # type: ignore[misc]
    """An event loop policy whose loops are rsloop loops."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()
