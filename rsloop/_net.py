"""Streams, servers and datagram endpoints: ``create_connection`` and friends.

The per-connection and per-server logic (address resolution, happy eyeballs, the
``Server`` object, accept back-off, TLS through ``asyncio.sslproto``, ``start_tls``,
``sendfile``) is stdlib asyncio's own, taken from the running Python's ``asyncio`` so
its behaviour, messages and version differences are exactly asyncio's. It only needs the
loop's public API plus the small set of hooks defined here (``_make_socket_transport``
and friends, ``_add_reader``...). What runs per packet -- the transports -- is in
:mod:`rsloop._transports`.
"""

from __future__ import annotations

import contextvars
import errno
import os
import socket
import sys
import weakref
from asyncio import base_events, constants, selector_events, trsock
from asyncio.log import logger
from typing import Any

from . import _transports

# typeshed leaves out asyncio's private methods: borrow them untyped.
_Base: Any = base_events.BaseEventLoop
_Selector: Any = selector_events.BaseSelectorEventLoop

if sys.platform != "win32":
    from asyncio import unix_events

    _Unix: Any = unix_events._UnixSelectorEventLoop
else:  # pragma: no cover - the Unix socket API does not exist there
    _Unix = None


class NetMixin:
    """``create_connection``, ``create_server`` and friends, mixed into
    :class:`rsloop._loop.Loop`."""

    _transports: weakref.WeakValueDictionary

    def _init_net(self) -> None:
        # fd -> transport, as selector loops keep it: sock_* refuse an fd a live
        # transport owns.
        self._transports = weakref.WeakValueDictionary()
        # The native sock_* methods look fds up in its dict before waiting on one.
        self._set_transport_table(self._transports.data)  # type: ignore[attr-defined]
        # Listening Unix sockets to unlink on close (3.13's cleanup_socket): socket -> inode.
        self._unix_server_sockets: dict = {}
        # Listening sockets and their multishot accepts: socket -> its _Acceptor.
        self._acceptors: dict = {}

    @property
    def _debug(self) -> bool:
        return self.get_debug()  # type: ignore[attr-defined]

    # ----- hooks the stdlib code calls -----

    # The public fd-watcher methods refuse an fd a live transport owns, as selector loops
    # do; the native `_add_reader` & co. (asyncio's private names, returning the handle)
    # are what transports and the stdlib code use.
    def add_reader(self, fd, callback, *args) -> None:
        self._ensure_fd_no_transport(fd)
        self._add_reader(fd, callback, *args)  # type: ignore[attr-defined]

    def remove_reader(self, fd) -> bool:
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)  # type: ignore[attr-defined]

    def add_writer(self, fd, callback, *args) -> None:
        self._ensure_fd_no_transport(fd)
        self._add_writer(fd, callback, *args)  # type: ignore[attr-defined]

    def remove_writer(self, fd) -> bool:
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)  # type: ignore[attr-defined]

    _ensure_fd_no_transport = _Selector._ensure_fd_no_transport

    # `context` (asyncio 3.15+): the context the protocol's callbacks run in.
    def _make_socket_transport(
        self, sock, protocol, waiter=None, *, extra=None, server=None, context=None
    ):
        self._ensure_fd_no_transport(sock)
        return _transports.make_socket_transport(
            self, sock, protocol, waiter, extra, server, context
        )

    def _make_ssl_transport(
        self,
        rawsock,
        protocol,
        sslcontext,
        waiter=None,
        *,
        server_side=False,
        server_hostname=None,
        extra=None,
        server=None,
        ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
        context=None,
    ):
        from asyncio import sslproto

        self._ensure_fd_no_transport(rawsock)
        kwargs = {"ssl_handshake_timeout": ssl_handshake_timeout}
        if sys.version_info >= (3, 11):
            kwargs["ssl_shutdown_timeout"] = ssl_shutdown_timeout
        ssl_protocol = sslproto.SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname, **kwargs
        )
        _transports.make_socket_transport(
            self, rawsock, ssl_protocol, extra=extra, server=server, context=context
        )
        return ssl_protocol._app_transport

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        self._ensure_fd_no_transport(sock)
        return _transports.make_datagram_transport(self, sock, protocol, address, waiter, extra)

    # ----- servers: one multishot accept per listening socket, on every native driver -----

    def _start_serving(
        self,
        protocol_factory,
        sock,
        sslcontext=None,
        server=None,
        backlog=100,
        *timeouts,
        context=None,
    ) -> None:
        # `timeouts`: the SSL handshake timeout, and the shutdown timeout from 3.11 on, as
        # this Python's asyncio passes them on to `_accept_connection2`. `context`: the
        # server's (asyncio 3.15+), of which each connection gets a copy.
        if context is None and timeouts and isinstance(timeouts[-1], contextvars.Context):
            # asyncio 3.15's own accept retry passes the context by position.
            *rest, context = timeouts
            timeouts = tuple(rest)
        fd = sock.fileno()
        if fd == -1:
            # Closed before a retry after EMFILE came due (asyncio logs a ValueError).
            return
        # (Stand-in sockets of tests, whose fileno() is no int, take asyncio's path.)
        if type(fd) is int and sock.type == socket.SOCK_STREAM:
            acceptor = _Acceptor(
                self, protocol_factory, sock, sslcontext, server, backlog, timeouts, context
            )
            acceptor.start()
            self._acceptors[sock] = acceptor
            return
        kwargs = {} if context is None else {"context": context}
        _Selector._start_serving(
            self, protocol_factory, sock, sslcontext, server, backlog, *timeouts, **kwargs
        )

    _accept_connection = _Selector._accept_connection
    _accept_connection2 = _Selector._accept_connection2

    def _stop_serving(self, sock) -> None:
        path = sock.getsockname() if sock in self._unix_server_sockets else None
        # (On io_uring both the stop and the removal cancel what is in flight at once, so
        # the close below really closes the listening socket.)
        acceptor = self._acceptors.pop(sock, None)
        if acceptor is not None:
            acceptor.stop()
        self._remove_reader(sock.fileno())  # type: ignore[attr-defined]
        sock.close()
        if path is not None:
            inode = self._unix_server_sockets.pop(sock)
            try:
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                from asyncio.log import logger

                logger.error("Unable to clean up listening UNIX socket %r: %r", path, err)

    # ----- the public API, asyncio's own code -----

    _ensure_resolved = _Base._ensure_resolved
    _connect_sock = _Base._connect_sock
    _create_connection_transport = _Base._create_connection_transport
    _create_server_getaddrinfo = _Base._create_server_getaddrinfo
    create_connection = _Base.create_connection
    create_server = _Base.create_server
    connect_accepted_socket = _Base.connect_accepted_socket
    create_datagram_endpoint = _Base.create_datagram_endpoint
    start_tls = _Base.start_tls
    sendfile = _Base.sendfile
    _sendfile_native = _Selector._sendfile_native
    _sendfile_fallback = _Base._sendfile_fallback

    if _Unix is not None:
        create_unix_connection = _Unix.create_unix_connection
        create_unix_server = _Unix.create_unix_server


