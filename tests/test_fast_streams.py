"""rsloop.StreamReader against asyncio.StreamReader, operation by operation.

The native reader keeps asyncio's state in Rust fields and received ``bytes`` in a chunk
queue (copied into ``_buffer`` only when something needs the bytearray). These tests run
generated sequences of feeds and reads on both readers and compare every observable:
the value or exception of each read, whether it has to wait, ``_buffer``, ``at_eof()``,
and the transport's pause/resume calls. Reads are stepped by hand (``send(None)``), so no
loop runs and nothing waits.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

rsloop = pytest.importorskip("rsloop")
if rsloop._backend.NATIVE_ERROR is not None:  # pragma: no cover
    pytest.skip("no native module", allow_module_level=True)

WAITS = "waits"


class Transport:
    """Records the reader's flow-control calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def outcome(awaitable):
    """What one step of a read gives: its value, its exception, or WAITS (then closed)."""
    it = awaitable.__await__()
    try:
        it.send(None)
    except StopIteration as stop:
        return ("value", stop.value)
    except BaseException as exc:  # noqa: BLE001 - compared between the readers
        return ("raises", type(exc).__name__, exc.args)
    it.close()
    return (WAITS,)


def make(cls, loop, limit):
    reader = cls(limit=limit, loop=loop)
    transport = Transport()
    reader.set_transport(transport)
    return reader, transport


data = st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\r", b"\n"))
separators = st.sampled_from([b"\n", b"ab", b"\n\n", b"x"])
if sys.version_info >= (3, 13):
    separators = separators | st.just((b"\n", b"ab"))
ops = st.one_of(
    st.tuples(st.just("feed"), data),
    st.tuples(st.just("feed_bytearray"), data),
    st.tuples(st.just("feed_eof")),
    st.tuples(st.just("read"), st.integers(-1, 50)),
    st.tuples(st.just("readexactly"), st.integers(-1, 50)),
    st.tuples(st.just("readline")),
    st.tuples(st.just("readuntil"), separators),
    st.tuples(st.just("anext")),
    st.tuples(st.just("buffer")),
    st.tuples(st.just("exception"), st.sampled_from([ValueError, ConnectionResetError])),
)


def apply(reader, op):
    name = op[0]
    if name in ("feed", "feed_bytearray"):
        chunk = op[1] if name == "feed" else bytearray(op[1])
        try:
            reader.feed_data(chunk)
        except AssertionError as exc:
            return ("raises", "AssertionError", exc.args)
        return ("fed",)
    if name == "feed_eof":
        reader.feed_eof()
        return ("eof",)
    if name == "buffer":
        return ("buffer", bytes(reader._buffer))
    if name == "exception":
        reader.set_exception(op[1]("boom"))
        return ("set",)
    if name == "anext":
        return outcome(reader.__anext__())
    return outcome(getattr(reader, name)(*op[1:]))


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=25), st.integers(1, 30))
def test_same_observable_behaviour_as_asyncio(program, limit):
    loop = asyncio.new_event_loop()
    try:
        theirs, their_transport = make(asyncio.StreamReader, loop, limit)
        ours, our_transport = make(rsloop.StreamReader, loop, limit)
        for op in program:
            expected = apply(theirs, op)
            got = apply(ours, op)
            assert got == expected, op
            assert bytes(ours._buffer) == bytes(theirs._buffer), op
            assert ours.at_eof() == theirs.at_eof()
            assert ours._paused == theirs._paused
            assert our_transport.calls == their_transport.calls
    finally:
        loop.close()


