#!/usr/bin/env python3
"""What uvicorn's HTTP protocol costs a request, without the kernel: each protocol class
is fed the same keep-alive GET (as wrk sends it) on a transport that only counts writes,
and serves demo/raw_asgi.py (or ``--app fastapi``: demo/app.py's GET /text) through
uvicorn's default middleware, on one loop.

    python bench/http_protocol.py                      # rsloop.http, httptools, h11 on rsloop
    python bench/http_protocol.py --loop asyncio --repeat 11

Each repeat runs every protocol once (interleaved); the table gives the median time per
request (microseconds: data_received, the app's task, its two sends) and the spread over
the repeats. The loop runs two iterations per request, as a server does between reads;
that part is the same for every protocol. Speed on real sockets: demo/scale_http.py.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "demo"))
sys.path.insert(0, str(HERE))

from _machine import describe  # noqa: E402

PROTOCOLS = {
    "rsloop.http": "rsloop.http:HttpProtocol",
    "httptools": "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol",
    "h11": "uvicorn.protocols.http.h11_impl:H11Protocol",
}
APPS = {"raw": ("raw_asgi", "/"), "fastapi": ("app", "/text")}


def request(path: str) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n"
    return (head + "Accept: */*\r\n\r\n").encode()


class CountingTransport:
    """The transport API uvicorn's protocols use; writes are counted, not sent."""

    def __init__(self) -> None:
        self.writes = 0
        self.closed = False

    def get_extra_info(self, key, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(key, default)

    def write(self, data) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_protocol(self, protocol) -> None:
        pass


def load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def per_request_us(cls, new_loop, n: int, app_name: str) -> float:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    module, path = APPS[app_name]
    app = importlib.import_module(module).app
    req = request(path)
    config = Config(app=app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    state = ServerState()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        protocol = cls(config=config, server_state=state, app_state={}, _loop=loop)
        transport = CountingTransport()
        protocol.connection_made(transport)
        t0 = time.perf_counter()
        for _ in range(n):
            protocol.data_received(req)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - t0
        if transport.writes < n or state.total_requests != n:
            raise SystemExit(f"{cls.__name__}: {state.total_requests} of {n} requests answered")
        protocol.connection_lost(None)
        return elapsed / n * 1e6

    loop = new_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--protocols", default=",".join(PROTOCOLS))
    p.add_argument("--loop", default="rsloop", choices=["rsloop", "asyncio", "uvloop"])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--app", default="raw", choices=sorted(APPS))
    a = p.parse_args()
    if a.loop == "rsloop":
        import rsloop

        new_loop = rsloop.new_event_loop
    elif a.loop == "uvloop":
        import uvloop

        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    names = a.protocols.split(",")
    classes = {}
    for name in names:
        try:
            classes[name] = load(PROTOCOLS[name])
        except ImportError as exc:
            print(f"{name}: not installed ({exc})", file=sys.stderr)
    times: dict[str, list[float]] = {name: [] for name in classes}
    for _ in range(a.repeat):
        for name, cls in classes.items():
            times[name].append(per_request_us(cls, new_loop, a.requests, a.app))
    title = f"protocol (loop: {a.loop}, app: {a.app})"
    print(f"| {title} | us per request (median) | spread | vs rsloop.http |")
    print("|---|---|---|---|")
    base = statistics.median(times["rsloop.http"]) if "rsloop.http" in times else None
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = (max(ts) - min(ts)) / med * 100
        ratio = f"{med / base:.2f}x" if base else "-"
        print(f"| {name} | {med:.2f} | ±{spread / 2:.0f} % | {ratio} |")
    print(f"\n{a.repeat} repeats x {a.requests} requests; {describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
