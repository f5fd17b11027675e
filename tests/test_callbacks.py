"""call_soon / call_soon_threadsafe: order, arguments, contexts, cancellation, errors."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys
import threading
import time
import weakref

import pytest


def run_once(loop) -> None:
    loop.stop()
    loop.run_forever()


def run_until_stopped(loop, safety: float = 10.0) -> None:
    """run_forever with a safety stop so a bug fails the test instead of hanging it."""
    guard = loop.call_later(safety, loop.stop)
    loop.run_forever()
    guard.cancel()


var = contextvars.ContextVar("var", default="default")


# ----- order and arguments -----


def test_call_soon_runs_in_fifo_order(loop):
    out = []
    for i in range(100):
        loop.call_soon(out.append, i)
    run_once(loop)
    assert out == list(range(100))


def test_call_soon_passes_positional_args(loop):
    out = []
    loop.call_soon(lambda *a: out.append(a))
    loop.call_soon(lambda *a: out.append(a), 1)
    loop.call_soon(lambda *a: out.append(a), 1, "two", None, (3,))
    run_once(loop)
    assert out == [(), (1,), (1, "two", None, (3,))]


def test_handle_args_attribute_matches_asyncio(loop):
    # asyncio.Handle keeps ``_args`` as the tuple of positional arguments, the same object
    # on every access, and drops it (None) on cancel.
    none, one, many = (
        loop.call_soon(print),
        loop.call_soon(print, "x"),
        loop.call_soon(print, 1, 2, 3),
    )
    timer = loop.call_later(10, print, "t")
    assert none._args == ()
    assert one._args == ("x",)
    assert one._args is one._args
    assert many._args == (1, 2, 3)
    assert timer._args == ("t",)
    for h in (none, one, many, timer):
        h.cancel()
        assert h._args is None
    run_once(loop)


def test_handle_args_read_before_the_run(loop):
    # A single argument that is a tuple stays one argument; reading `_args` before the
    # run changes nothing about the call.
    out = []
    h1 = loop.call_soon(lambda *a: out.append(a), (1, 2))
    h2 = loop.call_soon(lambda *a: out.append(a), "y")
    assert h1._args == ((1, 2),)
    assert h2._args == ("y",)
    run_once(loop)
    assert out == [((1, 2),), ("y",)]
    assert h2._args == ("y",)


def test_call_soon_returns_handle(loop):
    h = loop.call_soon(lambda: None)
    assert not h.cancelled()
    run_once(loop)


def test_handles_are_weak_referenceable(loop):
    # asyncio's Handle.__slots__ has __weakref__: a WeakValueDictionary of pending
    # handles (a common registry of timeouts) works on every loop.
    ran = []
    registry = weakref.WeakValueDictionary()
    registry["soon"] = soon = loop.call_soon(ran.append, "soon")
    registry["later"] = later = loop.call_later(0, ran.append, "later")
    assert registry["soon"] is soon and registry["later"] is later
    del soon, later
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert ran == ["soon", "later"]
    assert len(registry) == 0


def test_a_weakly_referenced_handle_never_runs_another_callback(loop):
    # A loop may reuse the handle objects of callbacks that ran; one that a weak
    # reference can still see must never come back as someone else's handle.
    ran = []
    refs = [weakref.ref(loop.call_soon(ran.append, i)) for i in range(100)]
    refs += [weakref.ref(loop.call_later(0, ran.append, i)) for i in range(100, 200)]
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    later = [loop.call_soon(ran.append, "later") for _ in range(200)]
    later += [loop.call_later(0, ran.append, "later") for _ in range(200)]
    # Each ran and was dropped, as in asyncio; one kept for reuse would still be seen.
    assert [r for r in refs if r() is not None] == []
    for h in later:
        h.cancel()
    assert ran == list(range(200))


def test_callbacks_scheduled_by_callbacks_run_next_iteration(loop):
    iteration = [0]
    out = []

    def tick():  # one call per iteration: counts iterations
        iteration[0] += 1
        if iteration[0] < 5:
            loop.call_soon(tick)

    def first():
        out.append(("first", iteration[0]))
        loop.call_soon(lambda: out.append(("second", iteration[0])))

    loop.call_soon(tick)
    loop.call_soon(first)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert out == [("first", 1), ("second", 2)]


def test_callbacks_ready_at_iteration_start_all_run_in_that_iteration(loop):
    out = []
    for i in range(3):
        loop.call_soon(out.append, i)
    loop.call_soon(lambda: loop.call_soon(out.append, "later"))
    run_once(loop)
    assert out == [0, 1, 2]
    run_once(loop)
    assert out == [0, 1, 2, "later"]


# ----- contexts -----


def test_callback_sees_the_context_it_was_given(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "given")
    seen = []
    loop.call_soon(lambda: seen.append(var.get()), context=ctx)
    loop.call_soon(lambda: seen.append(var.get()))
    run_once(loop)
    assert seen == ["given", "default"]


def test_set_in_callback_does_not_leak_to_other_callbacks(loop):
    seen = []

    def setter():
        var.set("leaked?")
        seen.append(("setter", var.get()))

    loop.call_soon(setter)
    loop.call_soon(lambda: seen.append(("other", var.get())))
    run_once(loop)
    assert seen == [("setter", "leaked?"), ("other", "default")]
    assert var.get() == "default"


def test_set_in_callback_lands_in_its_explicit_context(loop):
    ctx = contextvars.Context()
    loop.call_soon(var.set, "stored", context=ctx)
    run_once(loop)
    assert ctx[var] == "stored"
    assert var.get() == "default"


def test_default_context_is_a_copy_taken_at_call_time(loop):
    seen = []
    token = var.set("at-schedule")
    try:
        h = loop.call_soon(lambda: seen.append(var.get()))
    finally:
        var.reset(token)
    var_after = var.get()
    run_once(loop)
    assert seen == ["at-schedule"]
    assert var_after == "default"
    if sys.version_info >= (3, 12):  # Handle.get_context() is 3.12+
        ctx = h.get_context()
        assert isinstance(ctx, contextvars.Context)
        assert ctx[var] == "at-schedule"


# ----- cancellation -----


def test_handle_cancel(loop):
    out = []
    h = loop.call_soon(out.append, "cancelled")
    loop.call_soon(out.append, "kept")
    assert not h.cancelled()
    h.cancel()
    assert h.cancelled()
    h.cancel()  # idempotent
    assert h.cancelled()
    run_once(loop)
    assert out == ["kept"]


def test_cancel_from_earlier_callback_in_same_batch(loop):
    out = []
    later = []
    loop.call_soon(lambda: later[0].cancel())
    later.append(loop.call_soon(out.append, "must not run"))
    loop.call_soon(out.append, "runs")
    run_once(loop)
    assert out == ["runs"]


def test_cancel_after_run_is_harmless(loop):
    out = []
    h = loop.call_soon(out.append, 1)
    run_once(loop)
    h.cancel()
    assert h.cancelled()
    run_once(loop)
    assert out == [1]


# ----- call_soon_threadsafe -----


def test_call_soon_threadsafe_from_loop_thread(loop):
    out = []
    loop.call_soon(out.append, 1)
    loop.call_soon_threadsafe(out.append, 2)
    loop.call_soon(out.append, 3)
    h = loop.call_soon_threadsafe(out.append, "cancelled")
    h.cancel()
    run_once(loop)
    assert out == [1, 2, 3]


def test_call_soon_threadsafe_from_threads_all_run_in_per_thread_order(loop):
    n_threads, n_posts = 8, 500
    out = []
    done = []
    start = threading.Barrier(n_threads)

    def on_done():
        done.append(1)
        if len(done) == n_threads:
            loop.stop()

    def poster(t):
        start.wait()
        for i in range(n_posts):
            loop.call_soon_threadsafe(out.append, (t, i))
        loop.call_soon_threadsafe(on_done)

    threads = [threading.Thread(target=poster, args=(t,)) for t in range(n_threads)]
    loop.call_soon(lambda: [th.start() for th in threads])
    run_until_stopped(loop)
    for th in threads:
        th.join()
    assert len(out) == n_threads * n_posts
    for t in range(n_threads):
        assert [i for (tt, i) in out if tt == t] == list(range(n_posts))


def test_call_soon_threadsafe_before_loop_runs(loop):
    out = []
    th = threading.Thread(target=lambda: loop.call_soon_threadsafe(out.append, "posted"))
    th.start()
    th.join()
    run_once(loop)
    assert out == ["posted"]


class _Token:
    def hit(self, out):
        out.append("hit")


def test_call_soon_threadsafe_from_another_thread_keeps_and_releases_objects(loop):
    # A post from a thread that never ran loop code: the handle holds the callback and
    # its argument until the callback ran, then lets go of both; a post to a closed loop
    # raises asyncio's RuntimeError and keeps nothing.
    out = []
    token = _Token()
    ref = weakref.ref(token)
    errors = []

    def producer(obj):
        loop.call_soon_threadsafe(obj.hit, out)

    th = threading.Thread(target=producer, args=(token,))
    th.start()
    th.join()
    del token
    assert ref() is not None  # the pending handle holds it
    run_once(loop)
    assert out == ["hit"]
    loop.call_soon(lambda: None)  # the recycled handle is refilled, the old one emptied
    run_once(loop)
    gc.collect()
    assert ref() is None

    loop.close()
    token = _Token()
    ref = weakref.ref(token)

    def late(obj):
        try:
            loop.call_soon_threadsafe(obj.hit, out)
        except RuntimeError as exc:
            errors.append(str(exc))

    th = threading.Thread(target=late, args=(token,))
    th.start()
    th.join()
    del token
    gc.collect()
    assert errors == ["Event loop is closed"]
    assert ref() is None


def test_call_soon_threadsafe_wakes_a_blocked_loop(loop):
    fut = loop.create_future()

    def resolve():
        time.sleep(0.05)
        loop.call_soon_threadsafe(fut.set_result, "woken")

    th = threading.Thread(target=resolve)
    th.start()
    # A safety stop makes a missed wake-up a RuntimeError rather than a hang.
    guard = loop.call_later(10, loop.stop)
    t0 = time.monotonic()
    try:
        assert loop.run_until_complete(fut) == "woken"
    finally:
        guard.cancel()
        th.join()
    assert time.monotonic() - t0 < 5


def test_call_soon_threadsafe_wakes_a_loop_waiting_for_a_far_timer(loop):
    out = []
    far = loop.call_later(3600, out.append, "far")

    def post():
        time.sleep(0.05)
        loop.call_soon_threadsafe(loop.stop)

    th = threading.Thread(target=post)
    th.start()
    guard = loop.call_later(10, loop.stop)
    t0 = time.monotonic()
    loop.run_forever()
    th.join()
    guard.cancel()
    far.cancel()
    assert time.monotonic() - t0 < 5
    assert out == []


# ----- exceptions in callbacks -----


def test_exception_in_callback_goes_to_handler_and_loop_continues(loop, handler_log):
    out = []

    def boom():
        raise ZeroDivisionError("bad")

    h = loop.call_soon(boom)
    loop.call_soon(out.append, "after")
    run_once(loop)
    assert out == ["after"]
    [ctx] = handler_log.take()
    assert ctx["message"].startswith("Exception in callback ")
    assert "boom" in ctx["message"]
    assert isinstance(ctx["exception"], ZeroDivisionError)
    assert ctx["handle"] is h
    run_once(loop)  # still usable


def test_exception_handler_receives_loop(loop, handler_log):
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append((lp, ctx["exception"])))
    exc = ValueError("v")

    def boom():
        raise exc

    loop.call_soon(boom)
    run_once(loop)
    assert seen == [(loop, exc)]
    assert seen[0][0] is loop
    assert handler_log.take() == []


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_kbi_and_systemexit_propagate_from_run_forever_and_loop_resumes(loop, exc_type):
    out = []

    def boom():
        raise exc_type()

    loop.call_soon(out.append, 1)
    loop.call_soon(boom)
    loop.call_soon(out.append, 2)
    loop.call_soon(loop.stop)
    with pytest.raises(exc_type):
        loop.run_forever()
    assert out == [1]
    assert not loop.is_running()
    loop.call_soon(out.append, 3)
    loop.call_soon(loop.stop)
    loop.run_forever()
    # the rest of the interrupted batch runs first, then what was added afterwards
    assert out == [1, 2, 3]


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_kbi_and_systemexit_propagate_from_run_until_complete(loop, exc_type):
    out = []

    def boom():
        raise exc_type()

    async def main():
        loop.call_soon(boom)
        loop.call_soon(out.append, "queued")
        await loop.create_future()  # never completes

    task = loop.create_task(main())
    with pytest.raises(exc_type):
        loop.run_until_complete(task)
    assert out == []
    assert not task.done()
    assert loop.run_until_complete(_sleep0(loop)) == "again"
    assert out == ["queued"]
    task.cancel()
    loop.run_until_complete(_wait_cancelled(task))


async def _sleep0(loop):
    await asyncio.sleep(0)
    return "again"


async def _wait_cancelled(task):
    try:
        await task
    except asyncio.CancelledError:
        pass


def test_other_base_exception_goes_to_handler(loop, handler_log):
    class Custom(BaseException):
        pass

    out = []

    def boom():
        raise Custom()

    loop.call_soon(boom)
    loop.call_soon(out.append, "after")
    run_once(loop)
    assert out == ["after"]
    [ctx] = handler_log.take()
    assert isinstance(ctx["exception"], Custom)
    assert ctx["message"].startswith("Exception in callback ")


def test_error_in_custom_handler_falls_back_to_default(loop, caplog):
    def bad_handler(lp, ctx):
        raise RuntimeError("handler broke")

    def boom():
        raise ZeroDivisionError("original")

    loop.set_exception_handler(bad_handler)
    out = []
    loop.call_soon(boom)
    loop.call_soon(out.append, "after")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_once(loop)
    assert out == ["after"]
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.ERROR
    assert rec.getMessage().startswith("Unhandled error in exception handler")
    assert "Exception in callback" in rec.getMessage()
    assert rec.exc_info[0] is RuntimeError


def test_set_exception_handler_rejects_non_callable(loop):
    with pytest.raises(TypeError, match=r"^A callable object or None is expected, got 42$"):
        loop.set_exception_handler(42)


def test_get_exception_handler_roundtrip(loop):
    def handler(lp, ctx):
        pass

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None


def test_default_handler_logs_to_asyncio_logger(loop, caplog):
    loop.set_exception_handler(None)

    def boom():
        raise KeyError("logged")

    loop.call_soon(boom)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_once(loop)
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.ERROR
    assert rec.getMessage().startswith("Exception in callback ")
    assert "handle: <Handle " in rec.getMessage()
    assert rec.exc_info[0] is KeyError


def test_call_exception_handler_without_exception_logs_message(loop, caplog):
    loop.set_exception_handler(None)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "custom message", "extra": 1})
    [rec] = [r for r in caplog.records if r.name == "asyncio"]
    assert rec.getMessage() == "custom message\nextra: 1"
    assert not rec.exc_info


def test_handle_context_from_empty_context_is_stable_and_isolated(loop):
    # Scheduled from a context with no variable set: the handle still reports one Context
    # object, and what a callback sets stays in its own context.
    var = contextvars.ContextVar("iso")
    out = []

    def run_in_empty():
        first = loop.call_soon(lambda: (var.set("a"), out.append(var.get())))
        second = loop.call_soon(lambda: out.append(var.get("unset")))
        return first, second

    def context_of(handle):  # Handle.get_context() is 3.12+
        return handle.get_context() if hasattr(handle, "get_context") else handle._context

    first, second = contextvars.Context().run(run_in_empty)
    ctx = context_of(first)
    assert isinstance(ctx, contextvars.Context)
    assert context_of(first) is ctx
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert out == ["a", "unset"]
    assert var not in context_of(second)


def test_callbacks_from_empty_contexts_never_share_what_one_of_them_left(loop):
    # Many callbacks scheduled from an empty context, one after another: each starts in an
    # empty context, whatever the one before set, reset, or kept a Token of.
    var = contextvars.ContextVar("fresh")
    seen = []
    kept = []

    def set_and_keep():
        seen.append(var.get("unset"))
        kept.append(var.set("kept"))

    def set_and_reset():
        seen.append(var.get("unset"))
        var.reset(var.set("gone"))

    def reset_foreign_token():
        seen.append(var.get("unset"))
        try:
            var.reset(kept[0])
        except ValueError as exc:
            seen.append(type(exc).__name__)

    def schedule():
        for cb in (set_and_keep, set_and_reset, set_and_reset, reset_foreign_token):
            loop.call_soon(cb)
        loop.call_soon(loop.stop)

    contextvars.Context().run(schedule)
    loop.run_forever()
    assert seen == ["unset", "unset", "unset", "unset", "ValueError"]


def test_an_empty_context_set_after_scheduling_is_not_seen(loop):
    # Scheduled from an empty context, a callback runs in an empty one: a variable the
    # scheduling context sets afterwards is not in its snapshot (the loop sees the context
    # is empty without copying it where it can).
    var = contextvars.ContextVar("later")
    seen = []

    def schedule_then_set():
        loop.call_soon(lambda: seen.append(var.get("unset")))
        var.set("after")
        loop.call_soon(lambda: seen.append(var.get("unset")))
        loop.call_soon(loop.stop)

    contextvars.Context().run(schedule_then_set)
    loop.run_forever()
    assert seen == ["unset", "after"]


@pytest.mark.skipif(
    not (
        sys.platform.startswith("linux")
        and sys.maxsize > 2**32
        and (3, 10) <= sys.version_info < (3, 14)
    ),
    reason="the thread state's layout is known for CPython 3.10-3.13 on 64-bit Linux/macOS",
)
def test_the_current_context_is_read_in_place_where_its_layout_is_known():
    # Where rsloop knows PyThreadState's layout, call_soon sees an empty context without
    # copying it; if the offset stopped matching the interpreter, this says so.
    from rsloop import _rsloop

    assert _rsloop.CONTEXT_PEEK is True


@pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="the layout is checked against CPython's"
)
def test_fresh_handles_are_made_by_hand_and_hold_what_pyo3s_would(loop):
    # On CPython a new handle skips PyO3's generic initializer (object.__new__ with an
    # empty tuple): its layout was checked at import against a handle PyO3 made. One made
    # that way must be a full handle: its callback and arguments held, shown to the
    # collector, weakly referenceable, and everything released when it goes.
    from conftest import is_rsloop_native

    from rsloop import _rsloop

    assert _rsloop.FAST_HANDLE_NEW is True
    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native handles only")

    ran = []

    class Callback:
        def __call__(self, arg):
            ran.append(arg)

    cb, arg = Callback(), Callback()
    handles = [loop.call_soon(cb, arg) for _ in range(3)]
    h = handles[0]
    assert type(h) is _rsloop.Handle
    assert h._callback is cb and h._args == (arg,) and not h.cancelled()
    assert weakref.ref(h)() is h
    handles[1].cancel()
    run_once(loop)
    assert ran == [arg, arg]
    assert cb in gc.get_referents(h) and gc.is_tracked(h)
    refs = weakref.ref(cb), weakref.ref(arg), weakref.ref(h)
    ran.clear()
    del cb, arg, h, handles
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_the_running_loops_thread_id_is_threading_get_ident_on_every_thread(loop):
    # The loop's thread id (which call_soon compares with the caller's on every call, read
    # from pthread_self() where an import-time check saw it equal the interpreter's) is
    # asyncio's `_thread_id`: threading.get_ident() of the thread running the loop,
    # whichever thread that is, and None when no thread runs it.
    from conftest import is_rsloop_native

    if not is_rsloop_native(loop):
        pytest.skip("rsloop's native loop only")
    seen = []

    def run_on_this_thread():
        loop.call_soon(lambda: seen.append((loop._thread_id, threading.get_ident())))
        run_once(loop)

    run_on_this_thread()
    worker = threading.Thread(target=run_on_this_thread)
    worker.start()
    worker.join()
    assert seen == [(threading.get_ident(),) * 2, (worker.ident,) * 2]
    assert loop._thread_id is None


def test_call_soon_threadsafe_takes_the_posting_threads_context(loop):
    # The snapshot is the posting thread's context, not the loop thread's: a variable set
    # only in the poster is seen, one set only on the loop's thread is not.
    var = contextvars.ContextVar("poster")
    other = contextvars.ContextVar("loop_side")
    seen = []

    def post(value):
        if value is not None:
            var.set(value)
        loop.call_soon_threadsafe(lambda: seen.append((var.get("unset"), other.get("unset"))))

    def run():
        other.set("loop")
        for value in ("set", None):
            t = threading.Thread(target=post, args=(value,))
            t.start()
            t.join()
        loop.call_soon_threadsafe(loop.stop)
        loop.run_forever()

    contextvars.Context().run(run)
    assert seen == [("set", "unset"), ("unset", "unset")]


def test_handle_keeps_the_context_its_callback_changed(loop, handler_log):
    # asyncio's handle keeps the context it ran in; 3.12+ runs a custom exception handler
    # in it, so the handler sees what the failing callback set.
    var = contextvars.ContextVar("changed")

    def boom():
        var.set("set-by-callback")
        raise ZeroDivisionError

    handle = contextvars.Context().run(loop.call_soon, boom)
    loop.call_soon(loop.stop)
    loop.run_forever()
    [ctx] = handler_log.take()
    assert ctx["handle"] is handle
    context = handle.get_context() if hasattr(handle, "get_context") else handle._context
    assert context[var] == "set-by-callback"


# ----- a call_soon_threadsafe handle cancelled from another thread -----

# 3.14+ (probed): asyncio's call_soon_threadsafe() returns events._ThreadSafeHandle, whose
# cancel() and cancelled() from another thread wait for a run in progress. Before, they
# return at once. The asyncio row is the reference on each version.
THREADSAFE_CANCEL_WAITS = hasattr(asyncio.events, "_ThreadSafeHandle")


@pytest.mark.parametrize("method", ["cancel", "cancelled"])
def test_threadsafe_handle_cancel_from_another_thread_waits_as_asyncio(loop, method):
    started = threading.Event()
    done: list[str] = []
    seen: list[bool] = []

    def slow() -> None:
        started.set()
        time.sleep(0.3)  # the GIL released: the other thread goes on meanwhile
        done.append("ran")

    def other_thread() -> None:
        assert started.wait(10)
        getattr(handle, method)()
        seen.append(bool(done))  # had the callback finished when it returned?
        loop.call_soon_threadsafe(loop.stop)

    handle = loop.call_soon_threadsafe(slow)
    t = threading.Thread(target=other_thread)
    t.start()
    run_until_stopped(loop)
    t.join(10)
    assert done == ["ran"]
    assert seen == [THREADSAFE_CANCEL_WAITS]


def test_threadsafe_handle_cancelled_from_another_thread_before_its_run_never_runs(loop):
    ran: list[int] = []
    made: list = []

    def other_thread() -> None:
        h = loop.call_soon_threadsafe(ran.append, 1)
        h.cancel()
        made.append(h)
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    run_until_stopped(loop)
    assert ran == [] and made[0].cancelled()


def test_a_callback_cancels_its_own_threadsafe_handle_without_waiting(loop):
    out: list[bool] = []
    holder: list = []

    def cb() -> None:
        holder[0].cancel()  # the thread running it: no wait (asyncio's lock is an RLock)
        out.append(holder[0].cancelled())
        loop.stop()

    holder.append(loop.call_soon_threadsafe(cb))
    run_until_stopped(loop)
    assert out == [True]


def test_cancelled_of_a_running_timer_from_another_thread_does_not_wait(loop):
    """An `int` deadline marks a timer in the bit a call_soon_threadsafe handle uses for
    its wait: a timer's cancelled() from another thread must answer at once (the callback
    waits for that answer here: a wait would deadlock until the safety stop)."""
    answered = threading.Event()

    def in_thread(h) -> None:
        h.cancelled()
        answered.set()

    def cb() -> None:
        threading.Thread(target=in_thread, args=(holder[0],)).start()
        assert answered.wait(5)
        loop.stop()

    holder = [loop.call_at(int(loop.time()), cb)]
    run_until_stopped(loop)
    assert answered.is_set()
