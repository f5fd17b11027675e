"""Subprocesses: ``subprocess_exec`` / ``subprocess_shell`` and the
``asyncio.create_subprocess_*`` API on top, on every backend of the ``loop`` fixture
(``asyncio`` is the reference). Children are small shell utilities or ``sys.executable``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import is_rsloop_native

import rsloop
from rsloop import _backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix subprocesses")
if not hasattr(signal, "SIGKILL"):  # the module's parameters name Unix signals
    pytest.skip(f"Unix subprocesses: no signal.SIGKILL on {sys.platform}", allow_module_level=True)

WAIT_S = 10.0
PIPE = asyncio.subprocess.PIPE
PY = sys.executable


def run(loop, coro, timeout: float = WAIT_S):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def is_reaped(pid: int) -> bool:
    """True once ``pid`` is neither running nor a zombie (its exit status was collected)."""
    return not os.path.exists(f"/proc/{pid}")


def is_zombie(pid: int) -> bool:
    """True while ``pid`` has exited and waits for its parent to collect its status."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def wait_reaped(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if is_reaped(pid):
            return True
        time.sleep(0.01)
    return False


def test_exec_communicate(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec("echo", "hello", "world", stdout=PIPE)
        out, err = await proc.communicate()
        return out, err, proc.returncode

    assert run(loop, main()) == (b"hello world\n", None, 0)


def test_shell_exit_code_and_stderr(loop):
    async def main():
        proc = await asyncio.create_subprocess_shell("echo oops >&2; exit 7", stderr=PIPE)
        out, err = await proc.communicate()
        return out, err, await proc.wait()

    assert run(loop, main()) == (None, b"oops\n", 7)


def test_stdin_to_stdout_one_mebibyte(loop):
    data = os.urandom(1 << 20)

    async def main():
        proc = await asyncio.create_subprocess_exec("cat", stdin=PIPE, stdout=PIPE)
        out, _ = await proc.communicate(data)
        return out, proc.returncode

    out, rc = run(loop, main())
    assert rc == 0
    assert out == data


def test_stream_io_line_by_line(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-u",
            "-c",
            "import sys\nfor l in sys.stdin: print(l.strip().upper())",
            stdin=PIPE,
            stdout=PIPE,
        )
        answers = []
        for word in (b"alpha", b"beta"):
            proc.stdin.write(word + b"\n")
            await proc.stdin.drain()
            answers.append(await proc.stdout.readline())
        proc.stdin.close()
        await proc.stdin.wait_closed()
        return answers, await proc.stdout.read(), await proc.wait()

    assert run(loop, main()) == ([b"ALPHA\n", b"BETA\n"], b"", 0)


def test_stderr_to_stdout_devnull_and_files(loop, tmp_path):
    out_path = tmp_path / "out"

    async def main():
        merged = await asyncio.create_subprocess_shell(
            "echo out; echo err >&2", stdout=PIPE, stderr=subprocess.STDOUT
        )
        m_out, _ = await merged.communicate()
        quiet = await asyncio.create_subprocess_exec(
            "cat", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        with open(out_path, "wb") as f:
            to_file = await asyncio.create_subprocess_exec("echo", "to a file", stdout=f)
            await to_file.wait()
        r, w = os.pipe()
        to_fd = await asyncio.create_subprocess_exec("echo", "to an fd", stdout=w)
        os.close(w)
        await to_fd.wait()
        from_fd = os.read(r, 100)
        os.close(r)
        return sorted(m_out.split()), await quiet.wait(), from_fd

    merged, quiet_rc, from_fd = run(loop, main())
    assert merged == [b"err", b"out"]
    assert quiet_rc == 0
    assert out_path.read_bytes() == b"to a file\n"
    assert from_fd == b"to an fd\n"


def test_popen_parameters(loop, tmp_path):
    r, w = os.pipe()
    code = (
        "import os, sys\n"
        "os.write(int(sys.argv[1]), b'via pass_fds')\n"
        "print(os.getcwd(), os.environ.get('RSLOOP_T'), os.getsid(0) == os.getpid())\n"
    )

    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-c",
            code,
            str(w),
            stdout=PIPE,
            cwd=tmp_path,
            env={**os.environ, "RSLOOP_T": "set"},
            pass_fds=(w,),
            start_new_session=True,
        )
        out, _ = await proc.communicate()
        return out, proc.returncode

    try:
        out, rc = run(loop, main())
        assert rc == 0
        assert out.split() == [str(tmp_path).encode(), b"set", b"True"]
        assert os.read(r, 100) == b"via pass_fds"
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("terminate", -signal.SIGTERM),
        ("kill", -signal.SIGKILL),
        ("send_signal", -signal.SIGUSR1),
    ],
)
def test_signals_to_the_child(loop, method, expected):
    async def main():
        proc = await asyncio.create_subprocess_exec("sleep", "30")
        if method == "send_signal":
            proc.send_signal(signal.SIGUSR1)
        else:
            getattr(proc, method)()
        return await proc.wait(), proc.pid

    rc, pid = run(loop, main())
    assert rc == expected
    assert wait_reaped(pid)


