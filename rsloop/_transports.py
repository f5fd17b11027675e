"""Socket transports.

``SocketTransport`` (TCP and Unix streams) is the per-connection half of a transport:
extra info, ``repr``, reporting errors, ``connection_lost`` and closing the socket. The
per-packet half (reading into the protocol, the write queue, flow control, the close
state machine) is native: ``rsloop._rsloop.StreamCore``. The hot methods (``write``,
``pause_reading``...) are the core's own, bound on a transport the first time it reads
them, so a call costs no Python frame and a connection that never calls one carries no
bound method for it; through the class they are forwarding methods of the same names.
Behaviour is asyncio's ``_SelectorSocketTransport``'s.

``DatagramTransport`` (UDP and Unix datagrams) is built the same way over
``rsloop._rsloop.DatagramCore``: the core receives (one ``recvfrom`` per readiness, the
address converted natively), sends and queues ``(datagram, address)``; behaviour is
asyncio's ``_SelectorDatagramTransport``'s for the running Python version.

What the two share (set-up, teardown, error reporting, the attributes asyncio's code
reads) is ``_NativeTransport``, as asyncio's is ``_SelectorTransport``.
"""

from __future__ import annotations

import collections
import socket
import sys
import warnings
from asyncio import base_events, constants, futures, selector_events, transports, trsock
from asyncio.log import logger

from ._compat import PY311, PY313

try:
    from ._rsloop import DatagramCore, StreamCore, set_asyncio_behaviour
except ImportError:  # pragma: no cover - no native transport cores on this platform
    StreamCore = None  # type: ignore[assignment,misc]
    DatagramCore = None  # type: ignore[assignment,misc]
    set_asyncio_behaviour = None  # type: ignore[assignment]

__all__ = [
    "DatagramTransport",
    "SocketTransport",
    "make_datagram_transport",
    "make_socket_transport",
]

# Server._attach/_detach take the transport from 3.13 on.
_SERVER_TAKES_TRANSPORT = sys.version_info >= (3, 13)

# The methods whose per-call cost matters: the native core's own, bound on first use.
_HOT = (
    "write",
    "writelines",
    "write_eof",
    "can_write_eof",
    "close",
    "abort",
    "is_closing",
    "is_reading",
    "pause_reading",
    "resume_reading",
    "get_protocol",
    "set_protocol",
    "get_write_buffer_size",
    "get_write_buffer_limits",
    "set_write_buffer_limits",
)


def _probe_write_type_error() -> str:
    """The running asyncio's ``write()`` text for a non-bytes argument, before ``, not
    'int'`` (3.14 names the three accepted types); empty if it cannot be read. The type
    check is the method's first statement on every version, so no transport is needed."""
    try:
        selector_events._SelectorSocketTransport.write(None, 0)  # type: ignore[attr-defined]
    except TypeError as exc:
        text = str(exc)
        if text.endswith(", not 'int'"):
            return text[: -len(", not 'int'")]
    except Exception:  # noqa: BLE001 - another first statement: keep the default text
        pass
    return ""


class _WritelinesProbe:
    # What asyncio's writelines() reads before it converts the items.
    _eof = False
    _empty_waiter = None
    _conn_lost = 0

    def __init__(self) -> None:
        self._buffer: list = []


def _probe_writelines_skips_empty() -> bool:
    """Whether the running asyncio's ``writelines()`` leaves out empty items (3.14+:
    ``memoryview(data) for data in list_of_data if data``) rather than failing on them:
    asked of asyncio's method on a stand-in with nothing queued, which returns at once
    when every item is left out."""
    try:
        selector_events._SelectorSocketTransport.writelines(_WritelinesProbe(), [None])  # type: ignore[attr-defined]
    except TypeError:
        return False
    except Exception:  # noqa: BLE001 - not this version's shape: the older behaviour
        return False
    return True


if set_asyncio_behaviour is not None:
    set_asyncio_behaviour(_probe_write_type_error(), _probe_writelines_skips_empty())


def _server_attach(server, transport) -> None:
    if _SERVER_TAKES_TRANSPORT:
        server._attach(transport)
    else:
        server._attach()


