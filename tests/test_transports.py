"""Stream and datagram transports: bytes, callback order, errors and flow control.

Every test runs on rsloop's native backends, its fallback and stdlib asyncio (the
reference), so each assertion pins asyncio's observable behaviour: which protocol
callbacks run, in which order, with which bytes and exceptions.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import socket
import sys
from asyncio import selector_events, trsock

import pytest
from netutil import (
    HAS_IPV6,
    HOST,
    DatagramRecorder,
    Recorder,
    Signal,
    close_server,
    collecting,
    linger_reset,
    listening_socket,
    needs_ipv6,
    needs_reuse_port,
    needs_unix,
    payload,
    recv_all,
    recv_exactly,
    run,
    settle,
    tcp_echo_server,
    unix_path,
    wait_readable,
)

try:
    import resource  # Unix only
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

MIB = 1 << 20
SIZES = [1, 1000, MIB]


def shrink_sndbuf(transport, size: int = 65536) -> None:
    """Small fixed kernel send buffer, so a couple of MiB always leave data queued in the
    transport when the peer does not read (autotuning would otherwise absorb ~4 MiB)."""
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


async def wait_flushed(transport) -> None:
    """Until the transport's write buffer is empty (the peer may have read every byte
    before the loop has seen the last send complete)."""
    while transport.get_write_buffer_size():
        await asyncio.sleep(0)


class PausedRecorder(Recorder):
    """A server protocol that does not read until the test resumes it."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.pause_reading()


async def serve(loop, factory, host=HOST):
    """A server whose protocols are collected; returns (server, address, protocols)."""
    make, protos = collecting(factory)
    server = await loop.create_server(make, host, 0)
    return server, server.sockets[0].getsockname(), protos


async def wait_protocol(protos: list, index: int = 0):
    while len(protos) <= index:
        await asyncio.sleep(0)
    await protos[index].wait_made()
    return protos[index]


# ----- echo -----


async def echo_roundtrip(loop, connect, data: bytes, server_protos: list) -> None:
    client = Recorder()
    transport, proto = await connect(lambda: client)
    assert proto is client and client.transport is transport
    assert client.events == ["made"]
    transport.write(data)
    transport.write_eof()
    assert await client.wait_lost() is None
    assert bytes(client.data) == data
    assert client.names() == ["made", "data", "eof", "lost"]
    assert transport.is_closing()
    [server_proto] = server_protos
    assert await server_proto.wait_lost() is None
    assert bytes(server_proto.data) == data
    assert server_proto.names() == ["made", "data", "eof", "lost"]


@pytest.mark.parametrize("size", SIZES)
def test_tcp_echo(loop, size):
    data = payload(size)

    async def main():
        server, addr, protos = await tcp_echo_server(loop)
        await echo_roundtrip(loop, lambda f: loop.create_connection(f, *addr), data, protos)
        await close_server(server)

    run(loop, main())


@needs_unix
@pytest.mark.parametrize("size", SIZES)
def test_unix_echo(loop, tmp_path, size):
    data = payload(size)
    path = unix_path(tmp_path)

    async def main():
        make, protos = collecting()
        server = await loop.create_unix_server(make, path)
        await echo_roundtrip(loop, lambda f: loop.create_unix_connection(f, path), data, protos)
        await close_server(server)

    run(loop, main())


@needs_ipv6
def test_tcp_echo_ipv6(loop):
    data = payload(100_000)

    async def main():
        server, addr, protos = await tcp_echo_server(loop, host="::1")
        assert server.sockets[0].family == socket.AF_INET6
        assert len(addr) == 4 and addr[0] == "::1"

        async def connect(factory):
            tr, proto = await loop.create_connection(factory, "::1", addr[1])
            assert tr.get_extra_info("peername") == addr
            assert tr.get_extra_info("socket").family == socket.AF_INET6
            return tr, proto

        await echo_roundtrip(loop, connect, data, protos)
        await close_server(server)

    run(loop, main())


