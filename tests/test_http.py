"""``rsloop.http.HttpProtocol``: uvicorn's HTTP/1.1 protocol with the parsing in Rust.

Each test serves an ASGI app with the protocol on a real listening socket, on every
backend (rsloop's drivers, its fallback and stdlib asyncio: the protocol must work on any
loop), and talks to it as a client does, reading the answers with h11. The scope is
compared with what uvicorn's own h11 protocol gives for the same request. uvicorn's own
protocol tests run the class too (``nox -s upstream``, tests/upstream/suites.py).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from netutil import HOST, payload, run

h11 = pytest.importorskip("h11")
pytest.importorskip("uvicorn")

from uvicorn.config import Config  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from rsloop.http import HttpProtocol  # noqa: E402

# -- a server and a client --------------------------------------------------------------


class Served:
    """An ASGI app served by a protocol class on loopback, in the test's loop."""

    def __init__(self, loop, app, protocol=HttpProtocol, **config) -> None:
        config.setdefault("lifespan", "off")
        config.setdefault("log_level", "warning")
        self.config = Config(app=app, **config)
        self.config.load()
        self.state = ServerState()
        self.loop = loop
        self.protocol = protocol
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Served:
        def make():
            return self.protocol(
                config=self.config, server_state=self.state, app_state={}, _loop=self.loop
            )

        self.server = await self.loop.create_server(make, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        for conn in list(self.state.connections):
            conn.shutdown()
        self.server.close()
        await self.server.wait_closed()
        if self.state.tasks:
            await asyncio.wait(list(self.state.tasks), timeout=5)

    async def connect(self) -> Client:
        reader, writer = await asyncio.open_connection(HOST, self.port)
        return Client(reader, writer)


class Client:
    """A raw connection. Requests are written as bytes (so they can be pipelined); each
    response is read by a fresh h11 client connection, handed what the last one left."""

    def __init__(self, reader, writer) -> None:
        self.reader, self.writer = reader, writer
        self.left = b""
        self.eof = False

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, method: str = "GET") -> tuple[h11.Response, bytes]:
        """The next whole response (to a request of ``method``): its head and body."""
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "t")]))
        conn.send(h11.EndOfMessage())
        if self.left:  # (h11 reads b"" as the end of the stream)
            conn.receive_data(self.left)
        head = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(65536)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                self.left = conn.trailing_data[0]
                return head, bytes(body)
            else:
                raise ConnectionError(f"no whole response: {event!r}")

    @staticmethod
    def request(method: str, target: str, headers=(), body: bytes = b"") -> bytes:
        hdrs = [("Host", "test"), *headers]
        chunked = any(n.lower() == "transfer-encoding" for n, _ in hdrs)
        if body and not chunked:
            hdrs.append(("Content-Length", str(len(body))))
        out = f"{method} {target} HTTP/1.1\r\n".encode()
        out += b"".join(f"{n}: {v}\r\n".encode() for n, v in hdrs) + b"\r\n"
        if chunked:
            for i in range(0, len(body), 7000):
                piece = body[i : i + 7000]
                out += b"%x\r\n" % len(piece) + piece + b"\r\n"
            out += b"0\r\n\r\n"
        else:
            out += body
        return out

    async def closed(self) -> bool:
        """True when the server closes the connection (after what it sent)."""
        while await self.reader.read(65536):
            pass
        return True

    def close(self) -> None:
        self.writer.close()


def head_value(response: h11.Response, name: bytes) -> bytes | None:
    for n, v in response.headers:
        if n == name:
            return v
    return None


async def hello(scope, receive, send):
    assert scope["type"] == "http"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")],
        }
    )
    await send({"type": "http.response.body", "body": b"hello"})


async def echo(scope, receive, send):
    """Answers with the request's path and body, the body streamed back in chunks."""
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"x-path", scope["path"].encode())],
        }
    )
    for i in range(0, len(body), 65536):
        await send(
            {"type": "http.response.body", "body": bytes(body[i : i + 65536]), "more_body": True}
        )
    await send({"type": "http.response.body", "body": b""})


# -- the request-response cycle ---------------------------------------------------------


