#!/usr/bin/env python3
"""HTTP cost against concurrent connections: wrk -c 16..1,024 on each server and app.

    python demo/scale_http.py                                 # everything found, 3 repeats
    python demo/scale_http.py --quick                         # smoke test, a few minutes
    python demo/scale_http.py --servers uvicorn-uvloop,uvicorn-rsloop --connections 64,1024
    python demo/scale_http.py --plot docs/img/scale-http.png

Servers: uvicorn (one process) on asyncio, uvloop, rsloop (``--loop
rsloop:new_event_loop``) and the older PyPI rsloop (the same from its own venv, found as
for bench/run.py, with uvicorn and fastapi installed there), the same from another build
(``--base-python``: the ``*-base`` servers, an A/B of two commits), and granian (ASGI interface,
one worker) on uvloop and rloop as the reference. Apps: ``fastapi`` (demo/app.py, GET
/text) and ``raw`` (demo/raw_asgi.py: one ``http.response.start`` + one body message).
For each repeat, app and connection count, every server runs once in a fresh process
(interleaved A B C A B C): wrk (one thread, keep-alive) warms it up, then measures.
Reported per point: requests/s (median, spread), server CPU per request (user + sys of
the server's whole process tree: granian serves from a worker process) and the tree's peak
RSS (sum of each process's VmHWM). JSON goes to bench/results/scale-http-<timestamp>.json,
the Markdown table to stdout; ``--plot`` draws CPU per request against connections. Linux.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "bench"))

from run import _loadavg  # noqa: E402
from serve_bench import free_port, parse_wrk, wait_listening  # noqa: E402

# server -> (runner, loop); runner "uvicorn" or "granian".
SERVERS = {
    "uvicorn-asyncio": ("uvicorn", "asyncio"),
    "uvicorn-uvloop": ("uvicorn", "uvloop"),
    "uvicorn-pypi-rsloop": ("uvicorn", "rsloop:new_event_loop"),
    "uvicorn-rsloop": ("uvicorn", "rsloop:new_event_loop"),
    # uvicorn on rsloop with httptools' protocol named (as "auto" picks it when installed)
    # and with rsloop's own (rsloop.http: parsing and response heads in Rust).
    "uvicorn-rsloop-httptools": ("uvicorn", "rsloop:new_event_loop"),
    "uvicorn-rsloop-http": ("uvicorn", "rsloop:new_event_loop"),
    # The same three from another build of rsloop (`--base-python`): an A/B of two commits.
    "uvicorn-rsloop-base": ("uvicorn", "rsloop:new_event_loop"),
    "uvicorn-rsloop-httptools-base": ("uvicorn", "rsloop:new_event_loop"),
    "uvicorn-rsloop-http-base": ("uvicorn", "rsloop:new_event_loop"),
    "granian-uvloop": ("granian", "uvloop"),
    "granian-rloop": ("granian", "rloop"),
}
# uvicorn's --http per server (default: uvicorn's "auto").
HTTP = {
    "uvicorn-rsloop-httptools": "httptools",
    "uvicorn-rsloop-http": "rsloop.http:HttpProtocol",
    "uvicorn-rsloop-httptools-base": "httptools",
    "uvicorn-rsloop-http-base": "rsloop.http:HttpProtocol",
}
APPS = {"fastapi": ("app:app", "/text"), "raw": ("raw_asgi:app", "/")}
DEFAULT_CONNECTIONS = [16, 64, 256, 1024]
PEERS = ("uvicorn-uvloop", "uvicorn-pypi-rsloop", "granian-uvloop", "granian-rloop")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    found = [x for x in SERVERS if not x.endswith("-base")]
    p.add_argument("--servers", default=",".join(found), help="from " + ",".join(SERVERS))
    p.add_argument("--apps", default="fastapi,raw")
    p.add_argument("--connections", default=",".join(map(str, DEFAULT_CONNECTIONS)))
    p.add_argument("--repeat", type=int, default=None, help="default 3, quick 2")
    p.add_argument("--duration", type=int, default=None, help="seconds (default 3, quick 1)")
    p.add_argument("--warmup", type=int, default=1, help="seconds of load first (default 1)")
    p.add_argument("--quick", action="store_true", help="-c 16,1024, 2 repeats, 1 s windows")
    p.add_argument("--python", default=sys.executable, help="interpreter of the servers")
    p.add_argument(
        "--pypi-rsloop-python",
        default=None,
        help="interpreter of the older PyPI rsloop (default: .venv-pypi-rsloop beside the repo)",
    )
    p.add_argument(
        "--base-python",
        default=None,
        help="interpreter of a venv holding another build of rsloop, for the *-base servers",
    )
    p.add_argument("--plot", default=None, metavar="PNG")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.repeat = a.repeat or 2
        a.duration = a.duration or 1
        if a.connections == p.get_default("connections"):
            a.connections = "16,1024"
    a.repeat = a.repeat or 3
    a.duration = a.duration or 3
    a.servers = [x for x in a.servers.split(",") if x]
    a.apps = [x for x in a.apps.split(",") if x]
    a.connections = [int(x) for x in a.connections.split(",") if x]
    for x in a.servers:
        if x not in SERVERS:
            p.error(f"unknown server {x!r}")
    for x in a.apps:
        if x not in APPS:
            p.error(f"unknown app {x!r}")
    a.python = os.path.abspath(a.python) if os.sep in a.python else a.python
    if a.pypi_rsloop_python is None:
        a.pypi_rsloop_python = str(REPO / ".venv-pypi-rsloop" / "bin" / "python")
    a.pypi_rsloop_python = os.path.abspath(a.pypi_rsloop_python)
    if a.base_python is not None:
        a.base_python = os.path.abspath(a.base_python)
    elif any(x.endswith("-base") for x in a.servers):
        p.error("the *-base servers need --base-python")
    return a


def raise_nofile() -> int:
    """Soft limit on open files up to the hard one (inherited by wrk and the servers:
    1,024 connections need more than the usual 1,024 descriptors)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def python_of(a, server: str) -> str:
    if server == "uvicorn-pypi-rsloop":
        return a.pypi_rsloop_python
    return a.base_python if server.endswith("-base") else a.python


