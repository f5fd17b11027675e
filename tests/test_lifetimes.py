"""Lifetimes and interruptions: what the garbage collector can reclaim, and what survives a
slow-callback warning that raises."""

from __future__ import annotations

import contextvars
import gc
import os
import sys
import warnings
import weakref

import pytest


class Owner:
    """Keeps the handle of its own callback: ``self.h = loop.call_later(t, self.m)``."""

    def __init__(self, loop, delay):
        if delay is None:
            self.h = loop.call_soon(self.m)
        else:
            self.h = loop.call_later(delay, self.m)

    def m(self):
        pass


@pytest.mark.parametrize("delay", [None, 0.0])
def test_cycle_through_a_kept_handle_is_collected(loop, delay):
    owner = Owner(loop, delay)
    ref = weakref.ref(owner)
    del owner
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    gc.collect()
    assert ref() is None


def test_cycle_through_a_kept_cancelled_handle_and_its_context_is_collected(loop):
    # cancel() drops the callback, but the handle keeps its context, and the context
    # holds the owner: owner -> handle -> context -> owner, cut only by the collector.
    var = contextvars.ContextVar("owner")

    def make():
        owner = Owner.__new__(Owner)
        var.set(owner)
        owner.h = loop.call_soon(owner.m)
        owner.h.cancel()
        return weakref.ref(owner)

    ref = contextvars.Context().run(make)
    loop.call_soon(loop.stop)
    loop.run_forever()
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("delay", [None, 3600.0, "reader"])
def test_unclosed_loop_is_collected_with_a_resource_warning(loop_kind, delay):
    import socket

    from conftest import make_loop

    lp = make_loop(loop_kind)
    a, b = socket.socketpair()
    try:
        # A pending callback, or an fd watcher's, that refers back to the loop.
        if delay is None:
            lp.call_soon(lp.stop)
        elif delay == "reader":
            lp.add_reader(a.fileno(), lp.stop)
        else:
            lp.call_later(delay, lp.stop)
        ref = weakref.ref(lp)
        with pytest.warns(ResourceWarning, match="unclosed event loop"):
            del lp
            gc.collect()
        assert ref() is None
    finally:
        a.close()
        b.close()


@pytest.mark.debug_mode(True)
def test_raising_slow_callback_warning_keeps_the_rest_of_the_batch(loop, monkeypatch):
    import logging

    ran = []

    class Stop(KeyboardInterrupt):
        pass

    def boom_on_warning(self, msg, *args, **kwargs):
        if "took" in str(msg):
            raise Stop

    monkeypatch.setattr(logging.Logger, "warning", boom_on_warning)
    loop.slow_callback_duration = 0.0
    loop.call_soon(ran.append, "first")
    loop.call_soon(ran.append, "second")
    with pytest.raises(Stop):
        loop.run_forever()
    loop.slow_callback_duration = 100.0
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert ran == ["first", "second"]


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_loops_closed_with_open_connections_release_their_buffers():
    # Each loop owns its driver (an io_uring's rings, or an epoll set) and the transports'
    # buffers; a loop closed while its transports still read must free them all.
    import asyncio

    import rsloop

    class Proto(asyncio.Protocol):
        pass

    async def open_and_leave():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Proto, "127.0.0.1", 0)
        transport, _ = await loop.create_connection(Proto, *server.sockets[0].getsockname())
        await asyncio.sleep(0.01)
        server.close()
        return transport

    def cycle():
        loop = rsloop.new_event_loop()
        transport = loop.run_until_complete(open_and_leave())
        loop.close()
        del transport

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(5):
            cycle()
        gc.collect()
        before = _rss_kib()
        for _ in range(40):
            cycle()
        gc.collect()
        grown = _rss_kib() - before
    assert grown < 20 * 1024, f"RSS grew by {grown} KiB over 40 loops"


# ----- loops and threads -----


async def _round_trips(count: int = 20) -> int:
    """Socket round trips, timers and a task: the kinds of work a loop's driver serves."""
    import asyncio
    import socket

    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    got = 0
    try:
        for i in range(count):
            await loop.sock_sendall(a, bytes([i]))
            got += len(await loop.sock_recv(b, 1))
            await asyncio.sleep(0.001 if i % 5 == 0 else 0)
        return got + await asyncio.create_task(asyncio.sleep(0, result=0))
    finally:
        a.close()
        b.close()


def _in_thread(fn):
    import threading

    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join(30)
    assert not t.is_alive(), "thread hung"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_loop_created_on_one_thread_runs_on_another(loop):
    assert _in_thread(lambda: loop.run_until_complete(_round_trips())) == 20


def test_loop_moved_between_threads(loop):
    # Run here, then on another thread, then here again: each run serves its I/O.
    assert loop.run_until_complete(_round_trips()) == 20
    assert _in_thread(lambda: loop.run_until_complete(_round_trips())) == 20
    assert loop.run_until_complete(_round_trips()) == 20


def test_connection_keeps_receiving_when_the_loop_moves_to_another_thread(loop):
    # A transport made while the loop ran on one thread, then fed while it runs on
    # another, then on this one again (on io_uring: its receive is re-armed on the new
    # thread's ring).
    import asyncio
    import socket

    got = []

    class Collect(asyncio.Protocol):
        def data_received(self, data):
            got.append(data)

    a, b = socket.socketpair()

    async def attach():
        transport, _ = await loop.connect_accepted_socket(Collect, a)
        return transport

    async def echo(msg):
        b.sendall(msg)
        for _ in range(500):
            if b"".join(got).endswith(msg):
                return True
            await asyncio.sleep(0.01)
        return False

    transport = _in_thread(lambda: loop.run_until_complete(attach()))
    try:
        assert _in_thread(lambda: loop.run_until_complete(echo(b"one")))
        assert _in_thread(lambda: loop.run_until_complete(echo(b"two")))
        assert loop.run_until_complete(echo(b"three"))
        assert b"".join(got) == b"onetwothree"
    finally:
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        b.close()