def test_state_is_asyncios_attributes():
    loop = asyncio.new_event_loop()
    try:
        reader = rsloop.StreamReader(limit=10, loop=loop)
        assert isinstance(reader, asyncio.StreamReader)
        assert reader._limit == 10 and reader._loop is loop
        assert reader._buffer == bytearray() and reader._waiter is None
        assert reader._eof is False and reader._exception is None
        reader.feed_data(b"abc")
        reader.feed_data(b"def")
        # The received chunks show up in _buffer, which stays the same object.
        buf = reader._buffer
        assert buf == bytearray(b"abcdef") and reader._buffer is buf
        reader._buffer = bytearray(b"xy")
        assert outcome(reader.read(5)) == ("value", b"xy")
        with pytest.raises(TypeError):
            reader._buffer = b"not a bytearray"
        with pytest.raises(ValueError, match="Limit cannot be <= 0"):
            rsloop.StreamReader(limit=0, loop=loop)
        assert "limit=10" in repr(reader)
    finally:
        loop.close()


def test_read_of_one_received_chunk_is_that_object():
    loop = asyncio.new_event_loop()
    try:
        reader = rsloop.StreamReader(loop=loop)
        chunk = bytes(range(100))
        reader.feed_data(chunk)
        assert outcome(reader.read(1000))[1] is chunk
        reader.feed_data(chunk)
        assert outcome(reader.read(40)) == ("value", chunk[:40])
        assert outcome(reader.readexactly(60)) == ("value", chunk[40:])
    finally:
        loop.close()


STEPS = {
    "send": lambda it: it.send(None),
    "next": next,  # the type's own tp_iternext, the path of every await
    "__next__": lambda it: it.__next__(),
}


@pytest.mark.parametrize("step", STEPS.values(), ids=STEPS.keys())
def test_every_way_of_stepping_an_op_returns_or_yields_the_same(step):
    loop = asyncio.new_event_loop()
    try:
        reader = rsloop.StreamReader(loop=loop)
        reader.feed_data(b"ab\ncd")
        with pytest.raises(StopIteration) as stop:
            step(reader.readline().__await__())
        assert stop.value.value == b"ab\n"
        with pytest.raises(StopIteration) as stop:
            step(reader.read(0).__await__())
        assert stop.value.value == b""
        waiting = reader.readexactly(5).__await__()
        assert step(waiting) is reader._waiter
        waiting.close()
        with pytest.raises(RuntimeError, match="already awaited"):
            step(waiting)

        class Writer:  # what drain() reads of an open, unpaused stream
            _reader = None
            _transport = type("T", (), {"is_closing": lambda self: False})()
            _protocol = type("P", (), {"_connection_lost": False, "_paused": False})()

        with pytest.raises(StopIteration) as stop:
            step(rsloop._rsloop.StreamOp.drain(Writer()))
        assert stop.value.value is None
    finally:
        loop.close()


def test_waiting_read_wakes_on_feed_and_a_second_reader_is_refused():
    async def main():
        loop = asyncio.get_running_loop()
        reader = rsloop.StreamReader(loop=loop)
        task = asyncio.ensure_future(reader.readline())
        await asyncio.sleep(0)
        assert reader._waiter is not None
        with pytest.raises(RuntimeError, match="already waiting"):
            await reader.read(1)
        loop.call_soon(reader.feed_data, b"one\ntwo")
        assert await task == b"one\n"
        assert reader._waiter is None
        cancelled = asyncio.ensure_future(reader.readexactly(10))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert reader._waiter is None
        reader.feed_eof()
        assert [line async for line in reader] == [b"two"]

    rsloop.run(main())


class _TransportMethods:
    """What a writer calls on its transport, recorded; no state of its own."""

    __slots__ = ()

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class RecordingTransport(_TransportMethods):
    """Keeps its state in a ``__dict__``."""


class OpenProtocol(asyncio.Protocol):
    """What drain() reads of a protocol: connected, not paused."""

    _connection_lost = False
    _paused = False


WRITER_MISTAKES = {
    "write()": lambda w: w.write(),
    "write(a, b)": lambda w: w.write(b"a", b"b"),
    "write(a, data=b)": lambda w: w.write(b"a", data=b"b"),
    "write(x=1)": lambda w: w.write(x=1),
    "drain(1)": lambda w: w.drain(1),
    "drain(x=1)": lambda w: w.drain(x=1),
    # Python reports keywords before the positional count.
    "write(a, b, foo=1)": lambda w: w.write(b"a", b"b", foo=1),
    "write(a, b, data=c)": lambda w: w.write(b"a", b"b", data=b"c"),
    "drain(1, foo=1)": lambda w: w.drain(1, foo=1),
}


