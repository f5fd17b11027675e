"""Virtual time (rsloop.testing.VirtualClock, issue 28): sleeps and timeouts take no real
time, timers run at their exact deadlines, and the clock never jumps while real work is
in flight. Every test runs on the native drivers (uring, poll) and on the stdlib-based
fallback with the same clock (RSLOOP_TEST_BACKENDS narrows them)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import _selected_backends, make_loop
from test_properties import PatchedClockLoop

import rsloop
from rsloop.testing import VirtualClock

KINDS = tuple(k for k in ("uring", "poll", "fallback") if k in _selected_backends())
START = 5000.0


def virtual_loop(kind: str, clock: VirtualClock) -> asyncio.AbstractEventLoop:
    if kind == "fallback":
        from rsloop._fallback import FallbackLoop

        return FallbackLoop("test: forced fallback", clock=clock)
    make_loop(kind).close()  # skips (or fails in CI) where the backend is unavailable
    from rsloop._loop import Loop

    return Loop(backend=kind, clock=clock)  # type: ignore[abstract]


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


def run(kind: str, clock: VirtualClock, coro_fn):
    loop = virtual_loop(kind, clock)
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


# ----- the clock itself -----


def test_a_simulated_day_takes_no_real_time(kind, monkeypatch):
    monkeypatch.setenv("RSLOOP_BACKEND", "asyncio" if kind == "fallback" else kind)
    clock = VirtualClock()
    start = clock.now

    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(24):
            await asyncio.sleep(3600)
        return loop.time()

    wall = time.perf_counter()
    end = rsloop.run(main(), clock=clock)
    wall = time.perf_counter() - wall
    assert end == clock.now == pytest.approx(start + 86400, abs=1e-6)
    assert clock.jumps == 24
    assert wall < 2.0, f"a simulated day took {wall:.3f} s of real time"


def test_loop_time_reads_the_clock_from_its_start(kind):
    clock = VirtualClock(start=START)

    async def main(loop):
        t0 = loop.time()
        loop.call_later(2.5, lambda: None)
        await asyncio.sleep(1)
        return t0, loop.time()

    assert run(kind, clock, main) == (START, START + 1)
    assert clock.now == START + 1 and clock.jumps == 1


def test_default_start_is_the_monotonic_clock():
    before = time.monotonic()
    clock = VirtualClock()
    assert before <= clock.now <= time.monotonic()


# The scenario of issue 28's point 3: every asyncio timing primitive, traced with the
# loop's time at each step. ``unit`` scales all delays, so the same scenario can run in
# real time too.
def scenario(unit: float):
    async def main(loop):
        t0 = loop.time()
        trace: list = []

        def rec(*what):
            trace.append((*what, round((loop.time() - t0) / unit, 6)))

        loop.call_later(3 * unit, rec, "later", 3)
        loop.call_at(t0 + 1 * unit, rec, "at", 1)
        h = loop.call_later(2 * unit, rec, "cancelled")
        h.cancel()
        await asyncio.sleep(2 * unit)
        rec("slept")
        try:
            await asyncio.wait_for(asyncio.sleep(10 * unit), 2 * unit)
        except asyncio.TimeoutError:
            rec("wait_for", "timeout")
        rec("wait_for", "result", await asyncio.wait_for(asyncio.sleep(unit, "x"), 5 * unit))
        if sys.version_info >= (3, 11):
            try:
                async with asyncio.timeout(3 * unit):
                    await asyncio.sleep(4 * unit)
            except TimeoutError:
                rec("timeout", "expired")

            async def child(name, delay):
                await asyncio.sleep(delay * unit)
                rec("child", name)
                if name == "b":
                    raise ValueError(name)

            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(child("a", 1))
                    tg.create_task(child("b", 2))
                    tg.create_task(child("c", 6))
            except BaseException as exc:  # noqa: BLE001 - the ExceptionGroup is traced
                rec("taskgroup", type(exc).__name__, [type(e).__name__ for e in exc.exceptions])
            try:
                async with asyncio.timeout(2 * unit):
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(child("d", 1))
                        tg.create_task(child("e", 5))
            except TimeoutError:
                rec("taskgroup", "timeout")

        # Retry with exponential backoff against a service that fails three times.
        attempts = []

        async def flaky():
            attempts.append(loop.time())
            if len(attempts) < 4:
                raise ConnectionError(len(attempts))
            return "ok"

        delay = 1 * unit
        while True:
            try:
                rec("retry", await flaky())
                break
            except ConnectionError as exc:
                rec("retry", "failed", exc.args[0])
                await asyncio.sleep(delay)
                delay *= 2
        return trace

    return main


def test_trace_matches_asyncio_with_a_patched_clock(kind):
    """The same scenario on a patched-clock stdlib loop and on the virtual clock: the same
    order, results, exceptions, and loop.time() at every step, to the bit."""
    ref_loop = PatchedClockLoop(START)
    try:
        ref = ref_loop.run_until_complete(scenario(1.0)(ref_loop))
    finally:
        ref_loop.close()
    got = run(kind, VirtualClock(start=START), scenario(1.0))
    assert got == ref
    assert ("retry", "ok", 0) not in got and got[-1][:2] == ("retry", "ok")


def test_trace_matches_a_real_run_in_order_and_results(kind):
    """The same scenario on stdlib asyncio in real time (deadlines 80 ms apart): the
    same events, in the same order, with the same results."""
    ref_loop = asyncio.SelectorEventLoop()
    try:
        real = ref_loop.run_until_complete(scenario(0.08)(ref_loop))
    finally:
        ref_loop.close()
    got = run(kind, VirtualClock(), scenario(1.0))
    assert [e[:-1] for e in got] == [e[:-1] for e in real]
    for (*_, virtual_at), (*_, real_at) in zip(got, real, strict=True):
        assert real_at >= virtual_at - 1e-6  # nothing ran early in the real run either


# ----- advance() -----


def test_advance_runs_what_falls_due_in_deadline_order(kind):
    clock = VirtualClock(autojump=None, start=START)

    async def main(loop):
        seen = []

        async def two_sleeps():
            await asyncio.sleep(1)
            seen.append(("task", loop.time()))
            await asyncio.sleep(1)
            seen.append(("task", loop.time()))

        for d in (3.0, 1.5, 0.5, 2.5):
            loop.call_later(d, lambda d=d: seen.append((d, loop.time())))
        task = loop.create_task(two_sleeps())
        await clock.advance(2.2)
        at_22 = (list(seen), loop.time(), task.done())
        await clock.advance(1)
        return at_22, seen, loop.time()

    at_22, seen, end = run(kind, clock, main)
    first = [(0.5, START + 0.5), ("task", START + 1), (1.5, START + 1.5), ("task", START + 2)]
    assert at_22 == (first, START + 2.2, True)
    assert seen == [*first, (2.5, START + 2.5), (3.0, START + 3)]
    assert end == START + 3.2
    assert clock.jumps == 0  # advance steps are not jumps


def test_without_autojump_the_clock_waits_for_advance(kind):
    clock = VirtualClock(autojump=None, start=START)

    async def main(loop):
        fired = []
        loop.call_later(1, fired.append, "timer")
        woke = loop.create_future()
        # Only a real event ends the wait: a thread resolves the future 0.2 s later.
        threading.Timer(0.2, loop.call_soon_threadsafe, (woke.set_result, None)).start()
        t0 = time.perf_counter()
        await woke
        return fired, loop.time(), time.perf_counter() - t0

    fired, now, waited = run(kind, clock, main)
    assert fired == [] and now == START
    assert waited >= 0.15


def test_advance_errors(kind):
    clock = VirtualClock(autojump=None, start=START)
    other = VirtualClock()

    async def main(loop):
        with pytest.raises(ValueError):
            await clock.advance(-1)
        with pytest.raises(ValueError):
            await clock.advance(float("nan"))
        with pytest.raises(TypeError):
            await clock.advance("1")  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="does not drive"):
            await other.advance(1)
        # A cancelled advance leaves the clock where it got to and a new one can start.
        loop.call_later(1, lambda: None)
        loop.call_later(5, lambda: None)
        task = loop.create_task(clock.advance(10))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="in progress"):
            await clock.advance(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stopped_at = loop.time()
        await clock.advance(0)
        return stopped_at

    stopped_at = run(kind, clock, main)
    assert START <= stopped_at < START + 10
    assert clock.now == stopped_at


def test_bad_arguments():
    with pytest.raises(ValueError):
        VirtualClock(autojump=-1)
    with pytest.raises(ValueError):
        VirtualClock(autojump=float("inf"))
    with pytest.raises(TypeError):
        VirtualClock(autojump="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        VirtualClock(start="now")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        VirtualClock(start=float("nan"))
    with pytest.raises(TypeError, match="VirtualClock"):
        rsloop.new_event_loop(clock=object())
    clock = VirtualClock()
    with pytest.raises(ValueError):
        clock.autojump = -0.5
    clock.autojump = None
    assert clock.autojump is None


def test_a_clock_serves_one_loop(kind):
    clock = VirtualClock()
    first = virtual_loop(kind, clock)
    try:
        with pytest.raises(RuntimeError, match="one loop"):
            virtual_loop(kind, clock)
    finally:
        first.close()
    virtual_loop(kind, clock).close()  # the first one is closed: the clock is free


def test_autojump_waits_its_threshold_of_real_time_first(kind):
    clock = VirtualClock(autojump=0.1, start=START)

    async def main(loop):
        t0 = time.perf_counter()
        await asyncio.sleep(100)
        return time.perf_counter() - t0

    waited = run(kind, clock, main)
    assert clock.now == START + 100 and clock.jumps == 1
    assert waited >= 0.09


# ----- real work in flight holds the clock -----


def test_no_jump_while_an_executor_job_runs(kind):
    clock = VirtualClock(start=START)

    async def main(loop):
        loop.call_later(1000, lambda: None)  # a timer the clock could jump to
        slow = await asyncio.wait_for(loop.run_in_executor(None, time.sleep, 0.3), 0.1)
        thread = await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.2), 0.1)
        return slow, thread, loop.time()

    assert run(kind, clock, main) == (None, None, START)
    assert clock.jumps == 0 and clock.pending == 0


def test_no_jump_while_a_dns_lookup_runs(kind, monkeypatch):
    clock = VirtualClock(start=START)
    real = socket.getaddrinfo

    def slow_getaddrinfo(*args, **kwargs):
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)

    async def main(loop):
        infos = await asyncio.wait_for(loop.getaddrinfo("localhost", 80), 0.1)
        return bool(infos), loop.time()

    assert run(kind, clock, main) == (True, START)
    assert clock.jumps == 0


def test_no_jump_while_a_child_process_runs(kind):
    clock = VirtualClock(start=START)

    async def main(loop):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time; time.sleep(0.3)", stdout=subprocess.DEVNULL
        )
        code = await asyncio.wait_for(proc.wait(), 0.1)
        return code, loop.time()

    assert run(kind, clock, main) == (0, START)
    assert clock.jumps == 0 and clock.pending == 0


def test_no_jump_past_posts_from_other_threads(kind):
    """Callbacks posted with call_soon_threadsafe run before the clock moves on."""
    clock = VirtualClock(start=START)

    async def main(loop):
        seen = []

        def post_many():
            for i in range(50):
                loop.call_soon_threadsafe(lambda i=i: seen.append((i, loop.time())))

        loop.call_later(10, lambda: seen.append(("timer", loop.time())))
        t = threading.Thread(target=post_many)
        t.start()
        t.join()  # every post is queued, none has run
        await asyncio.sleep(20)
        return seen

    seen = run(kind, clock, main)
    assert seen == [*((i, START) for i in range(50)), ("timer", START + 10)]


def test_server_and_client_talk_and_time_out_at_asyncio_deadlines(kind):
    clock = VirtualClock(start=START)

    async def main(loop):
        events = []

        async def handle(reader, writer):
            line = await reader.readline()
            await asyncio.sleep(30)  # virtual: the reply leaves 30 s later
            writer.write(line.upper())
            await writer.drain()
            await reader.read()  # the client never sends more: wait for its close
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        far = loop.call_later(10_000, lambda: None)  # a jump target throughout
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        events.append(("connected", loop.time() - START, clock.jumps))
        writer.write(b"ping\n")
        reply = await asyncio.wait_for(reader.readline(), 60)
        events.append(("reply", reply, loop.time() - START))
        try:
            await asyncio.wait_for(reader.readline(), 5)
        except asyncio.TimeoutError:
            events.append(("timeout", loop.time() - START))
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        far.cancel()
        return events

    events = run(kind, clock, main)
    assert events == [("connected", 0.0, 0), ("reply", b"PING\n", 30.0), ("timeout", 35.0)]


# ----- pytest plugin -----

_PLUGIN_TESTS = """
import asyncio, time, pytest

