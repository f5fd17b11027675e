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

from _proc import open_fds, rss_mib  # stress/ is the script's own directory

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
        import gc

        # One line per request: "state" answers (once every connection the clients
        # closed is gone) with the open fds and RSS, for the growth checks between
        # waves; end of input ends the run.
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            # The clients have closed every connection; let their EOFs arrive (a
            # transport still open at close warns, as with asyncio).
            deadline = loop.time() + 30
            while state["open"] and loop.time() < deadline:
                await asyncio.sleep(0.01)
            if not line or line.strip() == "quit":
                break
            gc.collect()
            print(json.dumps({**state, "fds": open_fds(), "rss_mib": round(rss_mib(), 2)}),
                  flush=True)  # fmt: skip
        server.close()
        await server.wait_closed()
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
    p.add_argument("--waves", type=int, default=1, help="times the whole load is repeated")
    p.add_argument("--max-size", type=int, default=16384)
    p.add_argument("--connect-concurrency", type=int, default=256)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument(
        "--rss-growth-mib",
        type=float,
        default=4.0,
        help="most the server's RSS may grow from the end of the first wave to the end "
        "of the last (allocator noise, not a leak per connection)",
    )
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

    def server_state() -> dict:
        server.stdin.write("state\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    results = []
    states = []
    try:
        hello = json.loads(server.stdout.readline())
        states.append(server_state())
        for wave in range(args.waves):
            wave_args = argparse.Namespace(**{**vars(args), "seed": args.seed + wave})
            coro = client_main(wave_args, hello["port"])
            results.append(asyncio.run(asyncio.wait_for(coro, args.timeout)))
            states.append(server_state())
    finally:
        server.stdin.close()
        tail = server.stdout.read()
        server.stdout.close()
        server.wait(timeout=60)
    lines = tail.splitlines()
    server_report = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    failures = [f for r in results for f in r["failures"]]
    result = {
        "waves": len(results),
        "connections_opened": [r["connections_opened"] for r in results],
        "open_seconds": [r["open_seconds"] for r in results],
        "exchange_seconds": [r["exchange_seconds"] for r in results],
        "messages_checked": sum(r["messages_checked"] for r in results),
        "bytes_checked": sum(r["bytes_checked"] for r in results),
        "failures": failures[:20],
        "failure_count": sum(r["failure_count"] for r in results),
        # The server's open fds and RSS before the first wave and after each one (every
        # connection closed, collector run).
        "server_fds": [s["fds"] for s in states],
        "server_rss_mib": [s["rss_mib"] for s in states],
    }
    fds, rss = result["server_fds"], result["server_rss_mib"]
    result["server_rss_growth_mib"] = round(rss[-1] - rss[1], 2) if len(rss) > 2 else None
    report = {"backend": hello["backend"], **result, "server": server_report}
    print(json.dumps(report, indent=1))
    checks = {
        "every echo checked": result["failure_count"] == 0
        and result["messages_checked"] == args.connections * args.rounds * args.waves,
        "every connection opened, all held at once": all(
            n == args.connections for n in result["connections_opened"]
        )
        and server_report["max_open"] == args.connections,
        "no connection lost with an error": server_report["errors"] == 0,
        "no warning, unraisable exception or exception-handler call": (
            server_report["warnings"] == server_report["unraisable"] == 0
            and server_report["exception_handler_calls"] == 0
        ),
        "server fds back to where they started after each wave": all(f <= fds[0] for f in fds),
        f"server RSS growth from wave 1 to wave {args.waves} <= {args.rss_growth_mib} MiB": (
            result["server_rss_growth_mib"] is None
            or result["server_rss_growth_mib"] <= args.rss_growth_mib
        ),
        "server exited 0": server.returncode == 0,
    }
    for name, good in checks.items():
        print(f"{'ok  ' if good else 'FAIL'} {name}")
    ok = all(checks.values())
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
