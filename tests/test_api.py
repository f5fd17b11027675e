"""The loop's public API and lifecycle, as stdlib asyncio defines them."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
import warnings

import pytest
from conftest import is_rsloop_native, make_loop

import rsloop


def run_once(loop) -> None:
    """One iteration: stop() before run_forever() runs exactly one."""
    loop.stop()
    loop.run_forever()


# --- which rsloop backend a loop kind corresponds to (for rsloop.run / policy tests) ---

_ENV_BACKEND = {"uring": "uring", "poll": "poll", "fallback": "asyncio"}


def use_backend_env(loop_kind, monkeypatch) -> str:
    """Make rsloop.new_event_loop() build loops of ``loop_kind``; returns the backend name
    they report. Skips for stdlib asyncio (rsloop's entry points have no asyncio twin)."""
    if loop_kind == "asyncio":
        pytest.skip("rsloop entry point; nothing to compare on stdlib asyncio")
    monkeypatch.setenv("RSLOOP_BACKEND", _ENV_BACKEND[loop_kind])
    return _ENV_BACKEND[loop_kind]


# ----- type and lifecycle -----


def test_is_an_abstract_event_loop(loop):
    assert isinstance(loop, asyncio.AbstractEventLoop)


def test_stop_before_run_runs_one_iteration_and_returns(loop):
    out = []

    def first():
        out.append("first")
        loop.call_soon(out.append, "second")  # next iteration: must not run now

    loop.call_soon(first)
    loop.stop()
    loop.run_forever()
    assert out == ["first"]
    assert not loop.is_running()
    run_once(loop)
    assert out == ["first", "second"]


def test_run_forever_returns_after_stop_from_callback(loop):
    out = []
    loop.call_soon(out.append, 1)
    loop.call_soon(loop.stop)
    loop.call_soon(out.append, 2)  # same batch as stop(): still runs
    loop.run_forever()
    assert out == [1, 2]


def test_run_until_complete_returns_result(loop):
    async def main():
        await asyncio.sleep(0)
        return 42

    assert loop.run_until_complete(main()) == 42


def test_run_until_complete_accepts_future(loop):
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "done")
    assert loop.run_until_complete(fut) == "done"


def test_run_until_complete_propagates_exception(loop):
    class Boom(Exception):
        pass

    async def main():
        await asyncio.sleep(0)
        raise Boom("x")

    with pytest.raises(Boom, match="x"):
        loop.run_until_complete(main())


def test_run_until_complete_stopped_before_future_completed(loop):
    fut = loop.create_future()
    loop.call_soon(loop.stop)
    with pytest.raises(RuntimeError, match=r"^Event loop stopped before Future completed\.$"):
        loop.run_until_complete(fut)
    assert not fut.done()
    fut.cancel()


def test_is_running_inside_and_outside(loop):
    seen = []

    async def coro():
        seen.append(("coro", loop.is_running()))

    loop.call_soon(lambda: seen.append(("cb", loop.is_running())))
    assert not loop.is_running()
    loop.run_until_complete(coro())
    assert not loop.is_running()
    assert seen == [("cb", True), ("coro", True)]


def test_is_closed_and_close_twice(loop):
    assert not loop.is_closed()
    loop.close()
    assert loop.is_closed()
    loop.close()  # no error
    assert loop.is_closed()


def test_close_while_running_raises(loop):
    errors = []

    def try_close():
        try:
            loop.close()
        except RuntimeError as exc:
            errors.append(str(exc))
        loop.stop()

    loop.call_soon(try_close)
    loop.run_forever()
    assert errors == ["Cannot close a running event loop"]
    assert not loop.is_closed()


@pytest.mark.parametrize(
    "call",
    [
        lambda lp: lp.call_soon(print),
        lambda lp: lp.call_soon_threadsafe(print),
        lambda lp: lp.call_later(1, print),
        lambda lp: lp.call_at(1, print),
        lambda lp: lp.run_forever(),
    ],
    ids=["call_soon", "call_soon_threadsafe", "call_later", "call_at", "run_forever"],
)
def test_methods_on_closed_loop_raise(loop, call):
    loop.close()
    with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
        call(loop)


def test_run_until_complete_and_create_task_on_closed_loop_raise(loop):
    async def main():
        pass

    loop.close()
    for method in (loop.run_until_complete, loop.create_task):
        coro = main()
        with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
            method(coro)
        coro.close()


def test_run_forever_while_running_raises(loop):
    errors = []
    fut = loop.create_future()

    # One nested attempt per run: CPython 3.12/3.13 before gh-130145 reset the running
    # state after a failed nested run_forever(), so a second attempt would really run.
    for nested_call in (loop.run_forever, lambda: loop.run_until_complete(fut)):

        def nested(call=nested_call):
            try:
                call()
            except RuntimeError as exc:
                errors.append(str(exc))
            loop.stop()

        loop.call_soon(nested)
        loop.run_forever()
    assert errors == ["This event loop is already running"] * 2
    fut.cancel()


