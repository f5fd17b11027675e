"""call_later / call_at: deadlines, ordering, cancellation, odd delays, TimerHandle."""

from __future__ import annotations

import asyncio
import contextvars
import math
import sys

import pytest


def run_once(loop) -> None:
    loop.stop()
    loop.run_forever()


def run_for(loop, seconds: float) -> None:
    loop.call_later(seconds, loop.stop)
    loop.run_forever()


def scheduled_count(loop) -> int:
    """Timers in the heap, cancelled ones included."""
    if hasattr(loop, "stats"):
        return loop.stats()["timers"]
    return len(loop._scheduled)  # stdlib asyncio


var = contextvars.ContextVar("timer_var", default="default")


def test_call_later_orders_by_deadline(loop):
    out = []
    for delay in (0.03, 0.01, 0.02, 0.0):
        loop.call_later(delay, out.append, delay)
    run_for(loop, 0.06)
    assert out == [0.0, 0.01, 0.02, 0.03]


def test_call_at_orders_by_deadline_and_interleaves_with_call_later(loop):
    out = []
    now = loop.time()
    loop.call_at(now + 0.02, out.append, "at+0.02")
    loop.call_later(0.01, out.append, "later+0.01")
    loop.call_at(now + 0.005, out.append, "at+0.005")
    run_for(loop, 0.05)
    assert out == ["at+0.005", "later+0.01", "at+0.02"]


def test_equal_deadlines_fire_in_asyncio_order(loop):
    def order(lp):
        out = []
        base = lp.time() + 0.01
        for i in range(20):
            lp.call_at(base, out.append, i)
        lp.call_at(base + 0.01, lp.stop)
        lp.run_forever()
        return out

    reference = asyncio.new_event_loop()
    try:
        expected = order(reference)
    finally:
        reference.close()
    got = order(loop)
    assert sorted(got) == list(range(20))
    assert got == expected


def test_many_timers_due_at_once_fire_in_deadline_order(loop):
    """20,000 timers already due in one iteration, and 2,000 equal deadlines among them:
    each fires once, in deadline order (rsloop takes so many at once in bulk, where equal
    deadlines leave in an order of its own: asyncio leaves theirs undefined)."""
    import random

    rng = random.Random(5)
    now = loop.time()
    deadlines = [now - rng.random() * 0.01 for _ in range(18_000)] + [now - 0.005] * 2_000
    rng.shuffle(deadlines)
    fired = []
    for i, when in enumerate(deadlines):
        loop.call_at(when, fired.append, i)
    later = [loop.call_at(now + 3600 + i, fired.append, -1) for i in range(5)]
    run_once(loop)
    assert len(fired) == len(deadlines)
    assert sorted(fired) == list(range(len(deadlines)))
    order = [deadlines[i] for i in fired]
    assert order == sorted(order)
    assert scheduled_count(loop) == 5
    for h in later:
        h.cancel()


def test_timer_fires_no_earlier_than_its_deadline(loop):
    seen = []
    h = loop.call_later(0.02, lambda: seen.append(loop.time()))
    run_for(loop, 0.05)
    assert len(seen) == 1
    assert seen[0] >= h.when() - 0.002  # asyncio allows clock-resolution slack only


def test_when_returns_the_deadline(loop):
    now = loop.time()
    h = loop.call_at(now + 5, lambda: None)
    assert h.when() == now + 5
    h2 = loop.call_later(5, lambda: None)
    assert now + 5 <= h2.when() <= loop.time() + 5
    assert isinstance(h.when(), float)
    h.cancel()
    h2.cancel()


def test_cancel_before_firing(loop):
    out = []
    h = loop.call_later(0.01, out.append, "cancelled")
    loop.call_later(0.01, out.append, "kept")
    h.cancel()
    assert h.cancelled()
    run_for(loop, 0.03)
    assert out == ["kept"]


def test_cancel_after_firing_has_no_effect(loop):
    out = []
    h = loop.call_later(0, out.append, 1)
    run_for(loop, 0.01)
    assert out == [1]
    h.cancel()
    assert h.cancelled()
    loop.call_later(0, out.append, 2)
    run_for(loop, 0.01)
    assert out == [1, 2]