def _server_detach(server, transport) -> None:
    if _SERVER_TAKES_TRANSPORT:
        server._detach(transport)
    else:
        server._detach()


def _describe(transport) -> str:
    info = [type(transport).__name__]
    if transport._sock is None:
        info.append("closed")
    elif transport._closing:
        info.append("closing")
    info.append(f"fd={transport._sock_fd}")
    loop = transport._loop
    if loop is not None and not loop.is_closed():
        # 3.10's datagram transport has no is_reading(): its own flags say the same.
        reading = not transport._closing and not getattr(transport, "_paused", False)
        info.append("read=polling" if reading else "read=idle")
        bufsize = transport.get_write_buffer_size()
        # The datagram core knows whether it waits for writability; 3.13's datagram
        # buffer size can stay above 0 with nothing queued.
        writing = getattr(transport, "_writing", None)
        if writing is None:
            writing = bool(bufsize)
        info.append(f"write=<{'polling' if writing else 'idle'}, bufsize={bufsize}>")
    return "<{}>".format(" ".join(info))


class _Hot:
    """One of the core's methods on a transport class. Read through the class, it is a
    forwarding function (``SocketTransport.write(t, data)`` works); read through a
    transport, it binds the core's method and stores it in the transport's ``__dict__``,
    where every later read finds it first (this descriptor has no ``__set__``). Binding
    on first use, not in ``__init__``, saves each connection the bound methods it never
    calls: eager binding cost 15 collector-tracked objects and about 1 KiB a connection.
    """

    __slots__ = ("forward", "name")

    def __init__(self, name: str, owner: str) -> None:
        self.name = name

        def forward(self, *args, **kwargs):
            return getattr(self._core, name)(*args, **kwargs)

        forward.__name__ = name
        forward.__qualname__ = f"{owner}.{name}"
        self.forward = forward

    def __get__(self, transport, owner=None):
        if transport is None:
            return self.forward
        bound = getattr(transport._core, self.name)
        transport.__dict__[self.name] = bound
        return bound


class _NativeTransport(transports._FlowControlMixin):  # type: ignore[name-defined,misc]
    """The Python half both native transports share: asyncio's ``_SelectorTransport``
    set-up and teardown around a native core, which ``_make_core`` builds.

    An ``asyncio.transports._FlowControlMixin`` (so an ``asyncio.Transport``) because
    asyncio's own sendfile fallback insists on one; the flow control itself is the core's.
    """

    # The core's methods a transport binds on first use (see ``_Hot``).
    _hot: tuple[str, ...] = ()

    # Read by __del__, which runs even when __init__ failed half-way.
    _sock: socket.socket | None = None
    _server = None

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None, context=None):
        # `context` (asyncio 3.15+ passes one for stream transports): the protocol's
        # callbacks run in it, as asyncio's `_SelectorTransport._call_soon` and its fd
        # watchers do; None, as before 3.15, gives each a copy of the current context.
        # Not _FlowControlMixin.__init__: its water marks and paused flag live in the core.
        transports.BaseTransport.__init__(self, extra)
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        self._sock = sock
        self._sock_fd = fd = sock.fileno()
        self._loop = loop
        self._core = core = self._make_core(loop, sock, fd, protocol, context)
        self._server = server
        if server is not None:
            _server_attach(server, self)
        loop._transports[fd] = self
        base_events._set_nodelay(sock)  # TCP only: other sockets are left alone
        loop.call_soon(protocol.connection_made, self, context=context)
        # Reading starts once connection_made() has run.
        loop.call_soon(core._start_reading, context=context)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None, context=context)

    def _make_core(self, loop, sock, fd, protocol, context):
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # The same methods on the class, for code that calls them through it.
        for name in cls.__dict__.get("_hot", ()):
            setattr(cls, name, _Hot(name, cls.__qualname__))

    # asyncio's private attributes that stdlib code and tests read.
    @property
    def _protocol(self):
        return self._core.get_protocol()

    @property
    def _closing(self) -> bool:
        return self._core.is_closing()

    @property
    def _conn_lost(self) -> int:
        return self._core._conn_lost

    @property
    def _paused(self) -> bool:
        return self._core._paused

    @property
    def _protocol_paused(self) -> bool:
        return self._core._protocol_paused

    def __repr__(self) -> str:
        return _describe(self)

    def __del__(self, _warn=warnings.warn) -> None:
        if self._sock is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._sock.close()
            self._sock = None
            if self._server is not None:
                _server_detach(self._server, self)
                self._server = None

    # ----- called by the core on rare paths -----

    def _fatal_error(self, exc, message="Fatal error on transport") -> None:
        if isinstance(exc, OSError):
            if self._loop is not None and self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        elif self._loop is not None:
            self._report(message, exc)
        self._core._force_close(exc)

    def _force_close(self, exc) -> None:
        self._core._force_close(exc)

    def _report(self, message, exc) -> None:
        self._loop.call_exception_handler(
            {
                "message": message,
                "exception": exc,
                "transport": self,
                "protocol": self._core.get_protocol(),
            }
        )

    def _call_connection_lost(self, exc) -> None:
        core = self._core
        protocol = core.get_protocol()
        try:
            if protocol is not None:
                protocol.connection_lost(exc)
        finally:
            # The stream core hands back a pending loop.sendfile() waiter.
            waiter = core._detach()
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._loop = None
            server = self._server
            if server is not None:
                _server_detach(server, self)
                self._server = None
            if waiter is not None and not waiter.done():
                waiter.set_exception(ConnectionError("Connection is closed by peer"))


