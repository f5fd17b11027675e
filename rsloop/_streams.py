"""Fast streams: ``rsloop.StreamReader`` and ``rsloop.StreamWriter``.

``StreamReader`` subclasses both the native ``StreamReaderCore`` and
``asyncio.StreamReader``: its state (``_buffer``, ``_waiter``, ``_eof`` ...) lives in
Rust fields exposed under asyncio's names, asyncio's own ``__init__`` and ``__repr__``
run unchanged, and ``feed_data``, ``read``, ``readline``, ``readexactly``,
``readuntil`` and ``__anext__`` are asyncio's algorithms in Rust. An rsloop stream
transport whose protocol is a plain ``asyncio.StreamReaderProtocol`` feeds such a reader
directly. ``StreamWriter.drain()`` finishes natively when nothing has to wait.

``rsloop.open_connection`` / ``start_server`` / ``open_unix_connection`` /
``start_unix_server`` (asyncio's signatures) hand these out on rsloop's native loops and
are asyncio's own functions on any other loop. By default asyncio's four functions are
replaced by these when ``rsloop._loop`` is first imported, which making a native loop (or
touching ``rsloop.Loop``) does (``install``), so code calling
``asyncio.open_connection`` gets them on rsloop's loops and nothing changes on other
loops. ``RSLOOP_FAST_STREAMS=1`` also rebinds ``StreamReader`` and ``StreamWriter`` in
``asyncio`` and ``asyncio.streams`` (for code that builds asyncio's classes itself, and
for the ones asyncio builds), and instances of asyncio's own classes still pass
``isinstance`` against the rebound names;
``RSLOOP_FAST_STREAMS=0`` turns all of it off, and the functions hand out asyncio's
classes.
"""

from __future__ import annotations

import asyncio
import asyncio.streams
import os
import socket
from typing import Any

from ._rsloop import Loop as _NativeLoop
from ._rsloop import StreamReaderCore as _StreamReaderCore

_DEFAULT_LIMIT = 2**16
_ASYNCIO_READER = asyncio.streams.StreamReader
_ASYNCIO_WRITER = asyncio.streams.StreamWriter
# asyncio's stream functions as this module found them: what rsloop's functions call on
# loops that are not rsloop's (another library's wrapper, if one was installed first).
_ASYNCIO_FUNCTIONS = {
    name: getattr(asyncio.streams, name)
    for name in ("open_connection", "start_server", "open_unix_connection", "start_unix_server")
    if hasattr(asyncio.streams, name)
}


def _setting() -> str:
    return os.environ.get("RSLOOP_FAST_STREAMS", "").strip().lower()


def enabled() -> bool:
    """Whether rsloop's stream functions hand out the native readers (not ``=0``)."""
    return _setting() not in ("0", "off", "false", "no")


def rebind_classes() -> bool:
    """Whether asyncio's ``StreamReader`` / ``StreamWriter`` names are rebound (``=1``)."""
    return _setting() in ("1", "on", "true", "yes")


# With RSLOOP_FAST_STREAMS=1: rsloop's class -> the asyncio class whose names it took.
_REBOUND: dict[type, type] = {}


class _AcceptsAsyncios(type):
    """Metaclass of rsloop's reader and writer. Once ``RSLOOP_FAST_STREAMS=1`` has bound
    asyncio's names to them, an instance of asyncio's own class (made through a reference
    taken before, e.g. ``from asyncio import StreamReader``) still passes
    ``isinstance(x, asyncio.StreamReader)``, and so ``StreamWriter.__init__``'s assert."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        stand_in = _REBOUND.get(cls)
        return stand_in is not None and isinstance(obj, stand_in)

    def __subclasscheck__(cls, sub: Any) -> bool:
        if type.__subclasscheck__(cls, sub):
            return True
        stand_in = _REBOUND.get(cls)
        return stand_in is not None and issubclass(sub, stand_in)


class StreamReader(  # type: ignore[misc]
    _StreamReaderCore, asyncio.StreamReader, metaclass=_AcceptsAsyncios
):
    """An ``asyncio.StreamReader`` with its state and reads native, asyncio's behaviour."""


class StreamWriter(asyncio.StreamWriter, metaclass=_AcceptsAsyncios):
    """An ``asyncio.StreamWriter`` whose ``write()`` and ``drain()`` are native methods
    (put on the class by ``_register`` below): ``write`` is asyncio's
    ``self._transport.write(data)`` without a Python frame, and ``drain()`` returns an
    awaitable that is done at once when nothing has to wait."""


