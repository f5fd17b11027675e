#!/usr/bin/env python3
"""Serve demo/app.py (FastAPI) with uvicorn on asyncio, uvloop and rsloop in turn and load
each with wrk over loopback: requests/s, p50/p99 latency, the server's peak memory.

    python demo/serve_bench.py                       # 3 repeats, 5 s per run, /json and /text
    python demo/serve_bench.py --routes json --repeat 5 --duration 10
    bash scripts/nox -s demo                          # the same, from a fresh machine

Each (repeat, route) serves every loop once, interleaved (A B C A B C), each in a fresh
``uvicorn app:app --loop ...`` process; wrk (one thread, ``--connections`` keep-alive
connections) warms the server up, then measures. The table shows medians over the
repeats, the ratio of the medians to uvloop's and the median of the ratios within each
repeat (the loops of one repeat run back to back, so that ratio cancels a slow phase of a
shared machine). ``--loops`` may add ``rsloop-poll`` (rsloop on its ``poll`` backend,
``RSLOOP_BACKEND=poll``); JSON and a PNG chart (if matplotlib is installed) go to
bench/results/. wrk is installed from Debian's packages if missing (apt-get). Linux only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "bench" / "results"
LOOPS = {
    "asyncio": "asyncio",
    "uvloop": "uvloop",
    "rsloop": "rsloop:new_event_loop",
    # rsloop on its portable backend (docs/backends.md).
    "rsloop-poll": "rsloop:new_event_loop",
}
LOOP_ENV = {"rsloop-poll": {"RSLOOP_BACKEND": "poll"}}
ROUTES = {"json": "/json", "text": "/text", "fanout": "/fanout?n=10"}
START_S = 30.0


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print(
        "wrk not found: installing it from Debian's packages (apt-get install wrk)", file=sys.stderr
    )
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "wrk"], check=False, env=env)
    if not shutil.which("wrk"):
        subprocess.run([*sudo, "apt-get", "update", "-q"], check=False, env=env)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "wrk"], check=True, env=env)
    found = shutil.which("wrk")
    if not found:
        sys.exit("wrk is needed: apt-get install wrk")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_server(loop: str, python: str, port: int, wrapper: tuple = ()) -> subprocess.Popen:
    """uvicorn serving demo/app.py on ``loop`` at 127.0.0.1:``port``, run under
    ``wrapper`` (a command prefix such as valgrind's) if given; not waited for."""
    cmd = [
        *wrapper, python, "-m", "uvicorn", "app:app", "--app-dir", str(HERE),
        "--host", "127.0.0.1", "--port", str(port), "--loop", LOOPS[loop],
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    # cwd outside the repo: `import rsloop` finds the installed package, not the source.
    env = dict(os.environ, **LOOP_ENV.get(loop, {}))
    return subprocess.Popen(
        cmd, cwd="/", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_listening(loop: str, proc: subprocess.Popen, port: int, timeout: float = START_S) -> None:
    """Returns once the server ``spawn_server`` started accepts a connection; kills it and
    raises RuntimeError if it exits or does not listen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"{loop}: uvicorn exited {proc.returncode}: {err[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{loop}: uvicorn did not start listening")


def start_server(loop: str, python: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = spawn_server(loop, python, port)
    wait_listening(loop, proc, port)
    return proc, port


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> tuple[float, float] | None:
    """The process's (user, system) CPU seconds so far, from /proc/PID/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_wrk(out: str) -> dict:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not rps:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    lat = {}
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        lat[pct] = float(m.group(1)) * _UNITS[m.group(2)] if m else None
    total = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock_err = re.search(r"Socket errors:.*", out)
    return {
        "rps": float(rps.group(1)),
        "requests": int(total.group(1)) if total else None,
        "p50_ms": lat["50"],
        "p99_ms": lat["99"],
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": sock_err.group(0) if sock_err else None,
    }


def run_wrk(wrk: str, url: str, duration: int, connections: int) -> dict:
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 60)
    return parse_wrk(out.stdout)


def measure(args, wrk: str, loop: str, route: str) -> dict:
    proc, port = start_server(loop, args.python)
    try:
        url = f"http://127.0.0.1:{port}{ROUTES[route]}"
        if args.warmup:
            run_wrk(wrk, url, args.warmup, args.connections)
        before = cpu_seconds(proc.pid)
        result = run_wrk(wrk, url, args.duration, args.connections)
        after = cpu_seconds(proc.pid)
        result["peak_rss_mib"] = peak_rss_mib(proc.pid)
        if before and after and result["requests"]:
            # The server's CPU per request, user and kernel: steadier than requests/s on a
            # shared machine, and it shows which side a change moved.
            n = result["requests"]
            result["user_us"] = 1e6 * (after[0] - before[0]) / n
            result["sys_us"] = 1e6 * (after[1] - before[1]) / n
        return result
    finally:
        stop_server(proc)


def loop_available(loop: str, python: str) -> str | None:
    module = loop.split("-")[0]
    probe = subprocess.run(
        [python, "-c", f"import {module}, uvicorn, fastapi"],
        cwd="/",
        capture_output=True,
        text=True,
    )
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--loops", default="asyncio,uvloop,rsloop", help="comma-separated, from " + ",".join(LOOPS)
    )
    p.add_argument(
        "--routes", default="json,text", help="comma-separated, from " + ",".join(ROUTES)
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="whole seconds measured per run")
    p.add_argument("--warmup", type=int, default=1, help="whole seconds of load before measuring")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--python", default=sys.executable, help="interpreter for the servers")
    p.add_argument("--no-chart", action="store_true")
    a = p.parse_args(argv)
    if os.sep in a.python:  # the servers run with cwd="/": a relative path would miss
        a.python = os.path.abspath(a.python)
    a.loops = [x for x in a.loops.split(",") if x]
    a.routes = [x for x in a.routes.split(",") if x]
    for x in a.loops:
        if x not in LOOPS:
            p.error(f"unknown loop {x!r}")
    for x in a.routes:
        if x not in ROUTES:
            p.error(f"unknown route {x!r}")
    if a.repeat < 1 or a.duration < 1 or a.warmup < 0 or a.connections < 1:
        p.error("--repeat, --duration and --connections must be positive")
    return a


def fmt_ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def summarize(args, raw: dict) -> tuple[list[str], dict]:
    table: dict = {}
    lines = [
        f"FastAPI (demo/app.py) under uvicorn, wrk -t1 -c{args.connections} -d{args.duration:g}s "
        f"over loopback; medians of {args.repeat} server processes per cell; paired: the "
        "median over repeats of the ratio within one repeat; spread: (max - min) / median; "
        "CPU: the server's user + system CPU time per request.",
        "",
        "| route | loop | requests/s | ×uvloop | paired ×uvloop | spread | p50 ms | p99 ms "
        "| CPU µs/req (user + sys) | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for route in args.routes:
        row = {}
        for loop in args.loops:
            runs = raw[route][loop]
            ok = [r for r in runs if "rps" in r]
            if not ok:
                row[loop] = {"missing": runs[0].get("error") or runs[0].get("skip")}
                continue
            row[loop] = {
                "rps": statistics.median(r["rps"] for r in ok),
                "p50_ms": statistics.median(r["p50_ms"] for r in ok if r["p50_ms"] is not None),
                "p99_ms": statistics.median(r["p99_ms"] for r in ok if r["p99_ms"] is not None),
                "peak_rss_mib": max(r["peak_rss_mib"] or 0 for r in ok),
                "spread": (max(r["rps"] for r in ok) - min(r["rps"] for r in ok))
                / statistics.median(r["rps"] for r in ok),
                "failed_runs": len(runs) - len(ok),
            }
            cpu = [r for r in ok if r.get("user_us") is not None]
            if cpu:
                row[loop]["user_us"] = statistics.median(r["user_us"] for r in cpu)
                row[loop]["sys_us"] = statistics.median(r["sys_us"] for r in cpu)
                row[loop]["cpu_us"] = statistics.median(r["user_us"] + r["sys_us"] for r in cpu)
            # Each repeat serves the loops back to back: the ratio within one repeat cancels
            # a slow phase of a shared machine, which the ratio of medians still carries.
            pairs = [
                r["rps"] / u["rps"]
                for r, u in zip(runs, raw[route].get("uvloop", []), strict=False)
                if "rps" in r and "rps" in u
            ]
            row[loop]["paired_ratio"] = statistics.median(pairs) if pairs else None
        base = row.get("uvloop", {}).get("rps")
        for loop in args.loops:
            s = row[loop]
            if "rps" not in s:
                lines.append(f"| /{route} | {loop} | n/a ({s['missing']}) | | | | | | | |")
                continue
            ratio = f"{s['rps'] / base:.2f}×" if base else "–"
            paired = f"{s['paired_ratio']:.2f}×" if s["paired_ratio"] else "–"
            cpu = (
                f"{s['cpu_us']:.0f} ({s['user_us']:.0f} + {s['sys_us']:.0f})"
                if "cpu_us" in s
                else "–"
            )
            lines.append(
                f"| /{route} | {loop} | {s['rps']:,.0f} | {ratio} | {paired} | "
                f"{100 * s['spread']:.0f} % | "
                f"{fmt_ms(s['p50_ms'])} | {fmt_ms(s['p99_ms'])} | {cpu} | {s['peak_rss_mib']:.1f} |"
            )
        table[route] = row
    return lines, table


def chart(args, table: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no chart: matplotlib is not installed)", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(args.loops))
    for i, loop in enumerate(args.loops):
        values = [table[r][loop].get("rps", 0) for r in args.routes]
        xs = [j + i * width for j in range(len(args.routes))]
        bars = ax.bar(xs, values, width, label=loop)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    ax.set_xticks([j + width * (len(args.loops) - 1) / 2 for j in range(len(args.routes))])
    ax.set_xticklabels([f"/{r}" for r in args.routes])
    ax.set_ylabel("requests/s (median)")
    ax.set_title("FastAPI + uvicorn, wrk over loopback")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        sys.exit("demo/serve_bench.py measures with wrk on Linux")
    wrk = ensure_wrk()
    raw: dict = {r: {lp: [] for lp in args.loops} for r in args.routes}
    missing = {lp: loop_available(lp, args.python) for lp in args.loops}
    t0 = time.monotonic()
    for rep in range(args.repeat):
        for route in args.routes:
            for loop in args.loops:
                if missing[loop]:
                    raw[route][loop].append({"skip": f"not installed: {missing[loop]}"})
                    continue
                try:
                    r = measure(args, wrk, loop, route)
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    r = {"error": f"{type(exc).__name__}: {exc}"}
                raw[route][loop].append(r)
                shown = (
                    f"{r['rps']:,.0f} req/s p99 {fmt_ms(r['p99_ms'])} ms "
                    f"cpu {r.get('user_us', 0):.0f}+{r.get('sys_us', 0):.0f} us/req"
                    if "rps" in r
                    else r
                )
                print(
                    f"  rep {rep + 1}/{args.repeat} /{route:<6} {loop:<8} {shown}", file=sys.stderr
                )
    lines, table = summarize(args, raw)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / f"demo-{stamp}.json"
    out_json.write_text(json.dumps({"args": vars(args), "raw": raw, "table": table}, indent=1))
    png = None if args.no_chart else chart(args, table, RESULTS / f"demo-{stamp}.png")
    print("\n".join(lines))
    print()
    print(f"{time.monotonic() - t0:.0f} s; JSON: {out_json}" + (f"; chart: {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
