"""Streams, servers and datagram endpoints: ``create_connection`` and friends."""

from __future__ import annotations


class NetMixin:
    """``create_connection``, ``create_server`` and friends, mixed into
    :class:`rsloop._loop.Loop`."""