class _Acceptor:
    """One listening socket's multishot accept (every native driver performs one): each new
    connection's fd comes to :meth:`_on_accept`, and asyncio's own
    ``_accept_connection2`` makes its transport, as after ``sock.accept()`` in asyncio's
    ``_accept_connection``. Errors are handled as asyncio handles ``accept()``'s."""

    __slots__ = (
        "_loop",
        "_factory",
        "_sock",
        "_sslcontext",
        "_server",
        "_backlog",
        "_timeouts",
        "_token",
        "_context",
        "_given",
    )

    def __init__(
        self, loop, protocol_factory, sock, sslcontext, server, backlog, timeouts, context
    ):
        self._loop = loop
        self._factory = protocol_factory
        self._sock = sock
        self._sslcontext = sslcontext
        self._server = server
        self._backlog = backlog
        self._timeouts = timeouts
        self._token: int | None = None
        # The server's context, given by asyncio 3.15+: each connection runs in a copy of
        # it, its task and its transport's callbacks alike.
        self._given = context
        # Before 3.15, asyncio's reader handle copies the context of `_start_serving`'s
        # caller, and each connection's task copies that: the protocol factory sees its
        # contextvars.
        self._context = contextvars.copy_context() if context is None else context

    def start(self) -> None:
        """Arms the accept."""
        self._token = self._loop._accept_start(self._sock.fileno(), self._on_accept)

    def stop(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._loop._accept_stop(token)

    def _on_accept(self, result: int) -> None:
        if result < 0:
            self._ended(-result)
            return
        if self._token is None:
            # Taken by the kernel before the stop reached it: the server is closing.
            os.close(result)
            return
        sock = self._sock
        loop = self._loop
        try:
            conn = socket.socket(sock.family, sock.type | socket.SOCK_NONBLOCK, sock.proto, result)
        except BaseException:
            os.close(result)
            raise
        try:
            # What accept() would have said, asked before a reset can erase it.
            extra = {"peername": conn.getpeername()}
        except OSError:
            extra = {}
        if loop._debug:
            logger.debug(
                "%r got a new connection from %r: %r", self._server, extra.get("peername"), conn
            )
        if self._given is not None:
            conn_context = self._given.copy()
            coro = loop._accept_connection2(
                self._factory,
                conn,
                extra,
                self._sslcontext,
                self._server,
                *self._timeouts,
                context=conn_context,
            )
            loop.create_task(coro, context=conn_context)
            return
        coro = loop._accept_connection2(
            self._factory, conn, extra, self._sslcontext, self._server, *self._timeouts
        )
        self._context.run(loop.create_task, coro)

    def _restart(self) -> None:
        """``loop._start_serving`` again for this socket, as asyncio calls it."""
        args = (self._factory, self._sock, self._sslcontext, self._server, self._backlog)
        if self._given is not None:
            self._loop._start_serving(*args, *self._timeouts, context=self._given)
        else:
            self._context.run(self._loop._start_serving, *args, *self._timeouts)

    def _ended(self, code: int) -> None:
        """The kernel ended the accept with ``-code``: what asyncio does when ``accept()``
        raises that error, then accept on."""
        loop = self._loop
        sock = self._sock
        token, self._token = self._token, None
        if token is None:
            return
        # The ended accept leaves the loop's table (it is not armed: this removes it).
        loop._accept_stop(token)
        if loop._acceptors.get(sock) is self:
            del loop._acceptors[sock]
        if code in (errno.EAGAIN, errno.EINTR, errno.ECONNABORTED):
            # asyncio's "accept buffer empty" errors: go on accepting.
            self._restart()
            return
        exc = OSError(code, os.strerror(code))
        if code in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": exc,
                    "socket": trsock.TransportSocket(sock),
                }
            )
            loop.call_later(constants.ACCEPT_RETRY_DELAY, self._restart)
            return
        # asyncio lets the error reach the loop's handler from its reader callback (which
        # stays installed): the same here, accepting on; unless the socket cannot accept at
        # all (closed, not a socket, not listening: EINVAL), which would only fail again.
        # (A kernel without multishot accept is the driver's business: it accepts by
        # readiness itself.)
        if code not in (errno.EBADF, errno.ENOTSOCK, errno.EINVAL):
            self._restart()
        raise exc
