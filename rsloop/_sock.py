"""The ``sock_*`` coroutines and name lookups: asyncio's low-level socket API on rsloop's
fd watchers.

Owns: ``sock_recv`` and friends, ``sock_connect`` (with its address resolution),
``sock_accept``, ``sock_sendfile``, ``getaddrinfo`` / ``getnameinfo``. Not: transports,
servers and ``create_connection`` (:mod:`rsloop._net`), the watchers themselves (native).

Every operation has the shape of asyncio's ``SelectorEventLoop``
(``selector_events.py``, ``base_events.py``, ``unix_events.py``): try the syscall at once;
if it would block, park a future behind ``add_reader`` / ``add_writer`` whose callback
retries the syscall (unless the future is already done, so a cancelled receive never
consumes bytes), and drop the watcher from the future's done callback, which also runs
on cancellation. Checks, messages and their order are asyncio's.

``sock_recv``, ``sock_recv_into`` and ``sock_sendall`` first offer the call to the native
loop (``Loop._sock_recv`` & co., ``rust/src/py/sock.rs``), which runs those same steps in
Rust for a plain non-blocking ``socket.socket`` outside debug mode and answers with the
result, a future to await, or ``NotImplemented``: then the code here runs.
"""

from __future__ import annotations

import errno
import functools
import inspect
import io
import os
import socket
import sys
from asyncio import constants, exceptions
from asyncio.log import logger
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without OpenSSL
    ssl = None  # type: ignore[assignment]

__all__ = ["SockMixin"]

_HAS_IPV6 = hasattr(socket, "AF_INET6")
_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6) if _HAS_IPV6 else (socket.AF_INET,)
# getaddrinfo() with these flags parses and never asks a resolver, so it may run inline.
_AI_NUMERIC = socket.AI_NUMERICHOST | getattr(socket, "AI_NUMERICSERV", 0)
_NI_NUMERIC = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
_STOP = (SystemExit, KeyboardInterrupt)


def _reject_ssl_socket(sock: Any) -> None:
    # mirrors base_events._check_ssl_socket: TLS sockets need a transport, not sock_*.
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


def _retry(fut: Any, sock: Any, method: str, *args: Any) -> None:
    """Watcher callback: try ``sock.<method>(*args)`` again now that the fd is ready. The
    method is looked up on each attempt, as asyncio does."""
    if fut.done():
        return  # cancelled: leave the data in the kernel; the done callback unwatches
    try:
        result = getattr(sock, method)(*args)
    except (BlockingIOError, InterruptedError):
        return  # spurious wake-up; the watcher stays and fires again
    except _STOP:
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        # The exception's traceback holds this frame: without the future in it, no
        # exception -> frame -> future -> exception cycle outlives the failure.
        fut = None
    else:
        if method == "accept":
            result[0].setblocking(False)
        fut.set_result(result)


def _send_rest(fut: Any, sock: Any, view: memoryview, sent: list[int]) -> None:
    """Writer callback of sock_sendall: send what is left of ``view`` after ``sent[0]``."""
    if fut.done():
        return
    try:
        n = sock.send(view[sent[0] :])
    except (BlockingIOError, InterruptedError):
        return
    except _STOP:
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        fut = None  # no cycle through this frame (see _retry)
        return
    sent[0] += n
    if sent[0] == len(view):
        fut.set_result(None)


def _connect_finished(fut: Any, sock: Any, address: Any) -> None:
    """Writer callback of sock_connect: the in-progress connect() ended; SO_ERROR says how."""
    if fut.done():
        return
    try:
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err != 0:
            # OSError(errno, ...) builds the matching subclass (ConnectionRefusedError, ...);
            # EAGAIN/EINTR make it BlockingIOError/InterruptedError: keep waiting then.
            raise OSError(err, f"Connect call failed {address}")
    except (BlockingIOError, InterruptedError):
        pass
    except _STOP:
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        fut = None  # no cycle through this frame (see _retry)
    else:
        fut.set_result(None)


