"""rsloop basics: callbacks, timers, tasks, an fd watcher and the loop's counters.

python demo/basics.py            # RSLOOP_BACKEND=uring|poll|asyncio to choose
"""

from __future__ import annotations

import asyncio
import socket

import rsloop


async def main() -> None:
    loop = asyncio.get_running_loop()
    print("backend:", rsloop.backend())

    order: list[str] = []
    loop.call_soon(order.append, "soon")
    loop.call_later(0.01, order.append, "later")
    await asyncio.sleep(0.02)
    print("callbacks ran:", order)

    async def work(i: int) -> int:
        await asyncio.sleep(0.001 * i)
        return i * i

    print("gathered:", await asyncio.gather(*(work(i) for i in range(5))))

    a, b = socket.socketpair()
    got = loop.create_future()
    loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(100)))
    b.send(b"hello from a socketpair")
    print("fd watcher read:", await got)
    loop.remove_reader(a)
    a.close()
    b.close()

    stats = getattr(loop, "stats", lambda: {})()
    print(
        "stats:", {k: stats[k] for k in ("iterations", "callbacks", "timers_fired") if k in stats}
    )


if __name__ == "__main__":
    rsloop.run(main())
