"""System calls per operation of the core and echo workloads, counted by strace.

``bench/instructions.py`` counts user-space instructions only: a system call is one
instruction there, whatever the kernel then spends. A change that adds a call per
operation (a ``getpid()`` behind a convenience default, an ``io_uring_enter`` too many)
can look free in that count and cost a fifth of the time. This script shows such calls:

    .venv-bench/bin/python bench/syscalls.py --loops rsloop-base,rsloop \\
        --workloads future_pingpong,stream_echo

Each (loop, workload) runs twice under ``strace -f -c`` in a fresh process, as
``bench/run.py`` runs it (``bench/_child.py``, same warm-up), with N and 2N operations;
the difference of the call counts divided by the difference of the operations is the
number of calls one operation makes, start-up and warm-up cancelled out. Calls made
less than once per hundred operations are left out. strace slows every call down a lot:
use the timed benchmark for what the calls cost.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import instructions  # noqa: E402
from instructions import counts_at_n_and_2n, parse_counter_args  # noqa: E402
from run import child_command  # noqa: E402

# instructions.py's core workloads, plus the echoes: system calls are where they differ.
DEFAULT_WORKLOADS = [*instructions.DEFAULT_WORKLOADS, "socket_echo", "stream_echo", "sock_echo"]
SHOWN = 0.01  # calls per operation below this are left out


def parse_args(argv=None):
    return parse_counter_args(argv, __doc__, DEFAULT_WORKLOADS, 10_000, 300.0)


def parse_summary(text: str) -> dict[str, int]:
    """strace -c's table: syscall name -> calls (the total row left out)."""
    calls = {}
    for line in text.splitlines():
        cols = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(cols) < 5 or cols[-1] == "total" or not cols[3].isdigit():
            continue
        try:
            float(cols[0])
        except ValueError:
            continue
        calls[cols[-1]] = int(cols[3])
    return calls


def count(args, loop: str, workload: str, n: int, warm: int) -> tuple[dict[str, int], int]:
    """(calls per syscall name of the whole child, operations it reported) for one run."""
    cmd, env = child_command(args, loop, workload, n, warm)
    if cmd[0] is None:
        raise RuntimeError(f"no interpreter for {loop} (see --help)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary"
        proc = subprocess.run(
            ["strace", "-f", "-c", "-o", str(out), *cmd],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        summary = out.read_text() if out.exists() else ""
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        data = json.loads(last)
    except ValueError:
        data = {}
    if proc.returncode != 0 or "ops" not in data or not summary:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"{loop} {workload}: exit {proc.returncode}: {tail}")
    return parse_summary(summary), int(data["ops"])


def main(argv=None) -> int:
    args = parse_args(argv)
    if shutil.which("strace") is None:
        print("strace not found (apt-get install strace)", file=sys.stderr)
        return 2
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for wl, lp, (c1, o1), (c2, o2) in counts_at_n_and_2n(args, count):
        if o2 == o1:
            continue
        per_op = {name: (c2.get(name, 0) - c1.get(name, 0)) / (o2 - o1) for name in c1.keys() | c2}
        rows[(wl, lp)] = {k: v for k, v in per_op.items() if v >= SHOWN}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(rows[(wl, lp)].items()))
        print(f"  {wl:22s} {lp:16s} {shown or '(none)'}", file=sys.stderr)
    print(f"System calls per operation (strace -c, N={args.n} vs 2N; under {SHOWN} left out).\n")
    print("| workload | " + " | ".join(args.loops) + " |")
    print("|---|" + "---|" * len(args.loops))
    for wl in args.workloads:
        cells = []
        for lp in args.loops:
            r = rows.get((wl, lp))
            if r is None:
                cells.append("n/a")
                continue
            total = sum(r.values())
            parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.items()))
            cells.append(f"**{total:.2f}**" + (f" ({parts})" if parts else ""))
        print(f"| {wl} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