def test_cancelled_timers_are_compacted_and_the_rest_fire(loop):
    out = []
    base = loop.time() + 0.2
    handles = [loop.call_at(base + i * 1e-4, out.append, i) for i in range(300)]
    for i, h in enumerate(handles):
        if i % 3:
            h.cancel()
    assert scheduled_count(loop) == 300
    run_once(loop)  # asyncio compacts at the start of an iteration
    assert scheduled_count(loop) <= 100
    run_for(loop, 0.35)
    assert out == [i for i in range(300) if i % 3 == 0]
    assert scheduled_count(loop) == 0


def test_scheduled_follows_the_timer_in_and_out_of_the_heap(loop):
    # asyncio's TimerHandle._scheduled: True from call_later until the loop takes the entry
    # off its heap (run, or dropped once cancelled), cancel() alone leaves it True.
    out = []
    ran = loop.call_later(0, out.append, "ran")
    dropped = loop.call_later(0.001, out.append, "dropped")
    assert ran._scheduled and dropped._scheduled
    dropped.cancel()
    assert dropped._scheduled and dropped.cancelled()
    run_for(loop, 0.01)
    assert out == ["ran"]
    assert not ran._scheduled and not ran.cancelled()
    assert not dropped._scheduled


def test_timers_reused_after_running_start_afresh(loop):
    # Timers nobody holds are recycled by rsloop: what the last use left (an int deadline,
    # off the heap, cancelled) must not show through on the next one.
    out = []
    for i in range(50):
        loop.call_at(math.floor(loop.time()), out.append, i)
        loop.call_later(0, out.append, -i).cancel()
    run_for(loop, 0.01)
    assert sorted(out) == list(range(50))  # equal deadlines: heap order, as in asyncio
    fresh = [loop.call_later(10 + i, out.append, i) for i in range(100)]
    for h in fresh:
        assert type(h.when()) is float and type(h._when) is float
        assert h._scheduled and not h.cancelled()
    for h in fresh:
        h.cancel()
    run_once(loop)
    assert scheduled_count(loop) == 0 and len(out) == 50


def test_cancel_from_another_thread(loop):
    import threading

    out = []
    timer = loop.call_later(0.02, out.append, "timer")
    soon = loop.call_soon(out.append, "soon")
    th = threading.Thread(target=lambda: (timer.cancel(), soon.cancel()))
    th.start()
    th.join()
    assert timer.cancelled() and soon.cancelled()
    assert timer._callback is None and soon._args is None
    run_for(loop, 0.04)
    assert out == []
    assert scheduled_count(loop) == 0


def test_cancelled_head_timers_are_dropped(loop):
    out = []
    hs = [loop.call_later(10 + i, out.append, i) for i in range(5)]
    for h in hs:
        h.cancel()
    run_once(loop)
    assert scheduled_count(loop) == 0
    assert out == []


@pytest.mark.parametrize("delay", [0, -1, -1e9])
def test_zero_and_negative_delay_fire_in_the_next_iteration(loop, delay):
    out = []
    loop.call_soon(out.append, "soon")
    loop.call_later(delay, out.append, "timer")
    run_once(loop)
    assert out == ["soon", "timer"]


def test_expired_timers_run_after_ready_callbacks_in_deadline_order(loop):
    out = []
    loop.call_soon(out.append, "a")
    loop.call_later(0, out.append, "b")
    loop.call_later(-1, out.append, "c")
    run_once(loop)
    assert out == ["a", "c", "b"]


def test_huge_delay_does_not_fire_or_break_the_loop(loop):
    out = []
    h = loop.call_later(1e9, out.append, "huge")
    assert h.when() > loop.time() + 1e8
    loop.call_later(0.01, out.append, "small")
    run_for(loop, 0.03)
    assert out == ["small"]
    h.cancel()
    run_once(loop)
    assert out == ["small"]


@pytest.mark.parametrize("method", ["call_at", "call_later"])
def test_infinite_deadline_is_accepted_and_never_fires(loop, method):
    out = []
    h = getattr(loop, method)(math.inf, out.append, "inf")
    assert h.when() == math.inf
    run_for(loop, 0.02)
    assert out == []
    assert not h.cancelled()
    h.cancel()
    run_once(loop)