def _accept_nonblocking(sock: Any) -> tuple[Any, Any]:
    conn, address = sock.accept()
    conn.setblocking(False)
    return conn, address


def _unwatch(remove: Callable[[int], object], fd: int, handle: Any, _fut: Any) -> None:
    # Only while the watcher is still ours: a later sock_* call on the same fd replaced
    # (and so cancelled) it, and removing would strand that call (asyncio's rule).
    if handle is None or not handle.cancelled():
        remove(fd)


def _numeric_sockaddr(
    host: Any, port: Any, family: int, type: int, proto: int, flowinfo: int = 0, scopeid: int = 0
) -> Any:
    """The sockaddr for ``(host, port)`` when host is already an IP address, else None.

    Same answer as asyncio's ``base_events._ipaddr_info`` (which sock_connect consults
    before calling getaddrinfo): only plain TCP/UDP, no zone index, port numeric-ish.
    """
    if not hasattr(socket, "inet_pton"):
        return None
    if host is None or proto not in (0, socket.IPPROTO_TCP, socket.IPPROTO_UDP):
        return None
    if type not in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        return None
    if port is None or (isinstance(port, (str, bytes)) and not port):
        port = 0
    else:
        try:
            port = int(port)  # a service name such as "http" needs the resolver
        except (TypeError, ValueError):
            return None
    families: tuple[int, ...] = _IP_FAMILIES if family == socket.AF_UNSPEC else (family,)
    if isinstance(host, bytes):
        host = host.decode("idna")
    if "%" in host:
        return None  # inet_pton rejects zone indexes such as '::1%lo'; getaddrinfo knows them
    for af in families:
        try:
            socket.inet_pton(af, host)
        except OSError:
            continue
        if _HAS_IPV6 and af == socket.AF_INET6:
            return (host, port, flowinfo, scopeid)
        return (host, port)
    return None


def _is_numeric_host(host: Any) -> bool:
    """Whether getaddrinfo can answer for ``host`` without asking a resolver."""
    if host is None:
        return True
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    elif not isinstance(host, str):
        return False
    address = host.partition("%")[0]  # a zone index ('fe80::1%lo') is an interface name
    for af in _IP_FAMILIES:
        try:
            socket.inet_pton(af, address)
        except (OSError, ValueError):
            continue
        return True
    return False


def _is_numeric_port(port: Any) -> bool:
    if port is None or isinstance(port, int):
        return True
    return isinstance(port, (str, bytes)) and port.isascii() and port.isdigit()


def _check_sendfile_args(sock: Any, file: Any, offset: Any, count: Any) -> None:
    # mirrors base_events._check_sendfile_params: same checks, order and messages.
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.type == socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


def _probe_seek_always() -> bool:
    """Whether the running asyncio leaves the file at the transfer's end even when
    nothing was sent (3.14+: its ``_sock_sendfile_update_filepos`` takes no
    ``total_sent``); before, only a transfer that sent something moves it."""
    try:
        from asyncio import unix_events

        update = unix_events._UnixSelectorEventLoop._sock_sendfile_update_filepos  # type: ignore[attr-defined]
        return "total_sent" not in inspect.signature(update).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


_SEEK_ALWAYS = _probe_seek_always()


