"""The demos stay true: each one runs, on each backend, and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:8000/json
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     6.20ms    1.02ms  30.33ms   92.55%
    Req/Sec    10.32k   412.04    10.91k    88.00%
  Latency Distribution
     50%    6.06ms
     75%    6.36ms
     90%    6.87ms
     99%    1.02s
  51384 requests in 5.00s, 9.71MB read
Requests/sec:  10270.55
Transfer/sec:      1.94MB
"""


def test_serve_bench_parses_wrk():
    sys.path.insert(0, str(DEMO))
    try:
        import serve_bench
    finally:
        sys.path.remove(str(DEMO))
    got = serve_bench.parse_wrk(WRK_OUTPUT)
    assert got == {
        "rps": 10270.55,
        "requests": 51384,
        "p50_ms": 6.06,
        "p99_ms": 1020.0,
        "non_2xx": 0,
        "socket_errors": None,
    }


def _serve_bench():
    sys.path.insert(0, str(DEMO))
    try:
        import serve_bench
    finally:
        sys.path.remove(str(DEMO))
    return serve_bench


def test_serve_bench_pairs_runs_of_one_repeat():
    sb = _serve_bench()
    args = sb.parse_args(["--loops", "uvloop,rsloop", "--routes", "json", "--repeat", "3"])

    def run(rps):
        cpu = {"user_us": 1e6 / rps, "sys_us": 2e5 / rps}
        return {"rps": rps, "p50_ms": 1.0, "p99_ms": 2.0, "peak_rss_mib": 40.0, **cpu}

    # The machine slows down for a while (uvloop's third run, rsloop's first and third):
    # the ratio of the medians says 0.55, the ratios within each repeat 0.55, 1.1 and 1.1.
    raw = {
        "json": {
            "uvloop": [run(10_000), run(10_000), run(5_000)],
            "rsloop": [run(5_500), run(11_000), run(5_500)],
        }
    }
    _, table = sb.summarize(args, raw)
    assert table["json"]["rsloop"]["rps"] / table["json"]["uvloop"]["rps"] == pytest.approx(0.55)
    assert table["json"]["rsloop"]["paired_ratio"] == pytest.approx(1.1)
    assert table["json"]["uvloop"]["paired_ratio"] == pytest.approx(1.0)
    assert table["json"]["rsloop"]["cpu_us"] == pytest.approx(1.2e6 / 5_500)
    assert table["json"]["rsloop"]["sys_us"] == pytest.approx(2e5 / 5_500)
    # A failed run pairs with nothing.
    raw["json"]["rsloop"][1] = {"error": "boom"}
    _, table = sb.summarize(args, raw)
    assert table["json"]["rsloop"]["paired_ratio"] == pytest.approx((0.55 + 1.1) / 2)


def test_serve_bench_reads_cpu_time_of_a_process():
    sb = _serve_bench()
    if not sys.platform.startswith("linux"):
        pytest.skip("/proc is Linux's")
    before = sb.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = sb.cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after[0] + after[1] - before[0] - before[1] >= 0.1
    assert sb.cpu_seconds(2**22 + 1) is None  # no such process


def test_serve_bench_python_path_is_made_absolute():
    sb = _serve_bench()
    args = sb.parse_args(["--python", os.path.join("venv", "bin", "python")])
    assert os.path.isabs(args.python)
    assert sb.parse_args(["--python", "python3"]).python == "python3"  # found on PATH


def test_serve_bench_end_to_end(tmp_path):
    import shutil

    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    if shutil.which("wrk") is None:
        pytest.skip("wrk not installed (the demo session installs it)")
    proc = subprocess.run(
        [
            sys.executable, str(DEMO / "serve_bench.py"), "--loops", "rsloop,asyncio",
            "--routes", "json", "--repeat", "1", "--duration", "1", "--warmup", "0",
            "--no-chart",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| /json |")]
    assert [row.split("|")[2].strip() for row in rows] == ["rsloop", "asyncio"]
    for row in rows:
        assert float(row.split("|")[3].replace(",", "")) > 0, row


EXAMPLES = {
    "sockets.py": [
        "sock_recv: b'hello over a socket pair'",
        "tcp echo: b'ping'",
        "udp echo: b'DATAGRAM'",
    ],
    "streams.py": ["tcp: [b'A', b'BC']", "unix: [b'UNIX']", "accepted: b'accepted elsewhere'"],
    "processes.py": [
        "child said: [b'one', b'two'] exit 0",
        "shell: b'SHOUTED'",
        "pipe: b'through a pipe'",
        "signal: SIGUSR1",
    ],
}


@pytest.mark.parametrize("backend", ["uring", "poll", "asyncio"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_examples_run(example, backend):
    env = {**os.environ, "RSLOOP_BACKEND": backend}
    proc = subprocess.run(
        [sys.executable, str(DEMO / example)], capture_output=True, text=True, env=env, timeout=60
    )
    if proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"backend: {backend}", *EXAMPLES[example]]


@pytest.mark.parametrize("backend", ["uring", "poll", "asyncio"])
def test_virtual_time_demo_passes(backend):
    """demo/virtual_time: its own pytest session (17.5 simulated seconds of backoff, a
    rate limiter) passes on each backend, and its tests take milliseconds."""
    pytest.importorskip("pytest_asyncio", minversion="1.4")
    env = {**os.environ, "RSLOOP_BACKEND": backend}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(DEMO / "virtual_time"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--durations=0",
            "--durations-min=0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=DEMO / "virtual_time",
    )
    if proc.returncode != 0 and "unavailable" in proc.stdout + proc.stderr:
        pytest.skip("backend unavailable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout
    # "0.00s call     test_client.py::test_..." for each test: the call phases are short.
    calls = [float(line.split("s", 1)[0]) for line in proc.stdout.splitlines() if " call " in line]
    assert len(calls) == 4 and max(calls) < 1.0, proc.stdout
