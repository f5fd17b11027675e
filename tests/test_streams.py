"""asyncio streams (StreamReader / StreamWriter) over rsloop's transports.

Streams are stdlib code on top of the public transport API, so any difference from
stdlib asyncio here comes from the transports underneath: flow control (drain), EOF and
close ordering, extra info.
"""

from __future__ import annotations

import asyncio
import socket
import types
from typing import Any

import pytest
from netutil import (
    HOST,
    linger_reset,
    listening_socket,
    needs_unix,
    payload,
    recv_all,
    recv_exactly,
    run,
    settle,
    unix_path,
)

MIB = 1 << 20

# The stream functions under test, set per test by the `api` fixture:
# - "asyncio": asyncio's module functions as a user calls them. Once rsloop has made a
#   native loop they are rsloop's (unless RSLOOP_FAST_STREAMS=0), handing out
#   rsloop.StreamReader / StreamWriter on native loops and asyncio's classes elsewhere;
# - "rsloop": rsloop's functions called by name;
# - "asyncio-classes": asyncio's own functions from before rsloop replaced them, so
#   asyncio's StreamReaderProtocol -> StreamReader path runs over rsloop's transports.
API: Any = asyncio


def _original_functions() -> Any:
    import rsloop

    if rsloop._backend.NATIVE_ERROR is not None:
        return asyncio
    from rsloop import _streams

    return types.SimpleNamespace(**_streams._ASYNCIO_FUNCTIONS)


@pytest.fixture(autouse=True, params=["asyncio", "rsloop", "asyncio-classes"])
def api(request, loop):
    global API
    if request.param == "asyncio":
        API = asyncio
    elif request.param == "rsloop":
        import rsloop

        API = rsloop
    else:
        API = _original_functions()
    yield request.param
    API = asyncio


def fast(loop) -> bool:
    """Functions that hand out rsloop's readers on a native loop, on a native loop."""
    import rsloop

    if getattr(loop, "backend", None) not in ("uring", "poll"):
        return False
    from rsloop import _streams

    if not _streams.enabled():
        return False
    if API is asyncio:
        # Making this native loop imported rsloop._loop, which must have installed them.
        assert asyncio.open_connection is rsloop.open_connection
        assert asyncio.streams.start_server is rsloop.start_server
        return True
    return API is rsloop


async def scripted_server(loop, chunks, path=None, **kwargs):
    """A stream server that sends ``chunks`` (draining after each), then closes."""
    done = loop.create_future()

    async def handler(reader, writer):
        try:
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
            writer.close()
            await writer.wait_closed()
        finally:
            if not done.done():
                done.set_result(None)

    if path is None:
        server = await API.start_server(handler, HOST, 0, **kwargs)
        return server, server.sockets[0].getsockname(), done
    server = await API.start_unix_server(handler, path, **kwargs)
    return server, path, done


async def open_to(addr, **kwargs):
    if isinstance(addr, str):
        reader, writer = await API.open_unix_connection(addr, **kwargs)
    else:
        reader, writer = await API.open_connection(*addr, **kwargs)
    import rsloop

    if fast(asyncio.get_running_loop()):
        assert type(reader) is rsloop.StreamReader
        assert type(writer) is rsloop.StreamWriter
    else:
        # asyncio's classes, or what RSLOOP_FAST_STREAMS=1 rebound their names to.
        assert type(reader) is asyncio.streams.StreamReader
        assert type(writer) is asyncio.streams.StreamWriter
    return reader, writer


async def finish(server, writer, done=None) -> None:
    writer.close()
    await writer.wait_closed()
    if done is not None:
        await done
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("kind", ["tcp", pytest.param("unix", marks=needs_unix)])
def test_reader_methods(loop, tmp_path, kind):
    chunks = [
        b"line1\nli",
        b"ne2\nexact10___a|b",
        b"||cde",
        b"fgh rest of it",
    ]

    async def main():
        path = unix_path(tmp_path) if kind == "unix" else None
        server, addr, done = await scripted_server(loop, chunks, path)
        reader, writer = await open_to(addr)
        assert not reader.at_eof()
        assert await reader.readline() == b"line1\n"
        assert await reader.readline() == b"line2\n"
        assert await reader.readexactly(10) == b"exact10___"
        assert await reader.readuntil(b"|") == b"a|"
        assert await reader.readuntil(b"||") == b"b||"
        assert await reader.readexactly(3) == b"cde"
        assert await reader.readexactly(0) == b""
        first = await reader.read(3)
        assert 1 <= len(first) <= 3
        rest = await reader.read()
        assert first + rest == b"fgh rest of it"
        assert reader.at_eof()
        assert await reader.read() == b""
        assert await reader.read(5) == b""
        assert await reader.readline() == b""
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(1)
        assert info.value.partial == b"" and info.value.expected == 1
        await finish(server, writer, done)

    run(loop, main())