@pytest.mark.parametrize("method", ["call_at", "call_later"])
def test_nan_deadline_fires_at_once_as_on_asyncio(loop, loop_kind, method):
    # asyncio <= 3.12: max(0, nan) waits 0 and `nan >= end_time` is False, so the timer is
    # due. 3.13 asyncio passes the NaN timeout on to the selector, which raises ValueError.
    if sys.version_info >= (3, 13) and loop_kind in ("asyncio", "fallback"):
        pytest.skip("3.13+ asyncio: ValueError('cannot convert float NaN to integer')")
    out = []
    h = getattr(loop, method)(math.nan, out.append, "nan")
    assert math.isnan(h.when())
    loop.call_later(0.01, out.append, "later")
    run_for(loop, 0.05)
    assert out == ["nan", "later"]


def stdlib_310(loop_kind) -> bool:
    """Python 3.10's asyncio lacks 3.11's None checks (other message / AssertionError)."""
    return sys.version_info < (3, 11) and loop_kind in ("asyncio", "fallback")


def test_call_later_none_delay(loop, loop_kind):
    if stdlib_310(loop_kind):
        pytest.skip("3.10 asyncio: unsupported operand TypeError")
    with pytest.raises(TypeError, match=r"^delay must not be None$"):
        loop.call_later(None, lambda: None)


def test_call_at_none_when(loop, loop_kind):
    if stdlib_310(loop_kind):
        pytest.skip("3.10 asyncio: AssertionError")
    with pytest.raises(TypeError, match=r"^when cannot be None$"):
        loop.call_at(None, lambda: None)


def test_call_later_non_number_delay(loop):
    with pytest.raises(TypeError, match="unsupported operand type"):
        loop.call_later("1", lambda: None)


def test_call_later_passes_args(loop):
    out = []
    loop.call_later(0, lambda *a: out.append(a), 1, "x")
    loop.call_at(loop.time(), lambda *a: out.append(a), 2)
    run_for(loop, 0.01)
    assert out == [(1, "x"), (2,)]


def test_timer_callback_runs_under_given_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "timer-ctx")
    seen = []
    loop.call_later(0, lambda: seen.append(var.get()), context=ctx)
    loop.call_at(loop.time(), lambda: seen.append(var.get()))
    run_for(loop, 0.01)
    assert seen == ["timer-ctx", "default"]


def test_timer_default_context_copied_at_schedule_time(loop):
    seen = []
    token = var.set("scheduled")
    try:
        loop.call_later(0, lambda: seen.append(var.get()))
    finally:
        var.reset(token)
    run_for(loop, 0.01)
    assert seen == ["scheduled"]


def test_exception_in_timer_goes_to_handler(loop, handler_log):
    def boom():
        raise ValueError("timer")

    h = loop.call_later(0, boom)
    run_for(loop, 0.01)
    [ctx] = handler_log.take()
    assert ctx["message"].startswith("Exception in callback ")
    assert isinstance(ctx["exception"], ValueError)
    assert ctx["handle"] is h


def test_asyncio_sleep(loop):
    async def main():
        t0 = loop.time()
        result = await asyncio.sleep(0.02, "slept")
        return result, loop.time() - t0

    result, elapsed = loop.run_until_complete(main())
    assert result == "slept"
    assert elapsed >= 0.015


def test_asyncio_sleep_zero_yields_once(loop):
    out = []

    async def a():
        out.append("a1")
        await asyncio.sleep(0)
        out.append("a2")

    async def b():
        out.append("b1")
        await asyncio.sleep(0)
        out.append("b2")

    async def main():
        await asyncio.gather(a(), b())

    loop.run_until_complete(main())
    assert out == ["a1", "b1", "a2", "b2"]


def test_wait_for_times_out(loop):
    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 0.02)
        return await asyncio.wait_for(asyncio.sleep(0, "fast"), 5)

    assert loop.run_until_complete(main()) == "fast"


def test_timer_handle_comparisons_and_hash(loop):
    def cb():
        pass

    t1 = loop.call_at(5.0, cb)
    t2 = loop.call_at(5.0, cb)
    t3 = loop.call_at(6.0, cb)
    h = loop.call_soon(cb)
    assert hash(t1) == hash(5.0)
    assert t1 == t2
    assert t1 != t3
    assert t1 < t3 and t1 <= t3 and t3 > t1 and t3 >= t1
    assert t1 <= t2 and t1 >= t2
    assert not (t1 < t2)
    assert t1 != h and not (t1 == h)
    assert t1 != 5.0
    assert len({t1, t3}) == 2
    assert sorted([t3, t1]) == [t1, t3]
    t2.cancel()
    assert t1 != t2  # a cancelled handle differs
    for t in (t1, t3, h):
        t.cancel()
