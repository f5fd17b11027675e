"""The context a stream transport's protocol callbacks run in.

From 3.15, asyncio hands ``_make_socket_transport`` (and ``_start_serving``) a ``context``:
a server's connections each run in a copy of the context the server was made in, a
client's in a copy of its caller's, and every callback of the protocol -- made, data,
end of stream, lost -- runs in that one context, so a variable one callback sets is seen by
the next. Before 3.15 each callback runs in its own copy. Which applies is probed, as
rsloop probes it (``_make_socket_transport`` takes ``context``), and each test runs on
every backend, asyncio itself included: both halves of a version's behaviour are pinned.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import ssl
from asyncio import selector_events

import pytest
from netutil import HOST, close_server, needs_unix, run, unix_path

# The running asyncio passes its transports a context (3.15+).
TRANSPORT_CONTEXT = (
    "context"
    in inspect.signature(
        selector_events.BaseSelectorEventLoop._make_socket_transport  # type: ignore[attr-defined]
    ).parameters
)

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


class Seer(asyncio.Protocol):
    """Records the variable as each callback sees it; connection_made sets it."""

    def __init__(self, loop, echo: bool = False) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lost = loop.create_future()
        self.echo = echo

    def connection_made(self, transport) -> None:
        self.seen.append(("made", VAR.get()))
        self.transport = transport
        VAR.set("set in connection_made")

    def data_received(self, data) -> None:
        self.seen.append(("data", VAR.get()))
        if self.echo:
            self.transport.write(data)
            self.transport.close()

    def eof_received(self):
        self.seen.append(("eof", VAR.get()))

    def connection_lost(self, exc) -> None:
        self.seen.append(("lost", VAR.get()))
        if not self.lost.done():
            self.lost.set_result(None)


def expected(first: str) -> list[tuple[str, str]]:
    later = "set in connection_made" if TRANSPORT_CONTEXT else first
    return [("made", first), ("data", later), ("lost", later)]


async def _exchange(loop, serve, connect) -> tuple[Seer, Seer]:
    servers: list[Seer] = []

    def factory() -> Seer:
        proto = Seer(loop, echo=True)
        servers.append(proto)
        return proto

    VAR.set("the server's")
    server = await serve(factory)
    VAR.set("the client's")
    _, client = await connect(lambda: Seer(loop))
    client.transport.write(b"ping")
    await client.lost
    await servers[0].lost
    # 3.10's TLS transport is closed only by its own close(), not by the peer's.
    client.transport.close()
    await close_server(server)
    return servers[0], client


def _drop_eof(seen):
    # Whether the client sees eof_received before connection_lost differs by transport
    # (TLS has none): the test is about contexts, not about that.
    return [s for s in seen if s[0] != "eof"]


def test_tcp_callbacks_run_in_the_connections_context(loop):
    async def main():
        async def serve(factory):
            return await loop.create_server(factory, HOST, 0)

        server_holder: list = []

        async def serve_and_keep(factory):
            server = await serve(factory)
            server_holder.append(server)
            return server

        async def connect(factory):
            port = server_holder[0].sockets[0].getsockname()[1]
            return await loop.create_connection(factory, HOST, port)

        return await _exchange(loop, serve_and_keep, connect)

    server, client = run(loop, main())
    assert _drop_eof(server.seen) == expected("the server's")
    assert _drop_eof(client.seen) == expected("the client's")


@needs_unix
def test_unix_callbacks_run_in_the_connections_context(loop, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        return await _exchange(
            loop,
            lambda f: loop.create_unix_server(f, path),
            lambda f: loop.create_unix_connection(f, path),
        )

    server, client = run(loop, main())
    assert _drop_eof(server.seen) == expected("the server's")
    assert _drop_eof(client.seen) == expected("the client's")


def test_tls_callbacks_run_in_the_connections_context(loop, tls_contexts):
    server_ctx, client_ctx = tls_contexts

    async def main():
        server_holder: list = []

        async def serve(factory):
            server = await loop.create_server(factory, HOST, 0, ssl=server_ctx)
            server_holder.append(server)
            return server

        async def connect(factory):
            port = server_holder[0].sockets[0].getsockname()[1]
            return await loop.create_connection(
                factory, HOST, port, ssl=client_ctx, server_hostname="localhost"
            )

        return await _exchange(loop, serve, connect)

    server, client = run(loop, main())
    # Over TLS the application's connection_made and data_received both run inside the
    # raw transport's data_received (the handshake ends there) on every version, so they
    # share a context even before 3.15; connection_lost shares it from 3.15 on.
    for proto, first in ((server, "the server's"), (client, "the client's")):
        seen = _drop_eof(proto.seen)
        assert seen[:2] == [("made", first), ("data", "set in connection_made")]
        assert seen[2][0] == "lost"
        if TRANSPORT_CONTEXT:
            assert seen[2] == ("lost", "set in connection_made")


def test_each_connection_gets_its_own_copy_of_the_servers_context(loop):
    """Two connections to one server: what the first's callbacks set is not the second's."""

    async def main():
        protos: list[Seer] = []

        def factory() -> Seer:
            proto = Seer(loop, echo=True)
            protos.append(proto)
            return proto

        VAR.set("the server's")
        server = await loop.create_server(factory, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        for _ in range(2):
            _, client = await loop.create_connection(lambda: Seer(loop), HOST, port)
            client.transport.write(b"ping")
            await client.lost
        for proto in protos:
            await proto.lost
        await close_server(server)
        return protos

    first, second = run(loop, main())
    assert first.seen[0] == ("made", "the server's")
    assert second.seen[0] == ("made", "the server's")


@pytest.fixture
def tls_contexts(tmp_path):
    """A self-signed certificate for localhost: (server context, client context)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = tmp_path / "cert.pem"
    key_path = tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_path, key_path)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cert_path)
    return server_ctx, client_ctx