def test_running_a_loop_inside_another_loops_callback_raises(loop, loop_kind):
    inner = make_loop(loop_kind)
    errors = []

    def nested():
        try:
            inner.run_forever()
        except RuntimeError as exc:
            errors.append(str(exc))
        loop.stop()

    try:
        loop.call_soon(nested)
        loop.run_forever()
    finally:
        inner.close()
    assert errors == ["Cannot run the event loop while another loop is running"]


def test_get_running_loop_in_callback_and_coroutine(loop):
    seen = []

    async def coro():
        seen.append(asyncio.get_running_loop())

    loop.call_soon(lambda: seen.append(asyncio.get_running_loop()))
    loop.run_until_complete(coro())
    assert seen == [loop, loop]
    assert all(s is loop for s in seen)
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_time_is_the_monotonic_clock(loop):
    for _ in range(100):
        before = time.monotonic()
        now = loop.time()
        after = time.monotonic()
        assert before <= now <= after


# ----- rsloop.run / asyncio.run / policy -----


def test_rsloop_run_returns_result_and_closes_loop(loop_kind, loop, monkeypatch):
    name = use_backend_env(loop_kind, monkeypatch)
    seen = {}

    async def main():
        running = asyncio.get_running_loop()
        seen["loop"] = running
        seen["debug"] = running.get_debug()
        await asyncio.sleep(0)
        return "result"

    assert rsloop.run(main()) == "result"
    assert seen["loop"] is not loop
    assert seen["loop"].is_closed()
    assert rsloop.backend(seen["loop"]).name == name

    assert rsloop.run(main(), debug=True) == "result"
    assert seen["debug"] is True
    assert seen["loop"].is_closed()


def test_rsloop_run_propagates_exception(loop_kind, loop, monkeypatch):
    use_backend_env(loop_kind, monkeypatch)

    async def main():
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        rsloop.run(main())


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.run(loop_factory=) is 3.12+")
def test_asyncio_run_with_loop_factory(loop_kind, loop, monkeypatch):
    name = use_backend_env(loop_kind, monkeypatch)
    seen = []

    async def main():
        seen.append(asyncio.get_running_loop())
        return 7

    assert asyncio.run(main(), loop_factory=rsloop.new_event_loop) == 7
    assert rsloop.backend(seen[0]).name == name
    assert seen[0].is_closed()


def test_event_loop_policy_makes_rsloop_loops(loop_kind, loop, monkeypatch):
    name = use_backend_env(loop_kind, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # policies are deprecated in 3.14
        asyncio.set_event_loop_policy(rsloop.EventLoopPolicy())
        try:
            new = asyncio.new_event_loop()
            try:
                assert rsloop.backend(new).name == name
                assert type(new) is type(loop)
                assert new.run_until_complete(asyncio.sleep(0, "ok")) == "ok"
            finally:
                new.close()
        finally:
            asyncio.set_event_loop_policy(None)


# ----- tasks and futures -----


def test_create_future(loop):
    fut = loop.create_future()
    assert isinstance(fut, asyncio.Future)
    assert fut.get_loop() is loop
    assert not fut.done()
    fut.cancel()


@pytest.mark.debug_mode(False)  # debug mode refuses create_task from another thread
def test_futures_and_tasks_belong_to_the_loop_from_any_thread(loop):
    # Made before the run, inside it, and from another thread while it runs (where
    # asyncio's running loop is not this one, or is none): each belongs to `loop`.
    made = {"before": (loop.create_future(), loop.create_task(asyncio.sleep(0)))}

    async def main():
        made["inside"] = (loop.create_future(), loop.create_task(asyncio.sleep(0)))
        other = await loop.run_in_executor(
            None, lambda: (loop.create_future(), loop.create_task(asyncio.sleep(0)))
        )
        made["thread"] = other
        for _, task in made.values():
            await task

    loop.run_until_complete(main())
    for where, (fut, task) in made.items():
        assert fut.get_loop() is loop, where
        assert task.get_loop() is loop, where
        assert task.done(), where
        fut.cancel()


def test_create_task_with_name(loop):
    async def main():
        return asyncio.current_task().get_name()

    task = loop.create_task(main(), name="my-task")
    assert task.get_name() == "my-task"
    assert loop.run_until_complete(task) == "my-task"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="create_task(context=) is 3.11+")
