"""KeyboardInterrupt and SystemExit raised by callbacks while one loop serves 200 echo
connections: each must leave `run_until_complete` as in asyncio, the loop must go on when
run again, and every connection must still get every byte back, checked by SHA-256.

    python stress/interrupts.py --backend uring     # uring, poll, or asyncio (reference)

The server and the clients run on the one loop under test (asyncio streams over its
transports). While they work, plain callbacks raise KeyboardInterrupt and SystemExit at
seeded points of the run (after the Nth echoed message); asyncio lets both escape
`run_forever`, leaving the rest of that iteration's callbacks queued. The script runs the
loop again after each, until the clients are done. Nothing may reach the loop's
exception handler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="uring", choices=["uring", "poll", "asyncio"])
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--rounds", type=int, default=20, help="messages per connection")
    p.add_argument("--interrupts", type=int, default=20, help="exits raised in all")
    args = p.parse_args(argv)
    os.environ["RSLOOP_BACKEND"] = args.backend
    import asyncio

    import rsloop

    loop = rsloop.new_event_loop()
    backend = rsloop.backend(loop).name
    handler_calls: list = []
    loop.set_exception_handler(lambda lp, ctx: handler_calls.append(ctx.get("message")))
    counts = {"bytes_checked": 0, "messages": 0, "mismatches": 0}
    # Message counts at which a callback raises, spread over the run (seeded), so every
    # exit lands while the clients are still at work.
    rng = random.Random(2026)
    expected_messages = args.connections * args.rounds
    at = rng.sample(range(1, expected_messages), args.interrupts)
    triggers = {n: KeyboardInterrupt if i % 2 == 0 else SystemExit for i, n in enumerate(at)}
    raised = {"KeyboardInterrupt": 0, "SystemExit": 0}
    caught = {"KeyboardInterrupt": 0, "SystemExit": 0}

    def boom(exc_type: type[BaseException]) -> None:
        raised[exc_type.__name__] += 1
        raise exc_type()

    async def handle(reader, writer):
        try:
            while header := await reader.readexactly(4):
                size = int.from_bytes(header, "big")
                writer.write(header + await reader.readexactly(size))
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        writer.close()
        await writer.wait_closed()

    async def client(port: int, seed: int) -> None:
        crng = random.Random(seed)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(args.rounds):
            data = crng.randbytes(crng.randint(1, 16384))
            writer.write(len(data).to_bytes(4, "big") + data)
            await writer.drain()
            size = int.from_bytes(await reader.readexactly(4), "big")
            back = await reader.readexactly(size)
            if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
                counts["mismatches"] += 1
            counts["bytes_checked"] += len(back)
            counts["messages"] += 1
            exc_type = triggers.pop(counts["messages"], None)
            if exc_type is not None:
                loop.call_soon(boom, exc_type)
        writer.close()
        await writer.wait_closed()

    async def start():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        clients = [asyncio.ensure_future(client(port, i)) for i in range(args.connections)]
        return server, asyncio.gather(*clients)

    server, clients = loop.run_until_complete(start())

    t0 = time.perf_counter()
    deadline = t0 + 60
    while time.perf_counter() < deadline:
        try:
            loop.run_until_complete(clients)
            break
        except (KeyboardInterrupt, SystemExit) as exc:
            caught[type(exc).__name__] += 1
    finished = clients.done() and clients.exception() is None
    seconds = time.perf_counter() - t0
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.run_until_complete(asyncio.sleep(0.05))
    loop.close()

    report = {
        "backend": backend,
        "connections": args.connections,
        "messages": counts["messages"],
        "bytes_checked": counts["bytes_checked"],
        "mismatches": counts["mismatches"],
        "raised": raised,
        "caught": caught,
        "exception_handler_calls": handler_calls,
        "seconds": round(seconds, 2),
    }
    print(json.dumps(report, indent=1))
    ok = (
        finished
        and counts["messages"] == expected_messages
        and counts["mismatches"] == 0
        and raised == caught
        and sum(raised.values()) == args.interrupts
        and not handler_calls
    )
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
