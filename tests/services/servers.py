"""Real servers for the drivers' tests: PostgreSQL and Redis from Debian's packages,
started here on 127.0.0.1 with a temporary data directory, stopped at the end.

The tests are tests/services/svc_*.py, run by ``bash scripts/nox -s services`` (pytest
with ``-o python_files=svc_*.py``); the main suite's ``pytest tests`` does not collect
them, since it has neither the servers nor the drivers. This module is not a conftest.py
because the main suite imports its own as ``conftest``; the test modules import the
fixtures from here.

Every test runs on stdlib asyncio, rsloop uring and rsloop poll (the ``on`` fixture) and
compares what it observed with what asyncio observed for the same scenario.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

LOOPS = ("asyncio", "uring", "poll")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _binary(name: str, *dirs: str) -> str:
    for d in dirs:
        candidates = sorted(Path("/").glob(d.lstrip("/") + "/" + name))
        if candidates:
            return str(candidates[-1])
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: apt-get install postgresql redis-server")
    return found


class Server:
    """One server process; ``restart()`` stops it and starts it again on the same port."""

    def __init__(self, argv: list[str], port: int, log: Path, user: str | None = None) -> None:
        self.argv, self.port, self.log, self.user = argv, port, log, user
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        # Popen(user=...) rather than runuser: the signals of stop() must reach the server.
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=log,
                user=self.user,
                group=self.user,
                extra_groups=[] if self.user else None,
            )
        try:
            wait_port(self.port, self.proc)
        except Exception:
            self.stop()
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.argv[0]} did not start: {tail}") from None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        # SIGINT is PostgreSQL's fast shutdown; redis-server exits on SIGTERM.
        proc.send_signal(signal.SIGINT if "postgres" in self.argv[0] else signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Server]:
    """A PostgreSQL cluster in a fresh temporary directory (initdb, trust auth on loopback,
    fsync off), run as the ``postgres`` user when we are root (postgres refuses root)."""
    initdb = _binary("initdb", "/usr/lib/postgresql/*/bin")
    postgres_bin = _binary("postgres", "/usr/lib/postgresql/*/bin")
    user = "postgres" if os.geteuid() == 0 else None
    tmp = Path(tempfile.mkdtemp(prefix="rsloop-pg-"))
    data, sockdir = tmp / "data", tmp / "sock"
    sockdir.mkdir()
    if user is not None:
        import pwd  # POSIX only, like the servers

        pw = pwd.getpwnam(user)
        for p in (tmp, sockdir):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    as_user: dict = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    subprocess.run(
        [initdb, "-D", str(data), "-A", "trust", "-U", "test", "--no-sync", "-E", "UTF8"],
        check=True,
        stdout=subprocess.DEVNULL,
        **as_user,
    )
    port = free_port()
    argv = [postgres_bin, "-D", str(data), "-p", str(port), "-k", str(sockdir),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200",
            "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]  # fmt: skip
    server = Server(argv, port, tmp / "postgres.log", user)
    server.dsn = f"postgresql://test@127.0.0.1:{port}/postgres"  # type: ignore[attr-defined]
    server.start()
    # connections on 127.0.0.1 may be refused for a moment after the port opens
    deadline = time.monotonic() + 30
    while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode:
        if time.monotonic() > deadline:
            raise TimeoutError("postgres not ready")
        time.sleep(0.1)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Server]:
    binary = _binary("redis-server")
    tmp = Path(tempfile.mkdtemp(prefix="rsloop-redis-"))
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp), "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--maxclients", "2000"]  # fmt: skip
    server = Server(argv, port, tmp / "redis.log")
    server.url = f"redis://127.0.0.1:{port}/0"  # type: ignore[attr-defined]
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "asyncio":
        return asyncio.SelectorEventLoop
    from rsloop._loop import Loop

    return lambda: Loop(backend=name)


class On:
    """Runs a scenario on one loop and holds it to what stdlib asyncio observes."""

    _reference: dict[str, Any] = {}

    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key

    def run(self, scenario: Callable[[], Coroutine[Any, Any, Any]], name: str | None = None) -> Any:
        factory = _factory(name or self.name)
        with asyncio.Runner(loop_factory=factory) as runner:
            loop = runner.get_loop()
            if (name or self.name) != "asyncio":
                assert getattr(loop, "backend", None) == (name or self.name), loop
            return runner.run(asyncio.wait_for(scenario(), 120))

    def same_as_asyncio(self, scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run ``scenario`` here; on rsloop, assert its result equals asyncio's."""
        got = self.run(scenario)
        if self.name == "asyncio":
            On._reference[self.key] = got
            return got
        if self.key not in On._reference:
            On._reference[self.key] = self.run(scenario, "asyncio")
        assert got == On._reference[self.key], f"{self.name} differs from asyncio"
        return got


@pytest.fixture(params=LOOPS)
def on(request: pytest.FixtureRequest) -> On:
    return On(request.param, request.node.originalname + str(request.node.module.__name__))
