"""Servers and outgoing connections: create_server / create_unix_server, the Server
object, connect_accepted_socket and create_connection's address handling.

Run on every backend plus stdlib asyncio; version differences of asyncio itself (3.12's
wait_closed, 3.13's close_clients and cleanup_socket) are gated on sys.version_info.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import socket
import struct
import sys
from asyncio import trsock

import pytest
from netutil import (
    HAS_IPV6,
    HOST,
    EchoServer,
    Recorder,
    close_server,
    collecting,
    listening_socket,
    needs_ipv6,
    needs_reuse_port,
    needs_unix,
    payload,
    refused_address,
    run,
    settle,
    tcp_echo_server,
    unix_path,
)


async def echo_check(loop, addr, data: bytes = b"ping", family=None) -> None:
    """Connect to ``addr``, send ``data`` + EOF, expect it echoed and a clean close."""
    kwargs = {"family": family} if family is not None else {}
    client = Recorder()
    tr, _ = await loop.create_connection(lambda: client, addr[0], addr[1], **kwargs)
    tr.write(data)
    tr.write_eof()
    assert await client.wait_lost() is None
    assert bytes(client.data) == data


async def unix_echo_check(loop, path: str, data: bytes = b"ping") -> None:
    client = Recorder()
    tr, _ = await loop.create_unix_connection(lambda: client, path)
    tr.write(data)
    tr.write_eof()
    assert await client.wait_lost() is None
    assert bytes(client.data) == data


def bind_error(addr) -> str:
    """asyncio's message for EADDRINUSE on bind (3.13 lowercases the whole str(err))."""
    reason = "address already in use"
    if sys.version_info >= (3, 13):
        reason = f"[errno {errno.EADDRINUSE}] {reason}"
    return (
        f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address {addr!r}: {reason}"
    )


# ----- create_server -----


def test_server_object_api(loop):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        assert isinstance(server, asyncio.AbstractServer)
        assert server.get_loop() is loop
        assert server.is_serving()
        socks = server.sockets
        assert isinstance(socks, tuple) and len(socks) == 1
        [sock] = socks
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_INET
        assert sock.type == socket.SOCK_STREAM
        assert sock.getsockname() == addr
        assert addr[0] == HOST and addr[1] > 0
        await echo_check(loop, addr, payload(50_000))
        server.close()
        assert not server.is_serving()
        assert server.sockets == ()
        server.close()  # idempotent
        await server.wait_closed()
        assert sock.fileno() == -1

    run(loop, main())


def test_closed_server_refuses_connections(loop):
    # No loop iteration between close() and the connect: on io_uring an in-flight poll
    # must not keep the listening socket alive (it would accept, then reset).
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(Recorder, *addr)

    run(loop, main())


@needs_ipv6
def test_server_on_several_hosts(loop):
    async def main():
        make, protos = collecting()
        server = await loop.create_server(make, [HOST, "::1"], 0)
        socks = server.sockets
        assert sorted(s.family for s in socks) == sorted([socket.AF_INET, socket.AF_INET6])
        for s in socks:
            await echo_check(loop, s.getsockname()[:2], b"to " + str(s.family).encode())
        assert len(protos) == 2
        six = next(s for s in socks if s.family == socket.AF_INET6)
        # asyncio sets IPV6_V6ONLY on IPv6 listeners of a multi-family server
        assert six.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) != 0
        await close_server(server)

    run(loop, main())


def test_server_reuse_address(loop):
    async def main():
        default, _, _ = await tcp_echo_server(loop)
        off, _, _ = await tcp_echo_server(loop, reuse_address=False)
        on, _, _ = await tcp_echo_server(loop, reuse_address=True)
        opt = (socket.SOL_SOCKET, socket.SO_REUSEADDR)
        # POSIX default: SO_REUSEADDR on
        assert default.sockets[0].getsockopt(*opt) != 0
        assert off.sockets[0].getsockopt(*opt) == 0
        assert on.sockets[0].getsockopt(*opt) != 0
        for s in (default, off, on):
            await close_server(s)

    run(loop, main())