def command(a, server: str, app: str, port: int) -> list:
    runner, loop = SERVERS[server]
    py, target = python_of(a, server), APPS[app][0]
    if runner == "uvicorn":
        return [
            py, "-m", "uvicorn", target, "--app-dir", str(HERE), "--host", "127.0.0.1",
            "--port", str(port), "--loop", loop, "--log-level", "warning", "--no-access-log",
            *(["--http", HTTP[server]] if server in HTTP else []),
        ]  # fmt: skip
    return [
        py, "-m", "granian", "--interface", "asgi", "--loop", loop, "--workers", "1",
        "--host", "127.0.0.1", "--port", str(port), "--working-dir", str(HERE),
        "--log-level", "warning", "--no-access-log", target,
    ]  # fmt: skip


def available(a, server: str) -> str | None:
    """None if the server can run here, else why not."""
    runner, loop = SERVERS[server]
    py = python_of(a, server)
    if not os.path.exists(py) and os.sep in py:
        return f"no interpreter {py}"
    module = loop.split(":")[0]
    probe = subprocess.run(
        [py, "-c", f"import {runner}, {module}, fastapi, rsloop as r; print(r.__file__)"]
        if module == "rsloop"
        else [py, "-c", f"import {runner}, {module}, fastapi"],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        return (probe.stderr.strip().splitlines() or ["?"])[-1]
    if module == "rsloop":
        # Which rsloop answers: the older PyPI one has no backend(), ours does.
        probe2 = subprocess.run(
            [py, "-c", "import rsloop; print(hasattr(rsloop, 'backend'))"],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
        )
        ours = probe2.stdout.strip() == "True"
        if ours != server.startswith("uvicorn-rsloop"):
            return f"{py} holds the {'wrong' if ours else 'older PyPI'} rsloop"
    return None


def tree(pid: int) -> list:
    """pid and every descendant (via /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """user + sys CPU seconds of the whole tree so far."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / _TICK


def tree_peak_rss_mib(pid: int) -> float:
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def run_wrk(url: str, duration: int, connections: int) -> dict:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 60)
    return parse_wrk(out.stdout)


