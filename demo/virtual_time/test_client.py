"""Tests of client.py under virtual time: a backoff schedule of 17.5 s and a rate limit of
two calls a second, checked to the exact virtual second, in milliseconds of real time.

Run: ``pytest demo/virtual_time`` (pytest.ini here turns on ``--rsloop=rsloop``)."""

from __future__ import annotations

import asyncio
import time

import pytest
from client import RateLimiter, fetch_with_retry

pytestmark = [pytest.mark.asyncio, pytest.mark.rsloop(virtual_time=True)]


@pytest.fixture(autouse=True)
def real_time_budget():
    """Each test must take well under a second of real time (it simulates many)."""
    start = time.perf_counter()
    yield
    assert time.perf_counter() - start < 1.0


async def test_retry_backs_off_exponentially(rsloop_clock):
    loop = asyncio.get_running_loop()
    start = loop.time()
    tries = []

    async def flaky():
        tries.append(loop.time() - start)
        if len(tries) < 4:
            raise ConnectionError("refused")
        return "payload"

    assert await fetch_with_retry(flaky) == "payload"
    # Failures at 0, then waits of 0.5, 1 and 2 seconds.
    assert tries == [0.0, 0.5, 1.5, 3.5]
    assert rsloop_clock.jumps == 3


async def test_retry_gives_up_after_timeouts():
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def hangs():
        await asyncio.sleep(3600)

    with pytest.raises(asyncio.TimeoutError):
        await fetch_with_retry(hangs, attempts=5, timeout=2.0)
    # Five tries of 2 s, and waits of 0.5 + 1 + 2 + 4 s between them.
    assert loop.time() - start == pytest.approx(17.5)


async def test_rate_limiter_spaces_calls():
    loop = asyncio.get_running_loop()
    limiter = RateLimiter(rate=2.0, burst=3)
    start = loop.time()
    stamps = []
    for _ in range(7):
        await limiter.acquire()
        stamps.append(loop.time() - start)
    # The burst of 3 goes at once, then one every half second.
    assert stamps == pytest.approx([0, 0, 0, 0.5, 1.0, 1.5, 2.0])


@pytest.mark.rsloop(virtual_time=True, autojump=None)
async def test_rate_limiter_step_by_step(rsloop_clock):
    """With autojump=None the clock moves only when the test says so."""
    limiter = RateLimiter(rate=4.0)
    done = []

    async def worker(n):
        await limiter.acquire()
        done.append(n)

    tasks = [asyncio.create_task(worker(n)) for n in range(5)]
    await rsloop_clock.advance(0)
    assert done == [0]
    await rsloop_clock.advance(0.5)  # two more tokens: one each 0.25 s
    assert done == [0, 1, 2]
    await rsloop_clock.advance(10)
    assert done == [0, 1, 2, 3, 4]
    await asyncio.gather(*tasks)
