"""Task creation and task introspection as the running Python's asyncio has them.

Each feature is probed on asyncio itself, not read off the version number: where the
running asyncio has it (``create_task(..., eager_start=...)`` and keywords handed to a
task factory from 3.14, ``asyncio.capture_call_graph`` / ``print_call_graph`` and
``python -m asyncio ps`` / ``pstree`` from 3.14), rsloop's tasks must give the same; where
it does not, rsloop must refuse as asyncio does. The ``asyncio`` row of each test is the
reference.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import make_loop


def _outcome(loop, **kwargs):
    """What create_task(coro, **kwargs) gives: ("ran before await", done) or the error."""
    ran = []

    async def coro():
        ran.append(True)
        return 1

    async def main():
        made = coro()
        try:
            task = loop.create_task(made, **kwargs)
        except TypeError as exc:
            made.close()
            return ("TypeError", type(exc).__name__)
        before = (bool(ran), task.done())
        await task
        return before

    return loop.run_until_complete(main())


@pytest.mark.parametrize("eager", [True, False])
def test_eager_start_is_as_asyncio_takes_it(loop, eager):
    reference = make_loop("asyncio")
    try:
        want = _outcome(reference, eager_start=eager)
    finally:
        reference.close()
    assert _outcome(loop, eager_start=eager) == want
    if want[0] != "TypeError":
        # 3.14+: an eager task has run to its end before create_task() returns.
        assert want == ((True, True) if eager else (False, False))


def _factory_keywords(loop, **kwargs):
    seen = []

    def factory(lp, coro, **kw):
        seen.append(sorted(kw))
        kw.pop("eager_start", None)
        name = kw.pop("name", None)
        task = asyncio.Task(coro, loop=lp, **kw)
        if name is not None:
            task.set_name(name)
        return task

    async def nothing():
        return None

    async def main():
        loop.set_task_factory(factory)
        made = nothing()
        try:
            task = loop.create_task(made, **kwargs)
        except TypeError:
            made.close()
            return "TypeError"
        finally:
            loop.set_task_factory(None)
        await task
        # (An unnamed task's name counts tasks made so far: not compared.)
        return (task.get_name() if kwargs.get("name") is not None else None), seen

    return loop.run_until_complete(main())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"name": "n"},
        {"name": "n", "eager_start": True},
        # Given as None: a 3.14+ factory still sees the keys (3.10 refuses `context`).
        {"name": None},
        {"context": None},
        {"name": None, "context": None, "eager_start": False},
    ],
    ids=["none", "name", "both", "name-none", "context-none", "all-none"],
)
def test_task_factory_gets_the_keywords_asyncio_hands_it(loop, kwargs):
    reference = make_loop("asyncio")
    try:
        want = _factory_keywords(reference, **kwargs)
    finally:
        reference.close()
    assert _factory_keywords(loop, **kwargs) == want


needs_call_graph = pytest.mark.skipif(
    not hasattr(asyncio, "capture_call_graph"),
    reason="this asyncio has no call-graph introspection (3.14+)",
)


@needs_call_graph
def test_call_graph_inside_tasks(loop):
    async def leaf(out):
        buf = io.StringIO()
        asyncio.print_call_graph(file=buf)
        out.append(buf.getvalue())
        graph = asyncio.capture_call_graph()
        out.append([graph.future.get_name(), [a.future.get_name() for a in graph.awaited_by]])

    async def middle(out):
        await asyncio.create_task(leaf(out), name="leaf")

    async def main():
        out: list = []
        await asyncio.create_task(middle(out), name="middle")
        return out

    printed, captured = loop.run_until_complete(main())
    assert captured == ["leaf", ["middle"]]
    assert "Task(name='leaf'" in printed and "Task(name='middle'" in printed
    assert ".leaf()" in printed and ".middle()" in printed


PROGRAM = """
import asyncio, os, sys
sys.path.insert(0, {tests!r})
from conftest import make_loop

async def worker():
    await asyncio.sleep(60)

async def main():
    task = asyncio.create_task(worker(), name="the-worker")
    await asyncio.sleep(0)
    print("ready", flush=True)
    await task

loop = make_loop({kind!r})
loop.run_until_complete(main())
"""


@pytest.mark.skipif(
    importlib.util.find_spec("asyncio.tools") is None,
    reason="this asyncio has no `python -m asyncio ps` (3.14+)",
)
@pytest.mark.skipif(sys.platform != "linux", reason="remote inspection is tested on Linux")
@pytest.mark.parametrize("command", ["ps", "pstree"])
def test_python_m_asyncio_ps_and_pstree_see_the_tasks(loop_kind, command):
    make_loop(loop_kind).close()  # skips if this backend cannot run here
    tests = os.path.dirname(os.path.abspath(__file__))
    code = textwrap.dedent(PROGRAM.format(tests=tests, kind=loop_kind))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while True:
            out = subprocess.run(
                [sys.executable, "-m", "asyncio", command, str(child.pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if "the-worker" in out.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if out.returncode != 0 and "Permission" in out.stderr + out.stdout:
            pytest.skip(f"this machine refuses remote inspection: {out.stderr.strip()}")
        assert out.returncode == 0, out.stderr
        assert "the-worker" in out.stdout, out.stdout
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