def test_native_writer_methods_behave_as_asyncios():
    from rsloop import _streams

    loop = asyncio.new_event_loop()
    try:
        writers = {}
        # asyncio's own class, even when RSLOOP_FAST_STREAMS=1 rebound the name.
        for cls in (_streams._ASYNCIO_WRITER, rsloop.StreamWriter):
            writers[cls] = w = cls(RecordingTransport(), OpenProtocol(), None, loop)
            w.write(b"one")
            w.write(data=b"two")
            # start_tls() swaps the transport: writes follow it.
            w._transport = RecordingTransport()
            w.write(b"three")
            assert w._transport.written == [b"three"]
        for name, mistake in WRITER_MISTAKES.items():
            messages = []
            for w in writers.values():
                with pytest.raises(TypeError) as err:
                    mistake(w)
                messages.append(str(err.value))
            assert messages[0] == messages[1], name
        ours = writers[rsloop.StreamWriter]
        with pytest.raises(StopIteration):
            ours.drain().send(None)
        for w in writers.values():
            w.close()
    finally:
        loop.close()


class OwnMethodsTransport:
    """Keeps its methods bound in its own ``__dict__``, as rsloop's transports do."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.write = self.written.append
        self.closed = False
        self.is_closing = lambda: self.closed

    def close(self) -> None:
        self.closed = True


def test_writer_calls_what_getattr_finds_on_the_transport_as_its_class_changes():
    """write() and drain() call the transport's own bound methods without a look-up on
    its class, as long as the class defines no data descriptor of those names: one added
    later (or removed again) is what they call from then on, as with getattr."""
    cls = type("Transport", (OwnMethodsTransport,), {})
    loop = rsloop.new_event_loop()
    try:
        transport = cls()
        w = rsloop.StreamWriter(transport, OpenProtocol(), None, loop)
        for _ in range(3):  # the second and later calls take the remembered answer
            w.write(b"own")
            with pytest.raises(StopIteration):
                w.drain().send(None)  # open and not paused: done at once
        assert transport.written == [b"own"] * 3

        # A property comes before the instance's own attribute.
        cls.write = property(lambda self: lambda data: self.written.append(b"class:" + data))
        cls.is_closing = property(lambda self: lambda: True)
        w.write(b"x")
        assert transport.written[-1] == b"class:x"
        op = w.drain()
        assert op.send(None) is None  # closing: asyncio's drain sleeps once
        op.close()

        del cls.write, cls.is_closing
        w.write(b"y")
        assert transport.written[-1] == b"y"
        with pytest.raises(StopIteration):
            w.drain().send(None)

        # Replaced on the instance: the replacement is called.
        seen = []
        transport.write = seen.append
        w.write(b"z")
        assert seen == [b"z"]
        w.close()
    finally:
        loop.close()


class SlotsTransport(_TransportMethods):
    """A transport with no ``__dict__``: its methods are only the class's."""

    __slots__ = ("closed", "written")


def test_writer_over_a_transport_without_a_dict_calls_its_class_methods():
    loop = rsloop.new_event_loop()
    try:
        transport = SlotsTransport()
        w = rsloop.StreamWriter(transport, OpenProtocol(), None, loop)
        for _ in range(2):
            w.write(b"a")
            with pytest.raises(StopIteration):
                w.drain().send(None)
        assert transport.written == [b"a", b"a"]
        transport.closed = True
        op = w.drain()
        assert op.send(None) is None  # closing: asyncio's drain sleeps once
        op.close()
        assert sys.exc_info() == (None, None, None)
    finally:
        loop.close()