@pytest.mark.asyncio
@pytest.mark.rsloop(virtual_time=True)
async def test_marked():
    loop = asyncio.get_running_loop()
    t0, wall = loop.time(), time.perf_counter()
    await asyncio.sleep(3600)
    assert loop.time() - t0 == pytest.approx(3600, abs=1e-6)
    assert time.perf_counter() - wall < 2
    print("LOOP", type(loop).__module__)

@pytest.mark.asyncio
async def test_fixture(rsloop_clock):
    loop = asyncio.get_running_loop()
    assert loop._clock is rsloop_clock
    t0 = rsloop_clock.now
    await asyncio.wait_for(asyncio.sleep(1), 2)
    assert rsloop_clock.now == pytest.approx(t0 + 1, abs=1e-9) and rsloop_clock.jumps == 1

@pytest.mark.asyncio
@pytest.mark.rsloop(virtual_time=True, autojump=None, start=100.0)
async def test_advance(rsloop_clock):
    loop = asyncio.get_running_loop()
    fired = []
    loop.call_later(5, fired.append, 1)
    await rsloop_clock.advance(10)
    assert fired == [1] and loop.time() == 110.0

@pytest.mark.asyncio
async def test_plain():
    assert getattr(asyncio.get_running_loop(), "_clock", None) is None
