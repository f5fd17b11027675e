"""Shared helpers for the networking behaviour tests (transports, servers, streams).

Everything here uses only the public loop API, so the same helper drives rsloop's native
backends, its fallback and stdlib asyncio (the reference). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import select
import socket
import struct

import pytest
from conftest import is_rsloop_native

TIMEOUT = 10.0
HOST = "127.0.0.1"


def run(loop, coro, timeout: float = TIMEOUT):
    """Run ``coro`` on ``loop`` to completion, failing after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes (so a reordering or a dropped chunk shows)."""
    return random.Random(seed).randbytes(size)


def _has_ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = _has_ipv6()
needs_ipv6 = pytest.mark.skipif(not HAS_IPV6, reason="no IPv6 loopback (::1) here")
needs_unix = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no AF_UNIX")
needs_reuse_port = pytest.mark.skipif(
    not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT on this platform"
)


def xfail_native(request, loop, reason: str, backends=("uring", "poll")) -> None:
    """Mark the running test strict-xfail on some of rsloop's native backends: a known
    difference from asyncio, kept visible until it is fixed."""
    if is_rsloop_native(loop) and loop.backend in backends:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def unix_path(tmp_path, name: str = "s.sock") -> str:
    path = str(tmp_path / name)
    assert len(path.encode()) < 100, f"AF_UNIX path too long for the test: {path}"
    return path


@contextlib.contextmanager
def refused_address(family=socket.AF_INET, host=HOST):
    """An address whose TCP connects are refused: bound but not listening, so the port
    stays ours (no other process can start listening on it) for the whole block."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        yield s.getsockname()[:2]


@contextlib.contextmanager
def listening_socket(family=socket.AF_INET, host=HOST, backlog: int = 100):
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        s.listen(backlog)
        yield s


def linger_reset(sock) -> None:
    """Make close() send an RST instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def wait_readable(fd, timeout: float = TIMEOUT) -> None:
    """Block (outside the loop) until ``fd`` is readable: data or EOF is queued."""
    r, _, _ = select.select([fd], [], [], timeout)
    assert r, "fd did not become readable in time"


async def settle(rounds: int = 5) -> None:
    """Let the loop run several iterations, polling I/O each time. Only used to show that
    something does NOT happen (a paused transport reads nothing) after its trigger is
    already queued in the kernel; never to wait for something to happen."""
    for _ in range(rounds):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    for _ in range(rounds):
        await asyncio.sleep(0)


async def readable(loop, sock) -> None:
    fut = loop.create_future()
    fd = sock.fileno()

    def ready():
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


async def recv_exactly(loop, sock, n: int) -> bytes:
    """Read ``n`` bytes (fewer at EOF) from a plain non-blocking socket via add_reader."""
    sock.setblocking(False)
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except (BlockingIOError, InterruptedError):
            await readable(loop, sock)
            continue
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


async def recv_all(loop, sock) -> bytes:
    """Read a plain non-blocking socket up to EOF."""
    return await recv_exactly(loop, sock, 1 << 62)


class Signal:
    """Wake coroutines waiting for a condition on a protocol's recorded state."""

    def __init__(self) -> None:
        self._waiters: list = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def until(self, predicate) -> None:
        loop = asyncio.get_running_loop()
        while not predicate():
            fut = loop.create_future()
            self._waiters.append(fut)
            await fut


class Recorder(asyncio.Protocol):
    """Records every callback in order: ``made``, ``("data", bytes)``, ``eof``,
    ``("lost", exc)``, ``pause``, ``resume``."""

    def __init__(self, eof_result=None) -> None:
        self.events: list = []
        self.data = bytearray()
        self.transport = None
        self.eof_result = eof_result
        self.changed = Signal()
        self.pause_sizes: list[int] = []
        self.resume_sizes: list[int] = []

    def _note(self, event) -> None:
        self.events.append(event)
        self.changed.notify()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._note("made")

    def data_received(self, data) -> None:
        assert isinstance(data, bytes) and data, repr(data)
        self.data += data
        self._note(("data", data))

    def eof_received(self):
        self._note("eof")
        return self.eof_result

    def connection_lost(self, exc) -> None:
        self._note(("lost", exc))

    def pause_writing(self) -> None:
        self.pause_sizes.append(self.transport.get_write_buffer_size())
        self._note("pause")

    def resume_writing(self) -> None:
        self.resume_sizes.append(self.transport.get_write_buffer_size())
        self._note("resume")

    # ----- queries -----

    @property
    def lost_events(self) -> list:
        return [e for e in self.events if isinstance(e, tuple) and e[0] == "lost"]

    def names(self, flow: bool = False) -> list[str]:
        """The event sequence with consecutive data chunks folded into one ``data``;
        ``pause``/``resume`` (write flow control) only if ``flow``."""
        out: list[str] = []
        for e in self.events:
            name = e[0] if isinstance(e, tuple) else e
            if not flow and name in ("pause", "resume"):
                continue
            if name == "data" and out and out[-1] == "data":
                continue
            out.append(name)
        return out

    async def wait_made(self) -> None:
        await self.changed.until(lambda: "made" in self.events)

    async def wait_bytes(self, n: int) -> None:
        await self.changed.until(lambda: len(self.data) >= n or self.lost_events)
        assert len(self.data) >= n, (len(self.data), n, self.names())

    async def wait_eof(self) -> None:
        await self.changed.until(lambda: "eof" in self.events or self.lost_events)

    async def wait_lost(self):
        await self.changed.until(lambda: self.lost_events)
        return self.lost_events[0][1]

    async def wait_event(self, name: str, count: int = 1) -> None:
        await self.changed.until(lambda: self.names_count(name) >= count)

    def names_count(self, name: str) -> int:
        return sum(1 for e in self.events if (e[0] if isinstance(e, tuple) else e) == name)


class EchoServer(Recorder):
    """Writes back everything it receives; closes after EOF (once the echo is flushed)."""

    def data_received(self, data) -> None:
        super().data_received(data)
        self.transport.write(data)


class DatagramRecorder(asyncio.DatagramProtocol):
    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.transport = None
        self.datagrams: list = []
        self.errors: list = []
        self.events: list = []
        self.changed = Signal()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")
        self.changed.notify()

    def datagram_received(self, data, addr) -> None:
        self.datagrams.append((data, addr))
        self.events.append("datagram")
        if self.echo:
            self.transport.sendto(data, addr)
        self.changed.notify()

    def error_received(self, exc) -> None:
        self.errors.append(exc)
        self.events.append("error")
        self.changed.notify()

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))
        self.changed.notify()

    async def wait_datagrams(self, n: int) -> None:
        await self.changed.until(lambda: len(self.datagrams) >= n)

    async def wait_error(self) -> None:
        await self.changed.until(lambda: self.errors)

    async def wait_lost(self):
        await self.changed.until(lambda: any(isinstance(e, tuple) for e in self.events))
        return next(e[1] for e in self.events if isinstance(e, tuple))


def collecting(factory=EchoServer):
    """A protocol factory that keeps every protocol it makes: (factory, list)."""
    protos: list = []

    def make():
        p = factory()
        protos.append(p)
        return p

    return make, protos


async def tcp_echo_server(loop, host=HOST, **kwargs):
    """An EchoServer on ``host`` port 0; returns (server, address, protocols list)."""
    make, protos = collecting()
    server = await loop.create_server(make, host, 0, **kwargs)
    return server, server.sockets[0].getsockname(), protos


async def close_server(server) -> None:
    server.close()
    await server.wait_closed()
