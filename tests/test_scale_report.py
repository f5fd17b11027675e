"""The scale sweeps' reports (bench/scale_net.py, demo/scale_http.py): what a point shows."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module(folder: str, name: str):
    sys.path.insert(0, str(ROOT / folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / folder))


def _echo(rate: float, cpu_s: float, rss_mib: float = 30.0) -> dict:
    return {
        "req_per_s": rate,
        "requests": int(rate),
        "seconds": 1.0,
        "server_cpu_s": cpu_s,
        "peak_rss_kib": int(rss_mib * 1024),
        "others_cpu_util": 0.1,
    }


def test_echo_point_is_cpu_per_round_trip_of_the_runs_that_worked():
    scale_net = _module("bench", "scale_net")
    s = scale_net.summarize(
        [_echo(100_000, 0.5), _echo(80_000, 0.48), {"error": "client: 1 errors"}]
    )
    # 5 µs and 6 µs per round trip: median 5.5; the failed run is counted, not averaged.
    assert abs(s["cpu_us_per_rt"] - 5.5) < 1e-9
    assert s["runs"] == 2 and s["failed"] == 1
    assert s["req_per_s"] == 90_000
    cell = scale_net.fmt_cell(s)
    assert "5.5 µs" in cell and "(1 failed)" in cell
    gone = scale_net.summarize([{"error": "server did not start (exit 1): boom"}] * 2)
    assert "boom" in gone["missing"] and "error" in scale_net.fmt_cell(gone)


def test_echo_ratio_is_against_the_cheapest_peer_and_asyncio_is_no_peer():
    scale_net = _module("bench", "scale_net")
    row = {
        "asyncio": {"cpu_us_per_rt": 1.0},  # never the reference
        "uvloop": {"cpu_us_per_rt": 4.0},
        "rloop": {"cpu_us_per_rt": 3.0},
        "rsloop": {"cpu_us_per_rt": 2.0},
    }
    assert scale_net.ratio(row) == "**1.50×** (rloop)"
    assert scale_net.ratio({"rsloop": {"cpu_us_per_rt": 2.0}}) == "n/a"


def test_http_point_leaves_out_runs_with_error_responses():
    scale_http = _module("demo", "scale_http")
    ok = {"rps": 1000.0, "cpu_us": 50.0, "p99_ms": 3.0, "peak_rss_mib": 40.0}
    bad = dict(ok, rps=5000.0, cpu_us=10.0, error="7 non-2xx responses")
    s = scale_http.summarize([ok, dict(ok, rps=1200.0, cpu_us=40.0), bad])
    assert s["rps"] == 1100.0 and s["cpu_us"] == 45.0 and s["failed"] == 1
    row = {
        "uvicorn-uvloop": {"cpu_us": 90.0},
        "granian-uvloop": {"cpu_us": 30.0},
        "uvicorn-rsloop": {"cpu_us": 60.0},
    }
    assert scale_http.ratio(row) == "**1.50×** · 0.50× (granian-uvloop)"


def test_http_counts_the_whole_process_tree():
    scale_http = _module("demo", "scale_http")
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'input()'])"
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        for _ in range(200):
            if len(scale_http.tree(parent.pid)) == 2:
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert len(scale_http.tree(parent.pid)) == 2
        assert scale_http.tree_peak_rss_mib(parent.pid) > 2 * 1.0
    finally:
        parent.communicate(b"\n", timeout=30)
