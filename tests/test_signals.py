"""Signal handlers (``add_signal_handler`` / ``remove_signal_handler``) and Ctrl-C.

Every test runs on each backend of the ``loop`` fixture; the ``asyncio`` column is the
reference. Signals are sent to this process with ``os.kill`` (pytest runs tests in the
main thread, where Python lets a handler be installed).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import make_loop

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix signals")
if not hasattr(signal, "SIGKILL"):  # the module's parameters name Unix signals
    pytest.skip(f"Unix signals: no signal.SIGKILL on {sys.platform}", allow_module_level=True)

WAIT_S = 5.0
ROOT = Path(__file__).resolve().parent.parent


def run(loop, coro, timeout: float = WAIT_S):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


@pytest.fixture(autouse=True)
def _restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    signal.set_wakeup_fd(-1)


def test_handler_runs_on_the_loop_with_its_args(loop):
    seen = []

    async def main():
        done = loop.create_future()

        def on_usr1(*args):
            seen.append((args, threading.get_ident(), asyncio.get_running_loop() is loop))
            done.set_result(None)

        loop.add_signal_handler(signal.SIGUSR1, on_usr1, "a", 2)
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        await done

    run(loop, main())
    assert seen == [(("a", 2), threading.get_ident(), True)]


def test_signal_wakes_a_loop_blocked_in_the_kernel(loop):
    # Nothing is scheduled: the loop waits in the kernel with no deadline. A thread sends
    # the signal; the handler must run without any other event waking the loop.
    async def main():
        done = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, done.set_result, "woken")
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        return await done

    assert run(loop, main()) == "woken"


def test_each_signal_runs_its_own_handler(loop):
    seen = []

    async def main():
        done = loop.create_future()

        def record(name):
            seen.append(name)
            if len(seen) == 2:
                done.set_result(None)

        loop.add_signal_handler(signal.SIGUSR1, record, "usr1")
        loop.add_signal_handler(signal.SIGUSR2, record, "usr2")
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR2)
        await done

    run(loop, main())
    assert sorted(seen) == ["usr1", "usr2"]


def test_replacing_a_handler_keeps_only_the_new_one(loop):
    seen = []

    async def main():
        done = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, seen.append, "old")
        loop.add_signal_handler(signal.SIGUSR1, lambda: (seen.append("new"), done.set_result(None)))
        os.kill(os.getpid(), signal.SIGUSR1)
        await done

    run(loop, main())
    assert seen == ["new"]


def test_remove_restores_the_default_disposition(loop):
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN)
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    assert loop.remove_signal_handler(signal.SIGUSR1) is False
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # The last handler gone, the wakeup fd is released.
    assert signal.set_wakeup_fd(-1) == -1


def test_close_removes_the_handlers(loop):
    loop.add_signal_handler(signal.SIGUSR2, lambda: None)
    loop.close()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1


def test_a_raising_handler_goes_to_the_exception_handler(loop, handler_log):
    after = []

    async def main():
        def boom():
            raise ZeroDivisionError("in handler")

        loop.add_signal_handler(signal.SIGUSR1, boom)
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(20):
            await asyncio.sleep(0.01)
            if handler_log:
                break
        after.append("went on")

    run(loop, main())
    (ctx,) = handler_log.take()
    assert isinstance(ctx["exception"], ZeroDivisionError)
    assert after == ["went on"]


@pytest.mark.parametrize(
    ("sig", "exc", "match"),
    [
        ("1", TypeError, "sig must be an int"),
        (None, TypeError, "sig must be an int"),
        (0, ValueError, "invalid signal number 0"),
        (10_000, ValueError, "invalid signal number 10000"),
        (signal.SIGKILL, RuntimeError, f"sig {int(signal.SIGKILL)} cannot be caught"),
        (signal.SIGSTOP, RuntimeError, f"sig {int(signal.SIGSTOP)} cannot be caught"),
    ],
)
def test_bad_signals(loop, sig, exc, match):
    with pytest.raises(exc, match=match):
        loop.add_signal_handler(sig, lambda: None)
    if exc is not RuntimeError:
        with pytest.raises(exc, match=match):
            loop.remove_signal_handler(sig)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_coroutines_are_refused(loop):
    async def coro():
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used with add_signal_handler"):
        loop.add_signal_handler(signal.SIGUSR1, coro)
    c = coro()
    with pytest.raises(TypeError, match="coroutines cannot be used with add_signal_handler"):
        loop.add_signal_handler(signal.SIGUSR1, c)
    c.close()


def test_closed_loop_refuses(loop):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)


def test_only_the_main_thread_may_add_a_handler(loop):
    errors = []

    def other_thread():
        try:
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    assert "main thread" in str(errors[0])
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


# ----- Ctrl-C during rsloop.run() / asyncio.run() -----

_CTRL_C_CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, {root!r})
    import rsloop

    async def main():
        print("ready", flush=True)
        try:
            # Nothing scheduled: the loop waits in the kernel with no deadline.
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            print("main cancelled at", time.monotonic(), flush=True)
            raise

    try:
        if {use_asyncio}:
            asyncio.run(main())
        else:
            rsloop.run(main())
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(3)
    """
)


@pytest.mark.parametrize("backend", ["uring", "poll", "asyncio"])
def test_ctrl_c_interrupts_run(backend):
    import time

    if backend != "asyncio":
        make_loop(backend).close()  # skips where this backend cannot run
    code = _CTRL_C_CHILD.format(root=str(ROOT), use_asyncio=backend == "asyncio")
    env = dict(os.environ, RSLOOP_BACKEND="auto" if backend == "asyncio" else backend)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.1)  # let the loop settle into its wait
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.splitlines()
    assert lines[-1] == "KeyboardInterrupt", (out, err)
    assert proc.returncode == 3
    # asyncio.run (3.11+) cancels the main task first; the latency is reported, not timed.
    if sys.version_info >= (3, 11):
        cancelled_at = float(lines[0].split()[-1])
        print(f"{backend}: main task cancelled {1e3 * (cancelled_at - sent):.1f} ms after SIGINT")
