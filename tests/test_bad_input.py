"""Bad arguments: the same exception, at the same moment, as stdlib asyncio."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import weakref

import pytest
from conftest import is_rsloop_native


def run_once(loop) -> None:
    loop.stop()
    loop.run_forever()


def asyncio_reference(scenario, debug=False):
    """Run ``scenario(loop, log)`` on a fresh stdlib loop (debug flag pinned, since the
    suite also runs under PYTHONASYNCIODEBUG=1); return its result and log."""
    ref = asyncio.new_event_loop()
    ref.set_debug(debug)
    log: list = []
    ref.set_exception_handler(lambda _lp, ctx: log.append(ctx))
    try:
        return scenario(ref, log), log
    finally:
        ref.close()


async def _coro_fn():
    pass


@pytest.mark.debug_mode(False)
def test_non_debug_call_soon_non_callable_fails_at_run_time(loop, handler_log):
    out = []
    h = loop.call_soon(42)  # accepted: asyncio checks callables in debug mode only
    loop.call_soon(out.append, "after")
    run_once(loop)
    assert out == ["after"]
    [ctx] = handler_log.take()
    assert ctx["message"] == "Exception in callback 42()"
    assert isinstance(ctx["exception"], TypeError)
    assert str(ctx["exception"]) == "'int' object is not callable"
    assert ctx["handle"] is h


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda lp: lp.call_soon(),
            r"call_soon\(\) missing 1 required positional argument: 'callback'",
        ),
        (
            lambda lp: lp.call_soon(context=None),
            r"missing 1 required positional argument: 'callback'",
        ),
        (
            lambda lp: lp.call_soon(print, delay=1),
            r"call_soon\(\) got an unexpected keyword argument 'delay'",
        ),
        (
            lambda lp: lp.call_soon(print, callback=print),
            r"call_soon\(\) got multiple values for argument 'callback'",
        ),
        (
            lambda lp: lp.call_later(),
            r"call_later\(\) missing 2 required positional arguments: 'delay' and 'callback'",
        ),
        (lambda lp: lp.call_at(1.0), r"call_at\(\) missing 1 required positional argument"),
        (
            lambda lp: lp.call_later(0, print, delay=1),
            r"call_later\(\) got multiple values for argument 'delay'",
        ),
        (
            lambda lp: lp.call_at(0, print, x=1),
            r"call_at\(\) got an unexpected keyword argument 'x'",
        ),
        (lambda lp: lp.call_soon_threadsafe(), r"call_soon_threadsafe\(\) missing 1 required"),
        (lambda lp: lp.create_future(1), r"create_future\(\) takes"),
        (
            lambda lp: lp.create_future(x=1),
            r"create_future\(\) (takes no keyword|got an unexpected keyword argument 'x')",
        ),
    ],
)
def test_scheduling_bad_arguments_raise_type_error_like_asyncio(loop, call, message):
    with pytest.raises(TypeError, match=message):
        call(loop)
    out = []
    loop.call_soon(out.append, "after")
    run_once(loop)
    assert out == ["after"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda lp, c: lp.create_task(),
            r"create_task\(\) missing 1 required positional argument: 'coro'",
        ),
        (
            lambda lp, c: lp.create_task(c, c),
            r"create_task\(\) takes \d positional arguments? but \d were given",
        ),
        (
            lambda lp, c: lp.create_task(c, coro=c),
            r"create_task\(\) got multiple values for argument 'coro'",
        ),
        (lambda lp, c: lp.create_task(c, foo=1), r"unexpected keyword argument 'foo'"),
    ],
)
def test_create_task_bad_arguments_raise_type_error_like_asyncio(loop, call, message):
    async def coro():
        pass

    c = coro()
    with pytest.raises(TypeError, match=message):
        call(loop, c)
    c.close()
    out = []
    loop.call_soon(out.append, "after")
    run_once(loop)
    assert out == ["after"]


def test_create_task_takes_coro_name_and_context_by_keyword(loop):
    var = contextvars.ContextVar("var", default="outside")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "inside")

    async def report():
        return asyncio.current_task().get_name(), var.get()

    tasks = [
        loop.create_task(coro=report(), name="by-keyword"),
        loop.create_task(report(), name=None),
    ]
    if sys.version_info >= (3, 11):
        tasks.append(loop.create_task(report(), name="both", context=ctx))
        tasks.append(loop.create_task(report(), context=None))
    done = loop.run_until_complete(asyncio.gather(*tasks))
    assert done[0] == ("by-keyword", "outside")
    assert done[1][0].startswith("Task-") and done[1][1] == "outside"
    if sys.version_info >= (3, 11):
        assert done[2] == ("both", "inside")
        assert done[3][1] == "outside"


def test_scheduling_methods_take_callback_and_context_by_keyword(loop):
    var = contextvars.ContextVar("var", default="outside")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "inside")
    out = []
    loop.call_soon(callback=lambda: out.append(("kw", var.get())))
    loop.call_soon(lambda *a: out.append((a, var.get())), 1, 2, context=ctx)
    loop.call_soon(lambda: out.append(("none", var.get())), context=None)
    loop.call_soon_threadsafe(callback=lambda: out.append(("threadsafe", var.get())), context=ctx)
    run_once(loop)
    assert out == [
        ("kw", "outside"),
        ((1, 2), "inside"),
        ("none", "outside"),
        ("threadsafe", "inside"),
    ]
    loop.call_later(callback=lambda *a: out.append(a), delay=0)
    loop.call_at(loop.time(), lambda *a: out.append(a), 3, context=ctx)
    loop.call_later(0.001, loop.stop)
    loop.run_forever()
    assert out[4:] == [(), (3,)]


@pytest.mark.debug_mode(False)
def test_non_debug_call_later_non_callable_fails_at_run_time(loop, handler_log):
    loop.call_later(0, None)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    [ctx] = handler_log.take()
    assert isinstance(ctx["exception"], TypeError)
    assert ctx["message"] == "Exception in callback None()"


@pytest.mark.debug_mode(False)
def test_non_debug_call_soon_coroutine_object_like_asyncio(loop, handler_log):
    def scenario(lp, log):
        coro = _coro_fn()
        try:
            lp.call_soon(coro)
            run_once(lp)
        finally:
            coro.close()
        return [(type(c["exception"]), str(c["exception"])) for c in log]

    expected, _ = asyncio_reference(scenario, debug=loop.get_debug())
    assert expected == [(TypeError, "'coroutine' object is not callable")]
    got = scenario(loop, handler_log)
    assert got == expected
    handler_log.take()


def test_non_context_context_fails_at_run_time_like_asyncio(loop, handler_log):
    def scenario(lp, log):
        out = []
        lp.call_soon(out.append, "x", context=42)
        lp.call_soon(out.append, "after")
        run_once(lp)
        return out, [(type(c["exception"]), c["message"]) for c in log]

    expected, _ = asyncio_reference(scenario, debug=loop.get_debug())
    # asyncio calls context.run(...): an int has no .run
    assert expected[0] == ["after"]
    assert [t for t, _ in expected[1]] == [AttributeError]
    got = scenario(loop, handler_log)
    handler_log.take()
    assert got == expected


def test_context_like_object_with_run_method_is_used(loop):
    # asyncio only calls ``context.run(callback, *args)``; a duck-typed context works.
    calls = []

    class FakeContext:
        def run(self, callback, *args):
            calls.append("run")
            return callback(*args)

    out = []
    loop.call_soon(out.append, 1, context=FakeContext())
    loop.call_soon(lambda: out.append("none"), context=FakeContext())
    loop.call_soon(lambda *a: out.append(a), 2, 3, 4, context=FakeContext())
    run_once(loop)
    assert out == [1, "none", (2, 3, 4)]
    assert calls == ["run"] * 3


def test_reentering_the_callbacks_own_context_fails(loop, handler_log):
    # The loop runs the callback inside the given Context object itself (not a copy), so
    # entering it again from the callback fails as Context.run does.
    ctx = contextvars.copy_context()
    loop.call_soon(lambda: ctx.run(lambda: None), context=ctx)
    run_once(loop)
    [c] = handler_log.take()
    assert type(c["exception"]) is RuntimeError
    assert "already entered" in str(c["exception"])


def test_run_until_complete_on_closed_loop(loop):
    loop.close()
    fut = asyncio.Future(loop=loop)
    with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
        loop.run_until_complete(fut)
    coro = _coro_fn()
    with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
        loop.run_until_complete(coro)
    assert coro.cr_frame is not None  # not started, not wrapped in a task
    coro.close()


def test_run_until_complete_while_running_leaves_coroutine_alone(loop):
    errors = []
    coro = _coro_fn()

    def nested():
        try:
            loop.run_until_complete(coro)
        except RuntimeError as exc:
            errors.append(str(exc))
        loop.stop()

    loop.call_soon(nested)
    loop.run_forever()
    assert errors == ["This event loop is already running"]
    coro.close()


def test_run_forever_while_running(loop):
    errors = []

    def nested():
        try:
            loop.run_forever()
        except RuntimeError as exc:
            errors.append(str(exc))
        loop.call_soon(loop.stop)

    loop.call_soon(nested)
    loop.run_forever()
    assert errors == ["This event loop is already running"]
    assert not loop.is_running()
    run_once(loop)  # still usable


def test_call_later_bad_delay_type(loop):
    with pytest.raises(TypeError):
        loop.call_later(object(), lambda: None)


def test_add_reader_bad_fd_types(loop):
    with pytest.raises(ValueError, match=r"^Invalid file object: "):
        loop.add_reader("3", lambda: None)
    with pytest.raises(ValueError, match=r"^Invalid file object: "):
        loop.add_reader(3.0, lambda: None)
    with pytest.raises(ValueError, match=r"^Invalid file descriptor: -5$"):
        loop.add_writer(-5, lambda: None)


def test_set_exception_handler_non_callable(loop):
    with pytest.raises(TypeError, match=r"^A callable object or None is expected, got 'x'$"):
        loop.set_exception_handler("x")


def test_bogus_backend_name(loop):
    if not is_rsloop_native(loop):
        pytest.skip("Loop(backend=...) is rsloop's native loop only")
    with pytest.raises(ValueError, match="bogus"):
        type(loop)(backend="bogus")


def test_refused_callback_is_released_at_once(loop):
    # A scheduling call that raises keeps no reference to its arguments: the callback
    # is freed when the caller drops it, not at some later call into the loop.
    class Callback:
        def __call__(self) -> None:
            pass

    callback = Callback()
    ref = weakref.ref(callback)
    with pytest.raises(TypeError):
        loop.call_later(None, callback)
    del callback
    assert ref() is None
