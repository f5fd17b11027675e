"""run_in_executor, the default executor and getaddrinfo/getnameinfo."""

from __future__ import annotations

import concurrent.futures
import socket
import sys
import threading

import pytest


def test_run_in_executor_returns_result(loop):
    def work(a, b):
        return a + b, threading.get_ident()

    result, ident = loop.run_until_complete(loop.run_in_executor(None, work, 2, 3))
    assert result == 5
    assert ident != threading.get_ident()


def test_run_in_executor_propagates_exception(loop):
    def work():
        raise ArithmeticError("in thread")

    with pytest.raises(ArithmeticError, match="in thread"):
        loop.run_until_complete(loop.run_in_executor(None, work))


def test_run_in_executor_with_explicit_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mine") as ex:
        name = loop.run_until_complete(
            loop.run_in_executor(ex, lambda: threading.current_thread().name)
        )
    assert name.startswith("mine")


def test_default_executor_is_reused(loop):
    async def main():
        a = await loop.run_in_executor(None, threading.get_ident)
        first = loop._default_executor
        b = await loop.run_in_executor(None, threading.get_ident)
        return first, loop._default_executor, a, b

    first, second, _, _ = loop.run_until_complete(main())
    assert isinstance(first, concurrent.futures.ThreadPoolExecutor)
    assert first is second


def test_set_default_executor_is_used(loop):
    ex = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="custom")
    try:
        loop.set_default_executor(ex)
        name = loop.run_until_complete(
            loop.run_in_executor(None, lambda: threading.current_thread().name)
        )
        assert name.startswith("custom")
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        ex.shutdown(wait=True)


def test_set_default_executor_requires_thread_pool(loop, loop_kind):
    if sys.version_info < (3, 11) and loop_kind in ("asyncio", "fallback"):
        pytest.skip("3.10 asyncio only warns (DeprecationWarning)")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as ex:
        with pytest.raises(TypeError, match=r"^executor must be ThreadPoolExecutor instance$"):
            loop.set_default_executor(ex)
    with pytest.raises(TypeError, match=r"^executor must be ThreadPoolExecutor instance$"):
        loop.set_default_executor(object())


def test_run_in_executor_after_shutdown_default_executor(loop):
    loop.run_until_complete(loop.run_in_executor(None, lambda: None))
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match=r"^Executor shutdown has been called$"):
        loop.run_in_executor(None, lambda: None)


def test_shutdown_default_executor_without_executor(loop):
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match=r"^Executor shutdown has been called$"):
        loop.run_in_executor(None, lambda: None)


def test_shutdown_default_executor_waits_for_running_work(loop):
    done = []
    started = threading.Event()

    def work():
        started.set()
        threading.Event().wait(0.05)
        done.append(1)

    async def main():
        fut = loop.run_in_executor(None, work)
        await loop.shutdown_default_executor()
        assert done == [1]
        return await fut

    loop.run_until_complete(main())
    assert started.is_set()


def test_run_in_executor_on_closed_loop(loop):
    loop.close()
    with pytest.raises(RuntimeError, match=r"^Event loop is closed$"):
        loop.run_in_executor(None, lambda: None)


def test_getaddrinfo_matches_socket_getaddrinfo(loop):
    got = loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 80))
    assert got == socket.getaddrinfo("127.0.0.1", 80)
    got = loop.run_until_complete(
        loop.getaddrinfo("127.0.0.1", 80, family=socket.AF_INET, type=socket.SOCK_STREAM)
    )
    assert got == socket.getaddrinfo("127.0.0.1", 80, socket.AF_INET, socket.SOCK_STREAM)


def test_getaddrinfo_error_propagates(loop):
    with pytest.raises(socket.gaierror):
        loop.run_until_complete(
            loop.getaddrinfo("127.0.0.1", 80, flags=socket.AI_NUMERICHOST, family=-12345)
        )


def test_getnameinfo_matches_socket_getnameinfo(loop):
    flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    got = loop.run_until_complete(loop.getnameinfo(("127.0.0.1", 80), flags))
    assert got == socket.getnameinfo(("127.0.0.1", 80), flags)
