"""Pipe transports: ``connect_read_pipe`` / ``connect_write_pipe`` over pipes, FIFOs,
PTYs and socket pairs, on every backend of the ``loop`` fixture (``asyncio`` is the
reference)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix pipes")

WAIT_S = 5.0
PY311 = sys.version_info >= (3, 11)
MIB = 1 << 20


def run(loop, coro, timeout: float = WAIT_S):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def payload(n: int) -> bytes:
    return bytes((i * 7 + (i >> 8)) & 0xFF for i in range(n))


class ReadRecorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list = []
        self.data = bytearray()
        self.lost = asyncio.get_event_loop().create_future()

    def connection_made(self, transport) -> None:
        self.events.append("made")

    def data_received(self, data) -> None:
        if self.events[-1] != "data":
            self.events.append("data")
        self.data += data

    def eof_received(self) -> None:
        self.events.append("eof")

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))
        self.lost.set_result(exc)


class WriteRecorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list = []
        self.lost = asyncio.get_event_loop().create_future()
        self.resumed = asyncio.Event()

    def connection_made(self, transport) -> None:
        self.events.append("made")

    def pause_writing(self) -> None:
        self.events.append("pause")
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.events.append("resume")
        self.resumed.set()

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))
        self.lost.set_result(exc)


def drain_in_thread(fd: int, into: bytearray) -> threading.Thread:
    def reader():
        with os.fdopen(fd, "rb", buffering=0) as f:
            while chunk := f.read(65536):
                into.extend(chunk)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t


def test_read_pipe_data_eof_and_close(loop):
    rfd, wfd = os.pipe()
    data = payload(300_000)

    async def main():
        transport, proto = await loop.connect_read_pipe(ReadRecorder, os.fdopen(rfd, "rb", 0))
        assert transport.get_extra_info("pipe").fileno() == rfd
        if PY311:  # 3.10's read pipe transport has no is_reading()
            assert transport.is_reading()
        writer = threading.Thread(target=lambda: (os.write(wfd, data), os.close(wfd)))
        writer.start()
        exc = await proto.lost
        writer.join()
        return transport, proto, exc

    transport, proto, exc = run(loop, main())
    assert exc is None
    assert bytes(proto.data) == data
    assert proto.events == ["made", "data", "eof", ("lost", None)]
    assert transport.is_closing()


def test_read_pipe_pause_and_resume(loop):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_read_pipe(ReadRecorder, os.fdopen(rfd, "rb", 0))
        transport.pause_reading()
        if PY311:
            assert not transport.is_reading()
        os.write(wfd, b"held")
        await asyncio.sleep(0.05)
        held = bytes(proto.data)
        transport.resume_reading()
        await asyncio.sleep(0.05)
        os.close(wfd)
        await proto.lost
        return held, bytes(proto.data)

    held, after = run(loop, main())
    assert (held, after) == (b"", b"held")


def test_read_pipe_close_before_eof(loop):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_read_pipe(ReadRecorder, os.fdopen(rfd, "rb", 0))
        transport.close()
        assert transport.is_closing()
        return await proto.lost, proto.events

    try:
        assert run(loop, main()) == (None, ["made", ("lost", None)])
    finally:
        os.close(wfd)


def test_write_pipe_large_write_with_flow_control(loop):
    rfd, wfd = os.pipe()
    data = payload(MIB)
    received = bytearray()

    async def main():
        transport, proto = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        transport.set_write_buffer_limits(high=64 * 1024)
        assert transport.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        transport.write(data[:1000])
        transport.writelines([data[1000:2000], memoryview(data)[2000:]])
        # The pipe (64 KiB) cannot take 1 MiB at once: the rest is buffered, over the mark.
        assert transport.get_write_buffer_size() > 64 * 1024
        assert proto.events == ["made", "pause"]
        reader = drain_in_thread(rfd, received)
        await proto.resumed.wait()
        transport.close()
        exc = await proto.lost
        reader.join(WAIT_S)
        return proto.events, exc

    events, exc = run(loop, main())
    assert exc is None
    assert bytes(received) == data
    assert events == ["made", "pause", "resume", ("lost", None)]


def test_write_pipe_write_eof(loop):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        assert transport.can_write_eof()
        transport.write(b"last words")
        transport.write_eof()
        await proto.lost
        return os.read(rfd, 100), os.read(rfd, 100)

    try:
        assert run(loop, main()) == (b"last words", b"")
    finally:
        os.close(rfd)


def test_write_pipe_reader_goes_away(loop):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        os.close(rfd)
        # asyncio watches a write pipe for readability to notice the reader closing.
        return await proto.lost

    assert run(loop, main()) is None


def test_write_pipe_broken_mid_write(loop, handler_log):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        transport.write(b"x" * (MIB // 2))  # fills the pipe, the rest buffered
        os.close(rfd)
        return await proto.lost

    exc = run(loop, main())
    assert isinstance(exc, BrokenPipeError), exc
    handler_log.take()  # debug mode may log the fatal error


def test_write_after_close_is_dropped(loop):
    rfd, wfd = os.pipe()

    async def main():
        transport, proto = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        transport.close()
        transport.write(b"dropped")
        await proto.lost
        return os.read(rfd, 100)

    try:
        assert run(loop, main()) == b""
    finally:
        os.close(rfd)


def test_fifo(loop, tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)

    async def main():
        rt, rp = await loop.connect_read_pipe(ReadRecorder, os.fdopen(rfd, "rb", 0))
        wt, wp = await loop.connect_write_pipe(WriteRecorder, os.fdopen(wfd, "wb", 0))
        wt.write(b"through the fifo")
        wt.close()
        await wp.lost
        await rp.lost
        return bytes(rp.data)

    assert run(loop, main()) == b"through the fifo"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux pty semantics")
def test_pty(loop):
    master, slave = os.openpty()

    async def main():
        rt, rp = await loop.connect_read_pipe(ReadRecorder, os.fdopen(master, "rb", 0))
        wt, wp = await loop.connect_write_pipe(WriteRecorder, os.fdopen(slave, "wb", 0))
        wt.write(b"to the terminal\n")
        while b"\n" not in rp.data:
            await asyncio.sleep(0.01)
        wt.close()
        await wp.lost
        # The slave closed: reading the master fails with EIO, which asyncio treats as EOF
        # for a pty... and reports as an error for anything else.
        await rp.lost
        return bytes(rp.data)

    assert run(loop, main()).replace(b"\r\n", b"\n") == b"to the terminal\n"


def test_socketpair_as_a_pipe(loop):
    a, b = socket.socketpair()

    async def main():
        rt, rp = await loop.connect_read_pipe(ReadRecorder, a)
        b.sendall(b"over a socket")
        b.close()
        await rp.lost
        return bytes(rp.data)

    assert run(loop, main()) == b"over a socket"


def test_regular_file_is_refused(loop, tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"data")

    async def main():
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="Pipe transport is for pipes/sockets only"):
                await loop.connect_read_pipe(asyncio.Protocol, f)

    run(loop, main())


def test_stream_reader_over_a_pipe(loop):
    rfd, wfd = os.pipe()

    async def main():
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(rfd, "rb", 0)
        )
        os.write(wfd, b"line one\nline two\ntail")
        os.close(wfd)
        return [await reader.readline(), await reader.readline(), await reader.read()]

    assert run(loop, main()) == [b"line one\n", b"line two\n", b"tail"]
