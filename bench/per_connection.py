#!/usr/bin/env python3
"""What one idle connection costs a server: memory and the collector's work.

    python bench/per_connection.py                        # 1,000 and 5,000 connections
    python bench/per_connection.py --connections 5000 --loops uvloop,rsloop --repeat 5

For each repeat and each connection count, every loop runs once in a fresh process
(interleaved A B C A B C). The child starts a Protocol server on 127.0.0.1, connects one
warm-up client, collects, then opens N non-blocking client sockets to it from the same
process and waits until the server made N transports. Reported per loop, medians with
their spread (min-max): the server process's RSS growth per connection, the growth of
collector-tracked objects per connection, and how many young (generation 0) collections
ran while they connected. The client sockets are in the same process, so both figures
include one client socket per connection for every loop alike. Linux only (RSS from
/proc/self/status).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import describe  # noqa: E402
from run import (  # noqa: E402
    add_venv_options,
    child_command,
    resolve_venv_options,
)

DEFAULT_LOOPS = ["asyncio", "uvloop", "rloop", "pypi-rsloop", "rsloop", "rsloop-poll"]


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(loop_name: str, n: int) -> dict:
    from _child import make_loop

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if 2 * n + 64 > hard:
        raise SystemExit(f"{n} connections need {2 * n + 64} descriptors; the limit is {hard}")
    loop, info = make_loop(loop_name)
    made: list = []

    class Idle(asyncio.Protocol):
        def connection_made(self, transport):
            made.append(transport)

    async def connect(port: int, count: int) -> list[socket.socket]:
        target = len(made) + count
        clients = []
        for i in range(count):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            clients.append(c)
            if i % 128 == 127:
                await asyncio.sleep(0)
        for _ in range(60_000):
            if len(made) >= target:
                return clients
            await asyncio.sleep(0.001)
        raise RuntimeError(f"only {len(made)} of {target} connections were accepted")

    async def main() -> dict:
        server = await loop.create_server(Idle, "127.0.0.1", 0, backlog=4096)
        port = server.sockets[0].getsockname()[1]
        clients = await connect(port, 1)
        gc.collect()
        young0 = gc.get_stats()[0]["collections"]
        objects0 = len(gc.get_objects())
        rss0 = _rss_kib()
        clients += await connect(port, n)
        result = {
            "kib_per_conn": (_rss_kib() - rss0) / n,
            "objects_per_conn": (len(gc.get_objects()) - objects0) / n,
            "young_collections": gc.get_stats()[0]["collections"] - young0,
        }
        for c in clients:
            c.close()
        for t in made:
            t.close()
        server.close()
        await asyncio.sleep(0.05)
        return result

    try:
        result = loop.run_until_complete(main())
    finally:
        loop.close()
    result["info"] = info
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--loops", default=",".join(DEFAULT_LOOPS))
    p.add_argument("--connections", default="1000,5000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--child", nargs=2, metavar=("LOOP", "N"), help=argparse.SUPPRESS)
    add_venv_options(p)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return 0
    resolve_venv_options(a)
    loops = a.loops.split(",")
    counts = [int(x) for x in a.connections.split(",")]
    samples: dict = {}
    for _ in range(a.repeat):
        for n in counts:
            for loop in loops:
                cmd, env = child_command(a, loop, "-", n, 0)
                if cmd[0] is None or not os.path.exists(cmd[0]):
                    samples.setdefault((loop, n), None)
                    continue
                cmd = [cmd[0], str(Path(__file__).resolve()), "--child", loop, str(n)]
                proc = subprocess.run(
                    cmd, env=env, cwd="/", capture_output=True, text=True, timeout=a.timeout
                )
                lines = proc.stdout.strip().splitlines()
                if proc.returncode != 0 or not lines:
                    tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                    print(f"# {loop} at {n}: exit {proc.returncode}: {tail}", file=sys.stderr)
                    continue
                samples.setdefault((loop, n), []).append(json.loads(lines[-1]))
    print(
        "| loop | connections | KiB per connection | tracked objects per connection "
        "| young collections |"
    )
    print("|---|---:|---:|---:|---:|")

    def cell(runs: list, key: str, fmt: str) -> str:
        xs = [r[key] for r in runs]
        med = statistics.median(xs)
        return f"{med:{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"

    for n in counts:
        for loop in loops:
            runs = samples.get((loop, n))
            if not runs:
                print(f"| {loop} | {n:,} | n/a | n/a | n/a |")
                continue
            print(
                f"| {loop} | {n:,} | {cell(runs, 'kib_per_conn', '.2f')} "
                f"| {cell(runs, 'objects_per_conn', '.1f')} "
                f"| {cell(runs, 'young_collections', '.0f')} |"
            )
    print(f"\n{describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
