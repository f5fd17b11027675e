"""HTTP/1.1 for uvicorn, parsed in Rust: ``uvicorn app:app --http rsloop.http:HttpProtocol``.

A drop-in for uvicorn's ``HttpToolsProtocol``: the same constructor, the same ASGI scope
keys and events, the same answers (400 for a request it cannot read, 503 past
``--limit-concurrency``, the keep-alive timeout, the access log, the websocket upgrade
handed to uvicorn's websocket protocol). What differs is where the work is done: each
read goes through one call into rsloop's native parser (``httparse`` with strict framing:
a request two readers could frame differently is refused), and each response head is
built by one native call. An incomplete request head is bounded by uvicorn's
``h11_max_incomplete_event_size`` (16 KiB unless set), answered with 400 as uvicorn's
h11 protocol answers it.

It runs on any asyncio loop (it needs only the transport and loop APIs); rsloop's own
loop is the fast one.
"""

from __future__ import annotations

import asyncio
import contextvars
import http
import logging
import sys
from collections import deque
from typing import TYPE_CHECKING, Any, Literal

try:
    from uvicorn.config import Config
    from uvicorn.logging import TRACE_LOG_LEVEL
    from uvicorn.protocols.http.flow_control import (
        HIGH_WATER_LIMIT,
        FlowControl,
        service_unavailable,
    )
    from uvicorn.protocols.utils import (
        get_client_addr,
        get_local_addr,
        get_path_with_query_string,
        get_remote_addr,
        is_ssl,
    )
    from uvicorn.server import ServerState
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "rsloop.http.HttpProtocol is a protocol for uvicorn: install uvicorn "
        "(pip install uvicorn) to use it"
    ) from exc

from ._rsloop import HttpCycle, HttpRequestParser, response_head

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application, ASGIReceiveEvent, ASGISendEvent

__all__ = ["HttpProtocol"]

# The event kinds of HttpRequestParser.feed (rust/src/py/http.rs).
_HEAD, _BODY, _COMPLETE, _UPGRADED, _ERROR, _WHOLE = range(6)

# uvicorn's own default for h11_max_incomplete_event_size, where a Config lacks it.
_DEFAULT_MAX_HEAD = 16 * 1024


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}

_LOGGER = logging.getLogger("uvicorn.error")
# asyncio.Task, which takes eager_start= from 3.12 on (typeshed's may not say so).
_Task: Any = asyncio.Task
_ACCESS_LOGGER = logging.getLogger("uvicorn.access")