class SocketTransport(_NativeTransport):
    """A TCP or Unix stream transport on rsloop's native stream core."""

    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE
    _hot = _HOT

    def _make_core(self, loop, sock, fd, protocol, context):
        return StreamCore(loop, self, fd, protocol, context)

    @property
    def _eof(self) -> bool:
        return self._core._eof

    @property
    def _empty_waiter(self):
        return self._core._empty_waiter

    def _make_empty_waiter(self):
        return self._core._make_empty_waiter()

    def _reset_empty_waiter(self) -> None:
        self._core._reset_empty_waiter()

    def _log_lost_write(self) -> None:
        logger.warning("socket.send() raised exception.")


# The socket methods asyncio's selector transports call. The native cores read and write
# the fd themselves, so a socket whose class (a `socket.socket` subclass: instrumented,
# wrapped, rate-limited...) or instance replaces one of these would never see the calls.
_STREAM_IO = ("recv", "recv_into", "send", "sendmsg")
_DATAGRAM_IO = ("recvfrom", "recvfrom_into", "sendto", "send", "sendmsg")


def _overrides(sock, names: tuple[str, ...]) -> bool:
    """Whether ``sock`` has its own version of one of the socket methods ``names``."""
    cls = type(sock)
    if cls is socket.socket:
        return False  # the common case: no lookups
    own = getattr(sock, "__dict__", None) or {}
    return any(
        name in own or getattr(cls, name, None) is not getattr(socket.socket, name, None)
        for name in names
    )


class _SelectorSocketTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's stream transport, for sockets whose I/O methods are their own (see
    ``_STREAM_IO``) and where the native core is missing. It calls the socket's methods
    and waits through the loop's fd watchers, which both drivers provide."""

    def __repr__(self) -> str:
        return _describe(self)


def make_socket_transport(loop, sock, protocol, waiter=None, extra=None, server=None, context=None):
    """A stream transport: the native one where this platform has it, asyncio's for a
    socket that overrides its I/O methods (asyncio's transports call them). ``context``
    is what asyncio 3.15+ hands ``_make_socket_transport``; it is never given earlier."""
    if StreamCore is None or _overrides(sock, _STREAM_IO):
        kwargs = {} if context is None else {"context": context}
        return _SelectorSocketTransport(loop, sock, protocol, waiter, extra, server, **kwargs)
    return SocketTransport(loop, sock, protocol, waiter, extra, server, context)


# The datagram transport's methods bound straight to the native core. 3.10's datagram
# transport has no is_reading/pause_reading/resume_reading (they raise
# NotImplementedError, from asyncio.ReadTransport).
_DATAGRAM_HOT = (
    "sendto",
    "close",
    "abort",
    "is_closing",
    "get_protocol",
    "set_protocol",
    "get_write_buffer_size",
    "get_write_buffer_limits",
    "set_write_buffer_limits",
) + (("is_reading", "pause_reading", "resume_reading") if PY311 else ())

