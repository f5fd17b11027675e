"""How servers accept: bursts of connections, running out of fds, accept errors.

On both native backends a server's listening socket is accepted by one multishot accept
(``rsloop/_net.py``'s ``_Acceptor``): an ACCEPT in the ring on ``uring``, the driver's own
``accept4`` loop on readiness on ``poll`` (and on ``uring`` where the kernel has no
multishot accept: ``RSLOOP_TEST_URING_NO_ACCEPT_MULTI=1`` forces that path); on the
fallback, by asyncio's ``_accept_connection`` on readiness. The behaviour tests run on
every backend and stdlib asyncio alike.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import os
import socket
import threading
import time
from asyncio import constants

import pytest
from netutil import HOST, EchoServer, collecting, payload, run, tcp_echo_server, unix_path

try:
    import resource  # Unix only
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]


async def _echo_round_trip(loop, addr, data: bytes) -> tuple:
    """One client connection: ``data`` out, the echo back; returns (local, peer) names."""
    reader, writer = await asyncio.open_connection(*addr)
    writer.write(data)
    await writer.drain()
    assert await reader.readexactly(len(data)) == data
    names = (writer.get_extra_info("sockname"), writer.get_extra_info("peername"))
    writer.close()
    await writer.wait_closed()
    return names


def test_a_burst_of_connections_is_accepted_with_each_peer_named(loop):
    async def main():
        factory, protos = collecting(EchoServer)
        server = await loop.create_server(factory, HOST, 0, backlog=200)
        addr = server.sockets[0].getsockname()
        names = await asyncio.gather(
            *(_echo_round_trip(loop, addr, payload(64, seed=i)) for i in range(150))
        )
        server.close()
        await server.wait_closed()
        # Every server-side transport names its client as the client names itself.
        clients = sorted(local for local, _ in names)
        peers = sorted(p.transport.get_extra_info("peername") for p in protos)
        assert peers == clients
        assert all(peer == addr for _, peer in names)

    run(loop, main())


def test_unix_server_accepts(loop, tmp_path):
    async def main():
        path = unix_path(tmp_path)
        factory, protos = collecting(EchoServer)
        server = await loop.create_unix_server(factory, path)
        for i in range(5):
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"x%d" % i)
            assert await reader.readexactly(2) == b"x%d" % i
            writer.close()
            await writer.wait_closed()
        assert len(protos) == 5
        assert all(p.transport.get_extra_info("peername") == "" for p in protos)
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_closed_server_refuses_at_once_and_accepts_nothing_more(loop):
    async def main():
        factory, protos = collecting(EchoServer)
        server = await loop.create_server(factory, HOST, 0)
        addr = server.sockets[0].getsockname()
        await _echo_round_trip(loop, addr, b"before")
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, *addr)
        assert len(protos) == 1

    run(loop, main())


def _fill_fd_table() -> tuple[list[int], tuple[int, int]]:
    """Lowers this process's fd limit to just above the fds open now and takes every free
    number below it, so the next accept fails with EMFILE. Returns the fds taken and the
    old limit, for :func:`_free_fd_table`."""
    if resource is None or not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs Unix fd limits (resource) and /proc/self/fd")
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 4, old[1]))
    taken = []
    try:
        while True:
            taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        assert exc.errno == errno.EMFILE
    return taken, old


def _free_fd_table(taken: list[int], old: tuple[int, int]) -> None:
    for fd in taken:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, old)


def test_out_of_fds_reports_backs_off_and_accepts_again(loop, handler_log, monkeypatch):
    """asyncio's rule: EMFILE from accept goes to the exception handler as "socket.accept()
    out of system resource", accepting pauses for ACCEPT_RETRY_DELAY, then resumes; the
    waiting connection is served, not lost. (The fd limit is lowered before the server
    starts serving: io_uring's ACCEPT takes the limit as it is when armed.)"""
    monkeypatch.setattr(constants, "ACCEPT_RETRY_DELAY", 0.05)

    async def main():
        factory, protos = collecting(EchoServer)
        # backlog=1: asyncio tries accept() `backlog` times per wake-up and schedules a
        # retry for each EMFILE; with one, no stale retry outlives the server.
        server = await loop.create_server(factory, HOST, 0, backlog=1, start_serving=False)
        addr = server.sockets[0].getsockname()
        client = socket.socket()
        client.setblocking(False)
        taken, old = _fill_fd_table()
        try:
            await server.start_serving()
            try:
                client.connect(addr)
            except BlockingIOError:
                pass
            for _ in range(200):
                if handler_log:
                    break
                await asyncio.sleep(0.01)
        finally:
            _free_fd_table(taken, old)
        contexts = handler_log.take()
        assert contexts
        for ctx in contexts:
            assert ctx["message"] == "socket.accept() out of system resource"
            assert isinstance(ctx["exception"], OSError)
            assert ctx["exception"].errno == errno.EMFILE
            assert ctx["socket"].fileno() == server.sockets[0].fileno()
        # After the back-off the same connection is accepted and served.
        await loop.sock_sendall(client, b"still here")
        assert await loop.sock_recv(client, 100) == b"still here"
        assert len(protos) == 1
        client.close()
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_native_servers_accept_by_multishot_accept_and_stop_at_close(loop):
    if getattr(loop, "backend", None) not in ("uring", "poll"):
        pytest.skip("multishot accept is the native backends'")

    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        [sock] = server.sockets
        assert list(loop._acceptors) == [sock._sock]
        await _echo_round_trip(loop, addr, b"ring")
        server.close()
        await server.wait_closed()
        assert not loop._acceptors

    run(loop, main())


def test_a_listening_socket_shut_down_ends_its_accept_with_einval_once(loop, handler_log):
    """A socket that no longer listens ends its accept with EINVAL on every driver (the
    kernel's multishot accept, or the driver's own accept4): the loop's handler hears it
    once and that socket is accepted no more, where accepting on would only fail again.
    (asyncio's reader would report it at every readiness.)"""
    if getattr(loop, "backend", None) not in ("uring", "poll"):
        pytest.skip("the multishot accept's end")

    async def main():
        server, _, _ = await tcp_echo_server(loop)
        [sock] = server.sockets
        sock._sock.shutdown(socket.SHUT_RDWR)
        for _ in range(200):
            if handler_log:
                break
            await asyncio.sleep(0.01)
        [ctx] = handler_log.take()
        assert isinstance(ctx["exception"], OSError)
        assert ctx["exception"].errno == errno.EINVAL
        assert not loop._acceptors
        await asyncio.sleep(0.1)
        assert not handler_log.take()
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_accept_errors_reach_the_handler_and_accepting_goes_on(loop, handler_log):
    """As asyncio's reader callback does when accept() raises something that is neither
    "try again" nor "out of resources": the loop's handler hears it, the server accepts on."""
    if getattr(loop, "backend", None) not in ("uring", "poll"):
        pytest.skip("drives the multishot acceptor's error path")

    async def main():
        server, addr, _ = await tcp_echo_server(loop)
        [acceptor] = loop._acceptors.values()
        # The kernel ends the accept with EPERM (as a firewall hook can make accept fail).
        loop._accept_stop(acceptor._token)
        loop.call_soon(acceptor._on_accept, -errno.EPERM)
        await asyncio.sleep(0)
        [ctx] = handler_log.take()
        assert isinstance(ctx["exception"], PermissionError)
        assert ctx["exception"].errno == errno.EPERM
        assert len(loop._acceptors) == 1
        await _echo_round_trip(loop, addr, b"on")
        server.close()
        await server.wait_closed()

    run(loop, main())


CONNECTION_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("CONNECTION_VAR")


def test_connections_run_in_the_context_of_start_serving(loop):
    """asyncio's reader handle copies the context `_start_serving` runs in; the protocol
    factory of each connection sees those contextvars, not the accept callback's."""

    async def main():
        seen = []

        def factory():
            seen.append(CONNECTION_VAR.get("unset"))
            return EchoServer()

        token = CONNECTION_VAR.set("server's")
        server = await loop.create_server(factory, HOST, 0)
        CONNECTION_VAR.reset(token)
        addr = server.sockets[0].getsockname()
        await _echo_round_trip(loop, addr, b"ctx")
        assert seen == ["server's"]
        server.close()
        await server.wait_closed()

    run(loop, main())


def _in_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(30)
    assert not t.is_alive() and out, "loop thread hung or failed"
    return out[0]


def test_a_connection_made_while_the_loop_moves_threads_is_served(loop):
    """A loop run on one thread, then on another (io_uring: a new ring there, the old
    ring's accept cancelled, what it took handed over): a client that connected in
    between is served, not dropped."""

    async def start():
        return await loop.create_server(EchoServer, HOST, 0)

    server = _in_thread(lambda: loop.run_until_complete(start()))
    addr = server.sockets[0].getsockname()
    client = socket.create_connection(addr, timeout=5)
    try:
        client.sendall(b"moved")
        time.sleep(0.05)  # the old ring (if any) accepts it now, with no one reaping

        async def serve():
            for _ in range(500):
                if client_got:
                    break
                await asyncio.sleep(0.01)
            server.close()

        client_got: list = []
        reader = threading.Thread(target=lambda: client_got.append(client.recv(100)))
        reader.start()
        _in_thread(lambda: loop.run_until_complete(serve()))
        reader.join(5)
        assert client_got == [b"moved"]
    finally:
        client.close()
    # (3.12+: wait_closed also waits for the served connection, which the close ends.)
    run(loop, server.wait_closed())