def test_many_children_at_once(loop):
    async def one(i):
        proc = await asyncio.create_subprocess_exec("sh", "-c", f"exit {i}", stdout=PIPE)
        await proc.communicate()
        return proc.returncode

    async def main():
        return await asyncio.gather(*(one(i) for i in range(40)))

    assert run(loop, main()) == list(range(40))


def test_wait_from_two_tasks(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec("sh", "-c", "sleep 0.05; exit 4")
        return await asyncio.gather(proc.wait(), proc.wait())

    assert run(loop, main()) == [4, 4]


def test_no_zombie_after_wait(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
        return proc.pid

    pid = run(loop, main())
    assert is_reaped(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_child_running_when_the_loop_closes_is_reaped(loop):
    if not is_rsloop_native(loop):
        # asyncio's own answer depends on its child watcher: 3.10/3.11's thread reaps the
        # child, 3.12+'s pidfd watcher leaves a zombie until the process exits.
        pytest.skip("rsloop's reaper; asyncio differs by version")

    async def main():
        return await asyncio.create_subprocess_exec("sleep", "0.2")

    threads = set(threading.enumerate())
    proc = run(loop, main())
    loop.close()
    if _backend.PORTABLE:
        # The portable build, as macOS: no pidfd, the child's own thread waits and reaps it.
        (waiter,) = set(threading.enumerate()) - threads
        assert waiter.name == f"rsloop-waitpid-{proc.pid}"
        waiter.join(WAIT_S)
        assert is_reaped(proc.pid)
    else:
        # No thread waits for it (asyncio 3.12+ starts none either)...
        assert set(threading.enumerate()) <= threads
        deadline = time.monotonic() + WAIT_S
        while not is_zombie(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert is_zombie(proc.pid)
        # ...and the next loop that closes reaps it without blocking.
        from conftest import make_loop

        make_loop("uring" if rsloop.backend(loop).name == "uring" else "poll").close()
        assert is_reaped(proc.pid)
    # Dropping the never-awaited process warns, as with asyncio.
    with pytest.warns(ResourceWarning):
        del proc
        gc.collect()


def test_protocol_callbacks(loop):
    class Recorder(asyncio.SubprocessProtocol):
        def __init__(self):
            self.events = []
            self.out = bytearray()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.events.append("made")

        def pipe_data_received(self, fd, data):
            self.out += data

        def pipe_connection_lost(self, fd, exc):
            self.events.append(("pipe lost", fd, exc))

        def process_exited(self):
            self.events.append("exited")

        def connection_lost(self, exc):
            self.events.append(("lost", exc))
            self.done.set_result(None)

    async def main():
        transport, proto = await loop.subprocess_exec(
            Recorder, "sh", "-c", "echo hi; exit 2", stdin=None, stderr=None
        )
        pid = transport.get_pid()
        await proto.done
        rc = transport.get_returncode()
        transport.close()
        return pid, rc, proto

    pid, rc, proto = run(loop, main())
    assert isinstance(pid, int)
    assert rc == 2
    assert bytes(proto.out) == b"hi\n"
    assert proto.events[0] == "made"
    assert proto.events[-1] == ("lost", None)
    assert sorted(map(str, proto.events[1:-1])) == ["('pipe lost', 1, None)", "exited"]


def test_transport_pipes_and_kill(loop):
    async def main():
        transport, _ = await loop.subprocess_exec(
            asyncio.SubprocessProtocol, "cat", stdin=PIPE, stdout=PIPE, stderr=None
        )
        stdin = transport.get_pipe_transport(0)
        stdout = transport.get_pipe_transport(1)
        assert transport.get_pipe_transport(2) is None
        assert stdin is not None and stdout is not None
        transport.kill()
        await transport._wait()  # asyncio.subprocess.Process.wait() awaits this
        rc = transport.get_returncode()
        transport.close()
        return rc

    assert run(loop, main()) == -signal.SIGKILL


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda: asyncio.create_subprocess_exec("/nonexistent/program"), FileNotFoundError),
        (lambda: asyncio.create_subprocess_shell("echo", universal_newlines=True), ValueError),
        (lambda: asyncio.create_subprocess_exec("echo", text=True), ValueError),
        (lambda: asyncio.create_subprocess_exec("echo", bufsize=1), ValueError),
        (lambda: asyncio.create_subprocess_exec("echo", shell=True), ValueError),
        (
            lambda: asyncio.get_running_loop().subprocess_shell(
                asyncio.SubprocessProtocol, ["echo"]
            ),
            ValueError,
        ),
        (
            lambda: asyncio.get_running_loop().subprocess_exec(
                asyncio.SubprocessProtocol, "echo", shell=True
            ),
            ValueError,
        ),
    ],
)
def test_bad_input(loop, call, exc):
    async def main():
        with pytest.raises(exc):
            await call()

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="process_group is 3.11+")
def test_process_group(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", "import os; print(os.getpgid(0) == os.getpid())", stdout=PIPE, process_group=0
        )
        out, _ = await proc.communicate()
        return out

    assert run(loop, main()) == b"True\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_user_and_group(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            "id", "-u", stdout=PIPE, user=65534, group=65534, extra_groups=[]
        )
        out, _ = await proc.communicate()
        return out.strip(), proc.returncode

    assert run(loop, main()) == (b"65534", 0)