def test_keep_alive_serves_one_request_after_another(loop):
    async def main():
        async with Served(loop, hello) as srv:
            client = await srv.connect()
            for _ in range(3):
                await client.send(client.request("GET", "/"))
                head, body = await client.response()
                assert (head.status_code, body) == (200, b"hello")
                assert head_value(head, b"connection") is None
            client.close()

    run(loop, main())


def test_what_send_returns_is_a_coroutine_to_asyncio(loop):
    """An app may hand send()'s result to anything that takes a coroutine, as with an
    `async def` send: create_task, gather, ensure_future."""

    async def app(scope, receive, send):
        start = send({"type": "http.response.start", "status": 200, "headers": []})
        assert asyncio.iscoroutine(start)
        with pytest.raises(ValueError, match="thrown in"):
            start.throw(ValueError("thrown in"))
        with pytest.raises(StopIteration):
            start.send(None)
        start.close()
        await asyncio.create_task(start)
        await asyncio.gather(send({"type": "http.response.body", "body": b"he", "more_body": True}))
        await asyncio.ensure_future(send({"type": "http.response.body", "body": b"llo"}))

    async def main():
        async with Served(loop, app) as srv:
            client = await srv.connect()
            await client.send(client.request("GET", "/"))
            head, body = await client.response()
            client.close()
            return head.status_code, body

    assert run(loop, main()) == (200, b"hello")


def test_each_response_carries_the_servers_default_headers_of_the_moment(loop):
    """uvicorn replaces server_state.default_headers each second (a new date): every
    response has the list current when it starts, whatever it was before."""

    async def main():
        async with Served(loop, hello) as srv:
            client = await srv.connect()
            lists = [
                [(b"date", b"one"), (b"server", b"uvicorn")],
                [(b"date", b"two"), (b"server", b"uvicorn")],
                [(b"date", b"two")],
            ]
            lists.append(lists[1])  # the same list again, changed in place
            for i, defaults in enumerate(lists):
                if i == 3:
                    defaults[0] = (b"date", b"three")
                srv.state.default_headers = defaults
                await client.send(client.request("GET", "/"))
                head, body = await client.response()
                assert body == b"hello"
                assert [(n, v) for n, v in head.headers if n in (b"date", b"server")] == [
                    (n, v) for n, v in defaults
                ]
            # Defaults that frame the body are read as an app's headers are.
            srv.state.default_headers = [(b"Connection", b"close")]
            await client.send(client.request("GET", "/"))
            head, body = await client.response()
            assert (body, head_value(head, b"connection")) == (b"hello", b"close")
            assert await client.closed()
            client.close()

    run(loop, main())


def test_pipelined_requests_are_answered_in_order(loop):
    async def main():
        async with Served(loop, echo) as srv:
            client = await srv.connect()
            data = b"".join(
                client.request("POST", f"/{i}", body=str(i).encode() * (i + 1)) for i in range(5)
            )
            await client.send(data)
            for i in range(5):
                head, body = await client.response()
                assert head_value(head, b"x-path") == f"/{i}".encode()
                assert body == str(i).encode() * (i + 1)
            client.close()

    run(loop, main())


def test_chunked_request_and_response_bodies(loop):
    async def main():
        async with Served(loop, echo) as srv:
            client = await srv.connect()
            body = payload(200_000)
            await client.send(
                client.request("POST", "/c", headers=[("Transfer-Encoding", "chunked")], body=body)
            )
            head, got = await client.response()
            assert head_value(head, b"transfer-encoding") == b"chunked"
            assert got == body
            client.close()

    run(loop, main())


def test_expect_100_continue_is_sent_when_the_app_reads(loop):
    async def main():
        async with Served(loop, echo) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(
                b"POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
            )
            line = await reader.readuntil(b"\r\n\r\n")
            assert line == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"body")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            writer.close()

    run(loop, main())


def test_head_gets_the_head_only(loop):
    async def main():
        async with Served(loop, hello) as srv:
            client = await srv.connect()
            await client.send(client.request("HEAD", "/"))
            await client.send(client.request("GET", "/"))
            head, body = await client.response("HEAD")
            assert head_value(head, b"content-length") == b"5" and body == b""
            head, body = await client.response()
            assert body == b"hello"
            client.close()

    run(loop, main())


