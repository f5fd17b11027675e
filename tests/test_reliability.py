"""The states issue 29's crash was seen in, pinned as tests (docs/reliability.md has the
hunt): a loop idle in a wait for seconds while other threads' collections run finalizers
that post to it, schedule on it and cancel its handles; and CPython's test_runners with
SIGINT ignored, where a test waits forever on an idle loop until faulthandler ends it.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import itertools
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import make_loop

ROOT = Path(__file__).resolve().parent.parent


def _count(c: itertools.count) -> int:
    # itertools.count is bumped atomically under the GIL and needs no lock, which a
    # finalizer run by a collection inside a locked section would deadlock on.
    return int(repr(c)[6:-1])


# Off in debug mode too: the finalizers' call_later from other threads is what debug mode
# refuses ("Non-thread-safe operation"), on asyncio as on rsloop.
@pytest.mark.debug_mode(False)
def test_idle_loop_takes_posts_from_finalizers_on_other_threads(loop):
    posted, ran, finalized = itertools.count(), itertools.count(), itertools.count()
    stop = threading.Event()
    errors: list[BaseException] = []

    def on_loop() -> None:
        next(ran)

    class Node:
        def __init__(self, i: int) -> None:
            self.peer = None
            if i % 3 == 0:
                self.handle = loop.call_soon_threadsafe(on_loop)
                next(posted)
            elif i % 3 == 1:
                # a timer whose callback does not keep the cycle alive: the finalizer
                # cancels it, from this thread, while the loop sleeps
                self.handle = loop.call_later(3600, on_loop)
            else:
                # the loop keeps the cycle alive until it ran the callback; then the
                # handle is garbage in the cycle, and the collector on this thread
                # clears it
                self.handle = loop.call_soon_threadsafe(self.method)
                next(posted)

        def method(self) -> None:
            next(ran)

        def __del__(self) -> None:
            next(finalized)
            try:
                if isinstance(self.handle, asyncio.TimerHandle):
                    self.handle.cancel()  # a timer of the idle loop, from another thread
                loop.call_soon_threadsafe(on_loop)
                next(posted)
                self.handle = None
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

    def garbage() -> None:
        old = gc.get_threshold()
        for i in itertools.count():
            if stop.is_set():
                break
            nodes = [Node(i + k) for k in range(32)]
            for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
                a.peer = b
            del nodes, a, b
            if i % 64 == 0:
                gc.collect()
        gc.set_threshold(*old)

    async def main() -> None:
        ev = asyncio.Event()
        workers = [threading.Thread(target=garbage) for _ in range(2)]
        for w in workers:
            w.start()

        def end() -> None:
            stop.set()
            for w in workers:
                w.join()
            gc.collect()  # the last cycles' finalizers post too
            loop.call_soon_threadsafe(ev.set)

        threading.Timer(1.5, end).start()
        await ev.wait()  # idle but for the posts
        for _ in range(3):
            await asyncio.sleep(0)

    loop.run_until_complete(asyncio.wait_for(main(), 60))
    assert not errors, errors[:3]
    assert _count(finalized) > 1000
    assert _count(ran) == _count(posted) > 1000


def _runners_source() -> str:
    try:
        spec = importlib.util.find_spec("test.test_asyncio.test_runners")
    except ImportError:
        return ""
    if spec is None or spec.origin is None:
        return ""
    return Path(spec.origin).read_text(encoding="utf-8")


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="test_runners' test that waits for interrupt_main() is 3.11+",
)
@pytest.mark.skipif(
    sys.version_info >= (3, 11)
    and "def test_asyncio_run_without_uncancel" not in _runners_source(),
    reason="this Python ships no test package (CPython's test.test_asyncio)",
)
@pytest.mark.parametrize("backend", ["uring", "poll"])
def test_cpython_runners_idle_with_sigint_ignored(backend, tmp_path):
    """test_runners' test_asyncio_run_without_uncancel waits forever when SIGINT is
    ignored: the child must sit idle until faulthandler's per-test timeout ends it (exit
    1 with the dump), never die of a signal."""
    make_loop(backend).close()  # skips if this backend cannot run here
    out = subprocess.run(
        [sys.executable, str(ROOT / "stress" / "crash_hunt.py"), "--config", "runners",
         "--backend", backend, "--runs", "1", "--parallel", "1", "--idle", "3",
         "--busy", "0", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 runs: {'ok (idle until the timeout)': 1}" in out.stdout, out.stdout
