"""Do the loops in the benchmark do the same work? Checks the asyncio semantics the
workloads rely on, per loop, each in its own process (like the benchmark):

- ``call_soon`` / ``call_later`` / ``call_soon_threadsafe`` run the callback in a copy of
  the caller's contextvars context, and a callback's ``ContextVar.set`` stays in its own
  copy (stdlib asyncio's behaviour);

    python bench/semantics.py [--pypi-rsloop-python PATH]

A loop that skips the copy does less work per callback than asyncio asks for; its
numbers in the benchmark are not for the same job.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import contextvars, importlib, json, sys, threading
name = sys.argv[1]
mod = importlib.import_module("rsloop" if name == "pypi-rsloop" else name)
new_loop = mod.new_event_loop
var = contextvars.ContextVar("v", default="unset")
results = {}

def check(method):
    loop = new_loop()
    seen = []
    var.set("caller")
    sched = {
        "call_soon": lambda cb: loop.call_soon(cb),
        "call_later": lambda cb: loop.call_later(0, cb),
        "call_soon_threadsafe": lambda cb: loop.call_soon_threadsafe(cb),
    }[method]
    sched(lambda: seen.append(var.get()))
    sched(lambda: var.set("changed-by-callback"))
    sched(lambda: seen.append(var.get()))
    loop.call_later(0.01, loop.stop)
    loop.run_forever()
    loop.close()
    return seen == ["caller", "caller"], seen

for method in ("call_soon", "call_later", "call_soon_threadsafe"):
    ok, seen = check(method)
    results[method] = {"ok": ok, "seen": seen}
print(json.dumps(results))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", default="asyncio,uvloop,rloop,rsloop,pypi-rsloop")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--pypi-rsloop-python", default=None)
    a = p.parse_args()
    if a.pypi_rsloop_python is None:
        guess = HERE.parent / ".venv-pypi-rsloop" / "bin" / "python"
        a.pypi_rsloop_python = str(guess) if guess.exists() else None
    print("| loop | call_soon | call_later | call_soon_threadsafe |")
    print("|---|---|---|---|")
    for name in a.loops.split(","):
        python = a.pypi_rsloop_python if name == "pypi-rsloop" else a.python
        if python is None:
            print(f"| {name} | not installed | | |")
            continue
        proc = subprocess.run(
            [python, "-c", CHILD, name], capture_output=True, text=True, cwd="/", timeout=60
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"| {name} | not available: {last} | | |")
            continue
        res = json.loads(proc.stdout)
        cells = [
            "copies the context" if r["ok"] else f"**differs**: saw {r['seen']}"
            for r in res.values()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
