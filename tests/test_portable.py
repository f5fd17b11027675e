"""The build decides which code runs in place of each Linux-only mechanism: the Linux
build uses io_uring, pidfds and MSG_NOSIGNAL; the portable build (``--features portable``,
``nox -s portable``) runs what macOS and the BSDs run instead. Each test asserts the
behaviour of the build it runs on, so the same test checks both (docs/platforms.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import rsloop
from rsloop import _backend

pytestmark = [
    pytest.mark.skipif(_backend.NATIVE_ERROR is not None, reason="native module missing"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd"),
]

PORTABLE = _backend.PORTABLE


def _fd_kinds() -> list[str]:
    """What each of this process's fds is (``anon_inode:[pidfd]``, ``pipe:[...]``, ...)."""
    kinds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            kinds.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            pass  # the fd listdir itself used, closed since
    return kinds


def _native_module_flags() -> tuple[bool, bool]:
    from rsloop import _rsloop

    return _rsloop.BUILD_URING, _rsloop.BUILD_PORTABLE


def test_the_portable_build_has_no_io_uring():
    build_uring, build_portable = _native_module_flags()
    assert build_portable == PORTABLE
    if PORTABLE:
        assert not build_uring
        from rsloop._loop import Loop

        with pytest.raises(OSError, match="io_uring"):
            Loop(backend="uring")  # type: ignore[abstract]


def test_auto_gives_poll_in_the_portable_build(monkeypatch):
    monkeypatch.delenv("RSLOOP_BACKEND", raising=False)
    loop = rsloop.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0))
        info = rsloop.backend(loop)
        fds = _fd_kinds()
    finally:
        loop.close()
    if PORTABLE:
        assert info.name == "poll", info
        assert "anon_inode:[io_uring]" not in fds
    else:
        # The Linux build: io_uring where this machine allows it, else poll with a reason.
        assert info.name in ("uring", "poll"), info
        assert info.name == "uring" or info.reason


def test_python_m_rsloop_says_which_build(capsys):
    from rsloop import __main__ as rsloop_main

    rsloop_main.main()
    out = capsys.readouterr().out
    assert ("portable build" in out) == PORTABLE, out


@pytest.mark.parametrize("backend", ["poll"] + ([] if PORTABLE else ["uring"]))
def test_children_are_watched_by_pidfd_or_by_a_thread(backend):
    """Linux build: the loop watches a pidfd; portable build: a thread per child waits for
    it, as on macOS. Seen while the child runs: the fds and the threads of this process."""
    if backend == "uring":
        try:
            loop = rsloop.Loop(backend="uring")  # type: ignore[abstract]
        except OSError as exc:
            pytest.skip(f"io_uring unavailable: {exc}")
    else:
        loop = rsloop.Loop(backend="poll")  # type: ignore[abstract]

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdin.read()", stdin=subprocess.PIPE
        )
        seen_fds = _fd_kinds()
        seen_threads = [t.name for t in threading.enumerate()]
        proc.stdin.close()
        code = await asyncio.wait_for(proc.wait(), 30)
        return proc.pid, code, seen_fds, seen_threads

    try:
        pid, code, fds, threads = loop.run_until_complete(main())
    finally:
        loop.close()
    assert code == 0
    waiter = f"rsloop-waitpid-{pid}"
    if PORTABLE:
        assert "anon_inode:[pidfd]" not in fds
        assert waiter in threads
    else:
        assert "anon_inode:[pidfd]" in fds
        assert waiter not in threads


_SEND_TO_CLOSED_PEER = """
import asyncio, signal, socket, rsloop
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # what CPython ignores at startup
async def main():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    b.close()
    lost = loop.create_future()
    class Sender(asyncio.Protocol):
        def connection_lost(self, exc):
            lost.set_result(exc)
    # A transport's write is the native send on every Python version (on 3.10 rsloop's
    # sock_sendall is asyncio's, which calls socket.send: no MSG_NOSIGNAL there either).
    transport, _ = await loop.create_connection(Sender, sock=a)
    transport.write(b"x" * 100)
    exc = await asyncio.wait_for(lost, 30)
    if isinstance(exc, BrokenPipeError):
        print("EPIPE")
    else:
        print(repr(exc))
rsloop.run(main())
"""


def test_a_send_to_a_closed_peer_with_sigpipe_restored():
    """Linux build: sends pass MSG_NOSIGNAL, so the send fails with EPIPE even when the
    program restored SIGPIPE's default action. Portable build (macOS has no MSG_NOSIGNAL):
    SIGPIPE ends that program, as it would under asyncio's loop there."""
    env = {**os.environ, "RSLOOP_BACKEND": "poll"}
    done = subprocess.run(
        [sys.executable, "-c", _SEND_TO_CLOSED_PEER],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if PORTABLE:
        assert done.returncode == -signal.SIGPIPE, (done.returncode, done.stderr)
        assert done.stdout == ""
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "EPIPE"


def test_loop_time_is_time_monotonic():
    """The portable build reads the clock through Python (as on macOS), the Linux build
    through clock_gettime: both are time.monotonic()'s clock."""
    loop = rsloop.Loop(backend="poll")  # type: ignore[abstract]
    try:
        before = time.monotonic()
        now = loop.time()
        after = time.monotonic()
    finally:
        loop.close()
    assert before <= now <= after