def test_connection_close_and_http10_end_the_connection(loop):
    async def main():
        async with Served(loop, hello) as srv:
            for request in (
                b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
                b"GET / HTTP/1.0\r\n\r\n",
            ):
                reader, writer = await asyncio.open_connection(HOST, srv.port)
                writer.write(request)
                data = await reader.read()  # to EOF: the server closes
                assert data.count(b"HTTP/1.1 200 OK") == 1
                assert b"connection: close\r\n" in data
                writer.close()

    run(loop, main())


def test_flow_control_both_ways(loop):
    """A request body far above the high-water mark, read slowly by the app, and a
    response far above the transport's buffer limit, read slowly by the client."""
    size = 4 * 1024 * 1024

    async def slow_echo(scope, receive, send):
        body = bytearray()
        while True:
            message = await receive()
            body += message["body"]
            await asyncio.sleep(0)
            if not message["more_body"]:
                break
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())],
            }
        )
        for i in range(0, len(body), 1 << 20):
            await send(
                {
                    "type": "http.response.body",
                    "body": bytes(body[i : i + (1 << 20)]),
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b""})

    class Watched(HttpProtocol):
        """Counts the pauses: its reading (the app reads slowly) and its writing (the
        client reads late)."""

        reads_paused = 0
        writes_paused = 0

        def connection_made(self, transport):
            super().connection_made(transport)
            pause = self.flow.pause_reading

            def counted():
                Watched.reads_paused += 1
                pause()

            self.flow.pause_reading = counted  # type: ignore[method-assign]

        def pause_writing(self):
            Watched.writes_paused += 1
            super().pause_writing()

    async def main():
        async with Served(loop, slow_echo, protocol=Watched) as srv:
            client = await srv.connect()
            body = payload(size, seed=3)
            await client.send(client.request("PUT", "/", body=body))
            await asyncio.sleep(0.2)  # the server's write buffer fills; it must pause
            _, got = await client.response()
            assert got == body
            client.close()

    run(loop, main(), timeout=60)
    assert Watched.reads_paused > 0 and Watched.writes_paused > 0


def test_the_app_sees_a_disconnect(loop):
    seen = []

    async def waits(scope, receive, send):
        seen.append(await receive())  # the first part of the body
        seen.append(await receive())  # the client left

    async def main():
        async with Served(loop, waits) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
            await writer.drain()
            while len(seen) < 1:
                await asyncio.sleep(0.01)
            writer.close()
            while len(seen) < 2:
                await asyncio.sleep(0.01)

    run(loop, main())
    assert seen == [
        {"type": "http.request", "body": b"abc", "more_body": True},
        {"type": "http.disconnect"},
    ]


def test_limit_concurrency_answers_503(loop):
    async def main():
        async with Served(loop, hello, limit_concurrency=2) as srv:
            first = await srv.connect()
            await first.send(first.request("GET", "/"))
            head, _ = await first.response()
            assert head.status_code == 200  # under the limit: served
            second = await srv.connect()
            await asyncio.sleep(0.05)  # both connections made: at the limit
            await second.send(second.request("GET", "/"))
            head, body = await second.response()
            assert head.status_code == 503 and body == b"Service Unavailable"
            first.close()
            second.close()

    run(loop, main())


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout(loop):
    async def main():
        async with Served(loop, hello, timeout_keep_alive=0.2) as srv:
            client = await srv.connect()
            await client.send(client.request("GET", "/"))
            await client.response()
            t0 = loop.time()
            assert await client.closed()
            assert loop.time() - t0 >= 0.15
            client.close()

    run(loop, main())