# The transport feeds exactly this class directly (a subclass may override feed_data),
# and the native drain hands its waits to asyncio's coroutine, taken before any rebinding.
_StreamReaderCore._register(StreamReader, _ASYNCIO_WRITER.drain, StreamWriter)


def install() -> None:
    """Puts this module's stream functions in asyncio's place (unless
    ``RSLOOP_FAST_STREAMS=0``), and with ``=1`` rebinds asyncio's reader and writer
    classes too. Called when ``rsloop._loop`` is imported; a name that is not asyncio's
    own function (another library replaced it) is left alone."""
    if not enabled():
        return
    for name, found in _ASYNCIO_FUNCTIONS.items():
        if getattr(found, "__module__", None) != "asyncio.streams":
            continue  # someone else's wrapper: theirs stays, and wraps asyncio's own
        ours = globals()[name]
        for module in (asyncio.streams, asyncio):
            if getattr(module, name, None) is found:
                setattr(module, name, ours)
    if rebind_classes():
        # Both modules' names: what code builds itself, and what asyncio builds (the
        # writer of StreamReaderProtocol, a subprocess's readers). Instances of asyncio's
        # own classes keep passing isinstance against the rebound names (_REBOUND).
        _REBOUND[StreamReader] = _ASYNCIO_READER
        _REBOUND[StreamWriter] = _ASYNCIO_WRITER
        for module in (asyncio, asyncio.streams):
            module.StreamReader = StreamReader  # type: ignore[attr-defined,misc]
            module.StreamWriter = StreamWriter  # type: ignore[attr-defined,misc]


def _native(loop: Any) -> bool:
    return enabled() and isinstance(loop, _NativeLoop)


async def open_connection(
    host: Any = None, port: Any = None, *, limit: int = _DEFAULT_LIMIT, **kwds: Any
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` with the fast reader and writer on rsloop loops."""
    loop = asyncio.get_running_loop()
    if not _native(loop):
        return await _ASYNCIO_FUNCTIONS["open_connection"](host, port, limit=limit, **kwds)
    reader = StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: protocol, host, port, **kwds)
    return reader, StreamWriter(transport, protocol, reader, loop)


def _server_factory(client_connected_cb: Any, limit: int, loop: Any) -> Any:
    def client_connected(reader: Any, writer: Any) -> Any:
        if type(writer) is _ASYNCIO_WRITER:
            writer.__class__ = StreamWriter
        return client_connected_cb(reader, writer)

    def factory() -> asyncio.StreamReaderProtocol:
        reader = StreamReader(limit=limit, loop=loop)
        return asyncio.StreamReaderProtocol(reader, client_connected, loop=loop)

    return factory


async def start_server(
    client_connected_cb: Any,
    host: Any = None,
    port: Any = None,
    *,
    limit: int = _DEFAULT_LIMIT,
    **kwds: Any,
) -> asyncio.Server:
    """``asyncio.start_server`` with the fast reader and writer on rsloop loops."""
    loop = asyncio.get_running_loop()
    if not _native(loop):
        return await _ASYNCIO_FUNCTIONS["start_server"](
            client_connected_cb, host, port, limit=limit, **kwds
        )
    factory = _server_factory(client_connected_cb, limit, loop)
    return await loop.create_server(factory, host, port, **kwds)


if hasattr(socket, "AF_UNIX"):

    async def open_unix_connection(
        path: Any = None, *, limit: int = _DEFAULT_LIMIT, **kwds: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """``asyncio.open_unix_connection`` with the fast reader and writer."""
        loop = asyncio.get_running_loop()
        if not _native(loop):
            return await _ASYNCIO_FUNCTIONS["open_unix_connection"](path, limit=limit, **kwds)
        reader = StreamReader(limit=limit, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.create_unix_connection(lambda: protocol, path, **kwds)
        return reader, StreamWriter(transport, protocol, reader, loop)

    async def start_unix_server(
        client_connected_cb: Any, path: Any = None, *, limit: int = _DEFAULT_LIMIT, **kwds: Any
    ) -> asyncio.Server:
        """``asyncio.start_unix_server`` with the fast reader and writer."""
        loop = asyncio.get_running_loop()
        if not _native(loop):
            return await _ASYNCIO_FUNCTIONS["start_unix_server"](
                client_connected_cb, path, limit=limit, **kwds
            )
        factory = _server_factory(client_connected_cb, limit, loop)
        return await loop.create_unix_server(factory, path, **kwds)