def test_tcp_nodelay_is_set_on_both_ends(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, _ = await loop.create_connection(Recorder, *addr)
        sp = await wait_protocol(protos)
        for t in (tr, sp.transport):
            sock = t.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        tr.close()
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


@pytest.mark.debug_mode(False)  # debug mode's per-handle stack capture makes it ~10x slower
def test_thousand_concurrent_clients(loop):
    clients = 1000
    need = 2 * clients + 256
    if resource is None:
        pytest.skip("needs Unix fd limits (resource)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))

    async def main():
        server, addr, protos = await tcp_echo_server(loop, backlog=128)
        conns = []
        # Connect in batches no larger than the backlog (a full accept queue drops SYNs,
        # and a retransmitted SYN costs a second), but keep every connection open.
        for start in range(0, clients, 100):
            batch = [loop.create_connection(Recorder, *addr) for _ in range(start, start + 100)]
            conns += await asyncio.gather(*batch)
        assert len(protos) <= clients
        datas = [payload(100 + i % 900, seed=i) for i in range(clients)]
        for (tr, _), data in zip(conns, datas, strict=True):
            tr.write(data)
            tr.write_eof()
        results = await asyncio.gather(*(p.wait_lost() for _, p in conns))
        assert results == [None] * clients
        for (_, p), data in zip(conns, datas, strict=True):
            assert bytes(p.data) == data
        assert len(protos) == clients
        await close_server(server)

    try:
        run(loop, main(), timeout=40)
    finally:
        if resource.getrlimit(resource.RLIMIT_NOFILE)[0] != soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ----- protocol callback order -----


def test_callback_order_eof_closes_transport(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        sp = await wait_protocol(protos)
        assert sp.transport.get_protocol() is sp
        tr.write(b"ab")
        tr.write(bytearray(b"cd"))
        tr.write(memoryview(b"xefx")[1:3])
        tr.write(b"")
        tr.write_eof()
        # eof_received returned None: the server transport closes itself ...
        assert await sp.wait_lost() is None
        assert bytes(sp.data) == b"abcdef"
        assert sp.names() == ["made", "data", "eof", "lost"]
        assert sp.transport.is_closing()
        # ... so the client sees EOF and, its own eof_received returning None, closes.
        assert await client.wait_lost() is None
        assert client.events == ["made", "eof", ("lost", None)]
        await close_server(server)

    run(loop, main())


class CloseInConnectionMade(Recorder):
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.write(b"bye")
        transport.close()
        transport.write(b"dropped")


class GreetThenAbort(Recorder):
    """Greets in connection_made; aborts on the first data; records the socket state
    seen from inside connection_lost."""

    fileno_in_lost = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.write(b"hello;")

    def data_received(self, data) -> None:
        super().data_received(data)
        self.transport.abort()
        self.transport.write(b"dropped")

    def connection_lost(self, exc) -> None:
        self.fileno_in_lost = self.transport.get_extra_info("socket").fileno()
        super().connection_lost(exc)


def test_close_inside_connection_made(loop):
    async def main():
        server, addr, protos = await serve(loop, CloseInConnectionMade)
        tr, client = await loop.create_connection(Recorder, *addr)
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"bye"
        assert client.names() == ["made", "data", "eof", "lost"]
        sp = await wait_protocol(protos)
        assert await sp.wait_lost() is None
        assert sp.events == ["made", ("lost", None)]
        await close_server(server)

    run(loop, main())


def test_abort_inside_data_received(loop):
    async def main():
        server, addr, protos = await serve(loop, GreetThenAbort)
        tr, client = await loop.create_connection(Recorder, *addr)
        await client.wait_bytes(6)
        tr.write(b"first")
        assert await client.wait_lost() is None
        sp = protos[0]
        assert await sp.wait_lost() is None
        # connection_lost runs while the socket is still open; it is closed right after
        assert sp.fileno_in_lost is not None and sp.fileno_in_lost >= 0
        assert sp.transport.get_extra_info("socket").fileno() == -1
        assert bytes(sp.data) == b"first"
        assert sp.names() == ["made", "data", "lost"]
        assert bytes(client.data) == b"hello;"
        await close_server(server)

    run(loop, main())


class HalfCloseServer(Recorder):
    """eof_received returns True: the transport stays open for writing."""

    def __init__(self) -> None:
        super().__init__(eof_result=True)
        self.closing_at_eof = None

    def eof_received(self):
        result = super().eof_received()
        self.closing_at_eof = self.transport.is_closing()
        self.transport.write(b"reply:" + bytes(self.data))
        self.transport.close()
        return result


@pytest.mark.parametrize("family", ["tcp", "unix"])
def test_eof_received_true_keeps_transport_open_for_writing(loop, tmp_path, family):
    async def main():
        protos: list = []

        def factory():
            protos.append(HalfCloseServer())
            return protos[-1]

        client = Recorder()
        if family == "tcp":
            server = await loop.create_server(factory, HOST, 0)
            addr = server.sockets[0].getsockname()
            tr, _ = await loop.create_connection(lambda: client, *addr)
        else:
            path = unix_path(tmp_path)
            server = await loop.create_unix_server(factory, path)
            tr, _ = await loop.create_unix_connection(lambda: client, path)
        assert tr.can_write_eof()
        tr.write(b"question")
        tr.write_eof()
        assert not tr.is_closing()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"reply:question"
        assert client.names() == ["made", "data", "eof", "lost"]
        sp = protos[0]
        assert await sp.wait_lost() is None
        assert sp.closing_at_eof is False
        assert sp.names() == ["made", "data", "eof", "lost"]
        assert sp.transport.can_write_eof()
        await close_server(server)

    run(loop, main())


def test_write_eof_is_sent_after_pending_data(loop):
    data = payload(2 * MIB)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.write(data)
                assert tr.get_write_buffer_size() > 0
                tr.write_eof()
                assert not tr.is_closing()
                # everything, then the FIN (recv_all stops at EOF)
                assert await recv_all(loop, conn) == data
                conn.sendall(b"still open the other way")
                await client.wait_bytes(24)
                assert not tr.is_closing()
            assert await client.wait_lost() is None
        assert bytes(client.data) == b"still open the other way"
        assert client.names() == ["made", "data", "eof", "lost"]

    run(loop, main())


def test_write_after_write_eof_raises(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        tr.write(b"x")
        tr.write_eof()
        tr.write_eof()  # a second write_eof is a no-op
        with pytest.raises(RuntimeError) as info:
            tr.write(b"y")
        assert str(info.value) == "Cannot call write() after write_eof()"
        # "writelines()" in the message from 3.12 (it has its own implementation)
        with pytest.raises(RuntimeError, match=r"^Cannot call write(lines)?\(\) after write_eof"):
            tr.writelines([b"y"])
        sp = await wait_protocol(protos)
        await sp.wait_lost()
        assert bytes(sp.data) == b"x"
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


def _asyncio_write_type_error(bad) -> str:
    # The type check is the first statement of asyncio's write(): no transport needed.
    with pytest.raises(TypeError) as info:
        selector_events._SelectorSocketTransport.write(None, bad)
    return str(info.value)


@pytest.mark.parametrize("bad", ["text", 42, None, [b"list"]])
def test_write_of_non_bytes_raises_type_error(loop, bad):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        with pytest.raises(TypeError) as info:
            tr.write(bad)
        # The running asyncio's own text (3.14 changed it), as its transport gives it.
        assert str(info.value) == _asyncio_write_type_error(bad)
        with pytest.raises(TypeError):
            tr.writelines(["text"])
        # Nothing was queued; the transport still works.
        assert tr.get_write_buffer_size() == 0
        assert not tr.is_closing()
        tr.writelines([b"a", bytearray(b"b"), memoryview(b"c")])
        tr.write_eof()
        sp = await wait_protocol(protos)
        await sp.wait_lost()
        assert bytes(sp.data) == b"abc"
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


def test_write_after_close_is_dropped_then_logged(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")

    def warnings_logged():
        return [
            r
            for r in caplog.records
            if r.name == "asyncio" and r.getMessage() == "socket.send() raised exception."
        ]

    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        sp = await wait_protocol(protos)
        tr.close()
        assert tr.is_closing()
        # asyncio counts writes on a lost/closing connection: the first four are dropped
        # silently, from the fifth on each one logs a warning.
        for _ in range(4):
            tr.write(b"dropped")
        assert warnings_logged() == []
        tr.write(b"dropped")
        assert len(warnings_logged()) == 1
        tr.write(b"dropped")
        assert len(warnings_logged()) == 2
        assert await client.wait_lost() is None
        assert client.events == ["made", ("lost", None)]
        await sp.wait_lost()
        assert bytes(sp.data) == b""
        assert sp.names() == ["made", "eof", "lost"]
        await close_server(server)

    run(loop, main())


def test_close_flushes_buffer_before_connection_lost(loop):
    data = payload(2 * MIB)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.write(data)
                assert tr.get_write_buffer_size() > 0
                tr.close()
                assert tr.is_closing()
                tr.close()  # idempotent
                await settle()
                # The peer reads nothing, so the buffer cannot drain: not lost yet.
                assert client.names() == ["made"]
                assert tr.get_write_buffer_size() > 0
                got = await recv_all(loop, conn)  # up to the FIN
                assert got == data
                assert await client.wait_lost() is None
        assert tr.get_write_buffer_size() == 0
        # a closing transport still resumes writing once the buffer drains
        assert client.names(flow=True) == ["made", "pause", "resume", "lost"]

    run(loop, main())


def test_writes_while_a_send_waits_for_the_peer_arrive_whole_and_in_order(loop):
    # The peer reads nothing until every write is made, so on io_uring the first send
    # waits in the kernel while later writes gather behind it; each completion must send
    # what gathered meanwhile. The high-water mark is out of reach: flow control never
    # fires, and the transport settles every completion itself.
    chunks = [payload(16 * 1024, seed=i) for i in range(128)]
    expected = b"".join(chunks)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            tr.set_write_buffer_limits(high=64 * MIB)
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                for chunk in chunks:
                    tr.write(chunk)
                    await asyncio.sleep(0)
                assert tr.get_write_buffer_size() > 0
                got = await recv_exactly(loop, conn, len(expected))
                for _ in range(100):
                    if tr.get_write_buffer_size() == 0:
                        break
                    await asyncio.sleep(0)
                assert tr.get_write_buffer_size() == 0
                tr.close()
                assert await client.wait_lost() is None
                assert await recv_all(loop, conn) == b""
        assert got == expected
        assert client.names(flow=True) == ["made", "lost"]

    run(loop, main())


def test_small_reads_after_large_ones_arrive_exact(loop):
    # After a read of 8 KiB or more rsloop's next one goes straight into a 256 KiB `bytes`
    # that is shrunk to what arrived (where its glibc tuning is on): a few bytes after a
    # large message must come out as exactly those bytes, and no chunk may be longer than
    # asyncio's 256 KiB read size. Messages under loopback's 64 KiB segment size arrive in
    # one read, so each tiny one right after them takes that path; larger ones may end
    # with a small read.
    steps = [40_000, 5, 9000, 1, 60_000, 7, 300_000, 3, 200_000, 20_000, 2]
    messages = [payload(n, seed=i) for i, n in enumerate(steps)]

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            conn, _ = lsock.accept()
            conn.setblocking(False)
            with conn:
                sent = 0
                for msg in messages:
                    before = len(client.events)
                    await loop.sock_sendall(conn, msg)
                    sent += len(msg)
                    await client.wait_bytes(sent)
                    chunks = [e[1] for e in client.events[before:] if e[0] == "data"]
                    assert b"".join(chunks) == msg
                    assert all(type(c) is bytes and len(c) <= 256 * 1024 for c in chunks)
                    if len(msg) < 10:
                        assert [len(c) for c in chunks] == [len(msg)]
            assert await client.wait_lost() is None
            tr.close()
        assert bytes(client.data) == b"".join(messages)
        assert client.names() == ["made", "data", "eof", "lost"]

    run(loop, main())


def test_abort_drops_buffer(loop):
    data = payload(2 * MIB)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.write(data)
                assert tr.get_write_buffer_size() > 0
                tr.abort()
                assert tr.is_closing()
                # connection_lost comes without waiting for the (non-reading) peer.
                assert await client.wait_lost() is None
                assert client.names(flow=True) == ["made", "pause", "lost"]
                assert tr.get_write_buffer_size() == 0
                tr.abort()  # already closed: no-op
                tr.close()  # likewise
                got = await recv_all(loop, conn)
        assert 0 < len(got) < len(data)
        assert got == data[: len(got)]
        assert client.names(flow=True) == ["made", "pause", "lost"]

    run(loop, main())


def test_abort_while_a_send_waits_for_room_cancels_it(loop):
    # Under the high-water mark writes leave with the loop's wait as one send; with the
    # peer not reading, that send waits for room (in the ring on uring, inside the poll
    # driver on poll). abort() cancels it: connection_lost comes at once, the buffer is
    # empty, and the peer gets a prefix of the data, never bytes out of order.
    data = payload(2 * MIB)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            tr.set_write_buffer_limits(high=64 * MIB)
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.write(data)
                for _ in range(5):
                    await asyncio.sleep(0)
                assert 0 < tr.get_write_buffer_size() < len(data)
                tr.abort()
                assert tr.get_write_buffer_size() == 0
                assert await client.wait_lost() is None
                assert client.names(flow=True) == ["made", "lost"]
                got = await recv_all(loop, conn)
            # The loop goes on serving: a fresh connection echoes.
            tr2, _ = await loop.create_connection(Recorder, *lsock.getsockname())
            conn2, _ = lsock.accept()
            with conn2:
                tr2.write(b"after")
                assert await recv_exactly(loop, conn2, 5) == b"after"
            tr2.close()
        assert 0 < len(got) < len(data)
        assert got == data[: len(got)]

    run(loop, main())


def test_peer_reset_mid_write_gives_connection_reset(loop):
    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.write(payload(2 * MIB))
                assert tr.get_write_buffer_size() > 0
                linger_reset(conn)
            exc = await client.wait_lost()
        assert type(exc) is ConnectionResetError, repr(exc)
        assert exc.errno == errno.ECONNRESET
        assert client.names() == ["made", "lost"]
        assert tr.is_closing()
        assert tr.get_write_buffer_size() == 0

    run(loop, main())


def test_peer_reset_while_reading_gives_connection_reset(loop):
    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            await loop.create_connection(lambda: client, *lsock.getsockname())
            conn, _ = lsock.accept()
            with conn:
                conn.sendall(b"before")
                await client.wait_bytes(6)
                linger_reset(conn)
            exc = await client.wait_lost()
        assert type(exc) is ConnectionResetError, repr(exc)
        assert client.names() == ["made", "data", "lost"]

    run(loop, main())


# ----- flow control -----


def test_write_buffer_limits(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        assert tr.get_write_buffer_limits() == (16384, 65536)
        assert tr.get_write_buffer_size() == 0
        tr.set_write_buffer_limits(high=100)
        assert tr.get_write_buffer_limits() == (25, 100)
        tr.set_write_buffer_limits(low=10)
        assert tr.get_write_buffer_limits() == (10, 40)
        tr.set_write_buffer_limits(high=50, low=20)
        assert tr.get_write_buffer_limits() == (20, 50)
        tr.set_write_buffer_limits(high=7, low=7)
        assert tr.get_write_buffer_limits() == (7, 7)
        tr.set_write_buffer_limits(0)
        assert tr.get_write_buffer_limits() == (0, 0)
        tr.set_write_buffer_limits()
        assert tr.get_write_buffer_limits() == (16384, 65536)
        with pytest.raises(ValueError) as info:
            tr.set_write_buffer_limits(high=1, low=2)
        assert str(info.value) == "high (1) must be >= low (2) must be >= 0"
        with pytest.raises(ValueError) as info:
            tr.set_write_buffer_limits(high=-4)
        assert str(info.value) == "high (-4) must be >= low (-1) must be >= 0"
        assert tr.get_write_buffer_limits() == (16384, 65536)
        # writing within limits to a reading peer never pauses
        tr.write(b"x" * 1000)
        tr.close()
        await client.wait_lost()
        assert client.names_count("pause") == 0
        await close_server(server)

    run(loop, main())


def test_pause_and_resume_writing_once_per_crossing(loop):
    high, low = 64 * 1024, 16 * 1024
    chunk = payload(256 * 1024)

    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.set_write_buffer_limits(high=high, low=low)
                sent = 0
                for crossing in (1, 2):
                    writes = 0
                    while tr.get_write_buffer_size() <= high:
                        assert client.names_count("pause") == crossing - 1
                        tr.write(chunk)
                        sent += len(chunk)
                        writes += 1
                        assert writes < 100
                    # pause_writing ran inside the write that crossed `high`
                    assert client.names_count("pause") == crossing
                    assert client.names_count("resume") == crossing - 1
                    tr.write(chunk)  # more writes while paused: no second pause
                    sent += len(chunk)
                    assert client.names_count("pause") == crossing
                    got = await recv_exactly(loop, conn, sent)
                    assert got == chunk * (sent // len(chunk))
                    sent = 0
                    await wait_flushed(tr)
                    assert client.names_count("resume") == crossing
                    assert client.names_count("pause") == crossing
                assert all(size > high for size in client.pause_sizes)
                assert all(size <= low for size in client.resume_sizes)
                assert [e for e in client.events if e in ("pause", "resume")] == [
                    "pause",
                    "resume",
                    "pause",
                    "resume",
                ]
                tr.close()
                assert await client.wait_lost() is None
        assert client.names_count("resume") == 2

    run(loop, main())


def test_write_past_high_water_that_the_kernel_takes_at_once_does_not_pause(loop):
    # asyncio's write() hands the bytes to the kernel inside the call: a write larger than
    # the high-water mark that fits the socket's send buffer leaves nothing buffered and
    # never pauses (also when the loop gathers small writes for one send per iteration).
    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MIB)
            conn, _ = lsock.accept()
            with conn:
                tr.set_write_buffer_limits(high=4096)
                small, large = payload(1000), payload(32 * 1024, seed=1)
                tr.write(small)  # within the mark
                tr.write(large)  # past it, with what came before
                assert tr.get_write_buffer_size() == 0
                assert client.names_count("pause") == 0
                got = await recv_exactly(loop, conn, len(small) + len(large))
                assert got == small + large
                tr.close()
                await client.wait_lost()
        assert client.names_count("pause") == 0

    run(loop, main())


def test_set_write_buffer_limits_pauses_at_once_but_never_resumes(loop):
    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            shrink_sndbuf(tr)
            conn, _ = lsock.accept()
            with conn:
                tr.set_write_buffer_limits(high=1 << 30)
                data = payload(2 * MIB)
                tr.write(data)
                size = tr.get_write_buffer_size()
                assert size > 0
                assert client.names_count("pause") == 0
                tr.set_write_buffer_limits(high=size)  # size <= high: still fine
                assert client.names_count("pause") == 0
                tr.set_write_buffer_limits(high=size - 1, low=0)
                assert client.pause_sizes == [size]
                # Raising the limits again does not resume: only draining does.
                tr.set_write_buffer_limits(high=2 * size, low=size)
                assert client.names_count("resume") == 0
                tr.set_write_buffer_limits(high=size - 1, low=0)
                assert client.names_count("pause") == 1  # already paused
                tr.set_write_buffer_limits(high=2 * size, low=size)
                got = await recv_exactly(loop, conn, len(data))
                assert got == data
                await wait_flushed(tr)
                assert client.names_count("resume") == 1
                assert client.resume_sizes[0] <= size
                tr.close()
                await client.wait_lost()

    run(loop, main())


def test_pause_and_resume_reading(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        sp = await wait_protocol(protos)
        st = sp.transport
        fd = st.get_extra_info("socket").fileno()
        assert st.is_reading()
        st.pause_reading()
        assert not st.is_reading()
        st.pause_reading()  # no-op
        assert not st.is_reading()
        tr.write(b"while paused")
        await asyncio.sleep(0)  # on uring the bytes leave with the next wait
        wait_readable(fd)
        await settle()
        assert sp.events == ["made"]
        st.resume_reading()
        assert st.is_reading()
        st.resume_reading()  # no-op
        await sp.wait_bytes(12)
        assert bytes(sp.data) == b"while paused"
        # EOF is not seen while paused either
        st.pause_reading()
        tr.write_eof()
        wait_readable(fd)
        await settle()
        assert sp.names() == ["made", "data"]
        st.resume_reading()
        assert await sp.wait_lost() is None
        assert sp.names() == ["made", "data", "eof", "lost"]
        # on a closed transport pause/resume are no-ops and it is not reading
        assert not st.is_reading()
        st.pause_reading()
        st.resume_reading()
        assert not st.is_reading()
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


def test_pause_reading_on_closing_transport_is_noop(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        tr.close()
        assert not tr.is_reading()
        tr.pause_reading()
        assert not tr.is_reading()
        tr.resume_reading()
        assert not tr.is_reading()
        assert await client.wait_lost() is None
        assert client.events == ["made", ("lost", None)]
        sp = await wait_protocol(protos)
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="3.10's selector transport starts reading after connection_made even if paused",
)
def test_paused_in_connection_made_reads_after_resume(loop):
    async def main():
        server, addr, protos = await serve(loop, PausedRecorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        tr.write(b"early")
        sp = await wait_protocol(protos)
        await asyncio.sleep(0)  # on uring the bytes leave with the next wait
        wait_readable(sp.transport.get_extra_info("socket").fileno())
        await settle()
        assert sp.events == ["made"]
        assert not sp.transport.is_reading()
        sp.transport.resume_reading()
        await sp.wait_bytes(5)
        tr.close()
        await sp.wait_lost()
        assert bytes(sp.data) == b"early"
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


# ----- BufferedProtocol -----


class TinyBuffers(asyncio.BufferedProtocol):
    """Hands out 1..16-byte buffers in turn; records what arrives."""

    def __init__(self, fail: str | None = None) -> None:
        self.sizes = itertools.cycle(range(1, 17))
        self.data = bytearray()
        self.events: list = []
        self.hints: list = []
        self.fail = fail
        self.error = ZeroDivisionError("boom")
        self.transport = None
        self.buf = None
        self.changed = Signal()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")
        self.changed.notify()

    def get_buffer(self, sizehint):
        self.hints.append(sizehint)
        if self.fail == "get_buffer":
            raise self.error
        if self.fail == "empty":
            return bytearray()
        self.buf = bytearray(next(self.sizes))
        return self.buf if len(self.hints) % 2 else memoryview(self.buf)

    def buffer_updated(self, nbytes) -> None:
        assert 0 < nbytes <= len(self.buf)
        if self.fail == "buffer_updated":
            raise self.error
        self.data += self.buf[:nbytes]
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        self.changed.notify()

    def eof_received(self):
        self.events.append("eof")
        self.changed.notify()
        if self.fail == "eof_received":
            raise self.error

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))
        self.changed.notify()

    async def wait_lost(self):
        await self.changed.until(lambda: isinstance(self.events[-1], tuple))
        return self.events[-1][1]


def test_buffered_protocol_with_tiny_buffers(loop):
    data = payload(20_000)

    async def main():
        server, addr, protos = await serve(loop, TinyBuffers)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        tr.write(data)
        tr.write_eof()
        while not protos:
            await asyncio.sleep(0)
        sp = protos[0]
        assert await sp.wait_lost() is None
        assert bytes(sp.data) == data
        assert sp.events == ["made", "data", "eof", ("lost", None)]
        assert set(sp.hints) == {-1}
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


class PausedTinyBuffers(TinyBuffers):
    """TinyBuffers that pauses reading as soon as it is made."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.pause_reading()


def _queued_bytes(sock) -> int:
    import fcntl
    import struct
    import termios

    raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, struct.pack("i", 0))
    return struct.unpack("i", raw)[0]


@pytest.mark.parametrize("buffered", [False, True], ids=["protocol", "buffered"])
def test_bytes_waiting_when_reading_resumes_all_arrive_with_nothing_more_sent(
    loop, loop_kind, buffered
):
    """A reader that resumes over bytes already queued gets every one of them, though no
    new byte arrives after: more than one receive's worth for a Protocol (the transport
    reads up to 256 KiB at a time), hundreds of buffers for a BufferedProtocol of
    1..16-byte buffers. A level-triggered selector reports the fd until it is drained; a
    reader armed once for every readiness must ask to run again after a full receive."""
    if sys.version_info < (3, 11) and loop_kind in ("fallback", "asyncio"):
        pytest.skip("3.10's selector transport starts reading after connection_made even if paused")
    total = 3 * 256 * 1024 + 1000 if not buffered else 3000
    data = payload(total)
    factory = PausedTinyBuffers if buffered else PausedRecorder
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * MIB)
    lsock.bind((HOST, 0))
    lsock.listen(1)
    protos: list = []

    def make():
        protos.append(factory())
        return protos[-1]

    async def main():
        server = await loop.create_server(make, sock=lsock)
        client = socket.create_connection(lsock.getsockname(), timeout=10)
        try:
            client.sendall(data)  # fits in the receive buffer: returns at once
            while not protos or protos[0].transport is None:
                await asyncio.sleep(0.001)
            sp = protos[0]
            sock = sp.transport.get_extra_info("socket")
            for _ in range(2000):
                if _queued_bytes(sock) == total:
                    break
                await asyncio.sleep(0.005)
            assert _queued_bytes(sock) == total
            sp.transport.resume_reading()
            await sp.changed.until(lambda: len(sp.data) >= total)
            assert bytes(sp.data) == data
            assert sp.transport.is_reading()
        finally:
            client.close()
        await close_server(server)

    run(loop, main())


class FixedBuffer(asyncio.BufferedProtocol):
    """A 4 KiB buffer; logs ``g`` per ``get_buffer`` and each ``buffer_updated`` count."""

    def __init__(self, done) -> None:
        self.buf = bytearray(4096)
        self.log: list = []
        self.done = done

    def get_buffer(self, sizehint):
        self.log.append("g")
        return self.buf

    def buffer_updated(self, nbytes) -> None:
        self.log.append(nbytes)

    def eof_received(self):
        self.log.append("eof")

    def connection_lost(self, exc) -> None:
        self.done.set_result(self.log)


def test_a_buffer_filled_exactly_is_asked_for_again_only_when_more_arrived(loop):
    """asyncio calls ``get_buffer`` when the socket is readable: a receive that filled the
    buffer exactly, with nothing behind it, is not followed by a call that finds nothing."""

    async def main():
        async def handle(reader, writer):
            for _ in range(3):
                writer.write(b"x" * 4096)
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.close()

        server = await asyncio.start_server(handle, HOST, 0)
        done = loop.create_future()
        port = server.sockets[0].getsockname()[1]
        await loop.create_connection(lambda: FixedBuffer(done), HOST, port)
        log = await done
        assert log == ["g", 4096] * 3 + ["g", "eof"]
        await close_server(server)

    run(loop, main())


@needs_unix
def test_unix_bytes_behind_a_message_that_carried_fds_are_read(loop):
    """A Unix stream socket's receive stops short after a message that carried file
    descriptors, with the next writes still queued: they arrive with nothing more sent."""

    async def main():
        a, b = socket.socketpair()
        tr, proto = await loop.create_unix_connection(Recorder, sock=a)
        r, w = os.pipe()
        try:
            await asyncio.sleep(0.02)
            socket.send_fds(b, [b"A" * 10], [r])
            b.send(b"B" * 10)
            await proto.wait_bytes(20)
            assert bytes(proto.data) == b"A" * 10 + b"B" * 10
        finally:
            tr.close()
            b.close()
            os.close(r)
            os.close(w)
        await proto.wait_lost()

    run(loop, main())


@needs_unix
def test_a_send_to_a_peer_that_half_closed_and_reads_nothing_waits_without_spinning(loop):
    """The peer half-closes and reads nothing while 8 MiB wait to be sent. io_uring's polls
    report the half-close at once, so a ring send that found no room comes back at once:
    the loop must not retry it every iteration (it did, a busy loop). The bytes all
    arrive once the peer reads."""
    big = payload(8 * MIB)

    async def main():
        a, b = socket.socketpair()
        try:
            tr, proto = await loop.create_unix_connection(Recorder, sock=a)
            tr.write(big)
            b.shutdown(socket.SHUT_WR)
            await proto.wait_eof()
            stats = getattr(loop, "stats", dict)  # the native loops count iterations
            before = stats().get("iterations")
            await asyncio.sleep(0.3)
            if before is not None:
                assert stats()["iterations"] - before < 200, stats()
            b.setblocking(False)
            got = bytearray()
            while len(got) < len(big):
                try:
                    got += b.recv(MIB)
                except BlockingIOError:
                    await asyncio.sleep(0.001)
            assert bytes(got) == big
            await proto.wait_lost()
        finally:
            b.close()

    run(loop, main())


def test_a_peers_half_close_does_not_send_what_waits_for_writability_and_its_reset_fails_it(
    loop,
):
    """A TCP peer stops reading, half-closes, then resets. The bytes the transport still
    holds wait for the socket to be writable as a selector reports it (a third of the send
    buffer free): the FIN must not send them (a ring send waiting inside the kernel was
    retried by it and took the room there was), and the reset then fails them, so the
    protocol learns of it (connection_lost with EPIPE or ECONNRESET), as on asyncio."""

    async def main():
        lsock = socket.socket()
        lsock.bind((HOST, 0))
        lsock.listen(1)
        peer = None
        try:
            proto = Recorder(eof_result=True)
            tr, _ = await loop.create_connection(lambda: proto, *lsock.getsockname())
            peer, _ = lsock.accept()
            # fixed buffers, set once connected (as tests/test_io_differential.py does)
            for s in (tr.get_extra_info("socket"), peer):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 18)
            tr.write(payload(MIB))
            # the peer reads 256 KiB and then nothing (the stream reader's pause), which
            # leaves room in the send buffer, but less than a third of it
            assert len(await recv_exactly(loop, peer, 1 << 18)) == 1 << 18
            # until the bytes stop moving into the kernel
            deadline = loop.time() + 5
            last, still = -1, 0
            while still < 20 and loop.time() < deadline:
                await asyncio.sleep(0.005)
                size = tr.get_write_buffer_size()
                still = still + 1 if size == last else 0
                last = size
            assert 0 < last < MIB, last
            peer.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(proto.wait_eof(), 5)
            await asyncio.sleep(0.1)
            assert tr.get_write_buffer_size() == last, "the peer's FIN sent bytes"
            linger_reset(peer)
            peer.close()
            peer = None
            exc = await asyncio.wait_for(proto.wait_lost(), 5)
            assert isinstance(exc, (BrokenPipeError, ConnectionResetError)), exc
        finally:
            if peer is not None:
                peer.close()
            lsock.close()

    run(loop, main())


class FailingRecorder(Recorder):
    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.error = ZeroDivisionError("boom")

    def data_received(self, data) -> None:
        super().data_received(data)
        if self.where == "data_received":
            raise self.error

    def eof_received(self):
        super().eof_received()
        if self.where == "eof_received":
            raise self.error


FAILURES = {
    "get_buffer": "Fatal error: protocol.get_buffer() call failed.",
    "empty": "Fatal error: protocol.get_buffer() call failed.",
    "buffer_updated": "Fatal error: protocol.buffer_updated() call failed.",
    "data_received": "Fatal error: protocol.data_received() call failed.",
    "eof_received": "Fatal error: protocol.eof_received() call failed.",
}


@pytest.mark.parametrize("where", list(FAILURES))
def test_protocol_callback_error_goes_to_handler_and_closes(loop, handler_log, where):
    async def main():
        def factory():
            if where in ("data_received", "eof_received"):
                return FailingRecorder(where)
            return TinyBuffers(fail=where)

        server, addr, protos = await serve(loop, factory)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        tr.write(b"payload")
        if where == "eof_received":
            tr.write_eof()
        while not protos:
            await asyncio.sleep(0)
        sp = protos[0]
        exc = await sp.wait_lost()
        if where == "empty":
            assert type(exc) is RuntimeError
            assert str(exc) == "get_buffer() returned an empty buffer"
        else:
            assert exc is sp.error
        assert sp.transport.is_closing()
        # The failed transport is aborted: with unread bytes left in its socket the
        # peer gets an RST, otherwise a plain EOF.
        peer_exc = await client.wait_lost()
        if where in ("get_buffer", "empty", "buffer_updated"):
            assert type(peer_exc) is ConnectionResetError, repr(peer_exc)
        else:
            assert peer_exc is None
        [ctx] = handler_log.take()
        assert ctx["message"] == FAILURES[where]
        assert ctx["exception"] is exc
        assert ctx["transport"] is sp.transport
        assert ctx["protocol"] is sp
        await close_server(server)

    run(loop, main())


def test_set_protocol_switches_between_protocol_kinds(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        first = Recorder()
        tr, _ = await loop.create_connection(lambda: first, *addr)
        sp = await wait_protocol(protos)
        st = sp.transport
        assert tr.get_protocol() is first

        st.write(b"A" * 10)
        await first.wait_bytes(10)
        second = TinyBuffers()
        tr.set_protocol(second)
        assert tr.get_protocol() is second

        st.write(b"B" * 100)
        await second.changed.until(lambda: len(second.data) >= 100)
        third = Recorder()
        tr.set_protocol(third)
        assert tr.get_protocol() is third

        st.write(b"C" * 5)
        st.write_eof()
        assert await third.wait_lost() is None
        assert bytes(first.data) == b"A" * 10
        assert bytes(second.data) == b"B" * 100
        assert bytes(third.data) == b"C" * 5
        # connection_made only ever ran on the first protocol; EOF and
        # connection_lost reach whichever is current.
        assert first.names() == ["made", "data"]
        assert second.events == ["data"]
        assert third.names() == ["data", "eof", "lost"]
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


# ----- extra info -----


def test_get_extra_info_tcp(loop):
    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        sp = await wait_protocol(protos)
        sock = tr.get_extra_info("socket")
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_INET
        assert sock.type == socket.SOCK_STREAM
        assert sock.fileno() >= 0
        assert tr.get_extra_info("sockname") == sock.getsockname()
        assert tr.get_extra_info("peername") == addr == sock.getpeername()
        ssock = sp.transport.get_extra_info("socket")
        assert isinstance(ssock, trsock.TransportSocket)
        assert sp.transport.get_extra_info("peername") == tr.get_extra_info("sockname")
        assert sp.transport.get_extra_info("sockname") == addr
        assert tr.get_extra_info("no such key") is None
        assert tr.get_extra_info("no such key", 42) == 42
        assert tr.get_extra_info("sslcontext") is None
        assert tr.get_extra_info("peercert", "dflt") == "dflt"
        assert tr.get_protocol() is client
        tr.close()
        await client.wait_lost()
        # still answers once closed
        assert tr.get_extra_info("peername") == addr
        assert tr.get_extra_info("socket").fileno() == -1
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


@needs_unix
def test_get_extra_info_unix(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        make, protos = collecting(Recorder)
        server = await loop.create_unix_server(make, path)
        tr, client = await loop.create_unix_connection(Recorder, path)
        sp = await wait_protocol(protos)
        sock = tr.get_extra_info("socket")
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_UNIX
        assert sock.type == socket.SOCK_STREAM
        assert tr.get_extra_info("peername") == path
        assert tr.get_extra_info("sockname") == sock.getsockname()
        assert sp.transport.get_extra_info("sockname") == path
        assert (
            sp.transport.get_extra_info("peername")
            == sp.transport.get_extra_info("socket").getpeername()
        )
        tr.close()
        await client.wait_lost()
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


# ----- datagrams -----


async def udp_echo_server(loop, host=HOST, **kwargs):
    tr, proto = await loop.create_datagram_endpoint(
        lambda: DatagramRecorder(echo=True), local_addr=(host, 0), **kwargs
    )
    return tr, proto, tr.get_extra_info("sockname")


async def close_datagram(tr, proto) -> None:
    tr.close()
    assert await proto.wait_lost() is None


def test_udp_echo_connected_client(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        caddr = tr.get_extra_info("sockname")
        assert tr.get_extra_info("peername") == saddr
        assert cp.events == ["made"]
        tr.sendto(b"one")
        tr.sendto(bytearray(b"two"), None)
        tr.sendto(memoryview(b"three"), saddr)
        big = payload(60_000)
        tr.sendto(big)
        await cp.wait_datagrams(4)
        assert sp.datagrams == [(b"one", caddr), (b"two", caddr), (b"three", caddr), (big, caddr)]
        assert cp.datagrams == [(b"one", saddr), (b"two", saddr), (b"three", saddr), (big, saddr)]
        assert all(type(d) is bytes for d, _ in cp.datagrams)
        with pytest.raises(ValueError) as info:
            tr.sendto(b"x", (HOST, 9))
        assert str(info.value) == f"Invalid address: must be None or {saddr}"
        assert tr.get_write_buffer_size() == 0
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)
        assert cp.errors == [] and sp.errors == []

    run(loop, main())


def test_udp_unconnected_client_sendto_with_address(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        assert tr.get_extra_info("peername") is None
        caddr = tr.get_extra_info("sockname")
        for i in range(5):
            tr.sendto(b"n%d" % i, saddr)
        await cp.wait_datagrams(5)
        assert cp.datagrams == [(b"n%d" % i, saddr) for i in range(5)]
        assert sp.datagrams == [(b"n%d" % i, caddr) for i in range(5)]
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_empty_datagram(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        tr.sendto(b"")
        tr.sendto(b"after")
        await sp.changed.until(lambda: any(d == b"after" for d, _ in sp.datagrams))
        got = [d for d, _ in sp.datagrams]
        # 3.13 sends a zero-length datagram; before, sendto(b"") was a no-op.
        assert got == ([b"", b"after"] if sys.version_info >= (3, 13) else [b"after"])
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


@pytest.mark.parametrize("bad", ["text", 3, None])
def test_udp_sendto_non_bytes_raises(loop, bad):
    async def main():
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        with pytest.raises(TypeError) as info:
            tr.sendto(bad, (HOST, 9))
        assert str(info.value) == (
            f"data argument must be a bytes-like object, not {type(bad).__name__!r}"
        )
        assert not tr.is_closing()
        await close_datagram(tr, cp)

    run(loop, main())


def test_udp_oversized_datagram_reports_error_synchronously(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        tr.sendto(b"x" * 70_000)  # above the 65,507-byte UDP/IPv4 maximum
        assert len(cp.errors) == 1
        assert cp.errors[0].errno == errno.EMSGSIZE
        assert not tr.is_closing()
        tr.sendto(b"fine")
        await cp.wait_datagrams(1)
        assert [d for d, _ in sp.datagrams] == [b"fine"]
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_error_received_on_icmp_refused(loop):
    async def main():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((HOST, 0))
            closed = s.getsockname()
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=closed)
        tr.sendto(b"anyone?")
        await cp.wait_error()
        exc = cp.errors[0]
        assert type(exc) is ConnectionRefusedError, repr(exc)
        assert exc.errno == errno.ECONNREFUSED
        # error_received does not close the endpoint
        assert not tr.is_closing()
        assert cp.events[:2] == ["made", "error"]
        await close_datagram(tr, cp)

    run(loop, main())


def test_udp_close_abort_and_sendto_after_close(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        assert not tr.is_closing()
        tr.close()
        assert tr.is_closing()
        tr.sendto(b"dropped")  # silently dropped
        tr.close()
        assert await cp.wait_lost() is None
        assert cp.events == ["made", ("lost", None)]
        tr2, cp2 = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        tr2.abort()
        assert tr2.is_closing()
        assert await cp2.wait_lost() is None
        assert cp2.events == ["made", ("lost", None)]
        # nothing sent after close/abort reached the server
        tr3, cp3 = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        tr3.sendto(b"marker")
        await cp3.wait_datagrams(1)
        assert [d for d, _ in sp.datagrams] == [b"marker"]
        await close_datagram(tr3, cp3)
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_sendto_after_close_is_logged_from_the_fifth(loop, caplog):
    caplog.set_level(logging.WARNING, logger="asyncio")

    def warnings_logged():
        return [r for r in caplog.records if r.getMessage() == "socket.send() raised exception."]

    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=saddr)
        tr.close()
        for _ in range(4):
            tr.sendto(b"dropped")
        assert warnings_logged() == []
        tr.sendto(b"dropped")
        assert len(warnings_logged()) == 1
        assert await cp.wait_lost() is None
        await close_datagram(str_, sp)
        assert sp.datagrams == []

    run(loop, main())


def test_udp_extra_info(loop):
    async def main():
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        sock = tr.get_extra_info("socket")
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_INET
        assert sock.type == socket.SOCK_DGRAM
        assert tr.get_extra_info("sockname") == sock.getsockname()
        assert tr.get_extra_info("peername") is None
        assert tr.get_extra_info("missing", "d") == "d"
        assert tr.get_protocol() is cp
        assert tr.get_write_buffer_size() == 0
        assert tr.get_write_buffer_limits() == (16384, 65536)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        await close_datagram(tr, cp)

    run(loop, main())


@needs_unix
def test_unix_datagram_echo(loop, tmp_path):
    spath, cpath = unix_path(tmp_path, "srv"), unix_path(tmp_path, "cli")

    async def main():
        # A stale socket file at local_addr is replaced, as asyncio does.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stale:
            stale.bind(spath)
        assert os.path.exists(spath)
        str_, sp = await loop.create_datagram_endpoint(
            lambda: DatagramRecorder(echo=True), local_addr=spath, family=socket.AF_UNIX
        )
        tr, cp = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=cpath, remote_addr=spath, family=socket.AF_UNIX
        )
        assert tr.get_extra_info("sockname") == cpath
        assert tr.get_extra_info("peername") == spath
        assert tr.get_extra_info("socket").family == socket.AF_UNIX
        tr.sendto(b"hello")
        tr.sendto(b"world", spath)
        await cp.wait_datagrams(2)
        assert sp.datagrams == [(b"hello", cpath), (b"world", cpath)]
        assert cp.datagrams == [(b"hello", spath), (b"world", spath)]
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_allow_broadcast(loop):
    async def main():
        tr, cp = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=(HOST, 0), allow_broadcast=True
        )
        sock = tr.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) != 0
        tr2, cp2 = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        assert tr2.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 0
        await close_datagram(tr, cp)
        await close_datagram(tr2, cp2)

    run(loop, main())


@needs_reuse_port
def test_udp_reuse_port(loop):
    async def main():
        tr1, p1 = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=(HOST, 0), reuse_port=True
        )
        addr = tr1.get_extra_info("sockname")
        tr2, p2 = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=addr, reuse_port=True
        )
        assert tr2.get_extra_info("sockname") == addr
        for t in (tr1, tr2):
            assert t.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        with pytest.raises(OSError) as info:
            await loop.create_datagram_endpoint(DatagramRecorder, local_addr=addr)
        assert info.value.errno == errno.EADDRINUSE
        await close_datagram(tr1, p1)
        await close_datagram(tr2, p2)

    run(loop, main())


def test_udp_reuse_address_true_is_refused(loop):
    async def main():
        # 3.10 refuses True (and deprecates False); 3.11 removed the parameter.
        expected = TypeError if sys.version_info >= (3, 11) else ValueError
        with pytest.raises(expected, match="reuse_address"):
            await loop.create_datagram_endpoint(
                DatagramRecorder, local_addr=(HOST, 0), reuse_address=True
            )

    run(loop, main())


def test_udp_family_without_addresses(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, family=socket.AF_INET)
        assert tr.get_extra_info("socket").family == socket.AF_INET
        assert tr.get_extra_info("peername") is None
        tr.sendto(b"unbound", saddr)
        await cp.wait_datagrams(1)
        assert cp.datagrams == [(b"unbound", saddr)]
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


@needs_ipv6
def test_udp_ipv6_echo(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop, host="::1", family=socket.AF_INET6)
        assert str_.get_extra_info("socket").family == socket.AF_INET6
        tr, cp = await loop.create_datagram_endpoint(
            DatagramRecorder, remote_addr=("::1", saddr[1]), family=socket.AF_INET6
        )
        caddr = tr.get_extra_info("sockname")
        assert len(caddr) == 4
        tr.sendto(b"six")
        await cp.wait_datagrams(1)
        assert cp.datagrams == [(b"six", saddr)]
        assert sp.datagrams == [(b"six", caddr)]
        await close_datagram(tr, cp)
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_sock_argument(loop):
    async def main():
        str_, sp, saddr = await udp_echo_server(loop)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((HOST, 0))
        sock.connect(saddr)
        tr, cp = await loop.create_datagram_endpoint(DatagramRecorder, sock=sock)
        assert tr.get_extra_info("socket").fileno() == sock.fileno()
        assert tr.get_extra_info("peername") == saddr
        assert not sock.getblocking()
        tr.sendto(b"via sock")
        await cp.wait_datagrams(1)
        assert cp.datagrams == [(b"via sock", saddr)]
        await close_datagram(tr, cp)
        assert sock.fileno() == -1  # the transport owned and closed it
        await close_datagram(str_, sp)

    run(loop, main())


def test_udp_bad_arguments(loop):
    async def main():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as dgram:
            with pytest.raises(ValueError, match="socket modifier keyword arguments"):
                await loop.create_datagram_endpoint(
                    DatagramRecorder, sock=dgram, local_addr=(HOST, 0)
                )
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stream:
            with pytest.raises(ValueError) as info:
                await loop.create_datagram_endpoint(DatagramRecorder, sock=stream)
            # 3.13 says "A datagram socket", earlier versions "A UDP Socket"
            kind = "A datagram socket" if sys.version_info >= (3, 13) else "A UDP Socket"
            assert str(info.value) == f"{kind} was expected, got {stream!r}"
        with pytest.raises(ValueError, match="unexpected address family"):
            await loop.create_datagram_endpoint(DatagramRecorder)

    run(loop, main())


@pytest.mark.skipif(not HAS_IPV6, reason="needs ::1")
def test_udp_family_mismatch_is_an_error(loop):
    async def main():
        with pytest.raises((ValueError, OSError, socket.gaierror)):
            await loop.create_datagram_endpoint(
                DatagramRecorder, local_addr=("::1", 0), family=socket.AF_INET
            )

    run(loop, main())


# ----- sendfile -----


@pytest.mark.parametrize("fallback", [True, False])
def test_sendfile(loop, tmp_path, fallback):
    data = payload(MIB + 123)
    path = tmp_path / "blob"
    path.write_bytes(data)

    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        with open(path, "rb") as f:
            sent = await loop.sendfile(tr, f, fallback=fallback)
            assert sent == len(data)
            assert f.tell() == len(data)
            sent = await loop.sendfile(tr, f, offset=10, count=1000, fallback=fallback)
            assert sent == 1000
            assert f.tell() == 1010
        tr.write(b"after")  # the transport is usable again
        tr.write_eof()
        sp = await wait_protocol(protos)
        assert await sp.wait_lost() is None
        assert bytes(sp.data) == data + data[10:1010] + b"after"
        await client.wait_lost()
        await close_server(server)

    run(loop, main())


def test_sendfile_refusals(loop, tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 100)

    async def main():
        udp, up = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        with open(path, "rb") as f:
            with pytest.raises(RuntimeError, match="^sendfile is not supported for transport"):
                await loop.sendfile(udp, f)
            tr.close()
            with pytest.raises(RuntimeError) as info:
                await loop.sendfile(tr, f)
            assert str(info.value) == "Transport is closing"
        await close_datagram(udp, up)
        await client.wait_lost()
        sp = await wait_protocol(protos)
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())


# ----- repr -----


def test_transport_repr(loop):
    """Only the class name may differ from asyncio's; repr never raises (3.10's datagram
    transport has no is_reading(), which once made rsloop's repr raise)."""

    async def main():
        server, addr, protos = await serve(loop, Recorder)
        tr, client = await loop.create_connection(Recorder, *addr)
        udp, up = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        fd = tr.get_extra_info("socket").fileno()
        assert repr(tr).endswith(f" fd={fd} read=polling write=<idle, bufsize=0>>")
        tr.pause_reading()
        assert repr(tr).endswith(f" fd={fd} read=idle write=<idle, bufsize=0>>")
        ufd = udp.get_extra_info("socket").fileno()
        assert repr(udp).endswith(f" fd={ufd} read=polling write=<idle, bufsize=0>>")
        tr.close()
        udp.close()
        assert " closing fd=" in repr(tr) and " closing fd=" in repr(udp)
        await client.wait_lost()
        await up.wait_lost()
        assert repr(tr).startswith("<") and " closed fd=" in repr(tr)
        sp = await wait_protocol(protos)
        await sp.wait_lost()
        await close_server(server)

    run(loop, main())