class HttpProtocol(asyncio.Protocol):
    """uvicorn's HTTP/1.1 protocol with the parsing and head building in Rust."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.logger = logging.getLogger("uvicorn.error")
        self.access_logger = logging.getLogger("uvicorn.access")
        self.access_log = self.access_logger.hasHandlers()
        self.ws_protocol_class = config.ws_protocol_class
        self.root_path = config.root_path
        self.asgi_version = config.asgi_version
        self.limit_concurrency = config.limit_concurrency
        self.app_state = app_state
        max_head = getattr(config, "h11_max_incomplete_event_size", None) or _DEFAULT_MAX_HEAD
        self.parser: HttpRequestParser | None = HttpRequestParser(
            max_head, self.ws_protocol_class is not None
        )

        self.timeout_keep_alive_task: asyncio.TimerHandle | None = None
        self.timeout_keep_alive = config.timeout_keep_alive

        self.server_state = server_state
        self.connections = server_state.connections
        self.tasks = server_state.tasks

        # Per connection.
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.flow: FlowControl = None  # type: ignore[assignment]
        self.server: tuple[str, int | None] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme: Literal["http", "https"] | None = None
        self.pipeline: deque[tuple[_Cycle, ASGI3Application]] = deque()
        # An unreadable request came behind requests still being answered.
        self.invalid_after_pipeline = False
        # On a real loop (not the mock ones of uvicorn's tests): each app starts eagerly
        # (3.12+, no task factory of the user's), and the keep-alive timer is armed once
        # and moved on when it fires instead of cancelled and made again per request.
        real_loop = isinstance(self.loop, asyncio.AbstractEventLoop)
        self.reset_contextvars = getattr(config, "reset_contextvars", False)
        self.eager = (
            real_loop
            and sys.version_info >= (3, 12)
            and self.loop.get_task_factory() is None
            and not self.reset_contextvars
        )
        self.lazy_timer = real_loop
        # When the last response ended, and whether anything was read since.
        self.idle_since = 0.0
        self.read_while_idle = False

        # The cycles' end-of-response call, made once.
        self._on_response = self._on_response_complete

        # Per request.
        self.scope: dict[str, Any] = None  # type: ignore[assignment]
        self.cycle: _Cycle = None  # type: ignore[assignment]

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.add(self)
        self.transport = transport  # type: ignore[assignment]
        self.flow = FlowControl(transport)  # type: ignore[arg-type]
        self.server = get_local_addr(transport)  # type: ignore[arg-type]
        self.client = get_remote_addr(transport)  # type: ignore[arg-type]
        self.scheme = "https" if is_ssl(transport) else "http"  # type: ignore[arg-type]
        if self.parser is not None:
            # Each head comes as its ASGI scope: this part, and the request's keys.
            self.parser.set_scope(
                {
                    "type": "http",
                    "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
                    "server": self.server,
                    "client": self.client,
                    "scheme": self.scheme,
                    "root_path": self.root_path,
                    "state": self.app_state,
                }
            )
        if self.logger.level <= TRACE_LOG_LEVEL:
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", self._prefix())

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.logger.level <= TRACE_LOG_LEVEL:
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection lost", self._prefix())
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.wake()
        if self.flow is not None:
            self.flow.resume_writing()
        self._cancel_keep_alive()
        if exc is None:
            self.transport.close()
        self.parser = None
        # No cycle is made after this; the bound method held here would keep the
        # protocol in a reference cycle, for the collector to find.
        self._on_response = None  # type: ignore[assignment]

    def eof_received(self) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        if self.timeout_keep_alive_task is not None:
            if self.lazy_timer:
                self.read_while_idle = True
            else:
                self._cancel_keep_alive()
        parser = self.parser
        if parser is None or self.invalid_after_pipeline:
            return
        upgrade_head: dict[str, Any] | None = None
        rest = b""
        for event in parser.feed(data):
            kind = event[0]
            if kind == _WHOLE:  # a request without a body, whole: the common one
                previous = self.cycle
                if (
                    self.eager
                    and self.limit_concurrency is None
                    and (previous is None or previous.response_complete)
                ):
                    # _on_head() and _start() for it, inline: no upgrade (the parser
                    # never makes one whole), no limit to check, nothing to wait for.
                    _, scope, keep_alive, expect_continue, _ = event
                    self.scope = scope
                    cycle = self.cycle = _Cycle(
                        scope,
                        self.transport,
                        self.flow,
                        self.server_state.default_headers,
                        self.access_log,
                        keep_alive,
                        expect_continue,
                        True,
                        self._on_response,
                    )
                    task = _Task(cycle.run_asgi(self.app), loop=self.loop, eager_start=True)
                    if not task.done():
                        task.add_done_callback(self.tasks.discard)
                        self.tasks.add(task)
                else:
                    self._on_head(event, True)
            elif kind == _HEAD:
                upgrade_head = self._on_head(event, False)
            elif kind == _BODY:
                self._on_body(event[1])
            elif kind == _COMPLETE:
                self._on_complete()
            elif kind == _UPGRADED:
                rest += event[1]
            else:
                self._on_invalid()
                return
        if upgrade_head is not None:
            self.handle_websocket_upgrade(rest)

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    # -- what uvicorn's server calls ------------------------------------------------------

    def shutdown(self) -> None:
        """Begins a graceful shutdown: close now when idle, else after this response."""
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()
        else:
            self.cycle.keep_alive = False

    def timeout_keep_alive_handler(self) -> None:
        if self.lazy_timer:
            # Armed when the connection last went idle; since then it may have read, or
            # be answering a request (whose end arms it again).
            self.timeout_keep_alive_task = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return
            now = self.loop.time()
            if self.read_while_idle:
                # Part of a request came since the last response ended (when, is not
                # kept): the connection counts as idle from now.
                self.read_while_idle = False
                due = now + self.timeout_keep_alive
            else:
                due = self.idle_since + self.timeout_keep_alive
            if due > now:
                self.timeout_keep_alive_task = self.loop.call_at(
                    due, self.timeout_keep_alive_handler
                )
                return
        if not self.transport.is_closing():
            self.transport.close()

    # -- requests -------------------------------------------------------------------------

    def _prefix(self) -> str:
        return f"{self.client[0]}:{self.client[1]} - " if self.client else ""

    def _cancel_keep_alive(self) -> None:
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None

    def _on_head(self, event: tuple[Any, ...], whole: bool) -> dict[str, Any] | None:
        """A request head: its scope, then its cycle (started, or queued behind the one
        in progress); ``whole`` when the request came in full, without a body. Returns
        the scope when the connection becomes a websocket."""
        _, scope, keep_alive, expect_continue, upgrade = event
        self.scope = scope
        if upgrade is not None:
            if upgrade.lower() == b"websocket" and self.ws_protocol_class is not None:
                if self.root_path:  # the target as sent
                    scope["raw_path"] = scope["raw_path"][len(self.root_path.encode()) :]
                return scope
            self.logger.warning("Unsupported upgrade request.")
            if self.ws_protocol_class is None:
                self.logger.warning(
                    "No supported WebSocket library detected. Please use "
                    "\"pip install 'uvicorn[standard]'\", or install 'websockets' or "
                    "'wsproto' manually."
                )

        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app: ASGI3Application = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app

        previous = self.cycle
        self.cycle = _Cycle(
            scope,
            self.transport,
            self.flow,
            self.server_state.default_headers,
            self.access_log,
            keep_alive,
            expect_continue,
            whole,
            self._on_response,
        )
        if previous is None or previous.response_complete:
            self._start(self.cycle, app)
        else:
            # Pipelined: runs when the response before it is complete.
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))
        return None

    def _on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.wake()

    def _on_complete(self) -> None:
        cycle = self.cycle
        cycle.more_body = False  # (also when answered already: the request was whole)
        if not cycle.response_complete:
            cycle.wake()

    def _on_invalid(self) -> None:
        """A request that cannot be read: 400, and the connection ends. When it came
        after requests still being answered (pipelined), they are answered first."""
        self.logger.warning("Invalid HTTP request received.")
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and cycle.more_body:
            # The body of a request already answered (its app did not read it): a 400
            # now would answer nothing the client asked; the connection just ends.
            self.transport.close()
            return
        if cycle is not None and not cycle.response_complete:
            if cycle.more_body:
                # The request being answered is the broken one: its app sees the
                # client gone, and nothing it sends goes out after the 400.
                cycle.disconnected = True
                cycle.wake()
            else:
                self.flow.pause_reading()
                self.invalid_after_pipeline = True
                return
        self.send_400_response("Invalid HTTP request received.")

    def _start(self, cycle: _Cycle, app: ASGI3Application) -> None:
        if self.eager:
            # The app runs at once, up to its first wait: a response that needs no
            # waiting is written before data_received returns, without a trip through
            # the ready queue. A task already done needs no tracking (its done callback
            # would be one more handle through the ready queue, to remove it again).
            task = _Task(cycle.run_asgi(app), loop=self.loop, eager_start=True)
            if task.done():
                return
        elif self.reset_contextvars:
            # uvicorn's opt-in: the app does not see context set outside the request.
            if sys.version_info >= (3, 11):
                task = self.loop.create_task(cycle.run_asgi(app), context=contextvars.Context())
            else:  # pragma: no cover - 3.10
                task = contextvars.Context().run(self.loop.create_task, cycle.run_asgi(app))
        else:
            task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def _on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if not self.lazy_timer:
            self._cancel_keep_alive()
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start(cycle, app)
        elif self.invalid_after_pipeline:
            self.send_400_response("Invalid HTTP request received.")
        elif self.lazy_timer:
            self.idle_since = self.loop.time()
            self.read_while_idle = False
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )
        else:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def handle_websocket_upgrade(self, rest: bytes = b"") -> None:
        """Hands the connection to uvicorn's websocket protocol: the head as it came
        (with the bytes that followed it), then the transport."""
        if self.logger.level <= TRACE_LOG_LEVEL:
            self.logger.log(TRACE_LOG_LEVEL, "%sUpgrading to WebSocket", self._prefix())
        self.connections.discard(self)
        # The keep-alive timer of the requests served before on this connection would
        # close the transport the websocket protocol now owns (a read no longer cancels it).
        self._cancel_keep_alive()
        self._on_response = None  # type: ignore[assignment]
        scope = self.scope
        target = scope["raw_path"]
        if scope["query_string"]:
            target += b"?" + scope["query_string"]
        out = [scope["method"].encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
        for name, value in scope["headers"]:
            out += [name, b": ", value, b"\r\n"]
        out.append(b"\r\n")
        out.append(rest)
        protocol = self.ws_protocol_class(  # type: ignore[misc]
            config=self.config, server_state=self.server_state, app_state=self.app_state
        )
        protocol.connection_made(self.transport)
        protocol.data_received(b"".join(out))
        self.transport.set_protocol(protocol)

    def send_400_response(self, msg: str) -> None:
        head, _, _, _ = response_head(
            _STATUS_LINES[400],
            self.server_state.default_headers,
            [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(msg)).encode("ascii")),
                (b"connection", b"close"),
            ],
            False,
            400,
            False,
        )
        self.transport.write(head + msg.encode("ascii"))
        self.transport.close()


class _Cycle(HttpCycle):
    """One request and its response: the ASGI ``receive``, and ``send`` (native: the
    response head and body are framed and written in Rust, see ``HttpCycle``)."""

    __slots__ = ()

    def wake(self) -> None:
        """What asyncio.Event.set() did: the next receive() returns without waiting, a
        receive() waiting now returns."""
        self.woken = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run_asgi(self, app: ASGI3Application) -> None:
        try:
            result = await app(self.scope, self.receive, self.send)  # type: ignore[arg-type, func-returns-value]
            if result is None and self.response_complete:
                return  # the common end: on_response has run, and is spent
        except BaseException as exc:
            try:
                _LOGGER.error("Exception in ASGI application\n", exc_info=exc)
                if not self.response_started:
                    await self._send_500()
                else:
                    self.transport.close()
            finally:
                self.on_response = None
            return
        try:
            if result is not None:
                _LOGGER.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                _LOGGER.error("ASGI callable returned without starting response.")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                _LOGGER.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            # A response the app did not end: nothing it sends later is the protocol's.
            self.on_response = None

    async def _send_500(self) -> None:
        await self.send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"21"),
                    (b"connection", b"close"),
                ],
            }
        )
        await self.send(
            {"type": "http.response.body", "body": b"Internal Server Error", "more_body": False}
        )

    async def _send_slow(self, message: ASGISendEvent) -> None:
        """``send`` when writing is paused or the client gone: wait for the transport
        to drain, then send (nothing goes out once the client is gone)."""
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        self._send_now(message)

    def _log_access(self, status: int) -> None:
        scope = self.scope
        _ACCESS_LOGGER.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope),  # type: ignore[arg-type]
            scope["method"],
            get_path_with_query_string(scope),  # type: ignore[arg-type]
            scope["http_version"],
            status,
        )

    async def receive(self) -> ASGIReceiveEvent:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            if self.flow.read_paused:
                self.flow.resume_reading()
            if not self.woken:
                waiter = self.waiter = asyncio.get_running_loop().create_future()
                try:
                    await waiter
                finally:
                    self.waiter = None
            self.woken = False
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message: ASGIReceiveEvent = {
            "type": "http.request",
            "body": bytes(self.body),
            "more_body": self.more_body,
        }
        self.body = bytearray()
        return message