def test_create_task_with_context(loop):
    var = contextvars.ContextVar("var", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")

    async def main():
        seen = var.get()
        var.set("changed-by-task")
        return seen

    task = loop.create_task(main(), context=ctx)
    assert loop.run_until_complete(task) == "in-ctx"
    assert ctx[var] == "changed-by-task"
    assert var.get() == "default"


def test_task_factory_get_set(loop):
    calls = []

    def factory(lp, coro, **kwargs):
        calls.append(lp)
        return asyncio.Task(coro, loop=lp, **kwargs)

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def main():
        return 5

    task = loop.create_task(main(), name="via-factory")
    assert calls == [loop]
    assert task.get_name() == "via-factory"
    assert loop.run_until_complete(task) == 5
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None


def test_task_factory_must_be_callable(loop):
    with pytest.raises(TypeError, match=r"^task factory must be a callable or None$"):
        loop.set_task_factory(1)
    assert loop.get_task_factory() is None


# ----- async generators -----


def test_shutdown_asyncgens_closes_suspended_generator(loop):
    events = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            events.append("closed")

    gen = agen()

    async def main():
        return await gen.__anext__()

    assert loop.run_until_complete(main()) == 1
    assert events == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert events == ["closed"]


def test_asyncgen_hooks_installed_while_running_and_restored(loop):
    before = sys.get_asyncgen_hooks()
    inside = []
    loop.call_soon(lambda: inside.append(sys.get_asyncgen_hooks()))
    loop.call_soon(loop.stop)
    loop.run_forever()
    hooks = inside[0]
    assert hooks.firstiter is not None and hooks.finalizer is not None
    assert hooks.firstiter.__self__ is loop
    assert hooks.finalizer.__self__ is loop
    assert sys.get_asyncgen_hooks() == before


# ----- rsloop extras -----


def test_backend_reports_loop_backend(loop, loop_kind):
    info = rsloop.backend(loop)
    if loop_kind == "asyncio":
        assert info.name == "asyncio"
        assert info.reason and "not an rsloop loop" in info.reason
    elif loop_kind == "fallback":
        assert info == ("asyncio", "test: forced fallback")
    else:
        assert info.name == loop_kind == loop.backend


def test_backend_of_running_loop_by_default(loop):
    seen = []
    loop.call_soon(lambda: seen.append(rsloop.backend()))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == [rsloop.backend(loop)]


def test_stats_counters_increase(loop):
    if not is_rsloop_native(loop):
        pytest.skip("stats counters exist on rsloop's native backends only")
    before = loop.stats()
    assert before["backend"] == loop.backend
    loop.call_soon(lambda: None)
    loop.call_soon(lambda: None)
    loop.call_later(0, lambda: None)
    loop.call_later(0.001, loop.stop)
    loop.run_forever()
    after = loop.stats()
    assert after["iterations"] > before["iterations"]
    assert after["callbacks"] >= before["callbacks"] + 4
    assert after["timers_fired"] >= before["timers_fired"] + 2
    assert after["ready"] == 0
    assert after["timers"] == 0


def test_spare_handles_kept_while_busy_and_trimmed_after_an_idle_second(loop):
    if not is_rsloop_native(loop):
        pytest.skip("stats counters exist on rsloop's native backends only")

    async def main():
        for _ in range(5000):
            loop.call_soon(int)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        after_burst = loop.stats()["spare_handles"]
        # A wait without deadline that a cross-thread post ends a moment later: the spare
        # handles are kept through it (a producer thread reuses them).
        woken = loop.create_future()
        poster = threading.Timer(0.05, loop.call_soon_threadsafe, (woken.set_result, None))
        poster.start()
        await woken
        poster.join()
        after_short_wait = loop.stats()["spare_handles"]
        await asyncio.sleep(1.2)  # the loop sits idle for a second: the reserve is trimmed
        return after_burst, after_short_wait, loop.stats()["spare_handles"]

    after_burst, after_short_wait, after_idle = loop.run_until_complete(main())
    assert after_burst >= 5000
    assert after_short_wait >= 5000
    assert after_idle <= 1024


def test_spare_handles_of_a_spike_are_released_while_the_loop_stays_busy(loop):
    # After a burst far above the busy reserve, a loop that never sits idle for a second
    # still lets the spike's spare handles go within about a second.
    if not is_rsloop_native(loop):
        pytest.skip("stats counters exist on rsloop's native backends only")
    burst = 200_000

    async def main():
        for _ in range(burst):
            loop.call_soon(int)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        after_burst = loop.stats()["spare_handles"]
        deadline = loop.time() + 1.5
        while loop.time() < deadline:  # busy: never a wait of a second
            await asyncio.sleep(0.01)
        return after_burst, loop.stats()["spare_handles"]

    after_burst, after_busy_second = loop.run_until_complete(main())
    assert after_burst >= burst
    assert after_busy_second <= 65536


def test_completions_take_their_handles_from_the_freelist(loop):
    # Each completion (a send through the ring, an accepted connection) reaches its
    # callback through a handle that goes back to the freelist after it ran: one taken
    # from anywhere else would grow the freelist by one per completion, up to its cap.
    if not is_rsloop_native(loop):
        pytest.skip("stats counters exist on rsloop's native backends only")
    rounds = 2000

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for _ in range(50):  # accepts
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            await w.wait_closed()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(rounds):  # sends, both ends
            writer.write(b"%d\n" % i)
            assert await reader.readline() == b"%d\n" % i
        spare = loop.stats()["spare_handles"]
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return spare

    assert loop.run_until_complete(main()) < rounds // 10
