"""Faults against one rsloop echo server: peers that reset mid-write, peers that half-close
or close half-way through a message, peers that never read (slowloris), and accept under
fd exhaustion (EMFILE). Through all of them a
well-behaved client must keep being served, and the server's memory must stay bounded.

    python stress/faults.py --backend uring

The server (a child process on rsloop) is a flow-controlled echo ``Protocol``: it stops
reading from a peer while that peer's write buffer is over the high-water mark
(``pause_writing`` -> ``pause_reading``), as a careful asyncio server does. Its fd limit
is lowered (``--server-fds``) so that a burst of connections exhausts it. The parent runs
the faulty peers with blocking sockets and checks, after each phase, that a fresh
connection still gets a correct echo.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIGH_WATER = 64 * 1024


def serve(backend: str, fds: int) -> None:
    os.environ["RSLOOP_BACKEND"] = backend
    sys.path.insert(0, str(ROOT))
    import asyncio
    import logging

    import rsloop

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (fds, hard))
    state = {"made": 0, "lost_with_error": 0, "accept_errors_logged": 0, "max_buffered": 0}

    class CountAcceptErrors(logging.Handler):
        def emit(self, record):
            if "accept" in record.getMessage() or "out of system resource" in record.getMessage():
                state["accept_errors_logged"] += 1
                if state["accept_errors_logged"] <= 3 or os.environ.get("FAULTS_VERBOSE"):
                    print(f"server log: {record.getMessage()!r}", file=sys.stderr)

    logging.getLogger("asyncio").addHandler(CountAcceptErrors())
    logging.getLogger("asyncio").setLevel(logging.ERROR)

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            transport.set_write_buffer_limits(high=HIGH_WATER)
            state["made"] += 1

        def data_received(self, data):
            self.transport.write(data)
            size = self.transport.get_write_buffer_size()
            state["max_buffered"] = max(state["max_buffered"], size)

        def pause_writing(self):
            self.transport.pause_reading()

        def resume_writing(self):
            self.transport.resume_reading()

        def connection_lost(self, exc):
            if exc is not None:
                state["lost_with_error"] += 1

    # Opened now: under EMFILE nothing new can be opened, reports included.
    status = open(f"/proc/{os.getpid()}/status")  # noqa: SIM115 - kept for the process

    def rss_now() -> float:
        status.seek(0)
        return next(int(x.split()[1]) for x in status if x.startswith("VmRSS:")) / 1024

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"port": port, "backend": rsloop.backend().name}), flush=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line or line.strip() == "quit":
                break
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            report = {**state, "peak_rss_mib": round(rss, 1), "rss_mib": round(rss_now(), 1)}
            try:  # needs an fd of its own: -1 while the server is out of them
                report["fds"] = len(os.listdir("/proc/self/fd")) - 1
            except OSError:
                report["fds"] = -1
            print(json.dumps(report), flush=True)
        server.close()

    try:
        rsloop.run(main())
    finally:
        status.close()


def echo_ok(port: int, payload: bytes = b"still serving", timeout: float = 5.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = s.recv(65536)
                if not chunk:
                    return False
                got += chunk
            return got == payload
    except OSError:
        return False


def reset_mid_write(port: int, count: int) -> None:
    """Send a lot, read a little, then close with RST while the server is writing."""
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(os.urandom(512 * 1024))
        s.recv(1024)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()


def half_close(port: int, count: int, size: int = 64 * 1024) -> int:
    """Send a message, shut the write side (FIN) and read until the server's own FIN:
    every byte must come back first (asyncio's default ``eof_received`` closes the
    transport, which flushes its buffer before closing). Returns the peers that got it."""
    ok = 0
    for _ in range(count):
        data = os.urandom(size)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                got = bytearray()
                while chunk := s.recv(65536):
                    got += chunk
        except OSError:
            continue
        ok += bytes(got) == data
    return ok


def close_half_way(port: int, count: int) -> None:
    """Send half a message's worth and close (FIN) without reading the echo: the server's
    writes then meet a closed peer (EPIPE / ECONNRESET)."""
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(os.urandom(128 * 1024))


def slowloris(port: int, peers: int, megabytes: int) -> list[socket.socket]:
    """Peers that send and never read: the server must stop reading from them."""
    socks = []
    for _ in range(peers):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    chunk = b"x" * 65536
    sent = 0
    deadline = time.monotonic() + 10
    while sent < megabytes << 20 and time.monotonic() < deadline:
        progressed = False
        for s in socks:
            try:
                sent += s.send(chunk)
                progressed = True
            except BlockingIOError:
                pass
        if not progressed:
            time.sleep(0.01)
    return socks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="uring", choices=["uring", "poll"])
    p.add_argument("--server-fds", type=int, default=128)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.backend, args.server_fds)
        return 0
    flags = ["-X", "dev"] if sys.flags.dev_mode else []
    server = subprocess.Popen(
        [sys.executable, *flags, __file__, "--serve", "--backend", args.backend,
         "--server-fds", str(args.server_fds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip

    def server_state() -> dict:
        server.stdin.write("state\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    checks: dict[str, object] = {}
    try:
        hello = json.loads(server.stdout.readline())
        port = hello["port"]
        fds_at_start = server_state()["fds"]  # before any peer: no connection counted
        checks["serving at start"] = echo_ok(port)

        # 1. Peers that reset while the server writes to them.
        reset_mid_write(port, 20)
        time.sleep(0.2)
        checks["serving after 20 resets mid-write"] = echo_ok(port)

        # 2. Peers that half-close (FIN after their message, then read the echo to the
        # end) and peers that close half-way through, never reading.
        checks["half-closing peers that got every byte back, then EOF (of 20)"] = half_close(
            port, 20
        )
        close_half_way(port, 20)
        time.sleep(0.2)
        checks["serving after 20 peers closed half-way"] = echo_ok(port)

        # 3. Slowloris: 8 peers push up to 64 MiB in all at a server that echoes, and never
        # read its answers.
        base = server_state()["rss_mib"]
        loris = slowloris(port, 8, 64)
        time.sleep(0.5)
        st = server_state()
        checks["serving beside 8 peers that never read"] = echo_ok(port)
        checks["write buffer stayed near the high-water mark"] = st[
            "max_buffered"
        ] <= 4 * HIGH_WATER + (1 << 20)
        checks["server RSS growth under slowloris (MiB)"] = round(st["rss_mib"] - base, 1)
        for s in loris:
            s.close()

        # 4. EMFILE: more connections than the server has fds; it logs, backs off, and
        # serves again once fds are free.
        flood = []
        for _ in range(args.server_fds + 50):
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        time.sleep(1.0)
        logged = server_state()["accept_errors_logged"]
        checks["accept errors logged under EMFILE"] = logged
        for s in flood:
            s.close()
        deadline = time.monotonic() + 10
        recovered = False
        while time.monotonic() < deadline and not recovered:
            recovered = echo_ok(port, timeout=2)
            if not recovered:
                time.sleep(0.2)
        checks["serving again after EMFILE"] = recovered
        # Every faulty peer is gone: the server's fds must come back to where they were
        # (each closed transport closed its socket).
        deadline = time.monotonic() + 10
        while (final := server_state())["fds"] > fds_at_start and time.monotonic() < deadline:
            time.sleep(0.2)
        checks["server fds back to the start's once the peers are gone"] = (
            0 < final["fds"] <= fds_at_start
        )
        checks["server fds at start / at the end"] = f"{fds_at_start} / {final['fds']}"
    finally:
        try:
            server.stdin.write("quit\n")
            server.stdin.close()
        except OSError:
            pass
        server.wait(timeout=30)
        server.stdout.close()
    report = {"backend": hello["backend"], "checks": checks, "server": final}
    print(json.dumps(report, indent=1))
    ok = (
        all(v is True for k, v in checks.items() if isinstance(v, bool))
        and checks["accept errors logged under EMFILE"] > 0
        and checks["half-closing peers that got every byte back, then EOF (of 20)"] == 20
        and checks["server RSS growth under slowloris (MiB)"] < 50
        and server.returncode == 0
    )
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
