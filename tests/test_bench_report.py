"""bench/run.py's report: what a reader sees for loops that failed or are missing."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _run_module():
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("run")
    finally:
        sys.path.remove(str(BENCH))


def _ok(rate: float) -> dict:
    return {
        "ops_per_s": rate,
        "ops_per_cpu_s": rate,
        "seconds": 1.0,
        "cpu_seconds": 1.0,
        "peak_rss_kib": 20480,
        "base_rss_kib": 20000,
    }


def test_a_loop_failing_every_run_is_shown_failed_and_a_missing_one_is_left_out():
    run = _run_module()
    loops = ["asyncio", "uvloop", "rloop", "rsloop"]
    samples = {
        ("asyncio", "w"): [_ok(100.0), _ok(110.0)],
        ("uvloop", "w"): [{"skip": "uvloop is not installed"}] * 2,
        ("rloop", "w"): [{"error": "timed out after 120 s"}] * 2,
        ("rsloop", "w"): [_ok(200.0), _ok(220.0)],
    }
    table = run.summarize(loops, ["w"], samples)
    lines = run.summary_table(loops, table, {"repeat": 2}, "wall")
    header = next(line for line in lines if line.startswith("| workload"))
    row = next(line for line in lines if line.startswith("| w |"))
    assert "rloop" in header and "uvloop" not in header
    assert row.split(" | ")[2] == "failed"
    assert "- rloop / w: failed every run (timed out after 120 s)" in lines
    assert table["w"]["best_peer"] == "asyncio"


def test_syscalls_reads_strace_summaries_with_and_without_an_errors_column():
    sys.path.insert(0, str(BENCH))
    try:
        syscalls = importlib.import_module("syscalls")
    finally:
        sys.path.remove(str(BENCH))
    summary = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ------------------
 59.91    1.032486          17     60005           io_uring_enter
 39.37    0.678548          16     40001     20001 recvfrom
  0.01    0.000181          12        14           getpid
------ ----------- ----------- --------- --------- ------------------
100.00    1.723456          17    100020     20001 total
"""
    assert syscalls.parse_summary(summary) == {
        "io_uring_enter": 60005,
        "recvfrom": 40001,
        "getpid": 14,
    }
