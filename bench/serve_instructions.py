#!/usr/bin/env python3
"""Instructions per HTTP request of the FastAPI demo (demo/app.py under uvicorn), per loop,
counted by valgrind (callgrind) in the server process.

    .venv-bench/bin/python bench/serve_instructions.py                  # asyncio, uvloop, rsloop
    .venv-bench/bin/python bench/serve_instructions.py --loops uvloop,rsloop --requests 3200

``demo/serve_bench.py`` measures requests/s with wrk; on a shared machine its runs spread
by 30 % and more. This counts what the server executes instead: uvicorn starts under
callgrind, a keep-alive client (plain asyncio, outside valgrind) warms it up, the counters
are zeroed (``callgrind_control -z``), ``--requests`` GET requests are served over
``--connections`` connections and the counters are dumped. Instructions, not time: the
kernel's share (the sends and receives) and cache effects are not in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "demo"
sys.path.insert(0, str(DEMO))

# The timed demo's loops, port picker, server command and start-up wait.
from serve_bench import LOOPS, free_port, spawn_server, wait_listening  # noqa: E402


async def _one_connection(port: int, path: str, n: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    done = 0
    for _ in range(n):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected response: {head[:80]!r}")
        length = re.search(rb"content-length: *(\d+)", head, re.I)
        if length is None:
            raise RuntimeError(f"no content-length in {head!r}")
        await reader.readexactly(int(length.group(1)))
        done += 1
    writer.close()
    await writer.wait_closed()
    return done


def load(port: int, path: str, requests: int, connections: int) -> int:
    """Sends ``requests`` requests (split over ``connections``) and checks every answer."""

    async def main() -> int:
        per = [requests // connections] * connections
        per[0] += requests - sum(per)
        counts = await asyncio.gather(*(_one_connection(port, path, n) for n in per if n))
        return sum(counts)

    return asyncio.run(main())


def measure(loop: str, args) -> float:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
        proc = spawn_server(loop, args.python, port, wrapper)
        try:
            wait_listening(loop, proc, port, args.timeout)
            load(port, args.path, args.warmup, args.connections)
            subprocess.run(
                ["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True
            )
            served = load(port, args.path, args.requests, args.connections)
            subprocess.run(
                ["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True
            )
        finally:
            proc.send_signal(2)
            try:
                proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        dumps = sorted(Path(tmp).glob("callgrind.out.*"))
        if not dumps:
            raise RuntimeError("callgrind wrote no dump")
        text = dumps[0].read_text(errors="replace")
    m = re.search(r"^summary:\s+(\d+)", text, re.M) or re.search(r"^totals:\s+(\d+)", text, re.M)
    if m is None:
        raise RuntimeError("no totals in the callgrind dump")
    if served != args.requests:
        raise RuntimeError(f"served {served} of {args.requests}")
    return int(m.group(1)) / served


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", default="asyncio,uvloop,rsloop")
    p.add_argument("--path", default="/json", help="route to request (default /json)")
    p.add_argument("--requests", type=int, default=3200)
    p.add_argument("--warmup", type=int, default=640)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--python", default=sys.executable, help="interpreter for the servers")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to start or stop")
    args = p.parse_args(argv)
    if os.sep in args.python:
        args.python = os.path.abspath(args.python)
    loops = [x for x in args.loops.split(",") if x]
    for x in loops:
        if x not in LOOPS:
            p.error(f"unknown loop {x!r}; choose from {', '.join(LOOPS)}")
    if args.requests < args.connections or args.connections < 1:
        p.error("--requests must be at least --connections, which must be positive")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed (apt-get install valgrind)")
    results = {}
    for loop in loops:
        results[loop] = measure(loop, args)
        print(f"  {loop:<8} {results[loop]:,.0f} instructions/request", file=sys.stderr)
    base = results.get("uvloop")
    print(f"GET {args.path}, {args.requests} requests over {args.connections} connections")
    print()
    print("| loop | instructions/request | ×uvloop |")
    print("|---|---:|---:|")
    for loop, v in results.items():
        ratio = f"{v / base:.3f}" if base else "–"
        print(f"| {loop} | {v:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
