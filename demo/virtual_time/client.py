"""Two pieces of code whose tests would wait for real seconds: a client that retries with
exponential backoff, and a token-bucket rate limiter. Both read time only through the
event loop (``asyncio.sleep``, ``asyncio.wait_for``, ``loop.time()``), so under rsloop's
virtual time (test_client.py) their tests take milliseconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def fetch_with_retry(
    fetch: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    timeout: float = 2.0,
    base_delay: float = 0.5,
    max_delay: float = 8.0,
) -> T:
    """``await fetch()``, each try limited to ``timeout`` seconds; after a failure
    (ConnectionError or a timeout) wait ``base_delay * 2**n`` (at most ``max_delay``) and
    try again, up to ``attempts`` tries. The last failure is raised."""
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return await asyncio.wait_for(fetch(), timeout)
        except (ConnectionError, asyncio.TimeoutError):
            if attempt == attempts:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)
    raise AssertionError("unreachable")


class RateLimiter:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int = 1) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._updated: float | None = None
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # first come, first served
            loop = asyncio.get_running_loop()
            while True:
                now = loop.time()
                if self._updated is not None:
                    self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
                self._updated = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.rate)
