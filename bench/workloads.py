"""Core event-loop workloads for ``bench/run.py``.

Each workload is ``fn(loop, n) -> (ops, (wall_seconds, cpu_seconds))``: it does ``n``
units of work on an already created loop, times only the workload itself (set-up such as building
argument lists or starting a thread is outside the timed region) and returns how many
operations it performed and how long they took. Every workload checks its own result
(a count that does not add up raises), so a loop that drops or duplicates work fails
loudly instead of looking fast.

This module is imported by ``bench/_child.py`` in a fresh interpreter per measurement;
it uses only the public asyncio loop API, so it runs on any loop (and on any Python
>= 3.8, since the ``pypi-rsloop`` column may run under another interpreter). A loop
that lacks an API a workload needs raises NotImplementedError (or AttributeError); the
child reports it as unsupported, not as a failure.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time

_wall = time.perf_counter
_cpu = time.process_time


def _start():
    return _wall(), _cpu()


def _stop(t0):
    """(wall seconds, CPU seconds of the whole process) since ``_start()``. CPU time
    excludes time spent preempted by other processes (but includes a producer thread's
    work and excludes time asleep waiting for timers)."""
    return _wall() - t0[0], _cpu() - t0[1]


# 1. call_soon chain ------------------------------------------------------------------
def call_soon_chain(loop, n):
    """Each callback schedules the next one: one callback per loop iteration, so this
    measures the cost of a whole ``_run_once`` iteration (poll with zero timeout +
    ready-queue pop + call) more than call_soon alone."""
    left = [n]
    call_soon = loop.call_soon

    def step():
        left[0] -= 1
        if left[0]:
            call_soon(step)
        else:
            loop.stop()

    call_soon(step)
    t0 = _start()
    loop.run_forever()
    dt = _stop(t0)
    if left[0] != 0:
        raise AssertionError(f"call_soon_chain: {left[0]} steps did not run")
    return n, dt


# 2. call_soon batch ------------------------------------------------------------------
BATCH = 10_000


def call_soon_batch(loop, n):
    """Schedule BATCH callbacks from one callback, let one iteration run them all, and
    repeat until ``n`` ran: measures call_soon + the ready-queue drain per callback
    (the callback is a builtin counter, so almost no time is spent in Python code)."""
    counter = itertools.count()
    tick = counter.__next__
    call_soon = loop.call_soon
    batches = max(1, n // BATCH)
    left = [batches]

    def schedule_batch():
        for _ in range(BATCH):
            call_soon(tick)
        left[0] -= 1
        # FIFO: this runs after every callback of the batch above.
        call_soon(schedule_batch if left[0] else loop.stop)

    call_soon(schedule_batch)
    t0 = _start()
    loop.run_forever()
    dt = _stop(t0)
    ran = next(counter)
    if ran != batches * BATCH:
        raise AssertionError(f"call_soon_batch: ran {ran}, expected {batches * BATCH}")
    return ran, dt


# 3. call_later with small random delays ------------------------------------------------
TIMERS_ALIVE = 5_000
MAX_DELAY = 0.001  # seconds


def call_later_random(loop, n):
    """TIMERS_ALIVE timer chains; each fired timer re-arms itself with a random delay in
    [0, 1 ms) (seeded, drawn before timing) until ``n`` timers fired in total. Measures
    timer-heap push/pop, the poll timeout computation and expiry under a heap of ~5000
    live timers. A loop faster than the timers' own pace waits for them: the ceiling is
    about TIMERS_ALIVE / (MAX_DELAY / 2) = 10 M timers/s."""
    rng = random.Random(12345)
    delays = [rng.random() * MAX_DELAY for _ in range(n + TIMERS_ALIVE)]
    nxt = iter(delays).__next__
    call_later = loop.call_later
    fired = [0]
    armed = [0]

    def fire():
        fired[0] += 1
        if armed[0] < n:
            armed[0] += 1
            call_later(nxt(), fire)
        elif fired[0] == n:
            loop.stop()

    def start():
        for _ in range(min(TIMERS_ALIVE, n)):
            armed[0] += 1
            call_later(nxt(), fire)

    loop.call_soon(start)
    t0 = _start()
    loop.run_forever()
    dt = _stop(t0)
    if fired[0] != n:
        raise AssertionError(f"call_later_random: fired {fired[0]}, expected {n}")
    return n, dt


# 4. schedule-then-cancel timers -------------------------------------------------------
CANCEL_ROUND = 10_000


def timer_cancel(loop, n):
    """Rounds of CANCEL_ROUND call_later(far future) + cancel() of all of them, then a
    few loop iterations (so the loop sees, and may compact or drop, the cancelled
    timers). Measures handle creation, heap push and cancellation (typical of
    timeouts that almost never fire)."""
    rounds = max(1, n // CANCEL_ROUND)
    counter = itertools.count()
    tick = counter.__next__
    sleep = asyncio.sleep

    async def main():
        call_later = loop.call_later
        for _ in range(rounds):
            handles = [call_later(3600.0 + i * 1e-6, tick) for i in range(CANCEL_ROUND)]
            for h in handles:
                h.cancel()
            for _ in range(3):
                await sleep(0)
        return rounds * CANCEL_ROUND

    t0 = _start()
    done = loop.run_until_complete(main())
    dt = _stop(t0)
    if next(counter) != 0:
        raise AssertionError("timer_cancel: a cancelled timer ran")
    return done, dt


# 5. create_task + gather --------------------------------------------------------------
GATHER = 1_000


def gather_tasks(loop, n):
    """Rounds of GATHER trivial coroutines wrapped by create_task and awaited with
    gather(): measures Task creation, the first step scheduled with call_soon, the
    done-callbacks and gather's bookkeeping."""
    rounds = max(1, n // GATHER)

    async def leaf(i):
        return i

    async def main():
        create_task = loop.create_task
        gather = asyncio.gather
        total = 0
        for _ in range(rounds):
            res = await gather(*[create_task(leaf(i)) for i in range(GATHER)])
            total += len(res)
        return total

    t0 = _start()
    total = loop.run_until_complete(main())
    dt = _stop(t0)
    if total != rounds * GATHER:
        raise AssertionError(f"gather_tasks: {total} results, expected {rounds * GATHER}")
    return total, dt


# 6. future ping-pong ------------------------------------------------------------------
def future_pingpong(loop, n):
    """Two tasks hand a ball back and forth ``n`` times each: a task makes a fresh
    future for itself, resolves the other task's future and awaits its own. Every
    hand-off is a create_future + set_result + a task wake-up through the ready queue;
    ops = hand-offs (2 n)."""
    create_future = loop.create_future
    futs = [create_future(), create_future()]
    count = [0]

    async def player(me):
        other = 1 - me
        for _ in range(n):
            f = create_future()
            futs[me] = f
            futs[other].set_result(None)
            count[0] += 1
            await f
        if not futs[other].done():
            futs[other].set_result(None)

    async def main():
        await asyncio.gather(player(0), player(1))

    t0 = _start()
    loop.run_until_complete(main())
    dt = _stop(t0)
    if count[0] != 2 * n:
        raise AssertionError(f"future_pingpong: {count[0]} hand-offs, expected {2 * n}")
    return 2 * n, dt


# 7. call_soon_threadsafe from another thread ---------------------------------------------
def call_soon_threadsafe(loop, n):
    """A producer thread posts ``n`` callbacks with call_soon_threadsafe, then one that
    stops the loop; time runs from the producer's start until the loop has run all of
    them. Measures the inject queue, the wake-up of the loop thread and batching."""
    counter = itertools.count()
    tick = counter.__next__
    post = loop.call_soon_threadsafe
    go = threading.Event()

    def producer():
        go.wait()
        for _ in range(n):
            post(tick)
        post(loop.stop)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    loop.call_soon(go.set)
    t0 = _start()
    loop.run_forever()
    dt = _stop(t0)
    th.join(60)
    ran = next(counter)
    if ran != n:
        raise AssertionError(f"call_soon_threadsafe: ran {ran}, expected {n}")
    return n, dt


# 7b. Protocol echo over a socket pair ------------------------------------------------------
ECHO_SIZE = 1024


def _echo_client(workload: str, msg: bytes, left: list, done):
    """The client Protocol of the echo workloads: writes ``msg``, waits for all of it to
    come back, and again until ``left[0]`` round trips are done, then resolves ``done``."""

    class Client(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.got = 0

        def data_received(self, data):
            self.got += len(data)
            if self.got < len(msg):
                return
            if self.got > len(msg):
                raise AssertionError(f"{workload}: {self.got} bytes back, sent {len(msg)}")
            self.got = 0
            left[0] -= 1
            if left[0]:
                self.transport.write(msg)
            elif not done.done():
                done.set_result(None)

    return Client


def socket_echo(loop, n):
    """A client Protocol writes ECHO_SIZE bytes, a server Protocol on the other end of a
    connected socket pair writes them back, ``n`` round trips, both ends on this loop
    (``create_connection(sock=)`` and ``connect_accepted_socket``). Measures a transport's
    receive into ``data_received``, ``write`` and the readiness and send path; not a
    network benchmark (``bench/net.py`` is), but steady enough to count instructions."""
    import socket

    msg = b"x" * ECHO_SIZE
    done = loop.create_future()
    left = [n]

    class Server(asyncio.Protocol):
        def connection_made(self, transport):
            self.write = transport.write

        def data_received(self, data):
            self.write(data)

    Client = _echo_client("socket_echo", msg, left, done)

    a, b = socket.socketpair()

    async def setup():
        server, _ = await loop.connect_accepted_socket(Server, b)
        client, proto = await loop.create_connection(Client, sock=a)
        return server, client, proto

    server, client, _ = loop.run_until_complete(setup())
    t0 = _start()
    client.write(msg)
    loop.run_until_complete(done)
    dt = _stop(t0)
    client.close()
    server.close()
    loop.run_until_complete(asyncio.sleep(0))
    if left[0]:
        raise AssertionError(f"socket_echo: {left[0]} round trips missing")
    return n, dt


def _echo_against_task(loop, workload: str, n: int, setup):
    """``n`` round trips of the echo client against a server task: ``setup(Client)`` is a
    coroutine that starts the server task and connects a ``Client`` transport to it, and
    returns both; the task ends when the client closes."""
    msg = b"x" * ECHO_SIZE
    done = loop.create_future()
    left = [n]
    server, client = loop.run_until_complete(setup(_echo_client(workload, msg, left, done)))
    t0 = _start()
    client.write(msg)
    loop.run_until_complete(done)
    dt = _stop(t0)
    client.close()
    loop.run_until_complete(server)
    if left[0]:
        raise AssertionError(f"{workload}: {left[0]} round trips missing")
    return n, dt


def stream_echo(loop, n):
    """As socket_echo, but the server end is asyncio's streams
    (``asyncio.open_connection(sock=)``; ``await reader.read()``, ``writer.write()``,
    ``await writer.drain()`` in a task), the way ``asyncio.start_server`` handlers are
    written. The difference to socket_echo is what the streams layer costs a round trip."""
    import socket

    async def serve(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    a, b = socket.socketpair()

    async def setup(Client):
        reader, writer = await asyncio.open_connection(sock=b)
        server = loop.create_task(serve(reader, writer))
        client, _ = await loop.create_connection(Client, sock=a)
        return server, client

    return _echo_against_task(loop, "stream_echo", n, setup)


def sock_echo(loop, n):
    """As socket_echo, but over a TCP connection on loopback, and the server end is a task
    on ``loop.sock_recv`` / ``loop.sock_sendall`` over the raw non-blocking socket, as the
    ``sock`` kind of ``bench/net.py`` serves. The difference to socket_echo is what the
    ``sock_*`` coroutines cost a round trip. (rloop 0.5 never finishes this workload.)"""
    import socket

    async def serve(conn):
        while data := await loop.sock_recv(conn, 65536):
            await loop.sock_sendall(conn, data)
        conn.close()

    with socket.create_server(("127.0.0.1", 0)) as lsock:
        a = socket.create_connection(lsock.getsockname())
        b, _ = lsock.accept()
    b.setblocking(False)
    b.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def setup(Client):
        server = loop.create_task(serve(b))
        client, _ = await loop.create_connection(Client, sock=a)
        return server, client

    return _echo_against_task(loop, "sock_echo", n, setup)


# 7c. Accepting connections -----------------------------------------------------------------
ACCEPT_CONCURRENCY = 8


def tcp_accept(loop, n):
    """``n`` TCP connections over loopback to a ``create_server`` server on this loop,
    ACCEPT_CONCURRENCY at a time; the server's Protocol closes each one in
    ``connection_made``, the client (a plain non-blocking socket: ``sock_connect``, then
    ``sock_recv`` until the EOF) then closes its end. Measures what a server pays per
    connection: accepting (readiness and ``accept()``, or the ring's multishot accept),
    making the transport and protocol, and closing them. Client and server share the
    loop, so the client's connect and close are in the time as well."""
    import socket

    class Server(asyncio.Protocol):
        def connection_made(self, transport):
            transport.close()

    async def setup():
        return await loop.create_server(Server, "127.0.0.1", 0, backlog=256)

    server = loop.run_until_complete(setup())
    addr = server.sockets[0].getsockname()

    async def one():
        sock = socket.socket()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
            if await loop.sock_recv(sock, 1) != b"":
                raise AssertionError("tcp_accept: data where EOF was expected")
        finally:
            sock.close()

    async def client(count):
        for _ in range(count):
            await one()

    per = [
        n // ACCEPT_CONCURRENCY + (i < n % ACCEPT_CONCURRENCY) for i in range(ACCEPT_CONCURRENCY)
    ]
    t0 = _start()
    loop.run_until_complete(asyncio.gather(*(client(k) for k in per)))
    dt = _stop(t0)
    server.close()
    loop.run_until_complete(server.wait_closed())
    return n, dt


# 8. subprocess spawn and wait -------------------------------------------------------------
TRUE = "/bin/true"
ECHO = "/bin/echo"


def subprocess_wait(loop, n):
    """``n`` times, one after the other: ``proc = await
    asyncio.create_subprocess_exec('/bin/true')``, ``await proc.wait()``. Measures the
    loop's child-process path: the spawn (fork/vfork + exec in the loop's process), the
    subprocess transport and how the loop learns of the exit (SIGCHLD, a pidfd, or, in
    stdlib asyncio before 3.12, a thread per child). ops = processes; each must exit 0.
    The children's own CPU time is not in the CPU-time figure."""

    async def one() -> bool:
        proc = await asyncio.create_subprocess_exec(TRUE)
        return await proc.wait() == 0

    return _children(loop, "subprocess_wait", n, one)


def subprocess_communicate(loop, n):
    """As subprocess_wait with ``/bin/echo hello``, ``stdout=PIPE`` and ``await
    proc.communicate()``: adds a pipe, its read transport, reading to EOF and the
    ordering of pipe close and process exit. Every output must be ``b"hello\\n"``."""
    pipe = asyncio.subprocess.PIPE

    async def one() -> bool:
        proc = await asyncio.create_subprocess_exec(ECHO, "hello", stdout=pipe)
        out, _ = await proc.communicate()
        return out == b"hello\n" and proc.returncode == 0

    return _children(loop, "subprocess_communicate", n, one)


def _children(loop, name: str, n: int, one):
    """Time ``n`` sequential ``await one()`` (one child each); every one must succeed."""

    async def main():
        ok = 0
        for _ in range(n):
            ok += await one()
        return ok

    t0 = _start()
    ok = loop.run_until_complete(main())
    dt = _stop(t0)
    if ok != n:
        raise AssertionError(f"{name}: {n - ok} of {n} children failed")
    return n, dt


# name -> (function, full size, quick size). Sizes aim at ~0.3-1 s on stdlib asyncio
# on the project's 2-core machine (see bench/README.md).
WORKLOADS = {
    "call_soon_chain": (call_soon_chain, 150_000, 40_000),
    "call_soon_batch": (call_soon_batch, 300_000, 80_000),
    "call_later_random": (call_later_random, 100_000, 25_000),
    "timer_cancel": (timer_cancel, 100_000, 30_000),
    "gather_tasks": (gather_tasks, 60_000, 15_000),
    "future_pingpong": (future_pingpong, 50_000, 12_000),
    "call_soon_threadsafe": (call_soon_threadsafe, 100_000, 25_000),
    "socket_echo": (socket_echo, 50_000, 12_000),
    "stream_echo": (stream_echo, 40_000, 10_000),
    "sock_echo": (sock_echo, 40_000, 10_000),
    "tcp_accept": (tcp_accept, 5_000, 1_500),
    "subprocess_wait": (subprocess_wait, 500, 150),
    "subprocess_communicate": (subprocess_communicate, 500, 150),
}
