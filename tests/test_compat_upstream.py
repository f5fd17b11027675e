"""Differences from stdlib asyncio that other projects' test suites found (issue 26),
each checked on every backend with stdlib asyncio as the control:

- ``call_at(int)`` keeps the int in ``TimerHandle.when()`` / ``_when`` (aiohttp);
- a ``time`` patched on the loop or overridden in a subclass drives timer expiry (aiohttp);
- ``loop._closed`` (uvloop's tests);
- a ``socket.socket`` subclass's own ``recv``/``recv_into``/``send``/``sendmsg`` are
  called by the transports (websockets);
- the connection path leaves no reference cycles behind a failed attempt (AnyIO);
- a closed loop leaves no thread of its own running (AnyIO).
"""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import sys
import threading
import time
from unittest import mock

import pytest
from conftest import make_loop
from netutil import HOST, TIMEOUT, refused_address, run, tcp_echo_server


def run_once(loop) -> None:
    loop.stop()
    loop.run_forever()


def noop() -> None:
    pass


# ----- call_at(int) -----


def test_call_at_int_keeps_the_int(loop):
    # aiohttp's TimeoutHandle rounds its deadline up to a whole second and reads it back.
    when = math.ceil(loop.time() + 0.1)
    h = loop.call_at(when, noop)
    assert type(h.when()) is int and h.when() == when
    assert type(h._when) is int and h._when == when
    assert hash(h) == hash(when) == hash(float(when))
    assert f"when={when} " in repr(h)
    h.cancel()


def test_call_at_int_orders_and_compares_like_its_float(loop):
    when = math.ceil(loop.time()) + 100
    a = loop.call_at(when, noop)
    b = loop.call_at(float(when), noop)
    c = loop.call_at(when + 0.5, noop)
    assert a == b and not (a != b)
    assert a <= b and a >= b and not a < b
    assert a < c and c > a
    assert sorted([c, a]) == [a, c]
    for h in (a, b, c):
        h.cancel()


def test_call_later_and_float_call_at_stay_float(loop):
    now = loop.time()
    assert type(loop.call_later(5, noop).when()) is float
    assert type(loop.call_later(5.0, noop).when()) is float
    assert type(loop.call_at(now + 5, noop).when()) is float
    assert type(loop.call_at(float(math.ceil(now)), noop).when()) is float


def test_int_deadline_fires_and_recycled_timer_forgets_it(loop):
    fired = []
    loop.call_at(math.floor(loop.time()), fired.append, "int")
    run_once(loop)
    assert fired == ["int"]
    gc.collect()
    # The next timer may be the same object off rsloop's freelist: its deadline is a
    # float again.
    for _ in range(4):
        h = loop.call_at(loop.time() + 60.25, noop)
        assert type(h.when()) is float
        h.cancel()
        run_once(loop)
        del h


# ----- a Python time() drives the timers -----


def test_time_patched_on_the_instance_drives_timers(loop):
    # aiohttp's test_keepalive_expires_on_time: freeze time, schedule, jump the clock.
    fired = []

    async def main():
        now = loop.time()
        with mock.patch.object(loop, "time") as fake:
            fake.return_value = now
            h = loop.call_at(now + 3600, fired.append, "at")
            later = loop.call_later(7200, fired.append, "later")
            assert later.when() == now + 7200
            await asyncio.sleep(0)
            assert fired == []
            fake.return_value = now + 3600
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert fired == ["at"]
            fake.return_value = now + 7200
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert fired == ["at", "later"]
            assert h.cancelled() is False
        # Unpatched: the real clock again.
        assert "time" not in vars(loop)
        late = loop.call_later(3600, fired.append, "real")
        await asyncio.sleep(0.01)
        assert fired == ["at", "later"]
        late.cancel()

    # Not under wait_for(): its own deadline would follow the jumps of the patched clock.
    loop.run_until_complete(main())


def test_frozen_python_time_holds_timers_back(loop):
    fired = []
    now = loop.time()
    with mock.patch.object(loop, "time", return_value=now):
        h = loop.call_later(0.01, fired.append, 1)
        assert h.when() == now + 0.01
        # 50 ms of real time go by, the loop's time does not move: the timer waits.
        stopper = threading.Timer(0.05, loop.call_soon_threadsafe, (loop.stop,))
        stopper.start()
        loop.run_forever()
        stopper.join()
        assert fired == []
        loop.time.return_value = now + 0.01
        run_once(loop)
        assert fired == [1]


def test_time_set_before_the_loop_runs(loop):
    fired = []
    real = loop.time()
    loop.time = lambda: real + 1000.0
    try:
        loop.call_at(real + 500, fired.append, "due")
        loop.call_at(real + 2000, fired.append, "not yet")
        run_once(loop)
        assert fired == ["due"]
    finally:
        del loop.time
    assert loop.time() < real + 1000


def test_python_time_errors_leave_run_forever(loop):
    loop.call_later(3600, noop)
    with mock.patch.object(loop, "time", side_effect=ZeroDivisionError):
        with pytest.raises(ZeroDivisionError):
            run_once(loop)
    assert not loop.is_running()
    run_once(loop)  # the real clock again: runs fine