@needs_reuse_port
def test_server_reuse_port(loop):
    async def main():
        first, addr, _ = await tcp_echo_server(loop, reuse_port=True)
        assert first.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        make, _ = collecting()
        second = await loop.create_server(make, HOST, addr[1], reuse_port=True)
        assert second.sockets[0].getsockname() == addr
        await echo_check(loop, addr)
        await close_server(first)
        await close_server(second)

    run(loop, main())


def test_server_address_in_use(loop):
    async def main():
        first, addr, _ = await tcp_echo_server(loop)
        make, _ = collecting()
        with pytest.raises(OSError) as info:
            await loop.create_server(make, HOST, addr[1])
        assert info.value.errno == errno.EADDRINUSE
        assert str(info.value) == bind_error(addr)
        await close_server(first)

    run(loop, main())


def _listen_backlog(sock) -> int:
    """The listen() backlog of a listening TCP socket: Linux reports it as tcpi_sacked."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("8B6I", info)[13]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO backlog is Linux's")
def test_server_backlog(loop):
    async def main():
        default, _, _ = await tcp_echo_server(loop)
        small, addr, _ = await tcp_echo_server(loop, backlog=7)
        assert _listen_backlog(default.sockets[0]) == 100
        assert _listen_backlog(small.sockets[0]) == 7
        await echo_check(loop, addr)
        await close_server(default)
        await close_server(small)

    run(loop, main())


def test_start_serving_false_then_start_serving(loop):
    async def main():
        make, protos = collecting()
        server = await loop.create_server(make, HOST, 0, start_serving=False)
        assert not server.is_serving()
        [sock] = server.sockets
        addr = sock.getsockname()
        # bound but not listening yet: listen() is start_serving's job
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(Recorder, *addr)
        await server.start_serving()
        assert server.is_serving()
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0
        await server.start_serving()  # no-op
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        tr.write(b"queued")
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"queued"
        assert len(protos) == 1
        await close_server(server)

    run(loop, main())


def test_serve_forever(loop):
    async def main():
        make, protos = collecting()
        server = await loop.create_server(make, HOST, 0, start_serving=False)
        addr = server.sockets[0].getsockname()
        task = asyncio.ensure_future(server.serve_forever())
        while not server.is_serving():
            await asyncio.sleep(0)
        await echo_check(loop, addr, b"forever")
        with pytest.raises(RuntimeError, match="is already being awaited on serve_forever"):
            await server.serve_forever()
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # cancelling serve_forever closes the server
        assert not server.is_serving()
        assert server.sockets == ()
        with pytest.raises(RuntimeError, match="is closed"):
            await server.serve_forever()
        await server.wait_closed()
        assert len(protos) == 1

    run(loop, main())


def test_server_sock_argument(loop):
    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        addr = sock.getsockname()
        make, protos = collecting()
        server = await loop.create_server(make, sock=sock)
        [tsock] = server.sockets
        assert tsock.fileno() == sock.fileno()
        assert not sock.getblocking()
        await echo_check(loop, addr, b"via sock")
        await close_server(server)
        assert sock.fileno() == -1  # the server owns and closes it

    run(loop, main())


def test_wait_closed_before_close_waits_for_close(loop):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        waiter = asyncio.ensure_future(server.wait_closed())
        await settle()
        assert not waiter.done()
        server.close()
        await asyncio.wait_for(waiter, 5)

    run(loop, main())


def test_close_keeps_existing_connections(loop):
    async def main():
        server, addr, protos = await tcp_echo_server(loop)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, *addr)
        tr.write(b"one")
        await client.wait_bytes(3)
        server.close()
        assert not server.is_serving()
        waiter = asyncio.ensure_future(server.wait_closed())
        await settle()
        if sys.version_info >= (3, 12):
            # 3.12+: wait_closed also waits for the server's connections to end
            assert not waiter.done()
        else:
            assert waiter.done()
        # the accepted connection is still served
        tr.write(b"two")
        await client.wait_bytes(6)
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"onetwo"
        await protos[0].wait_lost()
        await asyncio.wait_for(waiter, 5)

    run(loop, main())


def test_async_with_server(loop):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        async with server as entered:
            assert entered is server
            assert server.is_serving()
            await echo_check(loop, addr)
        assert not server.is_serving()
        assert server.sockets == ()

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 13), reason="close_clients/abort_clients are 3.13+")
@pytest.mark.parametrize("how", ["close_clients", "abort_clients"])
def test_close_and_abort_clients(loop, how):
    async def main():
        make, protos = collecting(Recorder)
        server = await loop.create_server(make, HOST, 0)
        addr = server.sockets[0].getsockname()
        clients = []
        for _ in range(3):
            c = Recorder()
            await loop.create_connection(lambda c=c: c, *addr)
            clients.append(c)
        while len(protos) < 3:
            await asyncio.sleep(0)
        for p in protos:
            await p.wait_made()
        server.close()
        waiter = asyncio.ensure_future(server.wait_closed())
        await settle()
        assert not waiter.done()
        getattr(server, how)()
        for p in protos:
            assert p.transport.is_closing()
        assert [await p.wait_lost() for p in protos] == [None] * 3
        assert [await c.wait_lost() for c in clients] == [None] * 3
        assert all(c.names() == ["made", "eof", "lost"] for c in clients)
        await asyncio.wait_for(waiter, 5)

    run(loop, main())


# ----- Unix servers -----


@needs_unix
def test_unix_server_basics(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        make, protos = collecting()
        server = await loop.create_unix_server(make, path)
        assert server.is_serving()
        [sock] = server.sockets
        assert isinstance(sock, trsock.TransportSocket)
        assert sock.family == socket.AF_UNIX
        assert sock.getsockname() == path
        await unix_echo_check(loop, path, payload(100_000))
        server.close()
        await server.wait_closed()
        if sys.version_info >= (3, 13):
            assert not os.path.exists(path)  # cleanup_socket=True is the default
        else:
            assert os.path.exists(path)

    run(loop, main())


@needs_unix
@pytest.mark.skipif(sys.version_info < (3, 13), reason="cleanup_socket is 3.13+")
def test_unix_server_cleanup_socket_false_leaves_file(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        make, _ = collecting()
        server = await loop.create_unix_server(make, path, cleanup_socket=False)
        await close_server(server)
        assert os.path.exists(path)

    run(loop, main())


@needs_unix
@pytest.mark.skipif(sys.version_info < (3, 13), reason="cleanup_socket is 3.13+")
def test_unix_server_cleanup_spares_a_replaced_file(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        make, _ = collecting()
        server = await loop.create_unix_server(make, path)
        os.unlink(path)
        with open(path, "w") as f:
            f.write("not ours")
        await close_server(server)
        # the path now names another file: it is left alone
        with open(path) as f:
            assert f.read() == "not ours"

    run(loop, main())


@needs_unix
def test_unix_server_replaces_stale_socket_but_not_a_file(loop, tmp_path):
    stale, regular = unix_path(tmp_path, "stale"), unix_path(tmp_path, "regular")

    async def main():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(stale)
        make, _ = collecting()
        server = await loop.create_unix_server(make, stale)
        await unix_echo_check(loop, stale)
        await close_server(server)
        with open(regular, "w") as f:
            f.write("x")
        with pytest.raises(OSError) as info:
            await loop.create_unix_server(make, regular)
        assert info.value.errno == errno.EADDRINUSE
        expected = f"[Errno {errno.EADDRINUSE}] Address {regular!r} is already in use"
        assert str(info.value) == expected

    run(loop, main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux's")
def test_unix_abstract_namespace(loop, tmp_path):
    name = f"\0rsloop-test-{os.getpid()}-{os.path.basename(tmp_path)}"

    async def main():
        make, protos = collecting()
        server = await loop.create_unix_server(make, name)
        assert server.sockets[0].getsockname() == name.encode()
        client = Recorder()
        tr, _ = await loop.create_unix_connection(lambda: client, name)
        assert tr.get_extra_info("peername") == name.encode()
        tr.write(b"abstract")
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"abstract"
        await close_server(server)

    run(loop, main())


@needs_unix
def test_unix_server_sock_argument(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        make, _ = collecting()
        server = await loop.create_unix_server(make, sock=sock)
        assert server.sockets[0].fileno() == sock.fileno()
        await unix_echo_check(loop, path)
        await close_server(server)
        assert sock.fileno() == -1

    run(loop, main())


@needs_unix
def test_unix_connection_sock_argument(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        make, _ = collecting()
        server = await loop.create_unix_server(make, path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        client = Recorder()
        tr, _ = await loop.create_unix_connection(lambda: client, sock=sock)
        assert tr.get_extra_info("socket").fileno() == sock.fileno()
        assert tr.get_extra_info("peername") == path
        tr.write(b"over a given socket")
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"over a given socket"
        await close_server(server)

    run(loop, main())


# ----- connect_accepted_socket -----


def test_connect_accepted_socket(loop):
    async def main():
        with listening_socket() as lsock:
            client = Recorder()
            tr, _ = await loop.create_connection(lambda: client, *lsock.getsockname())
            conn, peer = lsock.accept()
            str_, sp = await loop.connect_accepted_socket(EchoServer, conn)
            assert isinstance(sp, EchoServer)
            assert str_.get_extra_info("peername") == peer
            assert str_.get_extra_info("socket").fileno() == conn.fileno()
            assert not conn.getblocking()
            data = payload(300_000)
            tr.write(data)
            tr.write_eof()
            assert await client.wait_lost() is None
            assert bytes(client.data) == data
            assert await sp.wait_lost() is None
            assert sp.names() == ["made", "data", "eof", "lost"]
            assert conn.fileno() == -1

    run(loop, main())


# ----- create_connection -----


def test_create_connection_local_addr(loop):
    async def main():
        server, addr, protos = await tcp_echo_server(loop)
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            port = probe.getsockname()[1]
        tr, client = await loop.create_connection(Recorder, *addr, local_addr=(HOST, port))
        assert tr.get_extra_info("sockname") == (HOST, port)
        while not protos:
            await asyncio.sleep(0)
        await protos[0].wait_made()
        assert protos[0].transport.get_extra_info("peername") == (HOST, port)
        tr.close()
        await client.wait_lost()
        # A local address that cannot be bound: asyncio's wrapped error
        with listening_socket() as busy:
            baddr = busy.getsockname()
            with pytest.raises(OSError) as info:
                await loop.create_connection(Recorder, *addr, local_addr=baddr)
            assert info.value.errno == errno.EADDRINUSE
            assert str(info.value) == bind_error(baddr)
        await close_server(server)

    run(loop, main())


def test_create_connection_sock_argument(loop):
    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        sock = socket.create_connection(addr)
        client = Recorder()
        tr, _ = await loop.create_connection(lambda: client, sock=sock)
        assert tr.get_extra_info("socket").fileno() == sock.fileno()
        assert not sock.getblocking()
        tr.write(b"given")
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"given"
        assert sock.fileno() == -1
        await close_server(server)

    run(loop, main())


@needs_ipv6
def test_create_connection_family(loop):
    async def main():
        server, addr, _ = await tcp_echo_server(loop, host="::1")
        await echo_check(loop, ("::1", addr[1]), family=socket.AF_INET6)
        with pytest.raises(socket.gaierror):
            await loop.create_connection(Recorder, "::1", addr[1], family=socket.AF_INET)
        await close_server(server)

    run(loop, main())


def test_create_connection_refused(loop):
    async def main():
        with refused_address() as addr:
            with pytest.raises(ConnectionRefusedError) as info:
                await loop.create_connection(Recorder, *addr)
        assert info.value.errno == errno.ECONNREFUSED
        assert str(info.value) == f"[Errno {errno.ECONNREFUSED}] Connect call failed {addr}"

    run(loop, main())


def test_create_connection_unresolvable_host(loop):
    async def main():
        with pytest.raises(socket.gaierror):
            await loop.create_connection(Recorder, "nonexistent.invalid", 80)

    run(loop, main(), timeout=30)  # a real resolver lookup: allow a slow DNS answer


def fake_resolver(monkeypatch, loop, answers):
    """Make ``loop.getaddrinfo`` answer ``answers`` (a list of (family, sockaddr)) for
    any host; returns the list of lookups made."""
    calls = []

    async def getaddrinfo(host, port, *, family=0, type=0, proto=0, flags=0):
        calls.append((host, port, family))
        return [
            (fam, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sa)
            for fam, sa in answers
            if family in (0, fam)
        ]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return calls


HAPPY_EYEBALLS = [
    pytest.param({}, id="sequential"),
    pytest.param({"happy_eyeballs_delay": 0.05}, id="delay"),
    pytest.param({"interleave": 1}, id="interleave"),
    pytest.param({"happy_eyeballs_delay": 0.05, "interleave": 2}, id="delay+interleave"),
]


@pytest.mark.parametrize("kwargs", HAPPY_EYEBALLS)
def test_create_connection_tries_each_address(loop, monkeypatch, kwargs):
    async def main():
        server, good, _ = await tcp_echo_server(loop)
        with refused_address() as bad1, refused_address() as bad2:
            answers = [(socket.AF_INET, bad1), (socket.AF_INET, bad2), (socket.AF_INET, good)]
            if HAS_IPV6:
                with refused_address(socket.AF_INET6, "::1") as bad6:
                    answers.insert(1, (socket.AF_INET6, bad6 + (0, 0)))
                    calls = fake_resolver(monkeypatch, loop, answers)
                    tr, client = await loop.create_connection(
                        Recorder, "multi.example", 4242, **kwargs
                    )
            else:
                calls = fake_resolver(monkeypatch, loop, answers)
                tr, client = await loop.create_connection(Recorder, "multi.example", 4242, **kwargs)
        assert calls == [("multi.example", 4242, 0)]
        assert tr.get_extra_info("peername") == good
        tr.write(b"found")
        tr.write_eof()
        assert await client.wait_lost() is None
        assert bytes(client.data) == b"found"
        await close_server(server)

    run(loop, main())


@pytest.mark.parametrize("kwargs", HAPPY_EYEBALLS)
def test_create_connection_all_addresses_refused(loop, monkeypatch, kwargs):
    async def main():
        with refused_address() as bad1, refused_address() as bad2:
            fake_resolver(monkeypatch, loop, [(socket.AF_INET, bad1), (socket.AF_INET, bad2)])
            with pytest.raises(OSError) as info:
                await loop.create_connection(Recorder, "multi.example", 1, **kwargs)
            assert type(info.value) is OSError
            assert info.value.errno is None
            refused = f"[Errno {errno.ECONNREFUSED}] Connect call failed"
            assert str(info.value) == f"Multiple exceptions: {refused} {bad1}, {refused} {bad2}"

            if sys.version_info >= (3, 12):
                with pytest.raises(ExceptionGroup) as group:  # noqa: F821 - 3.11+
                    await loop.create_connection(
                        Recorder, "multi.example", 1, all_errors=True, **kwargs
                    )
                assert group.value.message == "create_connection failed"
                excs = group.value.exceptions
                assert [type(e) for e in excs] == [ConnectionRefusedError] * 2
                assert [str(e) for e in excs] == [f"{refused} {bad1}", f"{refused} {bad2}"]

                # all_errors=True with a single failure still raises a group
                fake_resolver(monkeypatch, loop, [(socket.AF_INET, bad1)])
                with pytest.raises(ExceptionGroup) as group:  # noqa: F821 - 3.11+
                    await loop.create_connection(
                        Recorder, "one.example", 1, all_errors=True, **kwargs
                    )
                assert [type(e) for e in group.value.exceptions] == [ConnectionRefusedError]

    run(loop, main())


def test_create_connection_same_error_everywhere_is_raised_as_is(loop, monkeypatch):
    async def main():
        with refused_address() as bad:
            fake_resolver(monkeypatch, loop, [(socket.AF_INET, bad), (socket.AF_INET, bad)])
            with pytest.raises(ConnectionRefusedError) as info:
                await loop.create_connection(Recorder, "twice.example", 1)
            assert str(info.value) == f"[Errno {errno.ECONNREFUSED}] Connect call failed {bad}"

    run(loop, main())


def test_create_connection_empty_resolution(loop, monkeypatch):
    async def main():
        fake_resolver(monkeypatch, loop, [])
        with pytest.raises(OSError) as info:
            await loop.create_connection(Recorder, "empty.example", 1)
        assert str(info.value) == "getaddrinfo() returned empty list"

    run(loop, main())


# ----- bad arguments -----


def _bad_argument_cases(tcp, udp, unix_stream, path):
    f = Recorder
    cases = [
        (
            lambda lp: lp.create_connection(f, HOST, 1, sock=tcp),
            ValueError,
            "host/port and sock can not be specified at the same time",
        ),
        (
            lambda lp: lp.create_connection(f),
            ValueError,
            "host and port was not specified and no sock specified",
        ),
        (
            lambda lp: lp.create_connection(f, HOST, 1, ssl_handshake_timeout=1),
            ValueError,
            "ssl_handshake_timeout is only meaningful with ssl",
        ),
        (
            lambda lp: lp.create_connection(f, HOST, 1, server_hostname="x"),
            ValueError,
            "server_hostname is only meaningful with ssl",
        ),
        (
            lambda lp: lp.create_connection(f, sock=udp),
            ValueError,
            f"A Stream Socket was expected, got {udp!r}",
        ),
        (
            lambda lp: lp.create_server(f, HOST, 0, sock=tcp),
            ValueError,
            "host/port and sock can not be specified at the same time",
        ),
        (
            lambda lp: lp.create_server(f),
            ValueError,
            "Neither host/port nor sock were specified",
        ),
        (
            lambda lp: lp.create_server(f, HOST, 0, ssl_handshake_timeout=1),
            ValueError,
            "ssl_handshake_timeout is only meaningful with ssl",
        ),
        (
            lambda lp: lp.create_server(f, sock=udp),
            ValueError,
            f"A Stream Socket was expected, got {udp!r}",
        ),
        (
            lambda lp: lp.create_server(f, HOST, 0, ssl=True),
            TypeError,
            "ssl argument must be an SSLContext or None",
        ),
        (
            lambda lp: lp.connect_accepted_socket(f, udp),
            ValueError,
            f"A Stream Socket was expected, got {udp!r}",
        ),
        (
            lambda lp: lp.connect_accepted_socket(f, tcp, ssl_handshake_timeout=1),
            ValueError,
            "ssl_handshake_timeout is only meaningful with ssl",
        ),
    ]
    if sys.version_info >= (3, 11):
        cases += [
            (
                lambda lp: lp.create_connection(f, HOST, 1, ssl_shutdown_timeout=1),
                ValueError,
                "ssl_shutdown_timeout is only meaningful with ssl",
            ),
            (
                lambda lp: lp.create_server(f, HOST, 0, ssl_shutdown_timeout=1),
                ValueError,
                "ssl_shutdown_timeout is only meaningful with ssl",
            ),
        ]
    if unix_stream is not None:
        cases += [
            (
                lambda lp: lp.create_unix_connection(f, path, sock=unix_stream),
                ValueError,
                "path and sock can not be specified at the same time",
            ),
            (
                lambda lp: lp.create_unix_connection(f),
                ValueError,
                "no path and sock were specified",
            ),
            (
                lambda lp: lp.create_unix_connection(f, sock=tcp),
                ValueError,
                f"A UNIX Domain Stream Socket was expected, got {tcp!r}",
            ),
            (
                lambda lp: lp.create_unix_connection(f, path, server_hostname="x"),
                ValueError,
                "server_hostname is only meaningful with ssl",
            ),
            (
                lambda lp: lp.create_unix_server(f, path, sock=unix_stream),
                ValueError,
                "path and sock can not be specified at the same time",
            ),
            (
                lambda lp: lp.create_unix_server(f),
                ValueError,
                "path was not specified, and no sock specified",
            ),
            (
                lambda lp: lp.create_unix_server(f, sock=tcp),
                ValueError,
                f"A UNIX Domain Stream Socket was expected, got {tcp!r}",
            ),
            (
                lambda lp: lp.create_unix_server(f, path, ssl_handshake_timeout=1),
                ValueError,
                "ssl_handshake_timeout is only meaningful with ssl",
            ),
        ]
    return cases


def test_bad_arguments(loop, tmp_path):
    path = unix_path(tmp_path)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    unix_stream = None
    if hasattr(socket, "AF_UNIX"):
        unix_stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    socks = [s for s in (tcp, udp, unix_stream) if s is not None]

    async def main():
        for call, exc_type, message in _bad_argument_cases(tcp, udp, unix_stream, path):
            with pytest.raises(exc_type) as info:
                await call(loop)
            assert str(info.value) == message
        # nothing was closed or taken over by the failed calls
        assert all(s.fileno() >= 0 for s in socks)

    try:
        run(loop, main())
    finally:
        for s in socks:
            s.close()


@pytest.mark.debug_mode(False)
def test_idle_connections_cost_the_collector_no_more_than_asyncios(loop):
    """Each accepted connection adds no more collector-tracked objects than it does on
    stdlib asyncio: a transport binds the core methods it uses, not all of them up front
    (15 bound methods a connection once made rsloop's young collections outnumber
    asyncio's when 10,000 clients connected)."""
    n = 64

    def tracked_per_connection(lp) -> float:
        made: list[asyncio.BaseTransport] = []

        class Idle(asyncio.Protocol):
            def connection_made(self, transport):
                made.append(transport)

        async def connect(port: int, count: int) -> list[socket.socket]:
            target = len(made) + count
            clients = []
            for _ in range(count):
                c = socket.socket()
                c.setblocking(False)
                await lp.sock_connect(c, (HOST, port))
                clients.append(c)
            while len(made) < target:
                await asyncio.sleep(0.001)
            return clients

        async def main() -> float:
            server = await lp.create_server(Idle, HOST, 0)
            port = server.sockets[0].getsockname()[1]
            clients = await connect(port, 1)  # first-use imports and caches
            gc.collect()
            before = len(gc.get_objects())
            clients += await connect(port, n)
            added = len(gc.get_objects()) - before
            for c in clients:
                c.close()
            for t in made:
                t.close()
            await close_server(server)
            return added / n

        return run(lp, main())

    ours = tracked_per_connection(loop)
    reference = asyncio.new_event_loop()
    try:
        theirs = tracked_per_connection(reference)
    finally:
        reference.close()
    assert ours <= theirs + 0.5, (ours, theirs)


def test_transport_methods_called_through_the_class(loop):
    """``SocketTransport.write(transport, data)`` and friends work as on asyncio's
    classes, before and after the transport itself first used them."""

    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        try:
            got = loop.create_future()

            class Client(asyncio.Protocol):
                def data_received(self, data):
                    if not got.done():
                        got.set_result(data)

            transport, _ = await loop.create_connection(Client, *addr)
            cls = type(transport)
            cls.write(transport, b"via the class")
            assert await got == b"via the class"
            assert cls.get_write_buffer_size(transport) == transport.get_write_buffer_size()
            assert cls.is_closing(transport) is False
            cls.close(transport)
            assert transport.is_closing()
        finally:
            await close_server(server)

    run(loop, main())
