"""System calls the hot paths must not make, counted with strace.

Instruction counts (``bench/instructions.py``) do not see the kernel. On 3.10 and 3.11,
``Future()`` / ``Task(coro)`` without ``loop=`` find the running loop through a check that
calls ``getpid()``: a system call per future, which once slipped in because it saved
instructions. This pins it out on every Python version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

PROGRAM = r"""
import asyncio, rsloop
loop = rsloop.new_event_loop()

async def leaf():
    return 1

async def main():
    lp = asyncio.get_running_loop()
    for _ in range(N):
        fut = lp.create_future()
        lp.call_soon(fut.set_result, None)
        await fut
        await lp.create_task(leaf())

loop.run_until_complete(main())
loop.close()
print("ok")
"""

N = 2000


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-f", "-c", "-o", os.devnull, "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="strace is Linux's")
@pytest.mark.parametrize("backend", ["uring", "poll"])
def test_futures_and_tasks_on_the_loops_thread_make_no_getpid_call(tmp_path, backend):
    if not _strace_works():
        pytest.skip("strace is not installed or may not trace here")
    from rsloop import _backend

    if _backend.NATIVE_ERROR is not None:
        pytest.skip(_backend.NATIVE_ERROR)
    if backend == "uring" and _backend.PORTABLE:
        from conftest import unavailable

        unavailable("uring", "the portable build has no io_uring")
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM.replace("N)", f"{N})"))
    summary = tmp_path / "summary"
    env = dict(os.environ, RSLOOP_BACKEND=backend)
    proc = subprocess.run(
        ["strace", "-f", "-c", "-e", "trace=getpid", "-o", str(summary), sys.executable, script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
    calls = 0
    for line in summary.read_text().splitlines():
        cols = line.split()
        if cols and cols[-1] == "getpid" and len(cols) >= 5:
            calls = int(cols[3])
    # Start-up and shutdown make a handful; one per future or task would be 4,000.
    assert calls < 100, f"{calls} getpid() calls for {N} futures and {N} tasks"


def test_a_round_trip_on_one_loop_enters_io_uring_once_per_half():
    """Both ends of a TCP connection on one loop, 1 KiB each way (the older PyPI rsloop's
    tcp_streams workload): each half is one ``io_uring_enter`` that submits the send and
    the watcher's re-arm together and waits. Before the busy wait kept re-arms back, each
    half was two: a zero wait to re-arm, then the send and the wait."""
    import asyncio

    from conftest import make_loop

    rounds = 1000
    msg = b"x" * 1024

    async def main():
        loop = asyncio.get_running_loop()

        async def serve(reader, writer):
            try:
                while True:
                    writer.write(await reader.readexactly(len(msg)))
                    await writer.drain()
            except asyncio.IncompleteReadError:
                pass
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        for _ in range(20):
            writer.write(msg)
            await writer.drain()
            await reader.readexactly(len(msg))
        before = loop.stats()["kernel_enters"]
        for _ in range(rounds):
            writer.write(msg)
            await writer.drain()
            assert await reader.readexactly(len(msg)) == msg
        enters = loop.stats()["kernel_enters"] - before
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return enters

    loop = make_loop("uring")
    try:
        enters = loop.run_until_complete(main())
    finally:
        loop.close()
    # Two halves per round trip; a few more for the busy loop's periodic entry.
    assert enters <= 2.1 * rounds, f"{enters / rounds:.2f} io_uring_enter calls per round trip"
