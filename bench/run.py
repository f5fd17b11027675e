#!/usr/bin/env python3
"""Core event-loop benchmark: every workload on every loop, each run in its own process.

    python bench/run.py                                   # all loops found, 5 repeats
    python bench/run.py --loops asyncio,uvloop,rloop,rsloop --repeat 7
    python bench/run.py --quick                           # smoke test, < 2 minutes
    python bench/run.py --loops asyncio,uvloop,rsloop,pypi-rsloop \\
        --pypi-rsloop-python .venv-pypi-rsloop/bin/python

For each repeat, for each workload, every loop runs once, in a fresh ``python
bench/_child.py`` process (interleaved A B C A B C, so machine drift hits all loops
alike). The table reports the median over the repeats. Results go to
bench/results/<timestamp>.json and a Markdown table to stdout. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import describe  # noqa: E402
from burst import BURSTS  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

ALL_LOOPS = [
    "asyncio",
    "uvloop",
    "rloop",
    "rsloop",
    "rsloop-poll",
    "pypi-rsloop",
    "rsloop-nostats",
    "rsloop-mimalloc",
    "rsloop-asynciostreams",
    "rsloop-glibcmalloc",
    "rsloop-base",
]
DEFAULT_LOOPS = ["asyncio", "uvloop", "rloop", "rsloop", "rsloop-poll", "pypi-rsloop"]
OURS = (
    "rsloop",
    "rsloop-poll",
    "rsloop-nostats",
    "rsloop-mimalloc",
    "rsloop-asynciostreams",
    "rsloop-glibcmalloc",
    "rsloop-base",
)
# Loops whose children run another venv's interpreter: loop -> (option, venv beside the
# repo used when the option is not given, what that venv holds).
VENV_LOOPS = {
    "pypi-rsloop": (
        "--pypi-rsloop-python",
        ".venv-pypi-rsloop",
        "the older PyPI package 'rsloop'",
    ),
    "rsloop-nostats": (
        "--nostats-python",
        ".venv-nostats",
        "an rsloop wheel built without the `stats` feature (what loop.stats() costs)",
    ),
    "rsloop-mimalloc": (
        "--mimalloc-python",
        ".venv-mimalloc",
        "an rsloop wheel built with the `mimalloc` feature",
    ),
    "rsloop-base": (
        "--base-python",
        ".venv-base",
        "another rsloop build (say, the commit before a change): an interleaved A/B",
    ),
}
NOT_INSTALLED = 3
UNSUPPORTED = 4  # exit code of _child.py: the loop lacks an API the workload needs
CHILD_TIMEOUT = 120.0  # seconds; every child is killed past this


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--loops",
        default=",".join(DEFAULT_LOOPS),
        help=f"comma-separated, from {','.join(ALL_LOOPS)} (default: all; "
        "missing ones are skipped with a note)",
    )
    p.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated, from {','.join(WORKLOADS)} (default: all)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="processes per (loop, workload); median reported (default 5, quick 3)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (~1/4) and 3 repeats: a smoke test that finishes in < 2 min",
    )
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiply every workload size by this (default 1)"
    )
    p.add_argument(
        "--python", default=sys.executable, help="interpreter for the children (default: this one)"
    )
    add_venv_options(p)
    p.add_argument(
        "--metric",
        choices=("wall", "cpu"),
        default="wall",
        help="rate in the tables: ops per wall-clock second (default) or per "
        "CPU second of the child (robust when other processes compete for "
        "the CPUs; not meaningful for call_later_random, which sleeps)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up run in each child")
    p.add_argument(
        "--out", default=None, help="JSON results file (default bench/results/<UTC timestamp>.json)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=CHILD_TIMEOUT,
        help=f"seconds before a child is killed (default {CHILD_TIMEOUT:g})",
    )
    a = p.parse_args(argv)
    if a.repeat is None:
        a.repeat = 3 if a.quick else 5
    split_loops_and_workloads(p, a)
    resolve_venv_options(a)
    return a


def split_loops_and_workloads(p, a) -> None:
    """``--loops`` and ``--workloads`` as lists, each name checked."""
    a.loops = [x.strip() for x in a.loops.split(",") if x.strip()]
    a.workloads = [x.strip() for x in a.workloads.split(",") if x.strip()]
    for x in a.loops:
        if x not in ALL_LOOPS:
            p.error(f"unknown loop {x!r}; choose from {', '.join(ALL_LOOPS)}")
    for x in a.workloads:
        if x not in WORKLOADS and x not in BURSTS:
            known = ", ".join([*WORKLOADS, *BURSTS])
            p.error(f"unknown workload {x!r}; choose from {known}")


def _venv_attr(option: str) -> str:
    return option[2:].replace("-", "_")


# glibc's malloc thresholds as rsloop sets them (rsloop/_malloc.py), as glibc tunables.
SAME_MALLOC = "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=2097152"


def add_venv_options(p) -> None:
    """One ``--X-python PATH`` option per loop of VENV_LOOPS, and ``--same-malloc``: the
    process settings of every child."""
    p.add_argument(
        "--same-malloc",
        action="store_true",
        help="give every loop's process the glibc malloc thresholds rsloop sets for itself "
        "(GLIBC_TUNABLES; rsloop then leaves them as they are), so a ratio measures the loop",
    )
    for loop, (option, venv, holds) in VENV_LOOPS.items():
        p.add_argument(
            option,
            default=None,
            metavar="PATH",
            help=f"interpreter of a venv holding {holds}, for the loop `{loop}` "
            f"(default: {venv}/bin/python beside the repo, if present)",
        )


def resolve_venv_options(a) -> None:
    """Fill the VENV_LOOPS options not given from the venvs beside the repo, and make
    the given ones absolute: the children run with another working directory."""
    for option, venv, _ in VENV_LOOPS.values():
        attr = _venv_attr(option)
        guess = HERE.parent / venv / "bin" / "python"
        given = getattr(a, attr)
        if given is None and guess.exists():
            setattr(a, attr, str(guess))
        elif given is not None:
            setattr(a, attr, os.path.abspath(given))


def child_command(args, loop: str, workload: str, n: int, warm: int):
    env = dict(os.environ)
    env.pop("RSLOOP_BACKEND", None)
    env.pop("PYTHONASYNCIODEBUG", None)
    env["PYTHONHASHSEED"] = "0"
    python = args.python
    env.pop("RSLOOP_FAST_STREAMS", None)
    env.pop("RSLOOP_TUNE_MALLOC", None)
    if loop == "rsloop-poll":
        env["RSLOOP_BACKEND"] = "poll"
    elif loop == "rsloop-asynciostreams":
        # asyncio.open_connection / start_server hand out asyncio's own reader and writer
        # (RSLOOP_FAST_STREAMS=0): measures what rsloop's fast streams bring.
        env["RSLOOP_FAST_STREAMS"] = "0"
    elif loop == "rsloop-glibcmalloc":
        # glibc's malloc thresholds left at their defaults (RSLOOP_TUNE_MALLOC=0): measures
        # what rsloop/_malloc.py brings.
        env["RSLOOP_TUNE_MALLOC"] = "0"
    if getattr(args, "same_malloc", False):
        env["GLIBC_TUNABLES"] = SAME_MALLOC
    if loop in VENV_LOOPS:
        python = getattr(args, _venv_attr(VENV_LOOPS[loop][0]))
    return [python, str(HERE / "_child.py"), loop, workload, str(n), str(warm)], env


def run_child(args, loop, workload, n, warm):
    """One measurement: dict with the child's JSON, or {'skip': why} (loop not
    installed), {'unsupported': why} (loop lacks the API) or {'error': why}."""
    cmd, env = child_command(args, loop, workload, n, warm)
    if cmd[0] is None:
        return {"skip": f"no interpreter for {loop} (see --help)"}
    if not os.path.exists(cmd[0]):
        return {"skip": f"interpreter {cmd[0]} not found"}
    try:
        # cwd outside the repo, so the source tree's rsloop/ is never imported by accident.
        proc = subprocess.run(
            cmd,
            env=env,
            cwd="/" if os.name != "nt" else None,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:g} s"}
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        data = json.loads(last[0])
    except ValueError:
        data = {}
    if proc.returncode == NOT_INSTALLED:
        return {"skip": data.get("skip", "not installed")}
    if proc.returncode == UNSUPPORTED and "unsupported" in data:
        return {"unsupported": data["unsupported"]}
    if proc.returncode != 0 or "ops_per_s" not in data:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return data


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def summarize(loops, workloads, samples, metric="wall"):
    """{workload: {loop: summary}} from {(loop, workload): [child dicts]}."""
    key = "ops_per_cpu_s" if metric == "cpu" else "ops_per_s"
    table = {}
    for wl in workloads:
        row = {}
        for lp in loops:
            runs = samples.get((lp, wl), [])
            ok = [r for r in runs if "ops_per_s" in r]
            if not ok:
                why = next((r.get("skip") or r.get("error") for r in runs), "not run")
                na = next((r["unsupported"] for r in runs if "unsupported" in r), None)
                failed = not na and any("error" in r for r in runs)
                row[lp] = {
                    "missing": f"n/a ({na})" if na else why,
                    "unsupported": bool(na),
                    "failed": failed,
                }
                continue
            rates = sorted(r[key] for r in ok)
            med = statistics.median(rates)
            row[lp] = {
                "median_ops_per_s": med,
                "median_seconds": statistics.median(r["seconds"] for r in ok),
                "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in ok),
                "median_wall_ops_per_s": statistics.median(r["ops_per_s"] for r in ok),
                "median_cpu_ops_per_s": statistics.median(r["ops_per_cpu_s"] for r in ok),
                "spread_pct": 100.0 * (rates[-1] - rates[0]) / med if med else 0.0,
                "n_ok": len(ok),
                "n_failed": len(runs) - len(ok),
                "peak_rss_mib": statistics.median(r["peak_rss_kib"] for r in ok) / 1024,
                "rss_growth_mib": statistics.median(
                    r["peak_rss_kib"] - r["base_rss_kib"] for r in ok
                )
                / 1024,
            }
        base = row.get("asyncio", {}).get("median_ops_per_s")
        for s in row.values():
            if "median_ops_per_s" in s and base:
                s["vs_asyncio"] = s["median_ops_per_s"] / base
        peers = {
            lp: s["median_ops_per_s"]
            for lp, s in row.items()
            if lp not in OURS and "median_ops_per_s" in s
        }
        ours = row.get("rsloop", {}).get("median_ops_per_s")
        best = max(peers, key=peers.get) if peers else None
        table[wl] = {
            "loops": row,
            "best_peer": best,
            "rsloop_vs_best_peer": (ours / peers[best]) if (ours and best) else None,
        }
    return table


def _shown(loops, table) -> list:
    """Loops with a figure, an n/a (unsupported) or a failure in at least one workload
    (a loop that is only not installed is left out)."""
    return [
        lp
        for lp in loops
        if any(
            "median_ops_per_s" in table[w]["loops"][lp]
            or table[w]["loops"][lp].get("unsupported")
            or table[w]["loops"][lp].get("failed")
            for w in table
        )
    ]


def summary_table(loops, table, meta, metric) -> list:
    shown = _shown(loops, table)
    unit = "ops per CPU second of the child" if metric == "cpu" else "ops/s (wall clock)"
    out = [
        f"Core loop workloads: {unit}, median of {meta['repeat']} processes per cell "
        f"(×asyncio in brackets); higher is better.",
        "",
    ]
    out.append("| workload | " + " | ".join(shown) + " | rsloop / best peer |")
    out.append("|---|" + "---:|" * len(shown) + "---|")
    for wl, t in table.items():
        cells = []
        for lp in shown:
            s = t["loops"][lp]
            if s.get("unsupported"):
                cells.append("n/a")
            elif s.get("failed"):
                cells.append("failed")
            elif "median_ops_per_s" not in s:
                cells.append("–")
            else:
                vs = s.get("vs_asyncio")
                ratio = f" ({vs:.2f}×)" if vs is not None else ""
                cells.append(f"{fmt_rate(s['median_ops_per_s'])}{ratio}")
        r = t["rsloop_vs_best_peer"]
        cells.append(f"{r:.2f}× ({t['best_peer']})" if r else "–")
        out.append(f"| {wl} | " + " | ".join(cells) + " |")
    failures = [
        f"- {lp} / {wl}: failed every run ({t['loops'][lp]['missing']})"
        for wl, t in table.items()
        for lp in shown
        if t["loops"][lp].get("failed")
    ]
    if failures:
        out += ["", *failures]
    return out


def _vs_asyncio(s) -> str:
    """A loop's rate over asyncio's, or a dash when asyncio was not run."""
    vs = s.get("vs_asyncio")
    return f"{vs:.2f}" if vs is not None else "–"


def markdown(loops, table, meta, other=None) -> str:
    shown = _shown(loops, table)
    out = summary_table(loops, table, meta, meta["metric"])
    if other is not None:
        out.append("")
        out += summary_table(loops, other, meta, "cpu" if meta["metric"] == "wall" else "wall")
    out.append("")
    out.append(
        "Per loop: median wall and CPU time of the timed region, spread "
        "(max-min)/median of the rate over the repeats, "
        "peak RSS of the child (VmHWM, MiB) and its growth over the RSS measured "
        "after the loop was created."
    )
    out.append("")
    out.append(
        "| workload | loop | rate | ×asyncio | wall s | CPU s | spread | peak RSS MiB "
        "| RSS growth MiB |"
    )
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for wl, t in table.items():
        for lp in shown:
            s = t["loops"][lp]
            if "median_ops_per_s" not in s:
                out.append(f"| {wl} | {lp} | – | – | – | – | – | – | {s['missing']} |")
                continue
            fail = f" ({s['n_failed']} failed)" if s["n_failed"] else ""
            out.append(
                f"| {wl} | {lp} | {fmt_rate(s['median_ops_per_s'])}{fail} | "
                f"{_vs_asyncio(s)} | {s['median_seconds']:.3f} | "
                f"{s['median_cpu_seconds']:.3f} | "
                f"{s['spread_pct']:.0f}% | {s['peak_rss_mib']:.1f} | {s['rss_growth_mib']:.1f} |"
            )
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    col = 2 if args.quick else 1
    every = {**WORKLOADS, **BURSTS}
    sizes = {wl: max(1, int(every[wl][col] * args.scale)) for wl in args.workloads}
    samples: dict = {}
    skipped: dict = {}
    unsupported: set = set()  # (loop, workload): the loop lacks the API; not tried again
    infos: dict = {}
    t_start = time.time()
    load_start = _loadavg()
    log = sys.stderr
    print(
        f"# {len(args.loops)} loops x {len(args.workloads)} workloads x {args.repeat} "
        f"repeats, one process each{' (quick)' if args.quick else ''}",
        file=log,
    )
    for rep in range(args.repeat):
        for wl in args.workloads:
            n = sizes[wl]
            warm = 0 if args.no_warmup else max(1, n // 10)
            for lp in args.loops:  # interleaved: A B C A B C
                if lp in skipped or (lp, wl) in unsupported:
                    continue
                r = run_child(args, lp, wl, n, warm)
                samples.setdefault((lp, wl), []).append(r)
                if "skip" in r:
                    skipped[lp] = r["skip"]
                    print(f"# skipping {lp}: {r['skip']}", file=log)
                    continue
                if "unsupported" in r:
                    unsupported.add((lp, wl))
                    print(f"# {lp} {wl}: n/a ({r['unsupported']})", file=log)
                    continue
                if "error" in r:
                    print(f"# {lp} {wl} rep {rep}: ERROR {r['error']}", file=log)
                    continue
                infos.setdefault(lp, r.get("info", {}) | {"python": r.get("python")})
                print(
                    f"  rep {rep + 1}/{args.repeat} {wl:22s} {lp:12s} "
                    f"{fmt_rate(r['ops_per_s']):>7s} ops/s  {r['seconds']:.3f} s  "
                    f"peak {r['peak_rss_kib'] / 1024:.1f} MiB",
                    file=log,
                )
    table = summarize(args.loops, args.workloads, samples, args.metric)
    other = summarize(
        args.loops, args.workloads, samples, "cpu" if args.metric == "wall" else "wall"
    )
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "repeat": args.repeat,
        "metric": args.metric,
        "quick": args.quick,
        "scale": args.scale,
        "sizes": sizes,
        "python": args.python,
        "platform": platform.platform(),
        "machine": describe(),
        "cpu_count": os.cpu_count(),
        "git_commit": commit,
        "loops": args.loops,
        "loop_info": infos,
        "skipped": skipped,
        "wall_seconds": round(time.time() - t_start, 1),
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
    }
    out_path = (
        Path(args.out)
        if args.out
        else HERE
        / "results"
        / (meta["date_utc"].replace(":", "") + ("-quick" if args.quick else "") + ".json")
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    raw = {f"{lp}/{wl}": v for (lp, wl), v in samples.items()}
    out_path.write_text(
        json.dumps(
            {
                "meta": meta,
                "table": table,
                "table_" + ("cpu" if args.metric == "wall" else "wall"): other,
                "raw": raw,
            },
            indent=1,
        )
    )
    md = markdown(args.loops, table, meta, other)
    notes = []
    for lp, info in infos.items():
        bits = [
            f"{k}={v}"
            for k, v in info.items()
            if k in ("version", "backend", "backend_reason", "installed_from", "python") and v
        ]
        notes.append(f"- {lp}: " + ", ".join(bits))
    for lp, why in skipped.items():
        notes.append(f"- {lp}: skipped ({why})")
    print(md)
    print()
    print("Loops:\n" + "\n".join(notes))
    loads = [x[0] for x in (meta["loadavg_start"], meta["loadavg_end"]) if x]
    busy = (
        " (load above the CPU count: other processes competed, expect noise)"
        if any(x > (os.cpu_count() or 1) for x in loads)
        else ""
    )
    print(
        f"\n{describe()}, "
        f"repo HEAD {commit or '?'}, {meta['wall_seconds']} s wall, load average "
        f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at end{busy}. "
        f"JSON: {out_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