def _subclass_loop(loop_kind: str, offset: float):
    if loop_kind in ("uring", "poll"):
        from rsloop._loop import Loop as base
    elif loop_kind == "fallback":
        from rsloop._fallback import FallbackLoop as base
    else:
        base = asyncio.SelectorEventLoop

    class Shifted(base):  # type: ignore[valid-type,misc]
        def time(self):
            return super().time() + offset

    if loop_kind in ("uring", "poll"):
        return Shifted(backend=loop_kind)
    if loop_kind == "fallback":
        return Shifted("test")
    return Shifted()


def test_time_overridden_in_a_subclass_drives_timers(loop_kind):
    lp = _subclass_loop(loop_kind, 3600.0)
    try:
        fired = []
        real = time.monotonic()
        lp.call_at(real + 1800, fired.append, "due by the subclass clock")
        lp.call_at(real + 7200, fired.append, "not yet")
        h = lp.call_later(0, fired.append, "later")
        assert h.when() >= real + 3600
        run_once(lp)
        assert sorted(fired) == ["due by the subclass clock", "later"]
    finally:
        for t in getattr(lp, "_scheduled", ()):
            t.cancel()
        lp.close()


# ----- loop._closed -----


def test_closed_attribute(loop_kind):
    lp = make_loop(loop_kind)
    assert lp._closed is False
    lp.close()
    assert lp._closed is True


# ----- socket subclasses keep their own I/O methods -----


