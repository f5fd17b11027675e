# ruff: noqa: F401, F811  (fixtures imported from servers.py, then taken as parameters)
"""asyncpg and psycopg (async) against a real PostgreSQL, on each loop (see servers.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from servers import on, postgres  # the fixtures (tests/services/servers.py)

asyncpg = pytest.importorskip("asyncpg")
psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")

N = 1000


# ----- asyncpg -----


def test_asyncpg_pool_1000_concurrent(on, postgres):
    async def scenario():
        async with asyncpg.create_pool(postgres.dsn, min_size=2, max_size=20) as pool:
            got = await asyncio.gather(
                *(pool.fetchval("SELECT $1::int * 2 + pg_backend_pid() * 0", i) for i in range(N))
            )
            return got, pool.get_size() <= 20

    got, bounded = on.same_as_asyncio(scenario)
    assert got == [i * 2 for i in range(N)] and bounded


async def _transactions(conn, division_error) -> str:
    """Commit, rollback on a Python error, and a savepoint rolled back on a server error,
    through either driver's ``conn.transaction()``; the server error's class name."""
    async with conn.transaction():
        await conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(ZeroDivisionError):
        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (2)")
            1 / 0  # noqa: B018
    async with conn.transaction():
        await conn.execute("INSERT INTO t VALUES (3)")
        try:
            async with conn.transaction():  # a savepoint
                await conn.execute("INSERT INTO t VALUES (4)")
                await conn.execute("SELECT 1/0")
        except division_error as exc:
            return type(exc).__name__
    return "no error"


def test_asyncpg_transactions(on, postgres):
    async def scenario():
        conn = await asyncpg.connect(postgres.dsn)
        try:
            await conn.execute("CREATE TEMP TABLE t (v int)")
            err = await _transactions(conn, asyncpg.DivisionByZeroError)
            return [r["v"] for r in await conn.fetch("SELECT v FROM t ORDER BY v")], err
        finally:
            await conn.close()

    assert on.same_as_asyncio(scenario) == ([1, 3], "DivisionByZeroError")


def test_asyncpg_cancel_mid_query(on, postgres):
    async def scenario():
        conn = await asyncpg.connect(postgres.dsn)
        try:
            t0 = time.monotonic()
            task = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the server was told: the connection is usable again at once
            after = await conn.fetchval("SELECT 41 + 1")
            return after, time.monotonic() - t0 < 10
        finally:
            await conn.close()

    assert on.same_as_asyncio(scenario) == (42, True)


def test_asyncpg_timeouts(on, postgres):
    async def scenario():
        conn = await asyncpg.connect(postgres.dsn)
        try:
            try:
                await conn.fetchval("SELECT pg_sleep(30)", timeout=0.3)
            except Exception as exc:  # asyncio.TimeoutError (builtin TimeoutError on 3.11+)
                first = type(exc).__name__
            try:
                await asyncio.wait_for(conn.fetchval("SELECT pg_sleep(30)"), 0.3)
            except Exception as exc:
                second = type(exc).__name__
            return first, second, await conn.fetchval("SELECT 7")
        finally:
            await conn.close()

    assert on.same_as_asyncio(scenario) == ("TimeoutError", "TimeoutError", 7)


def test_asyncpg_listen_notify(on, postgres):
    async def scenario():
        listener = await asyncpg.connect(postgres.dsn)
        sender = await asyncpg.connect(postgres.dsn)
        got: asyncio.Queue = asyncio.Queue()
        try:
            await listener.add_listener(
                "ch", lambda _c, _pid, chan, payload: got.put_nowait((chan, payload))
            )
            for i in range(50):
                await sender.execute("SELECT pg_notify('ch', $1)", str(i))
            return [await asyncio.wait_for(got.get(), 10) for _ in range(50)]
        finally:
            await listener.close()
            await sender.close()

    assert on.same_as_asyncio(scenario) == [("ch", str(i)) for i in range(50)]


def test_asyncpg_server_restart_mid_connection(on, postgres):
    async def scenario():
        loop = asyncio.get_running_loop()
        conn = await asyncpg.connect(postgres.dsn)
        assert await conn.fetchval("SELECT 1") == 1
        await loop.run_in_executor(None, postgres.stop)
        try:
            await conn.fetchval("SELECT 1")
        except Exception as exc:
            broken = type(exc).__name__
        closed = conn.is_closed()
        await conn.close()
        await loop.run_in_executor(None, postgres.start)
        conn = await _connect_retry(postgres.dsn)
        try:
            return broken, closed, await conn.fetchval("SELECT 2")
        finally:
            await conn.close()

    broken, closed, value = on.same_as_asyncio(scenario)
    # the shutdown notice usually closes the connection first: "connection is closed"
    assert broken in ("ConnectionDoesNotExistError", "AdminShutdownError", "InterfaceError")
    assert closed and value == 2


async def _connect_retry(dsn: str):
    for _ in range(100):
        try:
            return await asyncpg.connect(dsn)
        except (OSError, asyncpg.CannotConnectNowError):
            await asyncio.sleep(0.1)
    return await asyncpg.connect(dsn)


# ----- psycopg (async) -----


def test_psycopg_pool_1000_concurrent(on, postgres):
    async def scenario():
        async with psycopg_pool.AsyncConnectionPool(
            postgres.dsn, min_size=2, max_size=20, open=False
        ) as pool:

            async def one(i):
                async with pool.connection() as conn:
                    cur = await conn.execute("SELECT %s::int * 3", (i,))
                    return (await cur.fetchone())[0]

            return await asyncio.gather(*(one(i) for i in range(N)))

    assert on.same_as_asyncio(scenario) == [i * 3 for i in range(N)]


def test_psycopg_transactions(on, postgres):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
            await conn.execute("CREATE TEMP TABLE t (v int)")
            await conn.commit()
            err = await _transactions(conn, psycopg.errors.DivisionByZero)
            cur = await conn.execute("SELECT v FROM t ORDER BY v")
            return [r[0] for r in await cur.fetchall()], err

    assert on.same_as_asyncio(scenario) == ([1, 3], "DivisionByZero")


def test_psycopg_cancel_mid_query(on, postgres):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as conn:
            t0 = time.monotonic()
            task = asyncio.ensure_future(conn.execute("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
            except BaseException as exc:  # CancelledError, or QueryCanceled if it won the race
                outcome = type(exc).__name__
            cur = await conn.execute("SELECT 41 + 1")
            return outcome, (await cur.fetchone())[0], time.monotonic() - t0 < 10

    assert on.same_as_asyncio(scenario) == ("CancelledError", 42, True)


def test_psycopg_timeouts(on, postgres):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as conn:
            try:
                await asyncio.wait_for(conn.execute("SELECT pg_sleep(30)"), 0.3)
            except Exception as exc:
                first = type(exc).__name__
            await conn.execute("SET statement_timeout = 200")
            try:
                await conn.execute("SELECT pg_sleep(30)")
            except psycopg.errors.QueryCanceled as exc:
                second = type(exc).__name__
            cur = await conn.execute("SELECT 7")
            return first, second, (await cur.fetchone())[0]

    assert on.same_as_asyncio(scenario) == ("TimeoutError", "QueryCanceled", 7)


def test_psycopg_listen_notify(on, postgres):
    async def scenario():
        async with (
            await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as listener,
            await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as sender,
        ):
            await listener.execute("LISTEN ch")
            for i in range(50):
                await sender.execute("SELECT pg_notify('ch', %s)", (str(i),))
            got = []
            gen = listener.notifies()
            async for n in gen:
                got.append((n.channel, n.payload))
                if len(got) == 50:
                    break
            await gen.aclose()
            return got

    assert on.same_as_asyncio(scenario) == [("ch", str(i)) for i in range(50)]


def test_psycopg_server_restart_mid_connection(on, postgres):
    async def scenario():
        loop = asyncio.get_running_loop()
        conn = await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True)
        await conn.execute("SELECT 1")
        await loop.run_in_executor(None, postgres.stop)
        try:
            await conn.execute("SELECT 1")
        except psycopg.Error as exc:
            broken = type(exc).__name__
        closed = conn.closed
        await conn.close()
        await loop.run_in_executor(None, postgres.start)
        for _ in range(100):
            try:
                conn = await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True)
                break
            except psycopg.OperationalError:
                await asyncio.sleep(0.1)
        async with conn:
            cur = await conn.execute("SELECT 2")
            return broken, closed, (await cur.fetchone())[0]

    broken, closed, value = on.same_as_asyncio(scenario)
    assert broken in ("OperationalError", "AdminShutdown") and closed and value == 2
