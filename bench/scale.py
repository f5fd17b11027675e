#!/usr/bin/env python3
"""Cost per operation against how much work is pending: the curve, not a point.

    python bench/scale.py                                  # every loop found, 3 repeats
    python bench/scale.py --loops rsloop-base,rsloop --workloads call_soon_burst
    python bench/scale.py --sizes 1000,1000000 --syscalls --plot docs/img/scale.png

For each size N (10^3..10^6 by default) and each burst workload of ``bench/burst.py``
(N operations scheduled before any runs, repeated until 10^6 ran; the collector on),
every loop runs in its own fresh process (``bench/_child.py``), interleaved A B C A B C,
``--repeat`` times; the tables give the median rate with its spread (min-max around the
median), CPU per operation, peak RSS, and with ``--syscalls`` system calls per operation
(one more run per point under ``strace -f -c``, which counts but slows everything down).
``rsloop / best`` divides rsloop's median by the best other loop's (``pypi-rsloop``,
``rloop``, ``uvloop``; asyncio is shown but is never the best). ``flat`` is the rate at
the largest N over the rate at the smallest. Results go to bench/results/scale-*.json;
``--plot`` draws cost per operation against N (needs matplotlib).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import describe  # noqa: E402
from burst import BURSTS  # noqa: E402
from run import (  # noqa: E402
    ALL_LOOPS,
    _loadavg,
    add_venv_options,
    fmt_rate,
    resolve_venv_options,
    run_child,
)

DEFAULT_LOOPS = ["asyncio", "uvloop", "rloop", "pypi-rsloop", "rsloop"]
DEFAULT_WORKLOADS = ["call_soon_burst", "threadsafe_burst", "call_later_burst", "gather_burst"]
DEFAULT_SIZES = [1_000, 10_000, 100_000, 1_000_000]
PEERS = ("pypi-rsloop", "rloop", "uvloop")
WARM = 1_000


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", default=",".join(DEFAULT_LOOPS))
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--syscalls", action="store_true", help="count system calls per op")
    p.add_argument(
        "--gc",
        action="store_true",
        help="also report the share of CPU the garbage collector took (BENCH_GC_TIME=1)",
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="draw cost per op against N")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--out", default=None)
    add_venv_options(p)
    a = p.parse_args(argv)
    a.loops = [x for x in a.loops.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    a.sizes = [int(float(x)) for x in a.sizes.split(",") if x]
    for x in a.loops:
        if x not in ALL_LOOPS:
            p.error(f"unknown loop {x!r}")
    for x in a.workloads:
        if x not in BURSTS:
            p.error(f"unknown workload {x!r}; choose from {', '.join(BURSTS)}")
    resolve_venv_options(a)
    if a.gc:
        os.environ["BENCH_GC_TIME"] = "1"
    return a


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "ops_per_s" in r]
    if not ok:
        return {"missing": next((r.get("skip") or r.get("error") for r in runs), "not run")}
    rates = [r["ops_per_s"] for r in ok]
    med = statistics.median(rates)
    return {
        "ops_per_s": med,
        "spread": (max(rates) - min(rates)) / med if med else 0.0,
        "cpu_us_per_op": statistics.median(1e6 * r["cpu_seconds"] / r["ops"] for r in ok),
        "peak_rss_mib": statistics.median(r["peak_rss_kib"] for r in ok) / 1024,
        "gc_share": (
            statistics.median(r["gc_seconds"] / r["cpu_seconds"] for r in ok)
            if all("gc_seconds" in r and r["cpu_seconds"] > 0 for r in ok)
            else None
        ),
        "runs": len(ok),
    }


def syscalls_per_op(args, loop: str, workload: str, n: int) -> float | None:
    import syscalls

    try:
        calls, ops = syscalls.count(args, loop, workload, n, WARM)
    except (RuntimeError, OSError) as exc:
        print(f"  (syscalls {loop} {workload} {n}: {exc})", file=sys.stderr)
        return None
    return sum(calls.values()) / ops if ops else None


def markdown(args, table: dict) -> str:
    out = []
    for wl in args.workloads:
        out.append(f"\n### {wl}\n")
        head = "| N | " + " | ".join(args.loops) + " | rsloop / best |"
        out += [head, "|" + "---|" * (len(args.loops) + 2)]
        for n in args.sizes:
            cells = []
            for lp in args.loops:
                s = table[wl][n].get(lp, {})
                if "ops_per_s" not in s:
                    cells.append("n/a")
                    continue
                cell = f"{fmt_rate(s['ops_per_s'])} ±{100 * s['spread'] / 2:.0f}%"
                cell += f" · {s['cpu_us_per_op']:.2f} µs · {s['peak_rss_mib']:.0f} MiB"
                if s.get("syscalls_per_op") is not None:
                    cell += f" · {s['syscalls_per_op']:.3f} sc"
                if s.get("gc_share") is not None:
                    cell += f" · gc {100 * s['gc_share']:.0f}%"
                cells.append(cell)
            out.append(f"| {n:,} | " + " | ".join(cells) + f" | {ratio(table[wl][n])} |")
        flat = []
        for lp in args.loops:
            lo, hi = table[wl][args.sizes[0]].get(lp, {}), table[wl][args.sizes[-1]].get(lp, {})
            if "ops_per_s" in lo and "ops_per_s" in hi:
                flat.append(f"{lp} {hi['ops_per_s'] / lo['ops_per_s']:.2f}")
        out.append(f"\nflat (rate at {args.sizes[-1]:,} / at {args.sizes[0]:,}): {', '.join(flat)}")
    out.append(
        "\nCell: median ops/s ±half the min-max spread · CPU µs per op · peak RSS"
        + (" · syscalls per op" if args.syscalls else "")
        + (" · the collector's share of CPU" if args.gc else "")
    )
    return "\n".join(out)


def ratio(row: dict) -> str:
    ours = row.get("rsloop", {}).get("ops_per_s")
    best = max((row[p]["ops_per_s"] for p in PEERS if "ops_per_s" in row.get(p, {})), default=None)
    if not ours or not best:
        return "n/a"
    name = next(p for p in PEERS if row.get(p, {}).get("ops_per_s") == best)
    return f"**{ours / best:.2f}×** ({name})"


def plot(args, table: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.workloads), figsize=(4.2 * len(args.workloads), 3.6))
    axes = axes if len(args.workloads) > 1 else [axes]
    for ax, wl in zip(axes, args.workloads, strict=True):
        for lp in args.loops:
            pts = [(n, table[wl][n].get(lp, {}).get("ops_per_s")) for n in args.sizes]
            pts = [(n, 1e9 / r) for n, r in pts if r]
            if pts:
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                ax.plot(xs, ys, marker="o", label=lp)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(wl)
        ax.set_xlabel("N pending")
        ax.set_ylabel("ns per operation (wall)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.syscalls and shutil.which("strace") is None:
        print("strace not found (apt-get install strace)", file=sys.stderr)
        return 2
    samples: dict = {}
    for rep in range(args.repeat):
        for wl in args.workloads:
            for n in args.sizes:
                for lp in args.loops:
                    r = run_child(args, lp, wl, n, WARM)
                    samples.setdefault((wl, n, lp), []).append(r)
                    rate = fmt_rate(r["ops_per_s"]) if "ops_per_s" in r else r
                    print(f"[{rep + 1}/{args.repeat}] {wl} N={n} {lp}: {rate}", file=sys.stderr)
    table = {wl: {n: {} for n in args.sizes} for wl in args.workloads}
    for (wl, n, lp), runs in samples.items():
        table[wl][n][lp] = summarize(runs)
    if args.syscalls:
        for wl in args.workloads:
            for n in args.sizes:
                for lp in args.loops:
                    if "ops_per_s" in table[wl][n][lp]:
                        table[wl][n][lp]["syscalls_per_op"] = syscalls_per_op(args, lp, wl, n)
    text = markdown(args, table)
    print(text)
    print(f"\n{describe()}")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else HERE / "results" / f"scale-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": describe(),
        "loadavg_end": _loadavg(),
        "argv": sys.argv[1:],
    }
    rows = {wl: {str(n): v for n, v in t.items()} for wl, t in table.items()}
    data = {"meta": meta, "table": rows}
    out.write_text(json.dumps(data, indent=1))
    print(f"\n(results: {out})", file=sys.stderr)
    if args.plot:
        plot(args, table, args.plot)
        print(f"(plot: {args.plot})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