class _OsSendfile:
    """One ``os.sendfile`` transfer driven by writability, as unix_events does it.

    ``offset`` and ``total_sent`` advance as the kernel takes data; the file position is
    set past what was sent when the transfer ends. A cancelled transfer moves it only if
    its writer fires once more before the done callback removes it (asyncio's race too).
    """

    __slots__ = ("loop", "fut", "sock", "fileno", "offset", "count", "blocksize", "total_sent")

    def __init__(
        self, loop: Any, fut: Any, sock: Any, fileno: int, offset: int, count: Any, blocksize: int
    ) -> None:
        self.loop = loop
        self.fut = fut
        self.sock = sock
        self.fileno = fileno
        self.offset = offset
        self.count = count
        self.blocksize = blocksize
        self.total_sent = 0

    def _finish(self, exc: BaseException | None = None) -> None:
        if self.total_sent > 0 or _SEEK_ALWAYS:
            os.lseek(self.fileno, self.offset, os.SEEK_SET)
        if exc is None:
            self.fut.set_result(self.total_sent)
        else:
            self.fut.set_exception(exc)

    def step(self, from_watcher: bool = False) -> None:
        fut = self.fut
        if fut.cancelled():
            if self.total_sent > 0 or _SEEK_ALWAYS:
                os.lseek(self.fileno, self.offset, os.SEEK_SET)
            return
        if fut.done():
            return
        if self.count:
            self.blocksize = self.count - self.total_sent
            if self.blocksize <= 0:
                self._finish()
                return
        fd = self.sock.fileno()
        try:
            sent = os.sendfile(fd, self.fileno, self.offset, self.blocksize)
        except (BlockingIOError, InterruptedError):
            if not from_watcher:
                self._watch(fd)
            return
        except OSError as exc:
            err: BaseException = exc
            if from_watcher and exc.errno == errno.ENOTCONN and type(exc) is not ConnectionError:
                # The peer went away mid-transfer: report it the same way on every POSIX
                # system (unix_events does this normalisation too).
                err = ConnectionError("socket is not connected", errno.ENOTCONN)
                err.__cause__ = exc
            if self.total_sent == 0:
                # Usually a file sendfile(2) cannot map (not a regular file): the caller
                # may fall back to read + send.
                err = exceptions.SendfileNotAvailableError("os.sendfile call failed")
            self._finish(err)
        except _STOP:
            raise
        except BaseException as exc:
            self._finish(exc)
        else:
            if sent == 0:
                self._finish()  # end of file
                return
            self.offset += sent
            self.total_sent += sent
            if not from_watcher:
                self._watch(fd)

    def _watch(self, fd: int) -> None:
        loop = self.loop
        loop._sock_check_fd_free(fd)
        handle = loop._add_writer(fd, self.step, True)
        self.fut.add_done_callback(functools.partial(_unwatch, loop._remove_writer, fd, handle))