def test_stream_waits_use_the_loops_create_future_and_its_futures():
    """A read that waits takes its waiter from ``loop.create_future()``: a loop class
    that overrides it (and hands out a Future subclass) is obeyed, before and after the
    override is added to the class."""
    made = []

    class Fut(asyncio.Future):
        pass

    class Loop(rsloop.Loop):
        pass

    def create_future(self):
        fut = Fut(loop=self)
        made.append(fut)
        return fut

    async def read_two(reader):
        loop = asyncio.get_running_loop()
        task = loop.create_task(reader.readexactly(2))
        await asyncio.sleep(0)
        waiter = reader._waiter
        reader.feed_data(b"ab")
        assert await task == b"ab"
        return waiter

    loop = Loop()
    try:
        reader = rsloop.StreamReader(loop=loop)
        waiter = loop.run_until_complete(read_two(reader))
        assert type(waiter) is asyncio.Future and made == []
        Loop.create_future = create_future
        waiter = loop.run_until_complete(read_two(reader))
        assert type(waiter) is Fut and made == [waiter]
        del Loop.create_future
        waiter = loop.run_until_complete(read_two(reader))
        assert type(waiter) is asyncio.Future and len(made) == 1
    finally:
        loop.close()


def test_a_cancelled_wait_leaves_the_waiter_cancelled_and_an_exception_reaches_a_waiter():
    async def main():
        loop = asyncio.get_running_loop()
        reader = rsloop.StreamReader(loop=loop)
        task = loop.create_task(reader.read(5))
        await asyncio.sleep(0)
        waiter = reader._waiter
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waiter.cancelled()
        reader.feed_data(b"late")  # a cancelled waiter is left alone
        assert await reader.read(5) == b"late"
        task = loop.create_task(reader.read(5))
        await asyncio.sleep(0)
        reader.set_exception(ConnectionResetError(104, "reset"))
        with pytest.raises(ConnectionResetError) as err:
            await task
        assert err.value.errno == 104

    rsloop.run(main())


def test_a_finished_read_is_reused_only_when_nobody_holds_it_and_keeps_nothing_alive():
    """Reads and drains that finished through ``await`` are kept for reuse: one its
    caller still holds stays finished (awaiting it again is refused, as for a coroutine)
    and is never handed out again, and a kept one no longer refers to its reader."""
    import gc
    import weakref

    async def main():
        loop = asyncio.get_running_loop()
        reader = rsloop.StreamReader(loop=loop)
        reader.feed_data(b"abcdef")
        held = reader.read(1)
        assert await held == b"a"
        ops = [held]
        for expected in (b"b", b"c", b"d"):
            op = reader.readexactly(1)
            assert all(op is not o for o in ops)  # `held` is still held
            ops.append(op)
            assert await op == expected
        with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
            await held
        del ops, op
        # Let go of: taken again, and working.
        assert [await reader.readexactly(1) for _ in range(2)] == [b"e", b"f"]

        gone = rsloop.StreamReader(loop=loop)
        gone.feed_data(b"x")
        assert await gone.read(1) == b"x"
        ref = weakref.ref(gone)
        del gone
        gc.collect()
        assert ref() is None

    rsloop.run(main())


NAMES = ("open_connection", "start_server", "open_unix_connection", "start_unix_server")


def _reset_to(monkeypatch, functions) -> None:
    # Every name install() may touch, restored by monkeypatch after the test.
    for name, function in functions.items():
        monkeypatch.setattr(asyncio, name, function)
        monkeypatch.setattr(asyncio.streams, name, function)


