"""Instructions per operation of the core workloads, counted by valgrind (callgrind).

Wall-clock rates on a shared or virtualised machine can spread by 50 % and more; an
instruction count does not move with what else the machine is doing. That makes it the
tool for the "one change at a time" rule: build the change and its base, then

    .venv-bench/bin/python bench/instructions.py --loops rsloop-base,rsloop \\
        --workloads call_soon_batch,call_soon_chain

Each (loop, workload) runs twice under ``valgrind --tool=callgrind``, in a fresh process as
``bench/run.py`` runs it (``bench/_child.py``, same warm-up), once with N operations and
once with 2N; the difference of the two totals divided by the difference of the
operations is the cost of one operation, start-up and warm-up cancelled out. It counts
instructions, not time: cache misses, system calls' kernel time and contention are not
in it, so a change that trades instructions for memory traffic needs the timed benchmark
too. Workloads that wait for timers or another thread (``call_later_random``,
``call_soon_threadsafe``) count what ran, which depends on how often the loop woke up.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import (  # noqa: E402
    add_venv_options,
    child_command,
    resolve_venv_options,
    split_loops_and_workloads,
)

DEFAULT_WORKLOADS = [
    "call_soon_chain",
    "call_soon_batch",
    "timer_cancel",
    "gather_tasks",
    "future_pingpong",
]
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def parse_counter_args(argv, doc: str, workloads: list, n: int, timeout: float):
    """The options of a counting script (this one, ``bench/syscalls.py``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--loops", default="rsloop-base,rsloop", help="comma-separated loops")
    p.add_argument("--workloads", default=",".join(workloads))
    p.add_argument(
        "--n",
        type=int,
        default=n,
        help="operations of the smaller run (the larger one does twice as many)",
    )
    p.add_argument(
        "--python", default=sys.executable, help="interpreter for the children (default: this one)"
    )
    p.add_argument("--timeout", type=float, default=timeout, help="seconds per child")
    add_venv_options(p)
    a = p.parse_args(argv)
    split_loops_and_workloads(p, a)
    if a.n < 1:
        p.error("--n must be positive")
    resolve_venv_options(a)
    return a


def parse_args(argv=None):
    return parse_counter_args(argv, __doc__, DEFAULT_WORKLOADS, 20_000, 600.0)


def count(args, loop: str, workload: str, n: int, warm: int) -> tuple[int, int]:
    """(instructions of the whole child, operations it reported) for one run."""
    cmd, env = child_command(args, loop, workload, n, warm)
    if cmd[0] is None:
        raise RuntimeError(f"no interpreter for {loop} (see --help)")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *cmd],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
    found = COLLECTED.search(proc.stderr)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        data = json.loads(last)
    except ValueError:
        data = {}
    if proc.returncode != 0 or not found or "ops" not in data:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"{loop} {workload}: exit {proc.returncode}: {tail}")
    return int(found.group(1)), int(data["ops"])


def counts_at_n_and_2n(args, count):
    """``(workload, loop, at_n, at_2n)`` for every pair of ``args.workloads`` and
    ``args.loops`` whose two children ran, ``at_*`` being what ``count(args, loop,
    workload, n, warm)`` returned; a child that failed is reported on stderr and the pair
    skipped. The difference of the two runs is one N's worth, start-up cancelled out."""
    for wl in args.workloads:
        warm = max(1, args.n // 10)
        for lp in args.loops:
            try:
                at_n = count(args, lp, wl, args.n, warm)
                at_2n = count(args, lp, wl, 2 * args.n, warm)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"# {exc}", file=sys.stderr)
                continue
            yield wl, lp, at_n, at_2n


def main(argv=None) -> int:
    args = parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    rows = {}
    for wl, lp, (i1, o1), (i2, o2) in counts_at_n_and_2n(args, count):
        per_op = (i2 - i1) / (o2 - o1) if o2 != o1 else float("nan")
        rows[(wl, lp)] = per_op
        print(f"  {wl:22s} {lp:16s} {per_op:10.0f} instructions/op", file=sys.stderr)
    print(f"Instructions per operation (callgrind, N={args.n} vs 2N); lower is better.\n")
    first = args.loops[0]
    header = " | ".join(args.loops)
    print(f"| workload | {header} | last / first |")
    print("|---|" + "---:|" * (len(args.loops) + 1))
    for wl in args.workloads:
        cells = [rows.get((wl, lp)) for lp in args.loops]
        shown = " | ".join("n/a" if c is None else f"{c:,.0f}" for c in cells)
        a, b = rows.get((wl, first)), rows.get((wl, args.loops[-1]))
        ratio = f"{b / a:.3f}" if a and b else "–"
        print(f"| {wl} | {shown} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