"""


@pytest.mark.parametrize(("mode", "passed"), [("rsloop", 4), ("both", 8)])
def test_pytest_marker_and_fixture(pytester, mode, passed):
    pytest.importorskip("pytest_asyncio", minversion="1.4")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_vt=_PLUGIN_TESTS)
    result = pytester.runpytest_subprocess("-s", f"--rsloop={mode}")
    result.assert_outcomes(passed=passed)


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_pytest_virtual_time_needs_no_option(pytester, mode):
    """The marker or the fixture alone (no --rsloop) runs that test on rsloop with virtual
    time; a test that asks for neither keeps pytest-asyncio's own loop."""
    pytest.importorskip("pytest_asyncio", minversion="1.4")
    pytester.makeini(
        f"[pytest]\nasyncio_default_fixture_loop_scope = function\nasyncio_mode = {mode}\n"
    )
    asyncio_mark = "@pytest.mark.asyncio" if mode == "strict" else ""  # auto: none needed
    pytester.makepyfile(
        test_vt=_PLUGIN_TESTS
        + f"""
{asyncio_mark}
@pytest.mark.rsloop(virtual_time=True)
async def test_marker_alone():
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("rsloop")
    t0, wall = loop.time(), time.perf_counter()
    await asyncio.sleep(86400)
    assert loop.time() - t0 == pytest.approx(86400, abs=1e-6)
    assert time.perf_counter() - wall < 2

{asyncio_mark}
async def test_default_loop():
    assert not type(asyncio.get_running_loop()).__module__.startswith("rsloop")
"""
    )
    result = pytester.runpytest_subprocess("-s", "-v")
    result.assert_outcomes(passed=6)
    out = "\n".join(result.outlines)
    assert "LOOP rsloop" in out and "needs --rsloop" not in out
    # the test ids are not changed by the loop factory given to virtual-time tests
    assert "test_vt.py::test_marker_alone PASSED" in out


def test_anyio_backend_with_the_clock(pytester):
    pytest.importorskip("anyio")
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def anyio_backend(rsloop_clock):
    return "asyncio", {"loop_factory": rsloop_clock.loop_factory}
"""
    )
    pytester.makepyfile(
        test_anyio_vt="""
import anyio, asyncio, pytest

@pytest.mark.anyio
async def test_sleep(rsloop_clock):
    t0 = rsloop_clock.now
    with anyio.move_on_after(50) as scope:
        await anyio.sleep(3600)
    assert scope.cancelled_caught
    assert rsloop_clock.now == pytest.approx(t0 + 50, abs=1e-9)
    assert asyncio.get_running_loop()._clock is rsloop_clock
"""
    )
    result = pytester.runpytest_subprocess("-p", "anyio")
    result.assert_outcomes(passed=1)


def test_reachable_from_a_plain_import(tmp_path):
    code = (
        "import asyncio, rsloop\n"
        "c = rsloop.testing.VirtualClock(start=0.0)\n"
        "async def m():\n"
        "    await asyncio.sleep(5)\n"
        "    return asyncio.get_running_loop().time()\n"
        "print(rsloop.run(m(), clock=c), c.jumps)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5.0", "1"]