class TrackedSocket(socket.socket):
    """websockets' test_explicit_socket: records calls to its own I/O methods."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def recv(self, *args, **kwargs):
        self.calls.append("recv")
        return super().recv(*args, **kwargs)

    def recv_into(self, *args, **kwargs):
        self.calls.append("recv_into")
        return super().recv_into(*args, **kwargs)

    def send(self, *args, **kwargs):
        self.calls.append("send")
        return super().send(*args, **kwargs)

    def sendmsg(self, *args, **kwargs):
        self.calls.append("sendmsg")
        return super().sendmsg(*args, **kwargs)


class _Echoed(asyncio.Protocol):
    def __init__(self, want: int):
        self.want = want
        self.data = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.data += data
        if len(self.data) >= self.want and not self.done.done():
            self.done.set_result(bytes(self.data))

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_exception(ConnectionError("lost"))


class _BufferedEchoed(asyncio.BufferedProtocol):
    def __init__(self, want: int):
        self.want = want
        self.buf = bytearray(65536)
        self.data = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]
        if len(self.data) >= self.want and not self.done.done():
            self.done.set_result(bytes(self.data))

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_exception(ConnectionError("lost"))


@pytest.mark.parametrize("protocol", [_Echoed, _BufferedEchoed])
def test_socket_subclass_methods_are_called(loop, protocol):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        sock = TrackedSocket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect(addr)
            sock.setblocking(False)
            chunk = bytes(range(256)) * 4096  # 1 MiB
            transport, proto = await loop.create_connection(
                lambda: protocol(2 + 8 * len(chunk)), sock=sock
            )
            transport.write(b"ab")
            for _ in range(8):
                transport.write(chunk)
            # More than the kernel takes at once: the rest waits in the transport.
            assert transport.get_write_buffer_size() > 0
            got = await asyncio.wait_for(proto.done, TIMEOUT)
            assert got == b"ab" + chunk * 8
            transport.close()
            await asyncio.sleep(0)
        finally:
            server.close()
            await server.wait_closed()
        return sock.calls

    calls = run(loop, main())
    read = "recv_into" if protocol is _BufferedEchoed else "recv"
    assert read in calls
    assert "send" in calls
    if sys.version_info >= (3, 12) and hasattr(socket.socket, "sendmsg"):
        # asyncio 3.12+ writes a queued buffer with sendmsg() once the socket is writable.
        assert "sendmsg" in calls


class NamedSocket(socket.socket):
    """A subclass that leaves the I/O methods alone."""

    def describe(self) -> str:
        return "named"


@pytest.mark.parametrize("cls", [socket.socket, NamedSocket])
def test_plain_socket_keeps_the_native_transport(loop, loop_kind, cls):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        sock = cls(socket.AF_INET, socket.SOCK_STREAM)
        sock.connect(addr)
        sock.setblocking(False)
        transport, proto = await loop.create_connection(lambda: _Echoed(2), sock=sock)
        transport.write(b"ok")
        assert await asyncio.wait_for(proto.done, TIMEOUT) == b"ok"
        kind = type(transport).__name__
        transport.close()
        await asyncio.sleep(0)
        server.close()
        await server.wait_closed()
        return kind

    kind = run(loop, main())
    if loop_kind in ("uring", "poll"):
        assert kind == "SocketTransport"


class TrackedDatagramSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def recvfrom(self, *args, **kwargs):
        self.calls.append("recvfrom")
        return super().recvfrom(*args, **kwargs)

    def sendto(self, *args, **kwargs):
        self.calls.append("sendto")
        return super().sendto(*args, **kwargs)


def test_datagram_socket_subclass_methods_are_called(loop):
    async def main():
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind((HOST, 0))
        peer.setblocking(False)
        sock = TrackedDatagramSocket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((HOST, 0))
        sock.setblocking(False)
        got = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                if not got.done():
                    got.set_result(data)

        transport, _ = await loop.create_datagram_endpoint(P, sock=sock)
        try:
            transport.sendto(b"out", peer.getsockname())
            # The peer waits with add_reader (sock_recvfrom / sock_sendto are 3.11+).
            readable = loop.create_future()
            loop.add_reader(peer.fileno(), lambda: readable.done() or readable.set_result(None))
            try:
                await asyncio.wait_for(readable, TIMEOUT)
            finally:
                loop.remove_reader(peer.fileno())
            data, addr = peer.recvfrom(100)
            assert data == b"out"
            peer.sendto(b"in", addr)
            assert await asyncio.wait_for(got, TIMEOUT) == b"in"
        finally:
            transport.close()
            peer.close()
            await asyncio.sleep(0)
        return sock.calls

    calls = run(loop, main())
    assert "sendto" in calls and "recvfrom" in calls


# ----- no reference cycles behind a failed connection attempt -----


def test_refused_connection_error_has_no_referrers(loop):
    # AnyIO's TestTCPStream::test_happy_eyeballs_refcycles: the attempt runs in a task of
    # its own and the caller keeps its error; nothing else may hold it (before the fix,
    # rsloop's sock_connect future did, through the frame in the error's traceback).
    box: list = []

    async def attempt(addr):
        try:
            await loop.create_connection(asyncio.Protocol, *addr)
        except OSError as e:
            box.append(e)

    async def main():
        with refused_address() as addr:
            await loop.create_task(attempt(addr))

    run(loop, main())
    assert len(box) == 1 and isinstance(box[0], ConnectionRefusedError)
    # Asked here, not inside main(): from 3.14 the collector sees a suspended coroutine's
    # value stack, where the argument of get_referrers() would be.
    assert [r for r in gc.get_referrers(box[0]) if r is not box] == []


def _happy_eyeballs_garbage(lp) -> int:
    """Cyclic garbage left by one happy-eyeballs connection whose first address refuses
    and whose second accepts."""

    async def main():
        server, addr, _ = await tcp_echo_server(lp)
        with refused_address() as dead:
            infos = [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", dead),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", addr),
            ]

            async def getaddrinfo(*args, **kwargs):
                return infos

            async def connect():
                transport, _ = await lp.create_connection(
                    asyncio.Protocol, "example.invalid", 1, happy_eyeballs_delay=0.2
                )
                assert transport.get_extra_info("peername") == addr
                transport.close()
                await asyncio.sleep(0.01)

            with mock.patch.object(lp, "getaddrinfo", getaddrinfo):
                for _ in range(3):  # warm up: first-use caches are not garbage
                    await connect()
                gc.collect()
                gc.disable()
                try:
                    await connect()
                    garbage = gc.collect()
                finally:
                    gc.enable()
        server.close()
        await server.wait_closed()
        return garbage

    return run(lp, main())


def test_happy_eyeballs_adds_no_cyclic_garbage(loop):
    # create_connection and its staggered race are the running Python's own asyncio code;
    # up to 3.12.7 and 3.13.0 that code itself leaves cycles (the failed attempt's
    # exception list, staggered_race's frames), on asyncio's loops too. The loop may add
    # none of its own: no more garbage than a stdlib loop leaves (none where the stdlib
    # code is fixed).
    control = asyncio.SelectorEventLoop()
    try:
        expected = _happy_eyeballs_garbage(control)
    finally:
        control.close()
    assert _happy_eyeballs_garbage(loop) <= expected


# ----- no thread of the loop's outlives it -----


def test_closed_loop_leaves_no_thread(loop_kind):
    # AnyIO's TestBlockingPortalProvider::test_single_thread: a loop run and closed in a
    # thread of its own, three times over, leaves the thread count as it found it.
    before = {t.ident for t in threading.enumerate()}

    def portal():
        lp = make_loop(loop_kind)
        try:

            async def work():
                await asyncio.sleep(0)
                server, addr, _ = await tcp_echo_server(lp)
                reader, writer = await asyncio.open_connection(*addr)
                writer.close()
                await writer.wait_closed()
                server.close()
                await server.wait_closed()
                await lp.getaddrinfo("localhost", 80)
                await lp.run_in_executor(None, time.sleep, 0)

            lp.run_until_complete(work())
            lp.run_until_complete(lp.shutdown_asyncgens())
            lp.run_until_complete(lp.shutdown_default_executor())
        finally:
            lp.close()

    for _ in range(3):
        t = threading.Thread(target=portal)
        t.start()
        t.join(TIMEOUT)
        assert not t.is_alive()
    left = [t for t in threading.enumerate() if t.ident not in before]
    assert left == []
