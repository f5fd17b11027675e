"""The `streams` fuzz target's oracle: rsloop's native StreamReader against asyncio's,
operation by operation, on a program decoded from the fuzz input.

The input's first byte is the limit (1-64); then each operation is a byte and its
arguments. Feeds carry 0-63 bytes (or 64-319 when the length byte's top bit is set) from a
small alphabet, so the separators (`\\n`, `ab`, `\\n\\n`, `aab`, ...) occur and split
across feeds. A read that has to wait stays pending (unlike tests/test_fast_streams.py,
which closes it) and is stepped again once its waiter is done, so a separator or a count
completed by later feeds is compared too. After every step: the value or exception of
each read, `_buffer`, `at_eof()`, `_paused` and the transport's pause/resume calls.
"""

from __future__ import annotations

import asyncio
import sys

import rsloop

ALPHABET = b"\nab x"
SEPARATORS: list = [b"\n", b"ab", b"\n\n", b"x", b"aab", b"", b"b\na"]
if sys.version_info >= (3, 13):
    SEPARATORS += [(b"\n", b"ab"), (b"ab", b"a"), ()]
EXCEPTIONS = [ValueError, ConnectionResetError]
LOOP = asyncio.new_event_loop()  # never run: the futures only need one to belong to


class Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


class Side:
    """One reader, its transport and its pending read."""

    def __init__(self, cls, limit: int) -> None:
        self.reader = cls(limit=limit, loop=LOOP)
        self.transport = Transport()
        self.reader.set_transport(self.transport)
        self.pending = None  # (iterator, the future it waits on)

    def step(self, it):
        try:
            waited = it.send(None)
        except StopIteration as stop:
            return ("value", stop.value)
        except BaseException as exc:  # noqa: BLE001 - compared between the readers
            return ("raises", type(exc).__name__, exc.args)
        if self.pending is not None:  # a second wait: not something a program makes
            it.close()
            return ("waits twice",)
        self.pending = (it, waited)
        return ("waits",)

    def resume(self):
        """The pending read's outcome once its waiter is done, else None."""
        if self.pending is None or not self.pending[1].done():
            return None
        it, _ = self.pending
        self.pending = None
        return self.step(it)

    def apply(self, op):
        r = self.reader
        name = op[0]
        if name in ("feed", "feed_bytearray"):
            chunk = op[1] if name == "feed" else bytearray(op[1])
            try:
                r.feed_data(chunk)
            except AssertionError as exc:
                return ("raises", "AssertionError", exc.args)
            return ("fed",)
        if name == "feed_eof":
            r.feed_eof()
            return ("eof",)
        if name == "buffer":
            return ("buffer", bytes(r._buffer))
        if name == "exception":
            r.set_exception(op[1]("boom"))
            return ("set",)
        if name == "anext":
            return self.step(r.__anext__().__await__())
        return self.step(getattr(r, name)(*op[1:]).__await__())

    def close(self) -> None:
        if self.pending is not None:
            self.pending[0].close()
            self.pending = None


def decode(data: bytes):
    i = 0

    def take() -> int:
        nonlocal i
        b = data[i] if i < len(data) else 0
        i += 1
        return b

    limit = take() % 64 + 1
    program = []
    while i < len(data):
        op = take() % 10
        if op in (0, 1):
            n = take()
            n = (n & 0x3F) if n < 0x80 else 64 + (n & 0x7F) * 2
            chunk = bytes(ALPHABET[take() % len(ALPHABET)] for _ in range(n))
            program.append(("feed" if op == 0 else "feed_bytearray", chunk))
        elif op == 2:
            program.append(("feed_eof",))
        elif op in (3, 4):
            program.append(("read" if op == 3 else "readexactly", take() % 80 - 2))
        elif op == 5:
            program.append(("readline",))
        elif op == 6:
            program.append(("readuntil", SEPARATORS[take() % len(SEPARATORS)]))
        elif op == 7:
            program.append(("anext",))
        elif op == 8:
            program.append(("buffer",))
        else:
            program.append(("exception", EXCEPTIONS[take() % len(EXCEPTIONS)]))
    return limit, program


def run(data: bytes) -> None:
    limit, program = decode(data)
    theirs = Side(asyncio.StreamReader, limit)
    ours = Side(rsloop.StreamReader, limit)
    try:
        for op in program:
            expected = theirs.apply(op)
            got = ours.apply(op)
            assert got == expected, (op, got, expected)
            later = (ours.resume(), theirs.resume())
            assert later[0] == later[1], (op, "pending read", later)
            assert bytes(ours.reader._buffer) == bytes(theirs.reader._buffer), op
            assert ours.reader.at_eof() == theirs.reader.at_eof(), op
            assert ours.reader._paused == theirs.reader._paused, op
            assert ours.transport.calls == theirs.transport.calls, op
            assert (ours.pending is None) == (theirs.pending is None), op
    finally:
        ours.close()
        theirs.close()