def test_several_loops_in_several_threads_at_once(loop_kind):
    import threading

    from conftest import make_loop

    results = []
    errors = []
    start = threading.Barrier(4)

    loops = [make_loop(loop_kind) for _ in range(4)]  # made here, each run on its own thread

    def worker(lp):
        try:
            start.wait(10)
            results.append(lp.run_until_complete(_round_trips(50)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            lp.close()

    threads = [threading.Thread(target=worker, args=(lp,)) for lp in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert results == [50] * 4


def test_transport_left_open_warns_when_collected(loop):
    import asyncio
    import socket

    a, b = socket.socketpair()

    async def main():
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        return weakref.ref(transport)

    ref = loop.run_until_complete(main())
    loop.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    # The warning names the transport (its `source`): let the record go before asking
    # whether it was freed. The socket's own "unclosed socket" may come first where the
    # collector finalizes it before the transport (3.15 does, on asyncio's loop too).
    messages = [str(w.message) for w in caught]
    del caught
    assert any(m.startswith("unclosed transport") for m in messages), messages
    assert all(m.startswith(("unclosed transport", "unclosed <socket")) for m in messages)
    gc.collect()
    assert ref() is None
    b.close()


def test_a_loop_that_ran_tasks_is_freed_without_the_collector(loop_kind):
    """While it runs, the loop keeps things that refer back to it (the `loop=` keywords of
    new futures and tasks; on 3.10/3.11 a bound `call_soon`); once the run ends it holds
    none, so dropping the last reference frees it at once, as asyncio's loop is."""
    import asyncio

    from conftest import make_loop

    lp = make_loop(loop_kind)

    async def main():
        running = asyncio.get_running_loop()
        fut = running.create_future()
        running.call_soon(fut.set_result, 1)
        return await asyncio.gather(fut, running.create_task(asyncio.sleep(0, 2)))

    assert lp.run_until_complete(main()) == [1, 2]
    lp.close()
    ref = weakref.ref(lp)
    gc.disable()
    try:
        del lp
        assert ref() is None
    finally:
        gc.enable()


def test_call_soon_set_on_the_instance_during_a_run_is_used_and_kept(loop):
    """A `call_soon` patched onto the loop instance while it runs (as `mock.patch.object`
    does) gets the tasks' wake-ups and is still there after the run."""
    import asyncio

    seen = []
    original = loop.call_soon

    def spy(callback, *args, context=None):
        seen.append(callback)
        return original(callback, *args, context=context)

    async def main():
        loop.call_soon = spy
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
        assert loop.call_soon is spy
        assert seen, "the task's wake-up did not go through the instance's call_soon"
    finally:
        del loop.call_soon


def test_task_wakeups_go_through_a_subclass_call_soon(loop_kind):
    """A loop subclass that overrides call_soon sees every task wake-up."""
    import asyncio

    from conftest import make_loop

    probe = make_loop(loop_kind)
    base = type(probe)
    probe.close()
    seen = []

    class Counting(base):
        def call_soon(self, callback, *args, context=None):
            seen.append(callback)
            return super().call_soon(callback, *args, context=context)

    if loop_kind in ("uring", "poll"):
        lp = Counting(backend=loop_kind)
    elif loop_kind == "fallback":
        lp = Counting("test: forced fallback")
    else:
        lp = Counting()
    try:

        async def main():
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        lp.run_until_complete(main())
    finally:
        lp.close()
    assert len(seen) >= 3, seen


@pytest.mark.skipif(sys.maxsize < 2**32, reason="sizes are for 64-bit builds")
def test_handles_stay_in_small_allocator_classes(loop):
    # pymalloc serves objects in 16-byte size classes, and a burst of cross-thread posts
    # keeps tens of thousands of handles alive at once: one word more in a handle
    # (64-bit, plus the collector's 16-byte header) put it in the next class and cost
    # call_soon_threadsafe ~6 % (docs/performance.md). Debug-only fields are boxed, and
    # the flags share the busy byte of the handle's cell: 64 bytes (pymalloc's 80-byte
    # class), a timer 80 (96).
    from conftest import is_rsloop_native

    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native handles only")
    handle = loop.call_soon(print)
    timer = loop.call_later(3600, print)
    assert type(handle).__basicsize__ <= 64
    assert type(timer).__basicsize__ <= 80
    # What the sizes must not cost: weak references (asyncio's handles have them).
    assert weakref.ref(handle)() is handle and weakref.ref(timer)() is timer
    timer.cancel()


def test_queued_handles_are_left_to_the_loop_and_kept_ones_tracked_after(loop):
    # A million pending callbacks must not be walked by every collection they survive:
    # while the loop alone runs them, the collector does not track them; one the caller
    # keeps is tracked again once it ran or was dropped as cancelled (the cycle tests
    # above show that such cycles are still collected).
    from conftest import is_rsloop_native

    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native handles only")
    ran = []
    kept = [loop.call_soon(ran.append, 1), loop.call_later(0, ran.append, 2)]
    kept.append(loop.call_soon(ran.append, 3))
    kept[2].cancel()
    assert not any(gc.is_tracked(h) for h in kept)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert ran == [1, 2]
    assert all(gc.is_tracked(h) for h in kept)
