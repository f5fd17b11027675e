"""The demos stay true: each one runs, on each backend, and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parent.parent / "demo"


@pytest.mark.parametrize("backend", ["uring", "poll", "asyncio"])
def test_basics_demo_runs(backend):
    env = {**os.environ, "RSLOOP_BACKEND": backend}
    proc = subprocess.run(
        [sys.executable, str(DEMO / "basics.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"name='{backend}'" in out
    assert "callbacks ran: ['soon', 'later']" in out
    assert "gathered: [0, 1, 4, 9, 16]" in out
    assert "fd watcher read: b'hello from a socketpair'" in out