def measure(a, server: str, app: str, conns: int) -> dict:
    port = free_port()
    proc = subprocess.Popen(
        command(a, server, app, port),
        cwd="/",  # `import rsloop` finds the installed package, never the source tree
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # granian's worker goes down with it
    )
    try:
        wait_listening(server, proc, port)
        url = f"http://127.0.0.1:{port}{APPS[app][1]}"
        if a.warmup:
            run_wrk(url, a.warmup, conns)
        before = tree_cpu(proc.pid)
        r = run_wrk(url, a.duration, conns)
        after = tree_cpu(proc.pid)
        r["peak_rss_mib"] = tree_peak_rss_mib(proc.pid)
        r["processes"] = len(tree(proc.pid))
        if r["requests"]:
            r["cpu_us"] = 1e6 * (after - before) / r["requests"]
        if r["non_2xx"]:
            r["error"] = f"{r['non_2xx']} non-2xx responses"
        return r
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything left of the tree
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait(timeout=5)


def summarize(runs: list) -> dict:
    ok = [r for r in runs if "rps" in r and "error" not in r]
    if not ok:
        return {"missing": next((r.get("error") or r.get("skip") for r in runs), "not run")}
    rates = [r["rps"] for r in ok]
    cpu = [r["cpu_us"] for r in ok if r.get("cpu_us")]
    med = statistics.median(rates)
    return {
        "rps": med,
        "spread": (max(rates) - min(rates)) / med if med else 0.0,
        "cpu_us": statistics.median(cpu) if cpu else None,
        "cpu_spread": (max(cpu) - min(cpu)) / statistics.median(cpu) if cpu else None,
        "p99_ms": statistics.median(r["p99_ms"] for r in ok if r["p99_ms"] is not None)
        if any(r["p99_ms"] is not None for r in ok)
        else None,
        "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in ok),
        "socket_errors": [r["socket_errors"] for r in ok if r.get("socket_errors")],
        "failed": len(runs) - len(ok),
    }


def fmt_cell(s: dict) -> str:
    if "rps" not in s:
        why = " ".join(str(s.get("missing")).split())
        return f"n/a ({why[:60]})"
    cell = f"{s['rps']:,.0f} ±{50 * s['spread']:.0f}%"
    if s["cpu_us"] is not None:
        cell += f" · {s['cpu_us']:.0f} µs ±{50 * s['cpu_spread']:.0f}%"
    cell += f" · {s['peak_rss_mib']:.0f} MiB"
    if s["failed"]:
        cell += f" ({s['failed']} failed)"
    if s["socket_errors"]:
        cell += " (wrk socket errors)"
    return cell


def ratio(row: dict) -> str:
    ours = row.get("uvicorn-rsloop", {}).get("cpu_us")
    peers = {p: row[p]["cpu_us"] for p in PEERS if row.get(p, {}).get("cpu_us")}
    if not ours or not peers:
        return "n/a"
    uv = peers.get("uvicorn-uvloop")
    best = min(peers, key=lambda p: peers[p])
    head = f"**{uv / ours:.2f}×**" if uv else "–"
    return f"{head} · {peers[best] / ours:.2f}× ({best})"


def markdown(a, table: dict, servers: list) -> str:
    out = []
    for app in a.apps:
        what = "FastAPI demo/app.py, GET /text" if app == "fastapi" else "raw ASGI demo/raw_asgi.py"
        out.append(f"\n#### HTTP, {what}\n")
        out.append(
            "| wrk -c | " + " | ".join(servers) + " | CPU/req: uvloop / rsloop · best / rsloop |"
        )
        out.append("|---:|" + "---:|" * len(servers) + "---|")
        for c in a.connections:
            row = table[app][c]
            cells = [fmt_cell(row.get(s, {})) for s in servers]
            out.append(f"| {c:,} | " + " | ".join(cells) + f" | {ratio(row)} |")
    out.append(
        f"\nCell: requests/s (median of {a.repeat} server processes, wrk -t1, {a.duration} s "
        "after a warm-up, ±half the min-max spread) · server CPU per request (user + sys, "
        "whole process tree) ±half its spread · peak RSS of the tree. Last column: uvicorn "
        "on uvloop's CPU per request over uvicorn on rsloop's, then the best peer's (either "
        "server) over it; above 1.00× rsloop spends less."
    )
    return "\n".join(out)


