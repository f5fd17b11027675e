"""The `datagram` fuzz target's oracle: rsloop's native datagram transport
(`rust/src/transports/datagram.rs`: the `recvfrom` batches, `sendto` and its queue of
(datagram, address), the address conversions, the write-buffer count and the water
marks) against asyncio's selector loop doing the same, step by step.

Each side gets its own connected AF_UNIX datagram socket pair (reliable and ordered, so
both sides see the same kernel behaviour), the transport on one end with a small send
buffer so datagrams queue, and the other end played by the harness. The input is a
program: datagrams of 0 to 70 KB (large ones fail with EMSGSIZE) sent with `sendto` to
the peer's name, to no address, to others of every form (paths, abstract names, bytes, numbers,
tuples), as `bytes`, `bytearray`, `memoryview` or `str`; datagrams from the peer (up to
40 at once, more than one receive batch); the peer draining its end; pause/resume
reading; water marks; the loop running until quiet; close and abort. After every step
the two logs must be equal: what each call returned or raised, every protocol callback
with its arguments, the write-buffer size, what the peer received.

The input's first byte picks the rsloop side's driver (io_uring or poll) and whether the
transport's socket is connected to the peer (asyncio then sends with `send`, and ignores
the address) or not (`sendto` with the address given). Both ends are bound to abstract
names, so received datagrams carry an address to convert.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from rsloop._loop import Loop

# Besides the peer's own name (op 0):
ADDRESSES: list = [None, "", "/nonexistent/fuzz", b"\0rsloop-fuzz-nowhere", 7,
                   ("127.0.0.1", 9), b"", "x" * 200, ("a", "b", "c")]  # fmt: skip
SIZES = [0, 1, 2, 100, 1000, 4000, 9000, 70000]
# Fatal errors are logged by both loops alike; the log is not compared, only noisy.
logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
# Fresh loops for every program: asyncio's selector keeps the registration of an fd
# closed while registered (an aborted transport's late writer), and then cannot register
# the next socket that gets that number (ENOENT), which would leak into later programs.
FACTORIES = {
    "asyncio": asyncio.SelectorEventLoop,
    "uring": lambda: Loop(backend="uring"),
    "poll": lambda: Loop(backend="poll"),
}


def streams(log: list) -> tuple[list, list]:
    """The log as two sequences, each in order: datagrams received, and everything else.
    Their interleaving is not compared: rsloop reads up to 16 datagrams per readiness
    event and asyncio one, so a queued send's `error_received` can come between two
    datagrams on asyncio and after both on rsloop, within the same settle."""
    return [e for e in log if e[0] == "received"], [e for e in log if e[0] != "received"]


def same(sides) -> bool:
    (got0, rest0), (got1, rest1) = (streams(side.log) for side in sides)
    if rest0 != rest1:
        return False
    if any(e[0] == "lost" for e in rest0):
        # A fatal error ends reading; how many datagrams came before it depends on the
        # read batch and on asyncio running a fd's reader before its writer within one
        # iteration, which rsloop does not (docs/reliability.md): one side's datagrams
        # are then a prefix of the other's.
        shorter, longer = sorted((got0, got1), key=len)
        return longer[: len(shorter)] == shorter
    return got0 == got1


def diff(ours: str, where, theirs: list, mine: list):
    """Where the two logs part: the first differing entry and the next few of each."""
    pairs = enumerate(zip(theirs, mine, strict=False))
    i = next((k for k, (x, y) in pairs if x != y), min(len(theirs), len(mine)))
    counts = f"entry {i} of {len(theirs)} (asyncio) / {len(mine)} (rsloop)"

    def near(log: list) -> list:
        return [repr(e)[:120] for e in log[max(i - 2, 0) : i + 3]]

    return (ours, where, counts, near(theirs), near(mine))


def describe(exc: BaseException):
    return (type(exc).__name__, getattr(exc, "errno", None))


class Protocol(asyncio.DatagramProtocol):
    def __init__(self, log: list, names: dict) -> None:
        self.log = log
        self.names = names  # each side's own names, logged as the same words

    def connection_made(self, transport) -> None:
        self.log.append(("made",))

    def datagram_received(self, data, addr) -> None:
        self.log.append(("received", bytes(data), self.names.get(addr, addr)))

    def error_received(self, exc) -> None:
        self.log.append(("error_received", describe(exc)))

    def connection_lost(self, exc) -> None:
        self.log.append(("lost", None if exc is None else describe(exc)))

    def pause_writing(self) -> None:
        self.log.append(("pause_writing",))

    def resume_writing(self) -> None:
        self.log.append(("resume_writing",))


class Side:
    serial = 0

    def __init__(self, loop, connected: bool) -> None:
        self.loop = loop
        self.log: list = []
        # Both ends bound to abstract names (so addresses travel both ways), the peer
        # connected to ours; ours connected to the peer or not (then `sendto` needs an
        # address, and the peer's is one of those the program picks from).
        names = []
        for end in ("ours", "peer"):
            Side.serial += 1
            names.append(b"\0rsloop-fuzz-%d-%d-%s" % (os.getpid(), Side.serial, end.encode()))
        self.ours = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ours.bind(names[0])
        self.peer.bind(names[1])
        self.peer.connect(names[0])
        if connected:
            self.ours.connect(names[1])
        self.peer_name = names[1]
        self.ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        self.ours.setblocking(False)
        self.peer.setblocking(False)
        self.transport, _ = loop.run_until_complete(
            loop.create_datagram_endpoint(
                lambda: Protocol(self.log, {names[0]: "ours", names[1]: "peer"}), sock=self.ours
            )
        )

    def call(self, what: str, f, *args) -> None:
        try:
            self.log.append((what, "returned", f(*args)))
        except Exception as exc:  # noqa: BLE001 - compared between the loops
            self.log.append((what, "raised", describe(exc)))

    def settle(self) -> None:
        """Runs the loop until its log and the write-buffer size stop changing (asyncio
        reads one datagram per iteration, rsloop up to 16: only the settled state is
        compared)."""
        seen = None
        for _ in range(2000):  # a program sends at most ~1,300 datagrams
            self.loop.call_soon(self.loop.stop)
            self.loop.run_forever()
            now = (len(self.log), self.transport.get_write_buffer_size())
            if now == seen:
                return
            seen = now

    def drain_peer(self) -> None:
        got = []
        while True:
            try:
                got.append(self.peer.recv(1 << 17))
            except BlockingIOError:
                break
        self.log.append(("peer got", got))

    def finish(self) -> None:
        # Abort even a closing transport (one still waiting for its queue), so no write
        # watch outlives the socket closed below; but asyncio's abort() raises
        # AttributeError once connection_lost has run (it drops its `_loop`).
        if getattr(self.transport, "_loop", True) is not None:
            self.transport.abort()
        self.settle()
        self.peer.close()
        self.ours.close()


def payload(size: int, kind: int, tag: int):
    data = bytes([tag]) * size
    return [data, bytearray(data), memoryview(data), data.decode("latin-1")][kind % 4]


def run(data: bytes) -> None:
    if not data:
        return
    ours = "uring" if data[0] % 2 else "poll"
    connected = bool(data[0] & 2)
    loops = [FACTORIES["asyncio"](), FACTORIES[ours]()]
    sides = [Side(loops[0], connected), Side(loops[1], connected)]
    try:
        steps = data[1:]
        for i in range(0, len(steps), 3):
            op, a, b = (list(steps[i : i + 3]) + [0, 0])[:3]
            for side in sides:
                step(side, op % 10, a, b)
            where = (op % 10, a, b)
            assert same(sides), diff(ours, where, *(sum(streams(x.log), []) for x in sides))
            if all(any(e[0] == "lost" for e in side.log) for side in sides):
                # Past connection_lost asyncio's transport still acts on what it left
                # behind (a writer registered after a fatal error pops its buffer and
                # zeroes the write-buffer size; a sendto only appends to a leftover
                # buffer), rsloop's does not: not compared, see docs/reliability.md.
                break
            t = [s.transport for s in sides]
            assert t[0].get_write_buffer_size() == t[1].get_write_buffer_size(), where
            assert t[0].is_closing() == t[1].is_closing(), where
        for side in sides:
            side.transport.close()
            side.settle()
            side.drain_peer()
        assert same(sides), diff(ours, "at the end", *(sum(streams(x.log), []) for x in sides))
        if os.environ.get("RSLOOP_FUZZ_SHOW"):  # what a program did, to check a seed
            print(ours, *(repr(e)[:100] for e in sides[1].log), sep="\n  ")
    finally:
        for side in sides:
            side.finish()
        for lp in loops:
            lp.close()


def step(side: Side, op: int, a: int, b: int) -> None:
    t = side.transport
    if op in (0, 1):
        size = SIZES[a % len(SIZES)] + (b >> 4)
        addr = side.peer_name if op == 0 else ADDRESSES[b % len(ADDRESSES)]
        side.call("sendto", t.sendto, payload(size, a >> 4, b), addr)
    elif op in (2, 3):
        for k in range(1 + a % 40):
            try:
                side.peer.send(bytes([k]) * (b % 64 + k))
            except OSError as exc:
                side.log.append(("peer send", describe(exc)))
                break
        if op == 3:
            side.settle()
    elif op == 4:
        side.drain_peer()
    elif op == 5:
        side.call("pause_reading", t.pause_reading)
    elif op == 6:
        side.call("resume_reading", t.resume_reading)
    elif op == 7:
        high = a * 64 if a % 3 else None
        low = b * 32 if b % 3 else None
        side.call("limits", t.set_write_buffer_limits, high, low)
    elif op == 8:
        side.settle()
    elif a % 8 == 0:
        side.call("close", t.close)
    elif a % 8 == 1:
        if isinstance(side.loop, asyncio.SelectorEventLoop) and getattr(t, "_loop", 1) is None:
            # asyncio's abort() after a close that waited for its queue has run
            # connection_lost raises AttributeError (`_force_close` calls the loop it
            # dropped); rsloop's does nothing, as abort() after any other close does.
            side.log.append(("abort", "returned", None))
        else:
            side.call("abort", t.abort)
    else:
        side.settle()
