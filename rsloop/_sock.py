"""The ``sock_*`` coroutines: asyncio's low-level socket API on rsloop's fd watchers."""

from __future__ import annotations


class SockMixin:
    """``sock_recv`` and friends, mixed into :class:`rsloop._loop.Loop`."""
