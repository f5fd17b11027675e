"""The ``sock_*`` coroutines and getaddrinfo/getnameinfo, as asyncio's SelectorEventLoop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import gc
import io
import os
import random
import socket
import ssl
import weakref

import pytest
from conftest import is_rsloop_native

MIB = 1 << 20
HAS_UNIX = hasattr(socket, "AF_UNIX")


def run(loop, coro, timeout: float = 5.0):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def nonblocking(*socks: socket.socket) -> None:
    for s in socks:
        s.setblocking(False)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    nonblocking(a, b)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def listener():
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    lsock.setblocking(False)
    yield lsock
    lsock.close()


@pytest.fixture
def tcp_pair(listener):
    """Two connected non-blocking TCP sockets on 127.0.0.1 (set up without a loop)."""
    client = socket.create_connection(listener.getsockname(), timeout=5)
    listener.setblocking(True)
    server, _ = listener.accept()
    listener.setblocking(False)
    nonblocking(client, server)
    yield client, server
    client.close()
    server.close()


async def recv_exactly(loop, sock, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = await loop.sock_recv(sock, min(65536, size - len(got)))
        if not chunk:
            break
        got += chunk
    return bytes(got)


async def parked(task) -> None:
    """Let ``task`` run until it waits on its fd watcher."""
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()


def fill_send_buffer(sock) -> int:
    """Write to ``sock`` until the kernel refuses more; return the byte count."""
    total = 0
    chunk = b"\0" * 65536
    while True:
        try:
            total += sock.send(chunk)
        except BlockingIOError:
            return total


# ----- TCP -----


def test_tcp_accept_connect_small_exchange(loop, listener):
    async def main():
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            (conn, peer), none = await asyncio.gather(
                loop.sock_accept(listener), loop.sock_connect(client, listener.getsockname())
            )
            with conn:
                assert none is None
                assert peer == client.getsockname()
                assert conn.gettimeout() == 0
                assert await loop.sock_sendall(client, b"ping") is None
                assert await recv_exactly(loop, conn, 4) == b"ping"
                await loop.sock_sendall(conn, bytearray(b"pong"))
                buf = bytearray(10)
                assert await loop.sock_recv_into(client, buf) == 4
                assert buf[:4] == b"pong"
                conn.shutdown(socket.SHUT_WR)
                assert await loop.sock_recv(client, 10) == b""
        finally:
            client.close()

    run(loop, main())


def test_tcp_one_mib_each_way_byte_for_byte(loop, tcp_pair):
    client, server = tcp_pair
    up, down = payload(MIB, 1), payload(MIB, 2)

    async def recv_into_all(sock, size):
        buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        while pos < size:
            n = await loop.sock_recv_into(sock, view[pos:])
            assert n > 0
            pos += n
        return bytes(buf)

    async def main():
        results = await asyncio.gather(
            loop.sock_sendall(client, up),
            loop.sock_sendall(server, memoryview(down)),
            recv_exactly(loop, server, MIB),
            recv_into_all(client, MIB),
        )
        assert results[:2] == [None, None]
        assert results[2] == up
        assert results[3] == down

    run(loop, main(), timeout=20)


def test_sock_recv_waits_for_data(loop, tcp_pair):
    client, server = tcp_pair

    async def main():
        task = loop.create_task(loop.sock_recv(server, 100))
        await parked(task)
        await loop.sock_sendall(client, b"late")
        assert await task == b"late"
        # the watcher went with the future
        await asyncio.sleep(0)
        assert loop.remove_reader(server.fileno()) is False

    run(loop, main())


def test_many_sockets_concurrently(loop):
    pairs = [socket.socketpair() for _ in range(16)]
    for a, b in pairs:
        nonblocking(a, b)

    async def echo_once(a, b, i):
        data = payload(4096 + i, i)
        recv = loop.create_task(recv_exactly(loop, b, len(data)))
        await asyncio.sleep(0)
        await loop.sock_sendall(a, data)
        return await recv == data

    async def main():
        results = await asyncio.gather(*(echo_once(a, b, i) for i, (a, b) in enumerate(pairs)))
        assert all(results)

    try:
        run(loop, main())
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_connect_refused_keeps_errno(loop):
    # Bound but not listening: the kernel answers with RST, deterministically.
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setblocking(False)
    try:
        with pytest.raises(ConnectionRefusedError) as info:
            run(loop, loop.sock_connect(client, closed.getsockname()))
        assert info.value.errno == errno.ECONNREFUSED
        assert loop.remove_writer(client.fileno()) is False
    finally:
        client.close()
        closed.close()


def test_connect_resolves_host_name(loop, listener):
    port = listener.getsockname()[1]

    async def main():
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            (conn, _), _ = await asyncio.gather(
                loop.sock_accept(listener), loop.sock_connect(client, ("localhost", port))
            )
            conn.close()
            assert client.getpeername() == ("127.0.0.1", port)
        finally:
            client.close()

    run(loop, main())


def test_connect_to_unresolvable_host_raises_gaierror(loop):
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setblocking(False)
    try:
        with pytest.raises(socket.gaierror):
            run(loop, loop.sock_connect(client, ("nonexistent.invalid", 80)), timeout=15)
    finally:
        client.close()


def test_ipv6_loopback(loop):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 support")
    lsock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        lsock.bind(("::1", 0))
    except OSError as exc:
        lsock.close()
        pytest.skip(f"no IPv6 loopback: {exc}")
    lsock.listen(1)
    lsock.setblocking(False)
    client = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    client.setblocking(False)
    data = payload(200_000, 6)

    async def main():
        (conn, peer), _ = await asyncio.gather(
            loop.sock_accept(lsock), loop.sock_connect(client, ("::1", lsock.getsockname()[1]))
        )
        with conn:
            assert peer[:2] == client.getsockname()[:2]
            _, got = await asyncio.gather(
                loop.sock_sendall(client, data), recv_exactly(loop, conn, len(data))
            )
            assert got == data

    try:
        run(loop, main())
    finally:
        client.close()
        lsock.close()


# ----- UDP -----


@pytest.fixture
def udp_pair(loop):
    if not hasattr(loop, "sock_recvfrom"):
        pytest.skip("this Python's asyncio has no sock_recvfrom/sock_sendto (3.11+)")
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    nonblocking(a, b)
    yield a, b
    a.close()
    b.close()


def test_udp_sendto_recvfrom(loop, udp_pair):
    a, b = udp_pair

    async def main():
        task = loop.create_task(loop.sock_recvfrom(b, 2048))
        await parked(task)
        assert await loop.sock_sendto(a, b"datagram", b.getsockname()) == 8
        assert await task == (b"datagram", a.getsockname())
        big = payload(60_000, 3)
        assert await loop.sock_sendto(a, big, b.getsockname()) == len(big)
        assert await loop.sock_recvfrom(b, 65536) == (big, a.getsockname())

    run(loop, main())


def test_udp_recvfrom_into(loop, udp_pair):
    a, b = udp_pair

    async def main():
        buf = bytearray(16)
        task = loop.create_task(loop.sock_recvfrom_into(b, buf))
        await parked(task)
        await loop.sock_sendto(a, b"hello", b.getsockname())
        assert await task == (5, a.getsockname())
        assert buf[:5] == b"hello"
        # nbytes limits the read; the rest of the datagram is discarded
        await loop.sock_sendto(a, b"0123456789", b.getsockname())
        buf = bytearray(16)
        assert await loop.sock_recvfrom_into(b, buf, 4) == (4, a.getsockname())
        assert buf[:5] == b"0123\0"

    run(loop, main())


# ----- Unix sockets -----


def test_unix_socketpair_stream(loop, pair):
    a, b = pair
    data = payload(MIB, 4)

    async def main():
        _, got = await asyncio.gather(loop.sock_sendall(a, data), recv_exactly(loop, b, MIB))
        assert got == data

    run(loop, main(), timeout=20)


@pytest.mark.skipif(not HAS_UNIX, reason="no AF_UNIX")
def test_unix_listening_socket(loop, tmp_path):
    path = str(tmp_path / "s")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(1)
    lsock.setblocking(False)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setblocking(False)

    async def main():
        accept = loop.create_task(loop.sock_accept(lsock))
        await parked(accept)
        await loop.sock_connect(client, path)
        conn, _ = await accept
        with conn:
            assert conn.gettimeout() == 0
            await loop.sock_sendall(conn, b"over unix")
            assert await recv_exactly(loop, client, 9) == b"over unix"

    try:
        run(loop, main())
    finally:
        client.close()
        lsock.close()


# ----- Cancellation -----


def test_cancelled_recv_leaves_no_watcher_and_loses_no_data(loop, pair):
    a, b = pair

    async def main():
        task = loop.create_task(loop.sock_recv(a, 100))
        await parked(task)
        # The fd turns readable, and the next iteration runs the cancellation before the
        # reader callback: the cancelled receive must not take the data.
        b.send(b"keep me")
        loop.call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert loop.remove_reader(a.fileno()) is False
        assert await loop.sock_recv(a, 100) == b"keep me"

    run(loop, main())


def test_cancelled_recv_into_and_accept_leave_no_watcher(loop, pair, listener):
    a, _ = pair

    async def main():
        tasks = [
            loop.create_task(loop.sock_recv_into(a, bytearray(10))),
            loop.create_task(loop.sock_accept(listener)),
        ]
        for task in tasks:
            await parked(task)
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await asyncio.sleep(0)
        assert loop.remove_reader(a.fileno()) is False
        assert loop.remove_reader(listener.fileno()) is False

    run(loop, main())


def test_cancelled_sendall_leaves_no_watcher(loop, pair):
    a, b = pair

    async def main():
        fill_send_buffer(a)
        task = loop.create_task(loop.sock_sendall(a, b"x" * MIB))
        await parked(task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert loop.remove_writer(a.fileno()) is False

    run(loop, main())


def test_recv_after_peer_closed_mid_wait(loop, pair):
    a, b = pair

    async def main():
        task = loop.create_task(loop.sock_recv(a, 100))
        await parked(task)
        b.close()
        assert await task == b""

    run(loop, main())


def test_parked_sendall_fails_when_peer_goes(loop, pair):
    a, b = pair

    async def main():
        fill_send_buffer(a)
        task = loop.create_task(loop.sock_sendall(a, b"x" * MIB))
        await parked(task)
        b.close()
        with pytest.raises(OSError) as info:
            await task
        assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)
        await asyncio.sleep(0)
        assert loop.remove_writer(a.fileno()) is False

    run(loop, main())


def test_parked_recv_fails_on_reset(loop, tcp_pair):
    client, server = tcp_pair

    async def main():
        task = loop.create_task(loop.sock_recv(server, 100))
        await parked(task)
        # linger 0: close() sends RST instead of FIN
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        client.close()
        with pytest.raises(ConnectionResetError) as info:
            await task
        assert info.value.errno == errno.ECONNRESET

    run(loop, main())


# ----- Waiting, cancelling and failing: what the retry on readiness must keep -----


def test_recv_cancelled_by_timeouts_leaves_bytes_for_the_next_recv(loop, tcp_pair):
    client, server = tcp_pair

    async def main():
        for _ in range(3):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(loop.sock_recv(server, 100), 0.01)
        assert loop.remove_reader(server.fileno()) is False
        client.send(b"after the timeouts")
        assert await recv_exactly(loop, server, 18) == b"after the timeouts"

    run(loop, main())


def test_cancelled_recv_into_loses_no_data(loop, pair):
    a, b = pair

    async def main():
        buf = bytearray(b"untouched")
        task = loop.create_task(loop.sock_recv_into(a, buf))
        await parked(task)
        # As for sock_recv: readable and cancelled in the same iteration, the cancel wins.
        b.send(b"keep me!!")
        loop.call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert buf == b"untouched"
        assert loop.remove_reader(a.fileno()) is False
        assert await loop.sock_recv_into(a, buf) == 9
        assert buf == b"keep me!!"

    run(loop, main())


def test_recv_takes_at_most_n_bytes(loop, pair):
    a, b = pair

    async def main():
        b.send(b"0123456789")
        assert await loop.sock_recv(a, 0) == b""
        assert await loop.sock_recv(a, 3) == b"012"
        assert await loop.sock_recv_into(a, bytearray(0)) == 0
        view = memoryview(bytearray(10))
        assert await loop.sock_recv_into(a, view[2:6]) == 4
        assert view[2:6] == b"3456"
        assert await loop.sock_recv(a, 1 << 20) == b"789"

    run(loop, main())


def test_parked_recv_into_fills_a_slice(loop, pair):
    a, b = pair

    async def main():
        buf = bytearray(b"..........")
        task = loop.create_task(loop.sock_recv_into(a, memoryview(buf)[4:]))
        await parked(task)
        b.send(b"abcdefgh")
        assert await task == 6
        assert buf == b"....abcdef"
        assert await loop.sock_recv(a, 10) == b"gh"

    run(loop, main())


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_sendall_4mib_to_a_slow_reader(loop, tcp_pair, kind):
    client, server = tcp_pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
    data = payload(4 * MIB, 8)
    wrapped = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[kind]

    async def slow_reader():
        got = bytearray()
        while len(got) < len(data):
            chunk = await loop.sock_recv(server, 16384)
            assert chunk
            got += chunk
            if len(got) % 8 == 0:
                await asyncio.sleep(0.0005)
        return bytes(got)

    async def main():
        sent, got = await asyncio.gather(loop.sock_sendall(client, wrapped), slow_reader())
        assert sent is None
        assert got == data
        await asyncio.sleep(0)
        assert loop.remove_writer(client.fileno()) is False

    run(loop, main(), timeout=30)


def test_sendall_of_a_bytearray_sends_it_as_it_is_when_it_leaves(loop, pair):
    """asyncio sends from a memoryview of the caller's buffer: while the call waits, the
    buffer cannot be resized, and what is written into it is what leaves."""
    a, b = pair

    async def main():
        filled = fill_send_buffer(a)
        data = bytearray(MIB)
        task = loop.create_task(loop.sock_sendall(a, data))
        await parked(task)
        with pytest.raises(BufferError):
            data.extend(b"more")
        data[-4:] = b"tail"
        got = await recv_exactly(loop, b, filled + MIB)
        await task
        assert got[-4:] == b"tail"
        await asyncio.sleep(0)
        data.extend(b"more")  # the view is gone with the call

    run(loop, main(), timeout=20)


def test_cancelled_sendall_stops_sending(loop, pair):
    a, b = pair

    async def main():
        filled = fill_send_buffer(a)
        task = loop.create_task(loop.sock_sendall(a, b"y" * MIB))
        await parked(task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Drain what the kernel holds; nothing of the cancelled call may follow.
        got = await recv_exactly(loop, b, filled)
        assert got.count(b"y") == 0
        for _ in range(5):
            await asyncio.sleep(0.002)
        with pytest.raises(BlockingIOError):
            b.recv(1)

    run(loop, main(), timeout=20)


def test_sendall_fails_when_the_peer_resets(loop, tcp_pair):
    client, server = tcp_pair
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)

    async def main():
        task = loop.create_task(loop.sock_sendall(client, payload(8 * MIB, 9)))
        await parked(task)
        assert await loop.sock_recv(server, 1000)
        # linger 0: close() sends RST
        server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        server.close()
        with pytest.raises((ConnectionResetError, BrokenPipeError)) as info:
            await task
        assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)
        await asyncio.sleep(0)
        assert loop.remove_writer(client.fileno()) is False

    run(loop, main())


def test_recv_on_a_reset_connection_raises_at_once(loop, tcp_pair):
    client, server = tcp_pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
    client.close()

    async def main():
        with pytest.raises(ConnectionResetError) as info:
            while True:  # the RST may need a moment to arrive
                if not await asyncio.wait_for(loop.sock_recv(server, 10), 1):
                    break
        assert info.value.errno == errno.ECONNRESET

    run(loop, main())


def test_done_recv_leaves_a_watcher_that_replaced_it(loop, pair):
    """A reader added on the fd after the call parked replaced its watcher (the call now
    waits forever, as with asyncio); ending the call must not remove the new reader."""
    a, _ = pair
    fired = []

    async def main():
        task = loop.create_task(loop.sock_recv(a, 10))
        await parked(task)
        loop.add_reader(a.fileno(), fired.append, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert loop.remove_reader(a.fileno()) is True

    run(loop, main())
    assert fired == []


def test_socket_subclass_methods_are_used(loop, pair):
    a, b = pair

    class Counting(socket.socket):
        calls: list[str] = []

        def recv(self, n, *args):
            self.calls.append("recv")
            return super().recv(n, *args)

        def send(self, data, *args):
            self.calls.append("send")
            return super().send(data, *args)

    sub = Counting(a.family, a.type, fileno=os.dup(a.fileno()))
    sub.setblocking(False)

    async def main():
        b.send(b"x")
        assert await loop.sock_recv(sub, 10) == b"x"
        await loop.sock_sendall(sub, b"y")
        assert await loop.sock_recv(b, 10) == b"y"

    try:
        run(loop, main())
    finally:
        sub.close()
    assert Counting.calls == ["recv", "send"]


def test_abandoned_parked_calls_are_collected(loop, handler_log):
    def park_and_abandon():
        a, b = socket.socketpair()
        nonblocking(a, b)

        async def start():
            fill_send_buffer(a)
            tasks = [
                loop.create_task(loop.sock_recv(a, 10)),
                loop.create_task(loop.sock_recv_into(a, bytearray(10))),
                loop.create_task(loop.sock_sendall(a, bytearray(MIB))),
            ]
            for t in tasks:
                await parked(t)
            return [weakref.ref(t) for t in tasks]

        refs = [weakref.ref(a), *run(loop, start())]
        loop.close()
        a.close()
        b.close()
        return refs

    refs = park_and_abandon()
    gc.collect()
    # The tasks were destroyed pending, which asyncio reports (each report names its
    # task: let them go, and collect what they held).
    assert all("destroyed" in ctx["message"] for ctx in handler_log.take())
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


# ----- sock_sendfile -----


@pytest.fixture
def data_file(tmp_path):
    data = payload(MIB + 12345, 5)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        yield f, data


@pytest.mark.parametrize(
    ("offset", "count"), [(0, None), (1000, None), (1000, 50_000), (0, MIB + 12345)]
)
def test_sendfile_real_file(loop, tcp_pair, data_file, offset, count):
    client, server = tcp_pair
    f, data = data_file
    want = data[offset : offset + count] if count else data[offset:]

    async def main():
        sent, got = await asyncio.gather(
            loop.sock_sendfile(client, f, offset, count), recv_exactly(loop, server, len(want))
        )
        assert sent == len(want)
        assert got == want
        assert f.tell() == offset + len(want)

    run(loop, main(), timeout=20)


def test_sendfile_over_unix_socketpair(loop, pair, data_file):
    a, b = pair
    f, data = data_file

    async def main():
        sent, got = await asyncio.gather(
            loop.sock_sendfile(a, f, 7), recv_exactly(loop, b, len(data) - 7)
        )
        assert sent == len(data) - 7
        assert got == data[7:]

    run(loop, main(), timeout=20)


def test_cancelled_sendfile_leaves_no_watcher(loop, tcp_pair, data_file):
    client, _ = tcp_pair
    f, _ = data_file

    async def main():
        fill_send_buffer(client)
        task = loop.create_task(loop.sock_sendfile(client, f))
        await parked(task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert loop.remove_writer(client.fileno()) is False

    run(loop, main())


def test_sendfile_peer_reset_mid_transfer(loop, tcp_pair, data_file):
    client, server = tcp_pair
    f, _ = data_file

    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)

    async def main():
        task = loop.create_task(loop.sock_sendfile(client, f))
        await parked(task)
        assert await loop.sock_recv(server, 1000)
        server.close()  # unread data: the kernel resets the connection
        with pytest.raises(OSError) as info:
            await task
        assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)
        await asyncio.sleep(0)
        assert loop.remove_writer(client.fileno()) is False

    run(loop, main())


def test_sendfile_falls_back_for_non_regular_file(loop, tcp_pair):
    client, server = tcp_pair
    data = payload(300_000, 7)
    f = io.BytesIO(data)

    async def main():
        sent, got = await asyncio.gather(
            loop.sock_sendfile(client, f, 10, 200_000), recv_exactly(loop, server, 200_000)
        )
        assert sent == 200_000
        assert got == data[10:200_010]
        assert f.tell() == 200_010

    run(loop, main())


def test_sendfile_without_fallback_raises(loop, tcp_pair):
    client, _ = tcp_pair
    with pytest.raises(asyncio.SendfileNotAvailableError):
        run(loop, loop.sock_sendfile(client, io.BytesIO(b"abc"), fallback=False))


def test_sendfile_empty_file(loop, tcp_pair, tmp_path):
    client, _ = tcp_pair
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with open(path, "rb") as f:
        assert run(loop, loop.sock_sendfile(client, f)) == 0


def test_sendfile_argument_checks(loop, tcp_pair, data_file, tmp_path):
    client, _ = tcp_pair
    f, _ = data_file
    text = tmp_path / "t.txt"
    text.write_text("x")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)
    cases = [
        ((client, f, 0, 0), ValueError, "count must be a positive integer (got 0)"),
        ((client, f, 0, 1.5), TypeError, "count must be a positive integer (got 1.5)"),
        ((client, f, -1), ValueError, "offset must be a non-negative integer (got -1)"),
        ((client, f, "0"), TypeError, "offset must be a non-negative integer (got '0')"),
        ((udp, f), ValueError, "only SOCK_STREAM type sockets are supported"),
    ]
    try:
        with open(text) as tf:
            cases.append(((client, tf), ValueError, "file should be opened in binary mode"))
            for args, exc_type, message in cases:
                with pytest.raises(exc_type) as info:
                    run(loop, loop.sock_sendfile(*args))
                assert str(info.value) == message
    finally:
        udp.close()


# ----- Bad input -----


def _calls(sock, peer_address=("127.0.0.1", 9)):
    return {
        "sock_recv": lambda lp: lp.sock_recv(sock, 10),
        "sock_recv_into": lambda lp: lp.sock_recv_into(sock, bytearray(10)),
        "sock_recvfrom": lambda lp: lp.sock_recvfrom(sock, 10),
        "sock_recvfrom_into": lambda lp: lp.sock_recvfrom_into(sock, bytearray(10)),
        "sock_sendall": lambda lp: lp.sock_sendall(sock, b"x"),
        "sock_sendto": lambda lp: lp.sock_sendto(sock, b"x", peer_address),
        "sock_connect": lambda lp: lp.sock_connect(sock, peer_address),
        "sock_accept": lambda lp: lp.sock_accept(sock),
        "sock_sendfile": lambda lp: lp.sock_sendfile(sock, io.BytesIO(b"x")),
    }


METHODS = list(_calls(None))


def _outcome(lp, call):
    try:
        lp.run_until_complete(asyncio.wait_for(call(lp), 5))
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return exc
    return None


def _asyncio_outcome(call, debug):
    ref = asyncio.new_event_loop()
    ref.set_debug(debug)
    try:
        return _outcome(ref, call)
    finally:
        ref.run_until_complete(ref.shutdown_default_executor())
        ref.close()


def _skip_missing(loop, method):
    # sock_recvfrom, sock_recvfrom_into and sock_sendto are 3.11+ in asyncio
    if not hasattr(loop, method) or not hasattr(asyncio.BaseEventLoop, method):
        pytest.skip(f"this Python's asyncio has no {method}")


@pytest.mark.debug_mode(True)
@pytest.mark.parametrize("method", METHODS)
def test_blocking_socket_in_debug_mode(loop, method):
    _skip_missing(loop, method)
    sock = socket.socket()
    try:
        exc = _outcome(loop, _calls(sock)[method])
        assert isinstance(exc, ValueError)
        assert str(exc) == "the socket must be non-blocking"
    finally:
        sock.close()


@pytest.mark.parametrize("method", METHODS)
def test_ssl_socket_rejected(loop, method):
    _skip_missing(loop, method)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    sock = ctx.wrap_socket(socket.socket(), server_hostname="x", do_handshake_on_connect=False)
    sock.setblocking(False)
    try:
        exc = _outcome(loop, _calls(sock)[method])
        assert isinstance(exc, TypeError)
        assert str(exc) == "Socket cannot be of type SSLSocket"
    finally:
        sock.close()


@pytest.mark.parametrize("method", METHODS)
def test_closed_socket_as_asyncio(loop, method):
    _skip_missing(loop, method)

    def closed_socket():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.close()
        return s

    sock, ref_sock = closed_socket(), closed_socket()
    exc = _outcome(loop, _calls(sock)[method])
    ref = _asyncio_outcome(_calls(ref_sock)[method], loop.get_debug())
    assert type(exc) is type(ref)
    assert isinstance(exc, OSError)
    assert (exc.errno, str(exc)) == (ref.errno, str(ref))


@pytest.mark.parametrize("bad", [None, 42, "sock"], ids=repr)
@pytest.mark.parametrize("method", METHODS)
def test_non_socket_as_asyncio(loop, method, bad):
    _skip_missing(loop, method)
    exc = _outcome(loop, _calls(bad)[method])
    ref = _asyncio_outcome(_calls(bad)[method], loop.get_debug())
    assert ref is not None
    assert type(exc) is type(ref)


def test_fd_owned_by_a_live_transport(loop, pair):
    a, _ = pair
    if getattr(loop, "_transports", None) is None:
        pytest.skip("this loop keeps no fd -> transport table")

    class Owner:
        closing = False

        def is_closing(self):
            return self.closing

        def __repr__(self):
            return "<Owner>"

    owner = Owner()
    loop._transports[a.fileno()] = owner
    with pytest.raises(RuntimeError) as info:
        run(loop, loop.sock_recv(a, 10))
    assert str(info.value) == f"File descriptor {a.fileno()!r} is used by transport <Owner>"
    owner.closing = True
    assert loop.remove_reader(a.fileno()) is False
    task = loop.create_task(loop.sock_recv(a, 10))

    async def main():
        await parked(task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(loop, main())
    finally:
        del loop._transports[a.fileno()]


# ----- Names -----


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    def __init__(self):
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


NUMERIC_QUERIES = [
    ("127.0.0.1", 80, {}),
    ("127.0.0.1", "8080", {"type": socket.SOCK_STREAM}),
    ("127.0.0.1", None, {"family": socket.AF_INET, "type": socket.SOCK_DGRAM}),
    (b"10.1.2.3", 0, {"proto": socket.IPPROTO_TCP}),
    (None, 443, {"flags": socket.AI_PASSIVE, "type": socket.SOCK_STREAM}),
    (None, 443, {}),
    ("::1", 53, {}),
    ("::1", 53, {"family": socket.AF_INET6, "type": socket.SOCK_DGRAM}),
    ("2001:db8::5", 1, {"flags": socket.AI_CANONNAME}),
]


@pytest.mark.parametrize(("host", "port", "kw"), NUMERIC_QUERIES, ids=repr)
def test_getaddrinfo_numeric_equals_socket(loop, host, port, kw):
    executor = CountingExecutor()
    loop.set_default_executor(executor)
    want = socket.getaddrinfo(
        host, port, kw.get("family", 0), kw.get("type", 0), kw.get("proto", 0), kw.get("flags", 0)
    )
    assert run(loop, loop.getaddrinfo(host, port, **kw)) == want
    if is_rsloop_native(loop):
        assert executor.submitted == 0  # answered without a thread hop


def test_getaddrinfo_ipv6_scope_id(loop):
    names = dict((name, index) for index, name in socket.if_nameindex())
    if "lo" not in names:
        pytest.skip("no interface named 'lo'")
    want = socket.getaddrinfo("fe80::1%lo", 80, 0, socket.SOCK_STREAM)
    got = run(loop, loop.getaddrinfo("fe80::1%lo", 80, type=socket.SOCK_STREAM))
    assert got == want
    assert got[0][4][3] == names["lo"]


def test_getaddrinfo_host_name(loop):
    infos = run(
        loop, loop.getaddrinfo("localhost", 80, family=socket.AF_INET, type=socket.SOCK_STREAM)
    )
    assert ("127.0.0.1", 80) in [info[4] for info in infos]


def test_getaddrinfo_numeric_host_named_port(loop):
    want = socket.getaddrinfo("127.0.0.1", "http", 0, socket.SOCK_STREAM)
    assert run(loop, loop.getaddrinfo("127.0.0.1", "http", type=socket.SOCK_STREAM)) == want


@pytest.mark.parametrize("host", ["nonexistent.invalid", "fe80::1%nonexistent0"])
def test_getaddrinfo_unresolvable(loop, host):
    with pytest.raises(socket.gaierror):
        run(loop, loop.getaddrinfo(host, 80), timeout=15)


@pytest.mark.parametrize(
    "flags", [socket.NI_NUMERICHOST | socket.NI_NUMERICSERV, socket.NI_NUMERICHOST, 0]
)
def test_getnameinfo_equals_socket(loop, flags):
    sockaddr = ("127.0.0.1", 80)
    assert run(loop, loop.getnameinfo(sockaddr, flags)) == socket.getnameinfo(sockaddr, flags)


def test_getnameinfo_bad_address(loop):
    with pytest.raises(TypeError):
        run(loop, loop.getnameinfo("not a tuple", socket.NI_NUMERICHOST | socket.NI_NUMERICSERV))


def test_sock_connect_numeric_address_forms(loop, listener):
    """A bytes host and a str port are taken as numeric, as asyncio does."""
    port = listener.getsockname()[1]

    async def main():
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            (conn, _), _ = await asyncio.gather(
                loop.sock_accept(listener), loop.sock_connect(client, (b"127.0.0.1", str(port)))
            )
            conn.close()
            assert client.getpeername() == ("127.0.0.1", port)
        finally:
            client.close()

    run(loop, main())