def test_the_keep_alive_timeout_counts_from_the_last_response(loop):
    """Requests answered while the timer runs move the deadline to their last response,
    not further; part of a request read while idle keeps the connection open longer."""

    async def main():
        async with Served(loop, hello, timeout_keep_alive=0.3) as srv:
            client = await srv.connect()
            for _ in range(3):  # across the timer armed by the first response
                await client.send(client.request("GET", "/"))
                await client.response()
                await asyncio.sleep(0.12)
            t0 = loop.time()
            assert await client.closed()
            assert 0.1 <= loop.time() - t0 < 0.4  # due 0.3 s after the last response
            client.close()

            client = await srv.connect()
            await client.send(client.request("GET", "/"))
            await client.response()
            await asyncio.sleep(0.2)
            await client.send(b"GET / HTTP/1.1\r\n")  # a head not yet whole
            await asyncio.sleep(0.2)  # past the first deadline: still open
            await client.send(b"Host: t\r\n\r\n")
            head, body = await client.response()
            assert (head.status_code, body) == (200, b"hello")
            client.close()

    run(loop, main())


def test_proxy_headers_root_path_and_the_access_log(loop):
    scopes = []

    async def app(scope, receive, send):
        scopes.append(scope)
        await hello(scope, receive, send)

    class Lines(logging.Handler):
        lines: list[str] = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    handler = Lines()
    access = logging.getLogger("uvicorn.access")

    async def main():
        served = Served(
            loop,
            app,
            proxy_headers=True,
            forwarded_allow_ips="*",
            root_path="/api",
            log_level="info",
        )
        # uvicorn logs access lines when the access logger has a handler; its logging
        # config (made with the Config) keeps them from propagating to the root.
        access.addHandler(handler)
        async with served as srv:
            client = await srv.connect()
            await client.send(
                client.request(
                    "GET",
                    "/x%20y?q=1",
                    headers=[("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
                )
            )
            await client.response()
            client.close()

    try:
        run(loop, main())
    finally:
        access.removeHandler(handler)
    scope = scopes[0]
    assert scope["client"][0] == "203.0.113.7" and scope["scheme"] == "https"
    assert scope["path"] == "/api/x y" and scope["raw_path"] == b"/api/x%20y"
    assert scope["root_path"] == "/api" and scope["query_string"] == b"q=1"
    assert handler.lines == ['203.0.113.7:0 - "GET /api/x%20y?q=1 HTTP/1.1" 200']


def test_the_scope_is_h11_protocols_scope(loop):
    """The same request through uvicorn's h11 protocol and through rsloop's gives the
    same scope (but the client port and the per-request state dict)."""
    captured = {}

    def capture(name):
        async def app(scope, receive, send):
            captured[name] = dict(scope)
            await hello(scope, receive, send)

        return app

    async def main():
        for name, cls in (("h11", H11Protocol), ("rsloop", HttpProtocol)):
            async with Served(loop, capture(name), protocol=cls) as srv:
                client = await srv.connect()
                await client.send(
                    client.request(
                        "GET",
                        "/a/b%2Fc?x=1&y=%20",
                        headers=[("X-Multi", "1"), ("x-multi", "2"), ("Accept", "*/*")],
                    )
                )
                await client.response()
                client.close()

    run(loop, main())
    h11_scope, ours = captured["h11"], captured["rsloop"]
    for scope in (h11_scope, ours):
        scope.pop("client")
        scope.pop("server")
    assert ours == h11_scope


# -- hostile input ----------------------------------------------------------------------

POST = b"POST / HTTP/1.1\r\nHost: t\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"
SMUGGLING = {
    "cl+te": POST + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "two cl": POST + b"Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
    "same cl twice": POST + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\na",
    "cl list": POST + b"Content-Length: 1, 1\r\n\r\na",
    "te not last": POST + b"Transfer-Encoding: chunked, identity\r\n\r\n",
    "te gzip": POST + b"Transfer-Encoding: gzip\r\n\r\n",
    "bad chunk size": CHUNKED + b"zz\r\n",
    "chunk size overflow": CHUNKED + b"1ffffffffffffffff\r\n",
    "chunk without crlf": CHUNKED + b"2\r\nabc\r\n0\r\n\r\n",
    "obs-fold": b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n",
    "bare lf": b"GET / HTTP/1.1\nHost: t\n\n",
    "bare lf in header": b"GET / HTTP/1.1\r\nHost: t\nX: y\r\n\r\n",
    "bare cr": b"GET / HTTP/1.1\r\nHost: t\rX: y\r\n\r\n",
    "nul in value": b"GET / HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n",
    "space before colon": b"GET / HTTP/1.1\r\nHost : t\r\n\r\n",
    "http/2 line": b"GET / HTTP/2.0\r\nHost: t\r\n\r\n",
    "no host": b"GET / HTTP/1.1\r\nX: y\r\n\r\n",
    "two hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "lowercase http version": b"GET / http/1.1\r\nHost: t\r\n\r\n",
    "garbage": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
}


@pytest.mark.parametrize("case", sorted(SMUGGLING))
def test_hostile_requests_get_400_and_a_closed_connection(loop, case):
    called = []

    async def app(scope, receive, send):
        called.append(scope)
        await echo(scope, receive, send)  # reads the body first

    async def main():
        async with Served(loop, app) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(SMUGGLING[case])
            data = await reader.read()  # to EOF
            writer.close()
            return data

    data = run(loop, main())
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert data.endswith(b"\r\n\r\nInvalid HTTP request received.")
    # A broken head never reaches the app; a broken body comes after its head did, and
    # then nothing the app sends follows the 400.
    assert called == [] or b"chunk" in case.encode()


def test_a_broken_body_after_its_response_ends_the_connection_without_a_400(loop):
    async def main():
        async with Served(loop, hello) as srv:  # answers without reading the body
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(CHUNKED)
            head = await reader.readuntil(b"hello")
            writer.write(b"zz\r\n")
            rest = await reader.read()
            writer.close()
            return head, rest

    head, rest = run(loop, main())
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert rest == b""


def test_a_good_request_ahead_of_a_bad_one_is_served(loop):
    async def main():
        async with Served(loop, hello) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n" + SMUGGLING["cl+te"])
            data = await reader.read()
            writer.close()
            return data

    data = run(loop, main())
    ok, _, bad = data.partition(b"hello")
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
    assert bad.startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_an_oversized_head_gets_400_as_uvicorn_answers_it(loop):
    async def main():
        async with Served(loop, hello, h11_max_incomplete_event_size=4096) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            # Not ended, and past the bound (as h11 bounds an incomplete head).
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"X-Big: " + b"a" * 5000)
            data = await reader.read()
            writer.close()
            # Just under the limit is served.
            client = await srv.connect()
            await client.send(client.request("GET", "/", headers=[("X-Big", "a" * 3000)]))
            head, _ = await client.response()
            client.close()
            return data, head.status_code

    data, status = run(loop, main())
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert data.endswith(b"Invalid HTTP request received.")
    assert status == 200


def test_a_slowloris_neither_blocks_others_nor_grows_past_the_limit(loop):
    async def main():
        async with Served(loop, hello, h11_max_incomplete_event_size=2048) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n")
            for _ in range(50):  # a header byte at a time
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(0.001)
                slow = [c for c in srv.state.connections if c.parser and c.parser.buffered]
                assert all(c.parser.buffered <= 2048 for c in slow)
                client = await srv.connect()
                await client.send(client.request("GET", "/"))
                head, _ = await client.response()
                assert head.status_code == 200
                client.close()
            writer.write(b"Y" * 3000)  # then past the limit
            data = await reader.read()
            writer.close()
            return data

    assert run(loop, main(), timeout=60).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_what_httptools_serves_and_a_strict_parser_might_not(loop):
    """``OPTIONS *``, a second Expect field, a head over the bound that came whole: served
    as uvicorn serves them."""
    scopes = []

    async def app(scope, receive, send):
        scopes.append(scope)
        await echo(scope, receive, send)

    async def main():
        async with Served(loop, app, h11_max_incomplete_event_size=1024) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            writer.write(b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert await reader.readuntil(b"0\r\n\r\n")
            writer.write(
                b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nExpect: x\r\n"
                b"Content-Length: 1\r\n\r\n"
            )
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"a")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert await reader.readuntil(b"0\r\n\r\n")
            writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\nCookie: " + b"c" * 3000 + b"\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            writer.close()

    run(loop, main())
    assert scopes[0]["path"] == "*" and scopes[0]["raw_path"] == b"*"
    assert scopes[2]["path"] == "/big"


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_bodies_may_be_any_bytes_like(loop, kind):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (b"hello ", b"world"):
            await send({"type": "http.response.body", "body": kind(piece), "more_body": True})
        await send({"type": "http.response.body", "body": kind(b"")})

    async def main():
        async with Served(loop, app) as srv:
            client = await srv.connect()
            await client.send(client.request("GET", "/"))
            head, body = await client.response()
            client.close()
            return head_value(head, b"transfer-encoding"), body

    assert run(loop, main()) == (b"chunked", b"hello world")


# -- websocket upgrade ------------------------------------------------------------------


@pytest.mark.parametrize("root_path", ["", "/api"])
def test_a_websocket_upgrade_goes_to_uvicorns_websocket_protocol(loop, root_path):
    """The websocket protocol is handed the target as the client sent it: its scope
    carries root_path once, as with httptools' protocol."""
    pytest.importorskip("websockets")

    async def app(scope, receive, send):
        assert scope["type"] == "websocket" and scope["root_path"] == root_path
        assert scope["path"] == root_path + "/ws"
        assert scope["raw_path"] == root_path.encode() + b"/ws"
        assert scope["query_string"] == b"x=1"
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        message = await receive()
        await send({"type": "websocket.send", "text": "echo:" + message["text"]})
        await send({"type": "websocket.close"})

    async def main():
        async with Served(loop, app, ws="websockets-sansio", root_path=root_path) as srv:
            reader, writer = await asyncio.open_connection(HOST, srv.port)
            # The client's first frame rides in the same packet as the head.
            mask = b"\x01\x02\x03\x04"
            text = b"hi"
            frame = (
                b"\x81"
                + bytes([0x80 | len(text)])
                + mask
                + bytes(b ^ mask[i % 4] for i, b in enumerate(text))
            )
            writer.write(
                b"GET /ws?x=1 HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
                + frame
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
            first = await reader.readexactly(2)
            assert first[0] == 0x81
            data = await reader.readexactly(first[1] & 0x7F)
            writer.close()
            return data

    assert run(loop, main()) == b"echo:hi"


def test_a_websocket_after_requests_on_the_same_connection_outlives_the_keep_alive_timer(
    loop,
):
    """A connection that served a request, then upgraded: the keep-alive timer of the
    HTTP requests does not close the websocket's transport."""
    pytest.importorskip("websockets")

    async def app(scope, receive, send):
        if scope["type"] == "http":
            return await hello(scope, receive, send)
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        message = await receive()
        await send({"type": "websocket.send", "text": "echo:" + message["text"]})

    async def main():
        async with Served(loop, app, ws="websockets-sansio", timeout_keep_alive=0.1) as srv:
            client = await srv.connect()
            await client.send(client.request("GET", "/"))
            head, body = await client.response()
            assert (head.status_code, body) == (200, b"hello")
            reader, writer = client.reader, client.writer
            writer.write(
                b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            await asyncio.sleep(0.5)  # five keep-alive timeouts
            mask, text = b"\x01\x02\x03\x04", b"hi"
            masked = bytes(b ^ mask[i % 4] for i, b in enumerate(text))
            writer.write(b"\x81" + bytes([0x80 | len(text)]) + mask + masked)
            first = await reader.readexactly(2)
            assert first[0] == 0x81
            data = await reader.readexactly(first[1] & 0x7F)
            writer.close()
            return data

    assert run(loop, main()) == b"echo:hi"


# -- on other loops ---------------------------------------------------------------------


def test_the_parser_reports_events_and_errors():
    from rsloop._rsloop import HttpRequestParser

    parser = HttpRequestParser(1024, False)
    events = parser.feed(b"POST /p?q HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nh")
    assert events == [
        (
            0,
            "POST",
            b"/p",
            b"q",
            "1.1",
            [(b"host", b"h"), (b"content-length", b"2")],
            True,
            False,
            None,
        ),
        (1, b"h"),
    ]
    assert parser.feed(b"iGET") == [(1, b"i"), (2,)]
    assert parser.buffered == 3 and not parser.idle
    assert parser.feed(b" / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n") == [
        (4, "invalid Content-Length")
    ]
    assert parser.feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n") == [(4, "invalid Content-Length")]
