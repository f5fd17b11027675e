"""A loop idle in a wait while other threads make garbage whose finalizers touch it.

The state of issue 29's crash: a loop blocked in the kernel for tens of seconds
(`await asyncio.Event().wait()` that nothing sets), SIGINT ignored, while the collector
runs and finalizers fire. Here the collector runs on other threads, which the GIL lets in
while the loop waits, and their finalizers post to the loop, schedule on it from the
wrong thread, cancel its handles and timers, and drop the last reference to handles,
futures, tasks and loops. The loop thread wakes for each post and goes back to sleep.

    python stress/idle_gc.py --backend poll --seconds 30

Exit status 0 when the loop survived, every threadsafe post from a finalizer ran, and
the wait was then ended from another thread (the loop stops and closes cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Stats:
    """Counters safe to bump from a finalizer (no lock a collection could re-enter)."""

    def __init__(self) -> None:
        self.counters = {k: itertools.count() for k in ("posted", "ran", "finalized")}
        self.errors: list[str] = []

    def add(self, field: str) -> None:
        next(self.counters[field])

    def get(self, field: str) -> int:
        # itertools.count's repr is the only way to read it without advancing it
        return int(repr(self.counters[field])[6:-1])


def make_garbage(loop, other_loops, stats: Stats, rng: random.Random, stop: threading.Event):
    """Cycles with __del__s that touch `loop`, made on this (non-loop) thread."""

    def ran() -> None:
        stats.add("ran")

    class Node:
        __slots__ = ("peer", "handle", "payload", "__weakref__")

        def __init__(self, kind: int) -> None:
            self.peer = None
            self.handle = None
            self.payload = None
            k = kind % 8
            if k == 0:
                # a ready handle from the wrong thread, kept in the cycle
                self.handle = loop.call_soon_threadsafe(self.method)
                stats.add("posted")
            elif k == 1:
                # a timer far away (its callback does not hold the cycle), cancelled by
                # the finalizer or never
                self.handle = loop.call_later(3600, ran)
            elif k == 2:
                # a future of the idle loop, left pending in the cycle
                self.payload = loop.create_future()
                self.payload.add_done_callback(lambda f, s=self: None)
            elif k == 3:
                # a loop never run, collected with a pending timer (its __del__ warns)
                lp = other_loops()
                lp.call_later(3600, self.method)
                self.payload = lp
            elif k == 4:
                # a handle whose callback closes over the cycle
                self.handle = loop.call_soon_threadsafe(lambda s=self: s.method())
                stats.add("posted")
            elif k == 5:
                self.payload = [self, bytearray(rng.randrange(1, 4096))]
            elif k == 6:
                # a far timer; now and then one that keeps its cycle until the loop
                # closes (collected then, its finalizer posting to a closed loop)
                arg = self if rng.random() < 0.02 else None
                self.handle = loop.call_at(loop.time() + 7200, print, arg)
            else:
                self.payload = {"h": loop.call_soon_threadsafe(ran), "me": self}
                stats.add("posted")

        def method(self) -> None:
            stats.add("ran")

        def __del__(self) -> None:
            stats.add("finalized")
            try:
                h = self.handle
                if h is not None and rng.random() < 0.5:
                    h.cancel()
                if rng.random() < 0.5:
                    loop.call_soon_threadsafe(ran)
                    stats.add("posted")
                if isinstance(self.payload, asyncio.Future) and rng.random() < 0.5:
                    loop.call_soon_threadsafe(self.payload.cancel)
                if isinstance(self.payload, asyncio.AbstractEventLoop):
                    if rng.random() < 0.5:
                        self.payload.close()
                self.handle = None
            except Exception as exc:  # noqa: BLE001
                stats.errors.append(f"{type(exc).__name__}: {exc} at {exc.__traceback__.tb_lineno}")

    while not stop.is_set():
        nodes = [Node(rng.randrange(8)) for _ in range(rng.randrange(1, 64))]
        for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
            a.peer = b
        del nodes, a, b
        if rng.random() < 0.05:
            gc.collect()
        if rng.random() < 0.01:
            time.sleep(0.01)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="poll", choices=["uring", "poll"])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--policy", action="store_true", help="set the loop by a policy, as test_runners"
    )
    args = p.parse_args(argv)
    os.environ["RSLOOP_BACKEND"] = args.backend
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.set_threshold(100, 5, 5)  # a collector that runs often
    import rsloop

    stats = Stats()
    stop = threading.Event()
    spare_loops: list = []

    def other_loop():
        lp = rsloop.new_event_loop()
        return lp

    async def main_coro() -> None:
        loop = asyncio.get_running_loop()
        ev = asyncio.Event()
        threads = [
            threading.Thread(
                target=make_garbage,
                args=(loop, other_loop, stats, random.Random(args.seed * 100 + i), stop),
                daemon=True,
            )
            for i in range(args.threads)
        ]
        for t in threads:
            t.start()

        def end() -> None:
            stop.set()
            for t in threads:
                t.join()
            gc.collect()
            loop.call_soon_threadsafe(ev.set)

        timer = threading.Timer(args.seconds, end)
        timer.start()
        await ev.wait()  # idle: only the garbage threads' posts wake it
        await asyncio.sleep(0.05)  # let the last posts run

    if args.policy:
        asyncio.set_event_loop_policy(rsloop.EventLoopPolicy())
        asyncio.run(main_coro())
    else:
        rsloop.run(main_coro())
    del spare_loops
    gc.collect()
    # A post made by a finalizer after the loop closed (the cycles its far timers kept
    # alive are collected at close) raises RuntimeError there, as asyncio's does; any
    # other error is a failure, and every post the loop accepted must have run.
    closed = [e for e in stats.errors if "Event loop is closed" in e]
    bad = [e for e in stats.errors if "Event loop is closed" not in e]
    report = {
        "backend": args.backend,
        "seconds": args.seconds,
        "posted": stats.get("posted"),
        "ran": stats.get("ran"),
        "finalized": stats.get("finalized"),
        "posts_refused_after_close": len(closed),
        "unexpected_errors": bad[:5],
    }
    print(json.dumps(report))
    ok = not bad and report["ran"] == report["posted"] and report["finalized"] > 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