class SockMixin:
    """``sock_recv`` and friends, mixed into :class:`rsloop._loop.Loop`."""

    if TYPE_CHECKING:
        # The loop API these methods build on (native, or asyncio's for the mixin's users).
        def create_future(self) -> Any: ...
        def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> None: ...
        def add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> None: ...
        def remove_reader(self, fd: Any) -> bool: ...
        def remove_writer(self, fd: Any) -> bool: ...
        def _add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> Any: ...
        def _add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> Any: ...
        def _remove_reader(self, fd: Any) -> bool: ...
        def _remove_writer(self, fd: Any) -> bool: ...
        def _sock_recv(self, sock: Any, n: Any) -> Any: ...
        def _sock_recv_into(self, sock: Any, buf: Any) -> Any: ...
        def _sock_sendall(self, sock: Any, data: Any) -> Any: ...
        def get_debug(self) -> bool: ...
        def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any: ...
        def time(self) -> float: ...

        slow_callback_duration: float

    # ----- checks shared by every sock_* method -----

    def _sock_check(self, sock: Any) -> None:
        _reject_ssl_socket(sock)
        if self.get_debug() and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")

    def _sock_check_fd_free(self, fd: int) -> None:
        # mirrors selector_events._ensure_fd_no_transport: a live transport owns its fd.
        transports = getattr(self, "_transports", None)
        if transports is None:
            return
        transport = transports.get(fd)
        if transport and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def _sock_park(self, sock: Any, writable: bool, callback: Callable[..., None], *args: Any):
        """A future completed by ``callback(fut, *args)`` each time ``sock`` is ready."""
        fut = self.create_future()
        fd = sock.fileno()
        self._sock_check_fd_free(fd)
        if writable:
            handle = self._add_writer(fd, callback, fut, *args)
            fut.add_done_callback(functools.partial(_unwatch, self._remove_writer, fd, handle))
        else:
            handle = self._add_reader(fd, callback, fut, *args)
            fut.add_done_callback(functools.partial(_unwatch, self._remove_reader, fd, handle))
        return fut

    # ----- Low-level socket operations -----

    async def sock_recv(self, sock, n):
        """Receive up to ``n`` bytes from ``sock``."""
        res = self._sock_recv(sock, n)  # bytes, a future, or NotImplemented
        if res.__class__ is bytes:
            return res
        if res is NotImplemented:
            self._sock_check(sock)
            try:
                return sock.recv(n)
            except (BlockingIOError, InterruptedError):
                pass
            res = self._sock_park(sock, False, _retry, sock, "recv", n)
        return await res

    async def sock_recv_into(self, sock, buf):
        """Receive into the writable buffer ``buf``; return the number of bytes."""
        res = self._sock_recv_into(sock, buf)  # an int, a future, or NotImplemented
        if res.__class__ is int:
            return res
        if res is NotImplemented:
            self._sock_check(sock)
            try:
                return sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                pass
            res = self._sock_park(sock, False, _retry, sock, "recv_into", buf)
        return await res

    async def sock_recvfrom(self, sock, bufsize):
        """Receive a datagram of up to ``bufsize`` bytes; return ``(data, address)``."""
        self._sock_check(sock)
        try:
            return sock.recvfrom(bufsize)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_park(sock, False, _retry, sock, "recvfrom", bufsize)

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        """Receive a datagram into ``buf``; return ``(nbytes, address)``."""
        self._sock_check(sock)
        if not nbytes:
            nbytes = len(buf)
        try:
            return sock.recvfrom_into(buf, nbytes)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_park(sock, False, _retry, sock, "recvfrom_into", buf, nbytes)

    async def sock_sendall(self, sock, data):
        """Send all of ``data``; on error there is no telling how much the peer got."""
        res = self._sock_sendall(sock, data)  # None (all sent), a future, or NotImplemented
        if res is None:
            return None
        if res is NotImplemented:
            self._sock_check(sock)
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n == len(data):
                return None
            res = self._sock_park(sock, True, _send_rest, sock, memoryview(data), [n])
        return await res

    async def sock_sendto(self, sock, data, address):
        """Send the datagram ``data`` to ``address``; return the number of bytes sent."""
        self._sock_check(sock)
        try:
            return sock.sendto(data, address)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_park(sock, True, _retry, sock, "sendto", data, address)

    async def sock_connect(self, sock, address):
        """Connect ``sock`` to ``address``, resolving a host name first for IP sockets."""
        self._sock_check(sock)
        if sock.family == socket.AF_INET or (_HAS_IPV6 and sock.family == socket.AF_INET6):
            address = await self._sock_resolve(sock, address)
        try:
            sock.connect(address)
            return None
        except (BlockingIOError, InterruptedError):
            # In progress (EINPROGRESS; after EINTR the connect goes on in the
            # background too): writability tells when it ended, SO_ERROR how.
            pass
        fut = self._sock_park(sock, True, _connect_finished, sock, address)
        try:
            return await fut
        finally:
            fut = None  # break the frame <-> exception cycle on failure

    async def _sock_resolve(self, sock, address):
        """sock_connect's address for an IP socket: as given if numeric, else resolved
        with the socket's family, type and protocol (asyncio's ``_ensure_resolved``)."""
        host, port = address[:2]
        sockaddr = _numeric_sockaddr(host, port, sock.family, sock.type, sock.proto, *address[2:])
        if sockaddr is not None:
            return sockaddr
        infos = await self.getaddrinfo(
            host, port, family=sock.family, type=sock.type, proto=sock.proto, flags=0
        )
        return infos[0][4]

    async def sock_accept(self, sock):
        """Accept a connection on the listening ``sock``; return ``(conn, address)``,
        ``conn`` non-blocking."""
        self._sock_check(sock)
        try:
            return _accept_nonblocking(sock)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_park(sock, False, _retry, sock, "accept")

    async def sock_sendfile(self, sock, file, offset=0, count=None, *, fallback=True):
        """Send ``file`` (from ``offset``, ``count`` bytes or to EOF) over the stream
        ``sock`` with os.sendfile, or by reading and sending when that is unavailable
        and ``fallback`` is true. Return the number of bytes sent."""
        if self.get_debug() and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        _reject_ssl_socket(sock)
        _check_sendfile_args(sock, file, offset, count)
        try:
            return await self._sock_sendfile_os(sock, file, offset, count)
        except exceptions.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_copy(sock, file, offset, count)

    async def _sock_sendfile_os(self, sock, file, offset, count):
        if not hasattr(os, "sendfile"):
            raise exceptions.SendfileNotAvailableError("os.sendfile() is not available")
        try:
            fileno = file.fileno()
        except (AttributeError, io.UnsupportedOperation):
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        try:
            fsize = os.fstat(fileno).st_size
        except OSError:
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        blocksize = count if count else fsize
        if not blocksize:
            return 0  # empty file
        # 3.13+ caps one call at 1 GiB on 32-bit builds (OverflowError otherwise).
        blocksize = min(blocksize, sys.maxsize // 2 + 1)
        fut = self.create_future()
        _OsSendfile(self, fut, sock, fileno, offset, count, blocksize).step()
        return await fut

    async def _sock_sendfile_copy(self, sock, file, offset, count):
        """sock_sendfile without os.sendfile: read in the executor, sock_sendall."""
        if hasattr(file, "seek") if _SEEK_ALWAYS else offset:
            file.seek(offset)
        chunk = constants.SENDFILE_FALLBACK_READBUFFER_SIZE
        blocksize = min(count, chunk) if count else chunk
        buf = bytearray(blocksize)
        total_sent = 0
        try:
            while True:
                if count:
                    blocksize = min(count - total_sent, blocksize)
                    if blocksize <= 0:
                        break
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    break  # EOF
                await self.sock_sendall(sock, view[:read])
                total_sent += read
            return total_sent
        finally:
            if total_sent > 0 and hasattr(file, "seek"):
                file.seek(offset + total_sent)

    # ----- Names -----

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        """socket.getaddrinfo without blocking the loop: inline when ``host`` is an IP
        address (or None) and ``port`` is numeric, else in the default executor."""
        if _is_numeric_host(host) and _is_numeric_port(port):
            try:
                if self.get_debug():
                    return self._getaddrinfo_logged(
                        host, port, family, type, proto, flags, _AI_NUMERIC
                    )
                return socket.getaddrinfo(host, port, family, type, proto, flags | _AI_NUMERIC)
            except socket.gaierror:
                pass  # e.g. an unknown zone index: the resolver gives the real answer
        if self.get_debug():
            return await self.run_in_executor(
                None, self._getaddrinfo_logged, host, port, family, type, proto, flags, 0
            )
        return await self.run_in_executor(
            None, socket.getaddrinfo, host, port, family, type, proto, flags
        )

    def _getaddrinfo_logged(self, host, port, family, type, proto, flags, extra_flags):
        """Debug mode: getaddrinfo with asyncio's log lines (``_getaddrinfo_debug``)."""
        parts = [f"{host}:{port!r}"]
        if family:
            parts.append(f"family={family!r}")
        if type:
            parts.append(f"type={type!r}")
        if proto:
            parts.append(f"proto={proto!r}")
        if flags:
            parts.append(f"flags={flags!r}")
        what = ", ".join(parts)
        logger.debug("Get address info %s", what)
        t0 = self.time()
        addrinfo = socket.getaddrinfo(host, port, family, type, proto, flags | extra_flags)
        dt = self.time() - t0
        msg = f"Getting address info {what} took {dt * 1e3:.3f}ms: {addrinfo!r}"
        if dt >= self.slow_callback_duration:
            logger.info(msg)
        else:
            logger.debug(msg)
        return addrinfo

    async def getnameinfo(self, sockaddr, flags=0):
        """socket.getnameinfo without blocking the loop: inline when both host and
        service are asked for numerically, else in the default executor."""
        if flags & _NI_NUMERIC == _NI_NUMERIC:
            return socket.getnameinfo(sockaddr, flags)
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)
