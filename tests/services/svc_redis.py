# ruff: noqa: F401, F811  (fixtures imported from servers.py, then taken as parameters)
"""redis-py's asyncio client against a real redis-server, on each loop (see servers.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from servers import on, redis_server  # the fixtures (tests/services/servers.py)

aioredis = pytest.importorskip("redis.asyncio")
redis_exceptions = pytest.importorskip("redis.exceptions")

N = 1000


def test_redis_pool_1000_concurrent(on, redis_server):
    async def scenario():
        pool = aioredis.BlockingConnectionPool.from_url(redis_server.url, max_connections=20)
        client = aioredis.Redis(connection_pool=pool)
        try:
            key = f"counter-{on.name}"
            await client.delete(key)
            got = await asyncio.gather(*(client.incr(key) for _ in range(N)))
            values = await asyncio.gather(*(client.set(f"k{i}", i) for i in range(N)))
            back = await client.mget([f"k{i}" for i in range(N)])
            return sorted(got), all(values), [int(v) for v in back]
        finally:
            await client.aclose()
            await pool.aclose()

    got, stored, back = on.same_as_asyncio(scenario)
    assert got == list(range(1, N + 1)) and stored and back == list(range(N))


def test_redis_transactions(on, redis_server):
    async def scenario():
        client = aioredis.from_url(redis_server.url)
        try:
            await client.delete("tx", "watched")
            async with client.pipeline(transaction=True) as pipe:
                committed = await pipe.set("tx", 1).incr("tx").incrby("tx", 5).get("tx").execute()
            # optimistic locking: a change between WATCH and EXEC aborts the transaction
            other = aioredis.from_url(redis_server.url)
            try:
                async with client.pipeline(transaction=True) as pipe:
                    await pipe.watch("watched")
                    pipe.multi()
                    pipe.set("watched", "mine")
                    await other.set("watched", "theirs")
                    try:
                        await pipe.execute()
                        aborted = None
                    except redis_exceptions.WatchError as exc:
                        aborted = type(exc).__name__
            finally:
                await other.aclose()
            return committed, aborted, await client.get("watched")
        finally:
            await client.aclose()

    assert on.same_as_asyncio(scenario) == ([True, 2, 7, b"7"], "WatchError", b"theirs")


def test_redis_cancel_mid_command(on, redis_server):
    async def scenario():
        client = aioredis.from_url(redis_server.url)
        try:
            await client.delete("q")
            t0 = time.monotonic()
            task = asyncio.ensure_future(client.blpop(["q"], timeout=30))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the client is usable afterwards and no reply of the cancelled BLPOP leaks in
            await client.rpush("q", "x")
            return await client.lpop("q"), await client.ping(), time.monotonic() - t0 < 10
        finally:
            await client.aclose()

    assert on.same_as_asyncio(scenario) == (b"x", True, True)


def test_redis_timeouts(on, redis_server):
    async def scenario():
        client = aioredis.from_url(redis_server.url, socket_timeout=0.3)
        try:
            await client.delete("empty")
            try:
                await client.blpop(["empty"], timeout=5)  # longer than socket_timeout
                first = None
            except redis_exceptions.TimeoutError as exc:
                first = type(exc).__name__
            plain = aioredis.from_url(redis_server.url)
            try:
                server_side = await plain.blpop(["empty"], timeout=0.2)  # the server's timeout
                try:
                    await asyncio.wait_for(plain.blpop(["empty"], timeout=5), 0.3)
                except Exception as exc:
                    third = type(exc).__name__
                return first, server_side, third, await plain.ping()
            finally:
                await plain.aclose()
        finally:
            await client.aclose()

    assert on.same_as_asyncio(scenario) == ("TimeoutError", None, "TimeoutError", True)


def test_redis_pubsub(on, redis_server):
    async def scenario():
        client = aioredis.from_url(redis_server.url)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe("news")
            await pubsub.psubscribe("ch.*")
            confirmations = [await pubsub.get_message(timeout=5) for _ in range(2)]
            for i in range(100):
                await client.publish("news" if i % 2 else "ch.x", str(i))
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                if msg is not None:
                    got.append((msg["type"], msg["channel"], msg["data"]))
            return [c["type"] for c in confirmations], got
        finally:
            await pubsub.aclose()
            await client.aclose()

    kinds, got = on.same_as_asyncio(scenario)
    assert kinds == ["subscribe", "psubscribe"]
    assert got == [
        ("message", b"news", str(i).encode()) if i % 2 else ("pmessage", b"ch.x", str(i).encode())
        for i in range(100)
    ]


def test_redis_server_restart_mid_connection(on, redis_server):
    async def scenario():
        loop = asyncio.get_running_loop()
        client = aioredis.from_url(redis_server.url, retry_on_error=[])
        try:
            assert await client.ping()
            await loop.run_in_executor(None, redis_server.stop)
            try:
                await client.ping()
                broken = None
            except redis_exceptions.ConnectionError as exc:
                broken = type(exc).__name__
            await loop.run_in_executor(None, redis_server.start)
            # the same client reconnects by itself once the server is back
            return broken, await client.ping(), await client.set("after", 1)
        finally:
            await client.aclose()

    assert on.same_as_asyncio(scenario) == ("ConnectionError", True, True)