def test_install_replaces_asyncios_functions_but_not_someone_elses(monkeypatch):
    from rsloop import _streams

    originals = dict(_streams._ASYNCIO_FUNCTIONS)
    assert all(f.__module__ == "asyncio.streams" for f in originals.values())
    monkeypatch.delenv("RSLOOP_FAST_STREAMS", raising=False)

    # RSLOOP_FAST_STREAMS=0: nothing is replaced.
    _reset_to(monkeypatch, originals)
    monkeypatch.setenv("RSLOOP_FAST_STREAMS", "0")
    _streams.install()
    for name in originals:
        assert getattr(asyncio, name) is originals[name]
        assert getattr(asyncio.streams, name) is originals[name]

    # By default every asyncio function is replaced, in both modules...
    monkeypatch.delenv("RSLOOP_FAST_STREAMS")
    _streams.install()
    for name in originals:
        assert getattr(asyncio, name) is getattr(rsloop, name)
        assert getattr(asyncio.streams, name) is getattr(rsloop, name)

    # ...but not a wrapper another library installed before rsloop was imported: that
    # one stays, and is what rsloop's function calls on other loops.
    async def theirs(*args, **kwargs):
        raise AssertionError("not called")

    _reset_to(monkeypatch, originals)
    monkeypatch.setattr(asyncio, "start_server", theirs)
    monkeypatch.setattr(asyncio.streams, "start_server", theirs)
    monkeypatch.setitem(_streams._ASYNCIO_FUNCTIONS, "start_server", theirs)
    _streams.install()
    assert asyncio.start_server is theirs
    assert asyncio.streams.start_server is theirs
    assert asyncio.open_connection is rsloop.open_connection


def test_rebound_classes_keep_asyncios_readers_working(monkeypatch):
    from rsloop import _streams

    for module in (asyncio, asyncio.streams):
        for name in ("StreamReader", "StreamWriter"):
            monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setattr(_streams, "_REBOUND", {})
    original_reader = _streams._ASYNCIO_READER
    original_writer = _streams._ASYNCIO_WRITER
    assert not isinstance(original_reader.__new__(original_reader), rsloop.StreamReader)
    monkeypatch.setenv("RSLOOP_FAST_STREAMS", "1")
    _streams.install()
    assert asyncio.StreamReader is asyncio.streams.StreamReader is rsloop.StreamReader
    assert asyncio.StreamWriter is asyncio.streams.StreamWriter is rsloop.StreamWriter
    # asyncio's own classes and their instances still count as asyncio's.
    assert issubclass(original_reader, asyncio.StreamReader)
    assert issubclass(original_writer, asyncio.StreamWriter)
    assert not isinstance(object(), asyncio.StreamReader)

    # A server protocol built on a reader of asyncio's class (taken before the rebinding)
    # still gets its writer: StreamWriter.__init__ asserts the reader's class.
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(original_reader(loop=loop), asyncio.StreamReader)
        connected = []

        def client_connected(reader, writer):
            connected.append((type(reader), type(writer)))
            writer.close()  # 3.13 keeps no reference to the writer

        for reader in (original_reader(loop=loop), asyncio.StreamReader(loop=loop)):
            protocol = asyncio.StreamReaderProtocol(reader, client_connected, loop=loop)
            transport = RecordingTransport()
            transport.get_extra_info = lambda name, default=None: default
            protocol.connection_made(transport)
        assert connected == [
            (original_reader, rsloop.StreamWriter),
            (rsloop.StreamReader, rsloop.StreamWriter),
        ]
    finally:
        loop.close()


def test_stream_functions_on_other_loops_are_asyncios(monkeypatch):
    # A loop that is not rsloop's native loop, even one with a `backend` attribute, gets
    # asyncio's reader and writer (or what RSLOOP_FAST_STREAMS=1 rebound their names to).
    class Other(asyncio.SelectorEventLoop):
        backend = "uring"

    async def main():
        async def handler(reader, writer):
            writer.write(await reader.readline())
            await writer.drain()
            writer.close()

        server = await rsloop.start_server(handler, "127.0.0.1", 0)
        reader, writer = await rsloop.open_connection(*server.sockets[0].getsockname())
        writer.write(b"ping\n")
        line = await reader.readline()
        writer.close()
        server.close()
        await server.wait_closed()
        return type(reader), line

    loop = Other()
    try:
        kind, line = loop.run_until_complete(main())
    finally:
        loop.close()
    assert (kind, line) == (asyncio.streams.StreamReader, b"ping\n")
