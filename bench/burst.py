"""Workloads whose cost depends on how much work is pending at once, for ``bench/scale.py``,
and the older PyPI rsloop's own published workloads.

A burst workload ``fn(loop, n)`` schedules ``n`` operations before any of them runs,
then waits for all of them; it repeats the burst until at least ``TOTAL`` operations ran,
and at least ``MIN_BURSTS`` times, so every size is measured in the same steady state: a
burst of 10^3 over a thousand bursts, one of 10^6 over three, the first of which meets
cold memory as the first of a thousand small ones does. The collector stays on, as in a
service. Like ``workloads.py``, every workload
checks its own count and uses only the public loop API.
"""

from __future__ import annotations

import array
import asyncio
import gc
import itertools
import random
import threading

from workloads import _start, _stop

TOTAL = 1_000_000
MIN_BURSTS = 3


def _bursts(n: int, total: int = TOTAL) -> int:
    return max(MIN_BURSTS, total // n)


def call_soon_burst(loop, n):
    """``n`` ``call_soon(cb)`` from one coroutine, then await the last callback."""
    counter = itertools.count()
    tick = counter.__next__
    bursts = _bursts(n)

    async def main():
        call_soon = loop.call_soon
        for _ in range(bursts):
            done = loop.create_future()
            for _ in range(n - 1):
                call_soon(tick)
            call_soon(done.set_result, None)
            await done

    t0 = _start()
    loop.run_until_complete(main())
    dt = _stop(t0)
    if next(counter) != bursts * (n - 1):
        raise AssertionError("call_soon_burst: a callback did not run")
    return bursts * n, dt


def threadsafe_burst(loop, n):
    """One producer thread posts ``n`` callbacks with ``call_soon_threadsafe``; the loop
    runs them all before the next burst starts."""
    counter = itertools.count()
    tick = counter.__next__
    bursts = _bursts(n)
    post = loop.call_soon_threadsafe
    start = threading.Semaphore(0)

    def producer():
        for _ in range(bursts):
            start.acquire()
            for _ in range(n - 1):
                post(tick)
            post(loop.stop)

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    t0 = _start()
    for _ in range(bursts):
        start.release()
        loop.run_forever()
    dt = _stop(t0)
    th.join(60)
    if next(counter) != bursts * (n - 1):
        raise AssertionError("threadsafe_burst: a callback did not run")
    return bursts * n, dt


def call_later_burst(loop, n):
    """``n`` ``call_later`` timers whose deadlines are random (drawn before timing) and
    already due (delays in [-1 ms, 0)), then await the last: heap push, expiry in
    deadline order and the run of ``n`` pending timers, without waiting on the clock."""
    counter = itertools.count()
    tick = counter.__next__
    bursts = _bursts(n)
    rng = random.Random(12345)
    # An array, not a list: the collector would walk a list of a million floats.
    delays = array.array("d", (-rng.random() * 0.001 for _ in range(n)))

    async def main():
        call_later = loop.call_later
        for _ in range(bursts):
            done = loop.create_future()
            for d in delays[:-1]:
                call_later(d, tick)
            call_later(0, done.set_result, None)
            await done

    t0 = _start()
    loop.run_until_complete(main())
    dt = _stop(t0)
    if next(counter) != bursts * (n - 1):
        raise AssertionError("call_later_burst: a timer did not fire")
    return bursts * n, dt


def gather_burst(loop, n):
    """``n`` tasks created at once (each ``await asyncio.sleep(0)``), gathered: a quarter
    of ``TOTAL`` tasks in all, and one burst from 250,000 up (a million tasks take asyncio
    half a minute)."""
    bursts = _bursts(n, TOTAL // 4) if n < TOTAL // 4 else 1

    async def leaf():
        await asyncio.sleep(0)
        return 1

    async def main():
        total = 0
        for _ in range(bursts):
            total += sum(await asyncio.gather(*[loop.create_task(leaf()) for _ in range(n)]))
        return total

    t0 = _start()
    total = loop.run_until_complete(main())
    dt = _stop(t0)
    if total != bursts * n:
        raise AssertionError("gather_burst: a task did not finish")
    return total, dt


# The older PyPI rsloop's published workloads (its README's three rows) ------------------
def legacy_callbacks(loop, n):
    """``n`` (200,000) ``call_soon`` scheduled by the running loop's task before any of
    them runs, then awaited, with the collector disabled during the run, as that
    benchmark does. (Scheduled from outside a running loop instead, the older rsloop takes
    a slower path: 2.5M/s where it does 6-7M/s from inside.)"""
    counter = itertools.count()
    tick = counter.__next__

    async def main():
        call_soon = loop.call_soon
        done = loop.create_future()
        t0 = _start()
        for _ in range(n - 1):
            call_soon(tick)
        call_soon(done.set_result, None)
        await done
        return _stop(t0)

    enabled = gc.isenabled()
    gc.disable()
    try:
        dt = loop.run_until_complete(main())
    finally:
        if enabled:
            gc.enable()
    if next(counter) != n - 1:
        raise AssertionError("legacy_callbacks: a callback did not run")
    return n, dt


LEGACY_TASK_BATCH = 5_000


def legacy_tasks(loop, n):
    """``n`` (50,000) tasks of ``await asyncio.sleep(0)``, gathered in batches of 5,000."""

    async def leaf():
        await asyncio.sleep(0)

    async def main():
        done = 0
        while done < n:
            k = min(LEGACY_TASK_BATCH, n - done)
            await asyncio.gather(*[loop.create_task(leaf()) for _ in range(k)])
            done += k
        return done

    t0 = _start()
    done = loop.run_until_complete(main())
    dt = _stop(t0)
    if done != n:
        raise AssertionError("legacy_tasks: a task did not run")
    return n, dt


def legacy_tcp_streams(loop, n):
    """``n`` (5,000) round trips of 1 KiB over one TCP connection, both ends on this loop
    (``asyncio.start_server`` + ``open_connection``; the client writes, drains and
    ``readexactly``s the echo)."""
    msg = b"x" * 1024

    async def serve(reader, writer):
        try:
            while True:
                data = await reader.readexactly(len(msg))
                writer.write(data)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = _start()
        for _ in range(n):
            writer.write(msg)
            await writer.drain()
            if await reader.readexactly(len(msg)) != msg:
                raise AssertionError("legacy_tcp_streams: echo differs")
        dt = _stop(t0)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return dt

    dt = loop.run_until_complete(main())
    return n, dt


# name -> (function, full size, quick size), as workloads.WORKLOADS.
BURSTS = {
    "call_soon_burst": (call_soon_burst, 100_000, 10_000),
    "threadsafe_burst": (threadsafe_burst, 100_000, 10_000),
    "call_later_burst": (call_later_burst, 100_000, 10_000),
    "gather_burst": (gather_burst, 10_000, 1_000),
    "legacy_callbacks": (legacy_callbacks, 200_000, 50_000),
    "legacy_tasks": (legacy_tasks, 50_000, 10_000),
    "legacy_tcp_streams": (legacy_tcp_streams, 5_000, 1_000),
}
