"""Socket transports on rsloop's fd watchers.

For now these are stdlib asyncio's selector transports, driven through the loop's
``_add_reader`` / ``_add_writer`` hooks (native fd watchers), so every byte, callback and
error follows asyncio exactly; only ``repr`` differs (asyncio's asks the selector, which
rsloop does not have).
"""

from __future__ import annotations

from asyncio import selector_events


def _describe(transport, info: list[str]) -> str:
    if transport._sock is None:
        info.append("closed")
    elif transport._closing:
        info.append("closing")
    info.append(f"fd={transport._sock_fd}")
    loop = transport._loop
    if loop is not None and not loop.is_closed():
        info.append("read=polling" if transport.is_reading() else "read=idle")
        bufsize = transport.get_write_buffer_size()
        state = "polling" if bufsize else "idle"
        info.append(f"write=<{state}, bufsize={bufsize}>")
    return "<{}>".format(" ".join(info))


class SocketTransport(selector_events._SelectorSocketTransport):
    """A TCP or Unix stream transport."""

    def __repr__(self) -> str:
        return _describe(self, [type(self).__name__])


class DatagramTransport(selector_events._SelectorDatagramTransport):
    """A UDP or Unix datagram transport."""

    def __repr__(self) -> str:
        return _describe(self, [type(self).__name__])
