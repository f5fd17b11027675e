"""Debug mode: asyncio's checks, source tracebacks, slow-callback warnings, reprs."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
import time

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_once(loop) -> None:
    loop.stop()
    loop.run_forever()


def lineno() -> int:
    return sys._getframe(1).f_lineno


async def _coro_fn():
    pass


@pytest.mark.debug_mode(False)
def test_set_debug_get_debug(loop):
    assert loop.get_debug() is False
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_set_debug_while_running(loop):
    seen = []

    def flip():
        loop.set_debug(True)
        seen.append(loop.get_debug())
        loop.call_soon(lambda: seen.append(loop.get_debug()))
        loop.call_soon(loop.stop)

    loop.call_soon(flip)
    loop.run_forever()
    assert seen == [True, True]


@pytest.mark.parametrize("env_value, expected", [("1", "True"), (None, "False")])
def test_pythonasynciodebug_env_makes_new_loops_debug(loop_kind, loop, env_value, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE")}
    if env_value is not None:
        env["PYTHONASYNCIODEBUG"] = env_value
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from conftest import make_loop\n"
        "lp = make_loop(sys.argv[2])\n"
        "print(lp.get_debug())\n"
        "lp.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, TESTS_DIR, loop_kind],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == expected, out.stderr


def test_debug_mode_run_tracks_coroutine_origins(loop):
    before = sys.get_coroutine_origin_tracking_depth()
    loop.set_debug(True)
    seen = []
    loop.call_soon(lambda: seen.append(sys.get_coroutine_origin_tracking_depth()))
    run_once(loop)
    assert seen == [asyncio.constants.DEBUG_STACK_DEPTH]
    assert sys.get_coroutine_origin_tracking_depth() == before


# ----- _check_callback -----


SCHEDULERS = {
    "call_soon": (lambda lp, cb: lp.call_soon(cb), "call_soon"),
    "call_soon_threadsafe": (lambda lp, cb: lp.call_soon_threadsafe(cb), "call_soon_threadsafe"),
    "call_later": (lambda lp, cb: lp.call_later(1, cb), "call_at"),
    "call_at": (lambda lp, cb: lp.call_at(lp.time() + 1, cb), "call_at"),
}


@pytest.mark.parametrize("method", SCHEDULERS)
def test_debug_rejects_non_callable(loop, method):
    schedule, name = SCHEDULERS[method]
    loop.set_debug(True)
    expected = f"a callable object was expected by {name}(), got 42"
    with pytest.raises(TypeError, match=rf"^{re.escape(expected)}$"):
        schedule(loop, 42)


@pytest.mark.parametrize("method", SCHEDULERS)
def test_debug_rejects_coroutine_function_and_object(loop, method):
    schedule, name = SCHEDULERS[method]
    loop.set_debug(True)
    with pytest.raises(TypeError, match=rf"^coroutines cannot be used with {name}\(\)$"):
        schedule(loop, _coro_fn)
    coro = _coro_fn()
    try:
        with pytest.raises(TypeError, match=rf"^coroutines cannot be used with {name}\(\)$"):
            schedule(loop, coro)
    finally:
        coro.close()


def test_debug_accepts_plain_callables(loop):
    loop.set_debug(True)
    out = []
    loop.call_soon(out.append, 1)
    loop.call_soon_threadsafe(out.append, 2)
    loop.call_later(0, out.append, 3)
    loop.call_at(loop.time(), out.append, 4)
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    assert out == [1, 2, 3, 4]


# ----- _check_thread -----


def test_debug_detects_non_threadsafe_calls_from_other_threads(loop):
    loop.set_debug(True)
    results = {}

    def other_thread():
        for name, call in [
            ("call_soon", lambda: loop.call_soon(lambda: None)),
            ("call_later", lambda: loop.call_later(1, lambda: None)),
            ("call_at", lambda: loop.call_at(loop.time() + 1, lambda: None)),
            ("call_soon_threadsafe", lambda: loop.call_soon_threadsafe(lambda: None)),
        ]:
            try:
                call()
                results[name] = "ok"
            except RuntimeError as exc:
                results[name] = str(exc)
        loop.call_soon_threadsafe(loop.stop)

    th = threading.Thread(target=other_thread)
    loop.call_soon(th.start)
    guard = loop.call_later(10, loop.stop)
    loop.run_forever()
    guard.cancel()
    th.join()
    msg = "Non-thread-safe operation invoked on an event loop other than the current one"
    assert results == {
        "call_soon": msg,
        "call_later": msg,
        "call_at": msg,
        "call_soon_threadsafe": "ok",
    }


def test_debug_allows_other_thread_when_loop_not_running(loop):
    loop.set_debug(True)
    out = []
    th = threading.Thread(target=lambda: loop.call_soon(out.append, "from thread"))
    th.start()
    th.join()
    run_once(loop)
    assert out == ["from thread"]


# ----- slow callbacks -----


def test_slow_callback_warning(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.05
    assert loop.slow_callback_duration == 0.05
    loop.call_soon(time.sleep, 0.06)
    loop.call_soon(lambda: None)  # fast: no warning
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_once(loop)
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.WARNING
    pattern = r"^Executing <Handle sleep\(0\.06\) .*> took \d+\.\d{3} seconds$"
    assert re.match(pattern, rec.getMessage())


def test_slow_threadsafe_callback_warning_names_the_callback(loop, caplog):
    # asyncio's own loop on 3.14+ names its _ThreadSafeHandle; rsloop's handle is a Handle.
    loop.set_debug(True)
    loop.slow_callback_duration = 0.05
    loop.call_soon_threadsafe(time.sleep, 0.06)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run_once(loop)
    [rec] = [r for r in caplog.records if r.name == "asyncio"]
    pattern = r"^Executing <(_ThreadSafe)?Handle sleep\(0\.06\) .*> took \d+\.\d{3} seconds$"
    assert re.match(pattern, rec.getMessage()), rec.getMessage()


@pytest.mark.debug_mode(False)
def test_no_slow_callback_warning_without_debug(loop, caplog):
    loop.slow_callback_duration = 0.01
    loop.call_soon(time.sleep, 0.02)
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        run_once(loop)
    assert [r for r in caplog.records if r.name == "asyncio"] == []


def test_slow_callback_duration_default(loop):
    assert loop.slow_callback_duration == 0.1


# ----- source tracebacks -----


def test_handles_have_source_traceback_in_debug(loop):
    loop.set_debug(True)
    handles = {
        "call_soon": (loop.call_soon(print), lineno()),
        "call_soon_threadsafe": (loop.call_soon_threadsafe(print), lineno()),
        "call_later": (loop.call_later(10, print), lineno()),
        "call_at": (loop.call_at(loop.time() + 10, print), lineno()),
    }
    for name, (h, line) in handles.items():
        tb = h._source_traceback
        assert tb, name
        last = tb[-1]
        assert (last.filename, last.lineno) == (__file__, line), name
        assert last.name == "test_handles_have_source_traceback_in_debug", name
        h.cancel()


@pytest.mark.debug_mode(False)
def test_no_source_traceback_without_debug(loop):
    h = loop.call_soon(print)
    t = loop.call_later(10, print)
    assert h._source_traceback is None
    assert t._source_traceback is None
    h.cancel()
    t.cancel()


def test_debug_exception_context_has_source_traceback(loop, handler_log):
    loop.set_debug(True)

    def boom():
        raise ValueError

    h = loop.call_soon(boom)
    run_once(loop)
    [ctx] = handler_log.take()
    assert ctx["handle"] is h
    assert ctx["source_traceback"] == h._source_traceback
    assert ctx["source_traceback"][-1].filename == __file__


def test_debug_default_handler_logs_creation_point(loop, caplog):
    loop.set_debug(True)
    loop.set_exception_handler(None)

    def boom():
        raise ValueError

    loop.call_soon(boom)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_once(loop)
    [rec] = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.ERROR]
    assert "Object created at (most recent call last):" in rec.getMessage()
    assert __file__ in rec.getMessage()


# ----- repr -----


# Python 3.13 shows a callback's arguments in debug mode only.
ARGS_SHOWN = sys.version_info < (3, 13)


@pytest.mark.debug_mode(False)
def test_handle_repr_matches_asyncio(loop):
    h = loop.call_soon(print, 1)
    t = loop.call_at(1234.5, print, 2)
    assert repr(h) == ("<Handle print(1)>" if ARGS_SHOWN else "<Handle print()>")
    assert repr(t) == (
        "<TimerHandle when=1234.5 print(2)>" if ARGS_SHOWN else "<TimerHandle when=1234.5 print()>"
    )
    h.cancel()
    t.cancel()
    assert repr(h) == "<Handle cancelled>"
    assert repr(t) == "<TimerHandle cancelled when=1234.5>"


def test_handle_repr_in_debug_matches_asyncio(loop):
    loop.set_debug(True)
    h, line = loop.call_soon(print, 1), lineno()
    t, tline = loop.call_at(1234.5, print, 2), lineno()
    assert repr(h) == f"<Handle print(1) created at {__file__}:{line}>"
    assert repr(t) == f"<TimerHandle when=1234.5 print(2) created at {__file__}:{tline}>"
    h.cancel()
    t.cancel()
    # in debug mode a cancelled handle keeps describing its callback
    assert repr(h) == f"<Handle cancelled print(1) created at {__file__}:{line}>"
    assert repr(t) == f"<TimerHandle cancelled when=1234.5 print(2) created at {__file__}:{tline}>"


@pytest.mark.debug_mode(False)
def test_handle_repr_of_function_callback(loop):
    def my_callback(x):
        pass

    h = loop.call_soon(my_callback, "a")
    code = my_callback.__code__
    args = "('a')" if ARGS_SHOWN else "()"
    expected = (
        f"<Handle test_handle_repr_of_function_callback.<locals>.my_callback{args} "
        f"at {code.co_filename}:{code.co_firstlineno}>"
    )
    assert repr(h) == expected
    h.cancel()


def _raise_with(x):
    raise ValueError(x)


def test_exception_message_shows_args_in_debug(loop, handler_log):
    loop.set_debug(True)
    loop.call_soon(_raise_with, 1)
    run_once(loop)
    [ctx] = handler_log.take()
    code = _raise_with.__code__
    assert ctx["message"] == (
        f"Exception in callback _raise_with(1) at {code.co_filename}:{code.co_firstlineno}"
    )


@pytest.mark.debug_mode(False)
def test_exception_message_args_without_debug(loop, handler_log):
    loop.call_soon(_raise_with, 1)
    run_once(loop)
    [ctx] = handler_log.take()
    code = _raise_with.__code__
    args = "(1)" if ARGS_SHOWN else "()"
    assert ctx["message"] == (
        f"Exception in callback _raise_with{args} at {code.co_filename}:{code.co_firstlineno}"
    )
