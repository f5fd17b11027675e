# ruff: noqa: F401, F811  (fixtures imported from servers.py, then taken as parameters)
"""grpcio's ``grpc.aio`` (server and client) on each loop (see servers.py).

grpc.aio drives its own completion-queue poller beside the asyncio loop; the server is
started by each scenario on 127.0.0.1 and stopped at its end. The service is defined
with generic handlers over raw bytes, so no generated code is needed.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from servers import free_port, on  # the fixtures (tests/services/servers.py)

grpc = pytest.importorskip("grpc")
from grpc import aio  # noqa: E402

N = 1000


async def _echo(request: bytes, context) -> bytes:
    return request[::-1]


async def _slow(request: bytes, context) -> bytes:
    await asyncio.sleep(float(request.decode()))
    return b"late"


async def _count(request: bytes, context):
    for i in range(int(request.decode())):
        yield str(i).encode()


async def _total(request_iterator, context) -> bytes:
    return str(sum([int(r.decode()) async for r in request_iterator])).encode()


def _handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "rsloop.Test",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(_echo),
            "Slow": grpc.unary_unary_rpc_method_handler(_slow),
            "Count": grpc.unary_stream_rpc_method_handler(_count),
            "Total": grpc.stream_unary_rpc_method_handler(_total),
        },
    )


async def _serve(port: int) -> aio.Server:
    server = aio.server()
    server.add_generic_rpc_handlers((_handler(),))
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    await server.start()
    return server


def _stubs(channel: aio.Channel):
    return (
        channel.unary_unary("/rsloop.Test/Echo"),
        channel.unary_unary("/rsloop.Test/Slow"),
        channel.unary_stream("/rsloop.Test/Count"),
        channel.stream_unary("/rsloop.Test/Total"),
    )


def test_grpc_unary_streaming_and_1000_concurrent(on):
    async def scenario():
        port = free_port()
        server = await _serve(port)
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                echo, _slow, count, total = _stubs(channel)
                one = await echo(b"abc")
                many = await asyncio.gather(*(echo(str(i).encode()) for i in range(N)))
                streamed = [r async for r in count(b"200")]

                async def numbers():
                    for i in range(100):
                        yield str(i).encode()

                summed = await total(numbers())
                return one, many, streamed, summed
        finally:
            await server.stop(None)

    one, many, streamed, summed = on.same_as_asyncio(scenario)
    assert one == b"cba"
    assert many == [str(i).encode()[::-1] for i in range(N)]
    assert streamed == [str(i).encode() for i in range(200)] and summed == b"4950"


def test_grpc_deadline_and_cancellation(on):
    async def scenario():
        port = free_port()
        server = await _serve(port)
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                echo, slow, _count, _total = _stubs(channel)
                try:
                    await slow(b"30", timeout=0.3)
                except aio.AioRpcError as exc:
                    deadline = exc.code().name
                t0 = time.monotonic()
                call = slow(b"30")
                await asyncio.sleep(0.3)
                cancelled = call.cancel()
                try:
                    await call
                except asyncio.CancelledError:
                    after_cancel = "CancelledError"
                task = asyncio.ensure_future(slow(b"30"))
                await asyncio.sleep(0.3)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    task_cancel = "CancelledError"
                try:
                    await asyncio.wait_for(slow(b"30"), 0.3)
                except TimeoutError as exc:
                    wait_for = type(exc).__name__
                still = await echo(b"ok")
                return (
                    deadline,
                    cancelled,
                    after_cancel,
                    task_cancel,
                    wait_for,
                    still,
                    (time.monotonic() - t0 < 10),
                )
        finally:
            await server.stop(None)

    assert on.same_as_asyncio(scenario) == (
        "DEADLINE_EXCEEDED",
        True,
        "CancelledError",
        "CancelledError",
        "TimeoutError",
        b"ko",
        True,
    )


def test_grpc_server_restart_mid_connection(on):
    async def scenario():
        port = free_port()
        server = await _serve(port)
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            echo, slow, _count, _total = _stubs(channel)
            before = await echo(b"12")
            in_flight = asyncio.ensure_future(slow(b"30"))
            await asyncio.sleep(0.3)
            await server.stop(None)
            try:
                await in_flight
            except aio.AioRpcError as exc:
                cut = exc.code().name
            try:
                await echo(b"x", timeout=1)
            except aio.AioRpcError as exc:
                down = exc.code().name
            server = await _serve(port)
            try:
                # the same channel reconnects once the server is back
                after = await echo(b"34", wait_for_ready=True, timeout=20)
            finally:
                await server.stop(None)
            return before, cut, down, after

    before, cut, down, after = on.same_as_asyncio(scenario)
    assert (before, after) == (b"21", b"43")
    assert cut in ("UNAVAILABLE", "CANCELLED") and down in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
