"""rsloop under the libraries people run it with: uvicorn + FastAPI (a real server process,
a real HTTP client and WebSocket client over loopback), anyio, and pytest-asyncio through
rsloop's pytest plugin."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
START_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = START_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"server exited {proc.returncode}:\n{out}\n{err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("server did not start listening")


class Server:
    """uvicorn in a child process, stopped with SIGINT (or SIGTERM) at the end."""

    def __init__(self, tmp_path: Path, *args: str, code: str | None = None) -> None:
        self.port = free_port()
        self.shutdown_file = tmp_path / "shutdown.log"
        env = {
            **os.environ,
            "RSLOOP_DEMO_SHUTDOWN_FILE": str(self.shutdown_file),
            "PYTHONPATH": os.pathsep.join([str(DEMO), os.environ.get("PYTHONPATH", "")]),
        }
        if code is None:
            cmd = [
                sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(DEMO),
                "--host", "127.0.0.1", "--port", str(self.port),
                "--loop", "rsloop:new_event_loop", *args,
            ]  # fmt: skip
        else:
            cmd = [sys.executable, "-c", code.format(port=self.port)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        wait_listening(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=START_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"server did not stop on signal {sig}:\n{err}") from None
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def uvicorn_server(tmp_path):
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    servers: list[Server] = []

    def start(*args: str, code: str | None = None) -> Server:
        server = Server(tmp_path, *args, code=code)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


def exercise(url: str) -> dict:
    """HTTP/1.1 keep-alive, JSON, text, streaming, a 4 MiB body, concurrent I/O, WebSocket."""
    httpx = pytest.importorskip("httpx")
    ws_sync = pytest.importorskip("websockets.sync.client")
    body = os.urandom(4 << 20)
    with httpx.Client(base_url=url, timeout=10) as client:
        seen = {
            "json": client.get("/json").json(),
            "text": client.get("/text").text,
            "stream": client.get("/stream", params={"chunks": 3}).text,
            "echo": client.post("/echo", content=body).json(),
            "fanout": client.get("/fanout", params={"n": 20}).json(),
            "stats": client.get("/stats").json(),
            "lifespan": client.get("/lifespan").json(),
        }
        # keep-alive: many requests on one connection
        seen["many"] = [client.get("/text").status_code for _ in range(50)]
    with ws_sync.connect(url.replace("http://", "ws://") + "/ws") as ws:
        answers = []
        for word in ("one", "two", "three"):
            ws.send(word)
            answers.append(ws.recv(timeout=10))
    seen["ws"] = answers
    seen["body_sha"] = hashlib.sha256(body).hexdigest()
    return seen


def check(seen: dict) -> None:
    assert seen["json"] == {"message": "hello", "items": list(range(10))}
    assert seen["text"] == "hello, world"
    assert seen["stream"] == "chunk 0\nchunk 1\nchunk 2\n"
    assert seen["echo"] == {"length": 4 << 20, "sha256": seen["body_sha"]}
    assert seen["fanout"] == {"timers": sum(range(20)), "socket": "ping"}
    assert seen["stats"]["loop"] == "rsloop._loop.Loop"
    assert seen["stats"]["stats"]["callbacks"] > 0
    assert seen["lifespan"]["started"] is True
    assert seen["lifespan"]["loop"] == "rsloop._loop.Loop"
    assert seen["many"] == [200] * 50
    assert seen["ws"] == ["echo: one", "echo: two", "echo: three"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_uvicorn_fastapi_on_rsloop(uvicorn_server, sig):
    server = uvicorn_server()
    check(exercise(server.url))
    rc, err = server.stop(sig)
    # After its graceful shutdown uvicorn re-raises the signal it caught: SIGINT ends in
    # exit status 0 (KeyboardInterrupt handled), SIGTERM kills the process with SIGTERM,
    # exactly as with `--loop asyncio`.
    assert rc == (0 if sig == signal.SIGINT else -signal.SIGTERM), err
    assert "Finished server process" in err
    # The lifespan's shutdown half ran: graceful shutdown.
    assert server.shutdown_file.read_text().startswith("shutdown ")


def test_uvicorn_two_workers(uvicorn_server):
    server = uvicorn_server("--workers", "2")
    check(exercise(server.url))
    rc, err = server.stop()
    assert rc == 0, err
    # Both workers ran on rsloop until the supervisor's SIGINT, then shut down gracefully.
    lines = server.shutdown_file.read_text().splitlines()
    assert len(lines) == 2 and len(set(lines)) == 2, lines


def test_uvicorn_reload(uvicorn_server):
    server = uvicorn_server("--reload", "--reload-dir", str(DEMO))
    check(exercise(server.url))
    rc, err = server.stop()
    assert rc == 0, err
    assert server.shutdown_file.read_text().startswith("shutdown ")


def test_uvicorn_run_programmatic(uvicorn_server):
    code = textwrap.dedent(
        """
        import uvicorn
        from app import app
        uvicorn.run(app, host="127.0.0.1", port={port}, loop="rsloop:new_event_loop")
        """
    )
    server = uvicorn_server(code=code)
    check(exercise(server.url))
    rc, err = server.stop()
    assert rc == 0, err


# ----- anyio -----


def test_anyio_on_rsloop():
    anyio = pytest.importorskip("anyio")
    import rsloop

    async def main():
        loop = asyncio.get_running_loop()
        results = []

        async def worker(i):
            await anyio.sleep(0.001 * i)
            results.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(worker, i)

        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def serve(stream):
            async with stream:
                await stream.send(await stream.receive())

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, serve)
            async with await anyio.connect_tcp("127.0.0.1", port) as client:
                await client.send(b"through anyio")
                echoed = await client.receive()
            tg.cancel_scope.cancel()
        await listener.aclose()

        in_thread = await anyio.to_thread.run_sync(lambda: "from a thread")
        proc = await anyio.run_process(["echo", "process"])
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(5)
        caught = scope.cancelled_caught
        return type(loop).__name__, sorted(results), echoed, in_thread, proc.stdout, caught

    options = {"loop_factory": rsloop.new_event_loop}
    got = anyio.run(main, backend="asyncio", backend_options=options)
    assert got == ("Loop", [0, 1, 2, 3, 4], b"through anyio", "from a thread", b"process\n", True)


# ----- pytest-asyncio through rsloop's plugin -----


def test_pytest_plugin_entry_point():
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("rsloop") == "rsloop.pytest_plugin"


RSLOOP = "rsloop._loop Loop"
STDLIB = "asyncio.unix_events _UnixSelectorEventLoop"

_PYTEST_ASYNCIO_TESTS = """
import asyncio
import pytest

