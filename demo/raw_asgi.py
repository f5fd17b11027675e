"""The smallest ASGI app worth serving: one ``http.response.start`` and one body message.

    uvicorn raw_asgi:app --app-dir demo --loop rsloop:new_event_loop
    granian --interface asgi --working-dir demo raw_asgi:app

Served beside demo/app.py (FastAPI) by demo/scale_http.py: what the server and the loop
cost a request with no framework in between. Lifespan messages are answered so that
both servers start it the same way.
"""

from __future__ import annotations

BODY = b"hello, world"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