def test_at_eof_only_once_buffer_is_empty(loop):
    async def main():
        server, addr, done = await scripted_server(loop, [b"tail"])
        reader, writer = await open_to(addr)
        await done  # the server has sent everything and closed
        assert await reader.readexactly(2) == b"ta"
        assert not reader.at_eof()  # EOF may be known, but data is left
        assert await reader.read() == b"il"
        assert reader.at_eof()
        await finish(server, writer)

    run(loop, main())


def test_incomplete_read_errors(loop):
    async def main():
        server, addr, done = await scripted_server(loop, [b"12345"])
        reader, writer = await open_to(addr)
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(10)
        assert info.value.partial == b"12345"
        assert info.value.expected == 10
        assert str(info.value) == "5 bytes read on a total of 10 expected bytes"
        assert isinstance(info.value, EOFError)
        assert reader.at_eof()
        await finish(server, writer, done)

        server, addr, done = await scripted_server(loop, [b"no sep", b"arator"])
        reader, writer = await open_to(addr)
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readuntil(b"\n")
        assert info.value.partial == b"no separator"
        assert info.value.expected is None
        assert str(info.value) == "12 bytes read on a total of undefined expected bytes"
        await finish(server, writer, done)

        server, addr, done = await scripted_server(loop, [b"last line without newline"])
        reader, writer = await open_to(addr)
        assert await reader.readline() == b"last line without newline"
        await finish(server, writer, done)

    run(loop, main())


def test_limit_overrun(loop):
    async def main():
        # sent in one write: the whole 47 bytes arrive together
        server, addr, done = await scripted_server(loop, [b"x" * 40 + b"\nshort\n"])
        reader, writer = await open_to(addr, limit=16)
        await done
        with pytest.raises(asyncio.LimitOverrunError) as info:
            await reader.readuntil(b"\n")
        assert str(info.value) == "Separator is found, but chunk is longer than limit"
        assert info.value.consumed == 40
        # nothing was consumed by the failed readuntil; readline drops the long line
        with pytest.raises(ValueError) as vinfo:
            await reader.readline()
        assert str(vinfo.value) == "Separator is found, but chunk is longer than limit"
        assert await reader.readline() == b"short\n"
        assert await reader.read() == b""
        await finish(server, writer)

        server, addr, done = await scripted_server(loop, [b"y" * 40])
        reader, writer = await open_to(addr, limit=16)
        await done
        with pytest.raises(asyncio.LimitOverrunError) as info:
            await reader.readuntil(b"\n")
        assert str(info.value) == "Separator is not found, and chunk exceed the limit"
        assert await reader.readexactly(40) == b"y" * 40
        await finish(server, writer)

    run(loop, main())


@pytest.mark.parametrize("kind", ["tcp", pytest.param("unix", marks=needs_unix)])
def test_stream_echo_large(loop, tmp_path, kind):
    data = payload(MIB)

    async def handler(reader, writer):
        got = await reader.read()
        writer.write(got[::-1])
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        if kind == "unix":
            path = unix_path(tmp_path)
            server = await API.start_unix_server(handler, path)
            reader, writer = await API.open_unix_connection(path)
        else:
            server = await API.start_server(handler, HOST, 0)
            reader, writer = await API.open_connection(*server.sockets[0].getsockname())
        assert writer.can_write_eof()
        writer.write(data)
        await writer.drain()
        writer.write_eof()
        assert await reader.read() == data[::-1]
        assert reader.at_eof()
        await finish(server, writer)

    run(loop, main())


