"""A small FastAPI service for serving on rsloop (and, to compare, asyncio or uvloop).

    uvicorn app:app --app-dir demo --loop rsloop:new_event_loop           # from the repo root
    uvicorn app:app --app-dir demo --loop rsloop:new_event_loop --workers 2

Routes: ``/json``, ``/text``, ``/stream?chunks=N`` (a streaming response), ``/echo``
(POST: the length and digest of the request body), ``/fanout?n=N`` (awaits N concurrent
timers and a round trip over a socket pair), ``/stats`` (which loop serves, and rsloop's
counters), ``/lifespan`` (what the lifespan handler saw), ``/ws`` (WebSocket echo).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse, StreamingResponse

LIFESPAN: dict[str, object] = {"started": False, "pid": os.getpid()}


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    LIFESPAN["started"] = True
    LIFESPAN["loop"] = f"{type(loop).__module__}.{type(loop).__name__}"
    yield
    # Graceful shutdown reaches here (SIGINT / SIGTERM to uvicorn). A file named by
    # RSLOOP_DEMO_SHUTDOWN_FILE records it, so a test can check it.
    path = os.environ.get("RSLOOP_DEMO_SHUTDOWN_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"shutdown {os.getpid()}\n")


app = FastAPI(lifespan=lifespan)


@app.get("/json")
async def json_route() -> dict:
    return {"message": "hello", "items": list(range(10))}


@app.get("/text", response_class=PlainTextResponse)
async def text_route() -> str:
    return "hello, world"


@app.get("/stream")
async def stream_route(chunks: int = 5) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for i in range(chunks):
            yield f"chunk {i}\n".encode()
            await asyncio.sleep(0)

    return StreamingResponse(body(), media_type="text/plain")


@app.post("/echo")
async def echo_route(request: Request) -> dict:
    body = await request.body()
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@app.get("/fanout")
async def fanout_route(n: int = 10) -> dict:
    loop = asyncio.get_running_loop()

    async def timer(i: int) -> int:
        await asyncio.sleep(0.001)
        return i

    async def round_trip() -> bytes:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        with a, b:
            await loop.sock_sendall(a, b"ping")
            return await loop.sock_recv(b, 4)

    results = await asyncio.gather(*(timer(i) for i in range(n)), round_trip())
    return {"timers": sum(results[:-1]), "socket": results[-1].decode()}


@app.get("/stats")
async def stats_route() -> dict:
    loop = asyncio.get_running_loop()
    stats = loop.stats() if hasattr(loop, "stats") else None
    return {"loop": f"{type(loop).__module__}.{type(loop).__name__}", "stats": stats}


@app.get("/lifespan")
async def lifespan_route() -> dict:
    return dict(LIFESPAN, pid=os.getpid())


@app.websocket("/ws")
async def ws_route(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            message = await websocket.receive_text()
            await websocket.send_text(f"echo: {message}")
    except WebSocketDisconnect:
        pass