def plot(a, table: dict, servers: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(a.apps)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.8), squeeze=False)
    for ax, app in zip(axes[0], a.apps, strict=True):
        for s in servers:
            pts = [(c, table[app][c].get(s, {}).get("cpu_us")) for c in a.connections]
            pts = [(c, v) for c, v in pts if v]
            if pts:
                style = "--" if s.startswith("granian") else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=s)
        ax.set_xscale("log", base=2)
        ax.set_title("FastAPI /text" if app == "fastapi" else "raw ASGI")
        ax.set_xlabel("wrk connections")
        ax.set_ylabel("server CPU µs per request")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    if not sys.platform.startswith("linux"):
        raise SystemExit("demo/scale_http.py measures with wrk on Linux")
    a = parse_args(argv)
    from serve_bench import ensure_wrk

    def on_sigterm(signum, frame):
        raise SystemExit(128 + signum)  # through measure()'s finally: the server goes too

    signal.signal(signal.SIGTERM, on_sigterm)

    ensure_wrk()
    hard = raise_nofile()
    if hard < max(a.connections) + 64:
        print(f"# the hard limit on open files is {hard}: too low for -c", file=sys.stderr)
    missing = {s: available(a, s) for s in a.servers}
    for s, why in missing.items():
        if why:
            print(f"# skipping {s}: {why}", file=sys.stderr)
    servers = [s for s in a.servers if not missing[s]]
    raw: dict = {}
    t0, load0 = time.time(), _loadavg()
    for rep in range(a.repeat):
        for app in a.apps:
            for c in a.connections:
                for s in servers:
                    try:
                        r = measure(a, s, app, c)
                    except Exception as exc:  # noqa: BLE001 - reported in the table
                        r = {"error": f"{type(exc).__name__}: {exc}"}
                    raw.setdefault((app, c, s), []).append(r)
                    shown = (
                        f"{r['rps']:>9,.0f} req/s {r.get('cpu_us', 0):6.0f} µs CPU/req "
                        f"peak {r['peak_rss_mib']:.0f} MiB"
                        + (f" {r['socket_errors']}" if r.get("socket_errors") else "")
                        if "rps" in r
                        else r["error"][:300]
                    )
                    print(f"  rep {rep + 1}/{a.repeat} {app:7s} c={c:<5} {s:20s} {shown}",
                          file=sys.stderr)  # fmt: skip
    table: dict = {app: {c: {} for c in a.connections} for app in a.apps}
    for (app, c, s), runs in raw.items():
        table[app][c][s] = summarize(runs)
    print(markdown(a, table, servers))
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": load0,
        "loadavg_end": _loadavg(),
        "wall_seconds": round(time.time() - t0, 1),
        "argv": sys.argv[1:],
        "skipped": {s: why for s, why in missing.items() if why},
    }
    print(
        f"\n{meta['platform']}, Python {meta['python']}, {meta['wall_seconds']} s wall, load "
        f"average {load0} at start, {meta['loadavg_end']} at end (2 CPUs, shared machine)."
        + "".join(f"\n- {s}: skipped ({why})" for s, why in meta["skipped"].items())
    )
    stamp = meta["date_utc"].replace(":", "") + ("-quick" if a.quick else "")
    out = Path(a.out) if a.out else REPO / "bench" / "results" / f"scale-http-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "meta": meta,
                "table": {app: {str(c): v for c, v in t.items()} for app, t in table.items()},
                "raw": {f"{app}/{c}/{s}": v for (app, c, s), v in raw.items()},
            },
            indent=1,
        )
    )
    print(f"(results: {out})", file=sys.stderr)
    if a.plot:
        plot(a, table, servers, a.plot)
        print(f"(plot: {a.plot})", file=sys.stderr)
    # A peer's failed cell is reported in its table and does not fail the run (a loaded
    # machine can make any server miss); rsloop's must not fail.
    failed = any(
        "error" in r for (_app, _conns, s), runs in raw.items() if s not in PEERS for r in runs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