def test_plain_function_client_connected_cb(loop):
    connected = []

    def handler(reader, writer):
        connected.append(writer.get_extra_info("peername"))
        writer.write(b"hi from a plain callback")
        writer.close()

    async def main():
        server = await API.start_server(handler, HOST, 0)
        reader, writer = await API.open_connection(*server.sockets[0].getsockname())
        assert await reader.read() == b"hi from a plain callback"
        assert connected == [writer.get_extra_info("sockname")]
        await finish(server, writer)

    run(loop, main())


def test_drain_waits_for_a_non_reading_peer(loop):
    data = payload(4 * MIB)

    async def main():
        with listening_socket() as lsock:
            reader, writer = await API.open_connection(*lsock.getsockname())
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            conn, _ = lsock.accept()
            with conn:
                writer.write(data)
                low, high = writer.transport.get_write_buffer_limits()
                assert writer.transport.get_write_buffer_size() > high
                drain = asyncio.ensure_future(writer.drain())
                await settle()
                assert not drain.done()
                got = await recv_exactly(loop, conn, len(data))
                assert got == data
                await asyncio.wait_for(drain, 5)
                assert drain.result() is None
                assert writer.transport.get_write_buffer_size() <= low
                # an idle writer drains at once
                await writer.drain()
                writer.close()
                assert writer.is_closing()
                await writer.wait_closed()
                assert await recv_all(loop, conn) == b""

    run(loop, main())


def test_drain_raises_when_peer_resets(loop):
    async def main():
        with listening_socket() as lsock:
            reader, writer = await API.open_connection(*lsock.getsockname())
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            conn, _ = lsock.accept()
            with conn:
                writer.write(payload(4 * MIB))
                drain = asyncio.ensure_future(writer.drain())
                await settle()
                assert not drain.done()
                linger_reset(conn)
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(drain, 5)
            # the reader saw the same failure
            with pytest.raises(ConnectionResetError):
                await reader.read()
            writer.close()
            with pytest.raises(ConnectionResetError):
                await writer.wait_closed()

    run(loop, main())


def test_writer_close_and_extra_info(loop):
    async def main():
        peers = []

        async def handler(reader, writer):
            peers.append((writer.get_extra_info("peername"), await reader.read()))
            writer.close()
            await writer.wait_closed()

        server = await API.start_server(handler, HOST, 0)
        addr = server.sockets[0].getsockname()
        reader, writer = await API.open_connection(*addr)
        sock = writer.get_extra_info("socket")
        assert isinstance(sock, asyncio.trsock.TransportSocket)
        assert writer.get_extra_info("peername") == addr
        assert writer.get_extra_info("sockname") == sock.getsockname()
        assert writer.get_extra_info("missing", "d") == "d"
        assert writer.transport.get_extra_info("peername") == addr
        assert not writer.is_closing()
        writer.writelines([b"a", b"b", b"c"])
        writer.close()
        assert writer.is_closing()
        await writer.wait_closed()
        await writer.wait_closed()  # again: returns at once
        assert await reader.read() == b""
        server.close()
        await server.wait_closed()
        while not peers:
            await asyncio.sleep(0)
        assert peers == [(writer.get_extra_info("sockname"), b"abc")]

    run(loop, main())


@needs_unix
def test_unix_writer_extra_info(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        server, _, done = await scripted_server(loop, [b"x"], path)
        reader, writer = await API.open_unix_connection(path)
        assert writer.get_extra_info("peername") == path
        assert writer.get_extra_info("socket").family == socket.AF_UNIX
        assert await reader.read() == b"x"
        await finish(server, writer, done)

    run(loop, main())


def test_reader_pauses_transport_above_twice_the_limit(loop):
    async def main():
        big = b"z" * 1000
        server, addr, done = await scripted_server(loop, [big])
        reader, writer = await open_to(addr, limit=64)
        await done
        await settle()
        # The protocol paused reading once its buffer passed 2 * limit ...
        assert not writer.transport.is_reading()
        assert await reader.readexactly(1000) == big
        # ... and resumes when the reader consumes it.
        assert await reader.read() == b""
        await finish(server, writer)

    run(loop, main())