# What changed in asyncio's datagram transport: 3.13 sends empty datagrams (earlier ones
# drop them) and counts 8 header bytes per queued datagram in get_write_buffer_size(),
# but takes them off on sending only from 3.14 (its `_header_size`, probed); 3.11 and
# 3.12 keep a counter without them; 3.10 sums the queued bytes.
_DATAGRAM_ALLOW_EMPTY = PY313
_HEADER_BOTH_WAYS = getattr(selector_events._SelectorDatagramTransport, "_header_size", None)  # type: ignore[attr-defined]
_DATAGRAM_SIZE_HEADER = (
    _HEADER_BOTH_WAYS if _HEADER_BOTH_WAYS is not None else 8 if PY313 else 0 if PY311 else None
)
_DATAGRAM_SIZE_HEADER_OUT = _HEADER_BOTH_WAYS or 0


class _ForceCloseProbe:
    # What asyncio's _SelectorTransport._force_close() reads and calls.
    _conn_lost = 0
    _closing = True
    _sock_fd = -1

    def __init__(self) -> None:
        self._buffer = collections.deque([b"x"])
        self._buffer_size = 9
        self._loop = self

    def _remove_writer(self, fd) -> None:
        pass

    def _remove_reader(self, fd) -> None:
        pass

    def call_soon(self, *args, **kwargs) -> None:
        pass

    _call_soon = call_soon
    _call_connection_lost = call_soon


def _probe_force_close_resets_size() -> bool:
    """Whether the running asyncio's forced close sets the write-buffer counter back to
    0 when it drops a queue (3.15+), asked of its own ``_force_close`` on a stand-in."""
    probe = _ForceCloseProbe()
    try:
        selector_events._SelectorTransport._force_close(probe, None)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - another shape: the older behaviour
        return False
    return probe._buffer_size == 0


_DATAGRAM_SIZE_RESET_ON_DROP = _probe_force_close_resets_size()


class DatagramTransport(_NativeTransport, transports.DatagramTransport):  # type: ignore[name-defined,misc]
    """A UDP or Unix datagram transport on rsloop's native datagram core.

    An ``asyncio.Transport`` as well as an ``asyncio.DatagramTransport``, as asyncio's own
    selector datagram transport is.
    """

    max_size = 256 * 1024  # asyncio's; the core receives at most this much at once.
    _hot = _DATAGRAM_HOT

    def __init__(self, loop, sock, protocol, address=None, waiter=None, extra=None):
        self._address = address
        super().__init__(loop, sock, protocol, waiter, extra)

    def _make_core(self, loop, sock, fd, protocol, context):
        # (asyncio gives datagram transports no context, up to 3.15 at least.)
        address = self._address
        return DatagramCore(
            loop,
            self,
            sock,
            fd,
            int(sock.family),
            protocol,
            address if address else None,
            bool(self._extra["peername"]),
            _DATAGRAM_ALLOW_EMPTY,
            _DATAGRAM_SIZE_HEADER,
            _DATAGRAM_SIZE_HEADER_OUT,
            _DATAGRAM_SIZE_RESET_ON_DROP,
        )

    @property
    def _writing(self) -> bool:
        return self._core._writing


class _SelectorDatagramTransport(selector_events._SelectorDatagramTransport):  # type: ignore[name-defined,misc]
    """asyncio's datagram transport, for sockets whose I/O methods are their own (see
    ``_DATAGRAM_IO``) and where the native core is missing."""

    def __repr__(self) -> str:
        return _describe(self)


def make_datagram_transport(loop, sock, protocol, address=None, waiter=None, extra=None):
    """A datagram transport: the native one where this platform has it."""
    if DatagramCore is None or _overrides(sock, _DATAGRAM_IO):
        return _SelectorDatagramTransport(loop, sock, protocol, address, waiter, extra)
    return DatagramTransport(loop, sock, protocol, address, waiter, extra)
