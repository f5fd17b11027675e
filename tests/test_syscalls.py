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