@pytest.mark.asyncio
async def test_which_loop():
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)
    print("LOOP", type(loop).__module__, type(loop).__name__)

@pytest.mark.asyncio(loop_factories=["rsloop"])
async def test_pinned_to_rsloop():
    assert type(asyncio.get_running_loop()).__module__ == "rsloop._loop"
"""


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        (["--rsloop=rsloop"], "", {RSLOOP}),
        (["--rsloop=both"], "", {RSLOOP, STDLIB}),
        ([], "rsloop = both", {RSLOOP, STDLIB}),
    ],
)
def test_pytest_plugin(pytester, args, ini, expected):
    pytest.importorskip("pytest_asyncio", minversion="1.4")
    pytester.makeini(f"[pytest]\nasyncio_default_fixture_loop_scope = function\n{ini}\n")
    pytester.makepyfile(test_loops=_PYTEST_ASYNCIO_TESTS)
    result = pytester.runpytest_subprocess("-s", *args)
    result.assert_outcomes(passed=len(expected) + 1)
    # "-s" output shares lines with the progress dots: find the markers anywhere.
    loops = set(re.findall(r"LOOP (\S+ \S+)", "\n".join(result.outlines)))
    assert loops == expected


def test_pytest_plugin_is_inert_by_default(pytester):
    pytest.importorskip("pytest_asyncio", minversion="1.4")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_default="""
import asyncio, pytest

@pytest.mark.asyncio
async def test_default_loop():
    assert type(asyncio.get_running_loop()).__module__.startswith("asyncio")
"""
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)


def test_pytest_plugin_rejects_a_bad_mode(pytester):
    pytester.makepyfile(test_nothing="def test_nothing(): pass\n")
    result = pytester.runpytest_subprocess("--rsloop=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "expected one of" in "\n".join(result.errlines)
