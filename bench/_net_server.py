"""Echo server on the loop under test: ``python bench/_net_server.py LOOP KIND [CERT KEY]``.

Run by ``bench/net.py``, one process per measurement. Creates the loop exactly as
``bench/_child.py`` does (same names, same environment: ``RSLOOP_BACKEND``, the
pypi-rsloop venv), starts an echo server of KIND on 127.0.0.1 with an ephemeral port
and prints one JSON line ``{"port": ..., ...}`` on stdout. It then serves until a line
(or EOF) arrives on stdin, and prints a last JSON line with its peak RSS and what went
wrong, if anything.

KIND is one of ``protocol`` (asyncio.Protocol, data_received -> transport.write),
``streams`` (asyncio.start_server, reader.read / writer.write / drain), ``sock``
(loop.sock_accept, sock_recv, sock_sendall on plain non-blocking sockets), ``udp``
(create_datagram_endpoint, datagram_received -> sendto) and ``tls`` (the ``protocol``
server with ``ssl=``: an ``ssl.SSLContext`` for the server side with CERT and KEY,
PEM files the parent made).

Exit codes: 0 served and stopped cleanly; 3 the loop is not installed; 4 the loop does
not support this kind (``{"unsupported": "..."}``: NotImplementedError or
AttributeError from the API, at set-up or while serving); 1 anything else.
A script, not ``-m``, so that ``import rsloop`` finds the installed wheel, never the
source tree (the parent starts it with cwd=/).
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import ssl
import sys
import threading

from _child import NOT_INSTALLED, _peak_rss_kib, _rss_kib_now, make_loop

UNSUPPORTED = 4
HOST = "127.0.0.1"
READ_SIZE = 65536
# asyncio's default listen backlog is 100: a client opening 10,000 connections one after
# the other would see SYNs dropped (a second's retransmit each) whenever the loop is
# slower to accept than the client to connect. uvicorn and granian use 2,048 and 1,024.
BACKLOG = 1024
# Errors the peer causes when the client closes its sockets at the end of a run.
PEER_GONE = (ConnectionError, BrokenPipeError, TimeoutError)
# What a loop lacking an API raises.
MISSING_API = (NotImplementedError, AttributeError)


def _why_missing(exc) -> str:
    """'ExcType: message', naming the API when the message is empty (rloop raises a
    bare NotImplementedError for ssl=)."""
    return f"{type(exc).__name__}: {str(exc) or API.get(KIND, '?')}"


class State:
    def __init__(self, loop):
        self.loop = loop
        self.unsupported = None  # "ExcType: message" of the first MISSING_API error
        self.errors = []  # other exceptions seen by the loop or the handlers

    def missing(self, exc):
        if self.unsupported is None:
            self.unsupported = _why_missing(exc)
        self.loop.stop()

    def failed(self, what):
        if len(self.errors) < 5:
            self.errors.append(what)


# protocol ---------------------------------------------------------------------------
class EchoProtocol(asyncio.Protocol):
    __slots__ = ("transport",)

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def start_protocol(loop, st):
    server = await loop.create_server(EchoProtocol, HOST, 0, backlog=BACKLOG)
    return server, server.sockets[0].getsockname()[1]


# tls --------------------------------------------------------------------------------
async def start_tls(loop, st):
    cert, key = sys.argv[3], sys.argv[4]
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server = await loop.create_server(EchoProtocol, HOST, 0, ssl=ctx, backlog=BACKLOG)
    return server, server.sockets[0].getsockname()[1]


# streams ----------------------------------------------------------------------------
async def start_streams(loop, st):
    async def handle(reader, writer):
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except PEER_GONE:
            pass
        except MISSING_API as exc:
            st.missing(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, HOST, 0, backlog=BACKLOG)
    return server, server.sockets[0].getsockname()[1]


# sock -------------------------------------------------------------------------------
async def start_sock(loop, st):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((HOST, 0))
    lsock.listen(BACKLOG)
    lsock.setblocking(False)

    async def serve(conn):
        try:
            while True:
                data = await loop.sock_recv(conn, READ_SIZE)
                if not data:
                    break
                await loop.sock_sendall(conn, data)
        except PEER_GONE:
            pass
        except MISSING_API as exc:
            st.missing(exc)
        finally:
            conn.close()

    async def accept_forever():
        try:
            while True:
                conn, _ = await loop.sock_accept(lsock)
                conn.setblocking(False)
                # As asyncio's transports do for TCP; plain sockets do not get it.
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                loop.create_task(serve(conn))
        except MISSING_API as exc:
            st.missing(exc)

    task = loop.create_task(accept_forever())

    class Server:
        def close(self):
            task.cancel()
            lsock.close()

    return Server(), lsock.getsockname()[1]


# udp --------------------------------------------------------------------------------
class EchoDatagram(asyncio.DatagramProtocol):
    __slots__ = ("transport",)

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


async def start_udp(loop, st):
    transport, _ = await loop.create_datagram_endpoint(EchoDatagram, local_addr=(HOST, 0))
    return transport, transport.get_extra_info("sockname")[1]


KINDS = {
    "protocol": start_protocol,
    "streams": start_streams,
    "sock": start_sock,
    "udp": start_udp,
    "tls": start_tls,
}
# What each kind needs of the loop, for an unsupported-API message that has none.
API = {
    "protocol": "create_server",
    "streams": "asyncio.start_server",
    "sock": "sock_accept / sock_recv / sock_sendall",
    "udp": "create_datagram_endpoint",
    "tls": "create_server(ssl=...)",
}
KIND = ""


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def raise_nofile() -> int:
    """Raise the soft limit on open files to the hard limit (one descriptor per
    connection: 10,000 connections need more than the usual 1,024); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def main() -> int:
    global KIND
    nofile = raise_nofile()
    loop_name, kind = sys.argv[1], sys.argv[2]
    start = KINDS[kind]
    KIND = kind
    try:
        loop, info = make_loop(loop_name)
    except ImportError as exc:
        emit({"skip": f"{type(exc).__name__}: {exc}"})
        return NOT_INSTALLED
    asyncio.set_event_loop(loop)
    st = State(loop)

    def on_exception(loop, context):
        exc = context.get("exception")
        if isinstance(exc, PEER_GONE):
            return
        if isinstance(exc, MISSING_API):
            st.missing(exc)
            return
        st.failed(f"{context.get('message')}: {exc!r}")

    loop.set_exception_handler(on_exception)
    try:
        server, port = loop.run_until_complete(start(loop, st))
    except MISSING_API as exc:
        emit({"unsupported": _why_missing(exc), "info": info})
        loop.close()
        return UNSUPPORTED

    def wait_for_stop():
        # Blocks in read() with the GIL released; costs the loop nothing until then.
        sys.stdin.readline()
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # loop already closed
            pass

    threading.Thread(target=wait_for_stop, daemon=True).start()
    emit(
        {
            "port": port,
            "kind": kind,
            "loop": loop_name,
            "base_rss_kib": _rss_kib_now(),
            "nofile": nofile,
        }
    )
    code = 0
    try:
        loop.run_forever()
    except MISSING_API as exc:
        st.missing(exc)
    except BaseException as exc:  # reported, then the parent fails the measurement
        st.failed(repr(exc))
    peak_kib = _peak_rss_kib()
    try:
        server.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    except Exception as exc:  # shutdown trouble is reported, never measured
        st.failed(f"shutdown: {exc!r}")
    out = {
        "peak_rss_kib": peak_kib,
        "errors": st.errors,
        "python": sys.version.split()[0],
        "info": info,
    }
    if st.unsupported:
        out["unsupported"] = st.unsupported
        code = UNSUPPORTED
    emit(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
