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

import os
import sys
import weakref
from asyncio import base_events, selector_events
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

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        self._ensure_fd_no_transport(sock)
        return _transports.make_socket_transport(self, sock, protocol, waiter, extra, server)

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
    ):
        from asyncio import sslproto

        self._ensure_fd_no_transport(rawsock)
        kwargs = {"ssl_handshake_timeout": ssl_handshake_timeout}
        if sys.version_info >= (3, 11):
            kwargs["ssl_shutdown_timeout"] = ssl_shutdown_timeout
        ssl_protocol = sslproto.SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname, **kwargs
        )
        _transports.make_socket_transport(self, rawsock, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        self._ensure_fd_no_transport(sock)
        return _transports.make_datagram_transport(self, sock, protocol, address, waiter, extra)

    # ----- servers: accept on the listening socket's readiness -----

    _start_serving = _Selector._start_serving
    _accept_connection = _Selector._accept_connection
    _accept_connection2 = _Selector._accept_connection2

    def _stop_serving(self, sock) -> None:
        path = sock.getsockname() if sock in self._unix_server_sockets else None
        # (On io_uring the removal cancels the in-flight poll at once, so the close below
        # really closes the listening socket.)
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
