"""10,000 concurrent TCP connections to one rsloop echo server, every byte checked.

    python stress/echo_load.py --backend uring --connections 10000

The server runs on rsloop (``--backend``) in a child process; the clients run in this
process on stdlib asyncio (so each side holds one fd per connection, under the usual
20,000-fd hard limit). The client opens every connection first (at most ``--connect-
concurrency`` connects in flight), and only when all of them are open does each send a
random payload (seeded; 1 byte to ``--max-size``) with its SHA-256, ``--rounds`` times,
checking that the echo comes back whole, in order. The server reports how many
connections it held at once and its peak RSS. Exit status 0 only if every byte of every
connection came back.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ----- server (child process, on rsloop) -----


def serve(backend: str, backlog: int) -> None:
    os.environ["RSLOOP_BACKEND"] = backend
    sys.path.insert(0, str(ROOT))
    import rsloop

    raise_fd_limit(20000)
    state = {
        "open": 0,
        "max_open": 0,
        "total": 0,
        "bytes": 0,
        "errors": 0,
        # What must stay zero: warnings (ResourceWarning...), unraisable exceptions
        # (__del__), and calls of the loop's exception handler ("Task was destroyed but
        # it is pending!", errors in callbacks).
        "warnings": 0,
        "unraisable": 0,
        "exception_handler_calls": 0,
    }
    import warnings

    def count_warning(message, category, filename, lineno, file=None, line=None):
        state["warnings"] += 1
        print(f"server warning: {category.__name__}: {message}", file=sys.stderr)

    warnings.simplefilter("always")
    warnings.showwarning = count_warning

    def count_unraisable(unraisable):
        state["unraisable"] += 1
        print(
            f"server unraisable: {unraisable.exc_value!r} in {unraisable.object!r}", file=sys.stderr
        )

    sys.unraisablehook = count_unraisable

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            state["open"] += 1
            state["total"] += 1
            state["max_open"] = max(state["max_open"], state["open"])

        def data_received(self, data):
            state["bytes"] += len(data)
            self.transport.write(data)

        def connection_lost(self, exc):
            state["open"] -= 1
            if exc is not None:
                state["errors"] += 1

    async def main():
        loop = asyncio.get_running_loop()

        def count_handler_call(loop, context):
            state["exception_handler_calls"] += 1
            loop.default_exception_handler(context)

        loop.set_exception_handler(count_handler_call)
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=backlog)
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"port": port, "backend": rsloop.backend().name}), flush=True)
        # The parent closes our stdin when it is done.
        await loop.run_in_executor(None, sys.stdin.read)
        # The clients have closed every connection; let their EOFs arrive before the
        # loop closes (a transport still open at close warns, as with asyncio).
        deadline = loop.time() + 30
        while state["open"] and loop.time() < deadline:
            await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()
        import gc

        gc.collect()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({**state, "peak_rss_mib": round(peak, 1)}), flush=True)

    rsloop.run(main())
    import gc

    gc.collect()  # anything left unclosed warns now, and is counted
    print(json.dumps({k: state[k] for k in ("warnings", "unraisable")}), flush=True)


# ----- clients (this process, on stdlib asyncio) -----


async def client_main(args, port: int) -> dict:
    rng = random.Random(args.seed)
    opened: list = []
    failures: list[str] = []
    sem = asyncio.Semaphore(args.connect_concurrency)

    async def connect(i: int):
        async with sem:
            for attempt in range(20):
                try:
                    return await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
                except OSError as exc:  # backlog full for a moment: retry
                    if attempt == 19:
                        failures.append(f"connect {i}: {exc!r}")
                        return None
                    await asyncio.sleep(0.05 * (attempt + 1))

    t0 = time.monotonic()
    results = await asyncio.gather(*(connect(i) for i in range(args.connections)))
    opened = [r for r in results if r is not None]
    t_open = time.monotonic() - t0
    sizes = [[rng.randint(1, args.max_size) for _ in range(args.rounds)] for _ in opened]
    seeds = [rng.getrandbits(32) for _ in opened]
    checked = {"bytes": 0, "messages": 0}

    async def exchange(i: int, reader, writer):
        prng = random.Random(seeds[i])
        try:
            for size in sizes[i]:
                data = prng.randbytes(size)
                writer.write(data)
                await writer.drain()
                got = await reader.readexactly(size)
                if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
                    failures.append(f"connection {i}: echo differs ({size} bytes)")
                    return
                checked["bytes"] += size
                checked["messages"] += 1
        except (OSError, asyncio.IncompleteReadError) as exc:
            failures.append(f"connection {i}: {exc!r}")
        finally:
            writer.close()

    async def ping(i: int, reader, writer) -> None:
        try:
            writer.write(b"!")
            await writer.drain()
            if await reader.readexactly(1) != b"!":
                failures.append(f"connection {i}: bad ping echo")
        except (OSError, asyncio.IncompleteReadError) as exc:
            failures.append(f"connection {i}: ping {exc!r}")

    # A one-byte round trip on every connection before any closes: when this returns,
    # the server has accepted all of them and holds them open at once.
    await asyncio.gather(*(ping(i, r, w) for i, (r, w) in enumerate(opened)))
    t1 = time.monotonic()
    await asyncio.gather(*(exchange(i, r, w) for i, (r, w) in enumerate(opened)))
    for _, w in opened:
        try:
            await w.wait_closed()
        except OSError:
            pass
    return {
        "connections_opened": len(opened),
        "open_seconds": round(t_open, 2),
        "exchange_seconds": round(time.monotonic() - t1, 2),
        "messages_checked": checked["messages"],
        "bytes_checked": checked["bytes"],
        "failures": failures[:20],
        "failure_count": len(failures),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="uring", choices=["uring", "poll"])
    p.add_argument("--connections", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-size", type=int, default=16384)
    p.add_argument("--connect-concurrency", type=int, default=256)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.backend, backlog=4096)
        return 0
    limit = raise_fd_limit(args.connections + 100)
    if limit < args.connections + 100:
        sys.exit(f"fd limit {limit} is too low for {args.connections} connections")
    # The server runs with this interpreter's -X dev / -W options (PYTHONASYNCIODEBUG is
    # inherited through the environment).
    flags = ["-X", "dev"] if sys.flags.dev_mode else []
    server = subprocess.Popen(
        [sys.executable, *flags, __file__, "--serve", "--backend", args.backend],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        hello = json.loads(server.stdout.readline())
        result = asyncio.run(asyncio.wait_for(client_main(args, hello["port"]), args.timeout))
    finally:
        server.stdin.close()
        tail = server.stdout.read()
        server.stdout.close()
        server.wait(timeout=60)
    lines = tail.splitlines()
    server_report = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    report = {"backend": hello["backend"], **result, "server": server_report}
    print(json.dumps(report, indent=1))
    ok = (
        result["failure_count"] == 0
        and result["connections_opened"] == args.connections
        and result["messages_checked"] == args.connections * args.rounds
        and server_report["max_open"] == args.connections
        and server_report["errors"] == 0
        and server_report["warnings"] == 0
        and server_report["unraisable"] == 0
        and server_report["exception_handler_calls"] == 0
        and server.returncode == 0
    )
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
