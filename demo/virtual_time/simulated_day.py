"""How much real time a simulated day takes under virtual time: ``python
demo/virtual_time/simulated_day.py [runs]`` sleeps 24 x one hour (and a day of
1-second ticks, 86,400 timers) on a fresh loop per run and prints the wall time's
min / median / max over the runs. ``RSLOOP_BACKEND`` picks the backend."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import rsloop
from rsloop.testing import VirtualClock


async def hours() -> None:
    for _ in range(24):
        await asyncio.sleep(3600)


async def ticks() -> None:
    for _ in range(86_400):
        await asyncio.sleep(1)


def measure(main, runs: int) -> tuple[list[float], VirtualClock]:
    walls = []
    for _ in range(runs):
        clock = VirtualClock()
        start = clock.now
        t0 = time.perf_counter()
        rsloop.run(main(), clock=clock)
        walls.append(time.perf_counter() - t0)
        assert abs(clock.now - start - 86_400) < 1e-3, clock.now - start
    return walls, clock


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"backend: {rsloop.backend().name}")
    for name, fn, n in (("24 sleeps of 1 h", hours, runs), ("86,400 sleeps of 1 s", ticks, 3)):
        walls, clock = measure(fn, n)
        ms = sorted(w * 1000 for w in walls)
        print(
            f"{name}: {clock.jumps} jumps; wall ms over {n} runs: min {ms[0]:.2f}, "
            f"median {statistics.median(ms):.2f}, max {ms[-1]:.2f}"
        )


if __name__ == "__main__":
    main()
