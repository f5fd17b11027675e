"""TLS over rsloop's transports: ``ssl=`` on every connection and server method,
``start_tls``, handshake timeouts, and the ``ssl.SSLContext`` features users bring
(client certificates, encrypted keys, ALPN, SNI callbacks, verification errors).

TLS is asyncio's own ``sslproto`` on top of the loop's transport, so the ``asyncio``
column of the ``loop`` fixture is the reference. Certificates are made once per session
with ``cryptography``: a CA, a server certificate for ``localhost`` / 127.0.0.1 whose key
is encrypted, and a client certificate.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import socket
import ssl
import sys

import pytest
from netutil import HOST, needs_unix, unix_path

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

WAIT_S = 10.0
PASSWORD = b"correct horse"
PY311 = sys.version_info >= (3, 11)


def run(loop, coro, timeout: float = WAIT_S):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def payload(n: int) -> bytes:
    return bytes((i * 31 + (i >> 9)) & 0xFF for i in range(n))


# ----- certificates -----


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _cert(subject, key, issuer, issuer_key, *, ca=False, sans=(), usage=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers and key usage: 3.13's default context verifies strictly
        # (VERIFY_X509_STRICT) and refuses certificates without them.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=not ca,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class Pki:
    def __init__(self, directory) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(_name("rsloop test CA"), ca_key, _name("rsloop test CA"), ca_key, ca=True)
        server_key = ec.generate_private_key(ec.SECP256R1())
        server = _cert(
            _name("localhost"),
            server_key,
            ca.subject,
            ca_key,
            sans=(x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
        )
        client_key = ec.generate_private_key(ec.SECP256R1())
        client = _cert(
            _name("rsloop client"),
            client_key,
            ca.subject,
            ca_key,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        pem = serialization.Encoding.PEM
        self.ca = directory / "ca.pem"
        self.ca.write_bytes(ca.public_bytes(pem))
        self.server_cert = directory / "server.pem"
        self.server_cert.write_bytes(server.public_bytes(pem))
        self.server_key = directory / "server.key"  # encrypted: loaded with PASSWORD
        self.server_key.write_bytes(
            server_key.private_bytes(
                pem,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(PASSWORD),
            )
        )
        self.client_cert = directory / "client.pem"
        self.client_cert.write_bytes(
            client.public_bytes(pem)
            + client_key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.server_cert, self.server_key, password=PASSWORD)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.ca)
        return ctx

    def client_context(self, *, with_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            ctx.load_cert_chain(self.client_cert)
        return ctx


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


# ----- helpers -----


async def echo_handler(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def exchange(reader, writer, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    got = await reader.readexactly(len(data))
    writer.close()
    await writer.wait_closed()
    return got


# ----- tests -----


@pytest.mark.parametrize("size", [1, 1024, 1 << 20])
def test_echo_over_tcp(loop, pki, size):
    data = payload(size)

    async def main():
        server = await asyncio.start_server(echo_handler, HOST, 0, ssl=pki.server_context())
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("localhost", port, ssl=pki.client_context())
        got = await exchange(reader, writer, data)
        server.close()
        await server.wait_closed()
        return got

    assert run(loop, main()) == data


def test_extra_info(loop, pki):
    async def main():
        seen = {}

        async def handler(reader, writer):
            seen["server_peercert"] = writer.get_extra_info("peercert")
            await echo_handler(reader, writer)

        server = await asyncio.start_server(
            handler, HOST, 0, ssl=pki.server_context(require_client_cert=True)
        )
        port = server.sockets[0].getsockname()[1]
        client_ctx = pki.client_context(with_cert=True)
        reader, writer = await asyncio.open_connection(
            HOST, port, ssl=client_ctx, server_hostname="localhost"
        )
        info = {
            name: writer.get_extra_info(name)
            for name in ("ssl_object", "peercert", "cipher", "sslcontext", "compression")
        }
        info["socket"] = writer.get_extra_info("socket")
        info["peername"] = writer.get_extra_info("peername")
        await exchange(reader, writer, b"ping")
        server.close()
        await server.wait_closed()
        return info, seen, client_ctx, port

    info, seen, client_ctx, port = run(loop, main())
    assert isinstance(info["ssl_object"], ssl.SSLObject)
    assert info["ssl_object"].server_hostname == "localhost"
    assert dict(x[0] for x in info["peercert"]["subject"]) == {"commonName": "localhost"}
    name, version, bits = info["cipher"]
    assert version.startswith("TLS") and bits >= 128
    assert info["sslcontext"] is client_ctx
    assert info["compression"] is None
    assert info["socket"].family == socket.AF_INET
    assert info["peername"] == (HOST, port)
    # The server asked for and verified the client's certificate.
    assert dict(x[0] for x in seen["server_peercert"]["subject"]) == {"commonName": "rsloop client"}


def test_client_certificate_required_and_missing(loop, pki, handler_log):
    async def attempt(port):
        reader, writer = await asyncio.open_connection(
            HOST, port, ssl=pki.client_context(), server_hostname="localhost"
        )
        try:
            # TLS 1.3: the server's refusal arrives after the client's handshake is done.
            writer.write(b"hello")
            await writer.drain()
            return await reader.read(10)
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(
            echo_handler, HOST, 0, ssl=pki.server_context(require_client_cert=True)
        )
        port = server.sockets[0].getsockname()[1]
        try:
            # The client's handshake may complete (TLS 1.3) before the server refuses it:
            # then the refusal shows as an error or as EOF on the first read, never as
            # echoed data.
            try:
                answer = await attempt(port)
            except (ssl.SSLError, ConnectionResetError):
                answer = None
            assert answer in (None, b"")
        finally:
            server.close()
            await server.wait_closed()

    run(loop, main())
    # The server's side of the failed handshake may reach the exception handler.
    for ctx in handler_log.take():
        assert isinstance(ctx.get("exception"), (ssl.SSLError, ConnectionError)), ctx


def test_alpn_and_sni_callback(loop, pki):
    names = []

    async def main():
        server_ctx = pki.server_context()
        server_ctx.set_alpn_protocols(["h2", "http/1.1"])
        server_ctx.sni_callback = lambda sslobj, name, ctx: names.append(name)
        server = await asyncio.start_server(echo_handler, HOST, 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client_ctx = pki.client_context()
        client_ctx.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.open_connection(
            HOST, port, ssl=client_ctx, server_hostname="localhost"
        )
        alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        await exchange(reader, writer, b"x")
        server.close()
        await server.wait_closed()
        return alpn

    assert run(loop, main()) == "h2"
    assert names == ["localhost"]


def test_untrusted_certificate_is_a_verification_error(loop, pki, handler_log):
    async def main():
        server = await asyncio.start_server(echo_handler, HOST, 0, ssl=pki.server_context())
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                # The default context does not trust the test CA.
                await asyncio.open_connection(
                    HOST, port, ssl=ssl.create_default_context(), server_hostname="localhost"
                )
            with pytest.raises(ssl.SSLCertVerificationError):
                # Trusted CA, wrong name.
                await asyncio.open_connection(
                    HOST, port, ssl=pki.client_context(), server_hostname="example.org"
                )
        finally:
            server.close()
            await server.wait_closed()

    run(loop, main())
    for ctx in handler_log.take():  # the server's side of the failed handshakes
        assert isinstance(ctx.get("exception"), (ssl.SSLError, ConnectionError)), ctx


def test_handshake_timeout(loop, pki):
    async def main():
        # A plain TCP server that accepts and never speaks TLS.
        idle = []
        server = await asyncio.start_server(lambda r, w: idle.append(w), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ConnectionAbortedError, match="SSL handshake is taking longer"):
                await asyncio.open_connection(
                    HOST,
                    port,
                    ssl=pki.client_context(),
                    server_hostname="localhost",
                    ssl_handshake_timeout=0.2,
                )
        finally:
            for w in idle:
                w.close()
            server.close()
            await server.wait_closed()

    run(loop, main())


@needs_unix
def test_unix_server_and_connection(loop, pki, tmp_path):
    path = unix_path(tmp_path)

    async def main():
        server = await asyncio.start_unix_server(echo_handler, path, ssl=pki.server_context())
        reader, writer = await asyncio.open_unix_connection(
            path, ssl=pki.client_context(), server_hostname="localhost"
        )
        got = await exchange(reader, writer, b"over unix + tls")
        server.close()
        await server.wait_closed()
        return got

    assert run(loop, main()) == b"over unix + tls"


def test_connect_accepted_socket(loop, pki):
    async def main():
        listener = socket.create_server((HOST, 0))
        port = listener.getsockname()[1]
        client_task = asyncio.ensure_future(
            asyncio.open_connection(
                HOST, port, ssl=pki.client_context(), server_hostname="localhost"
            )
        )
        listener.setblocking(False)
        accepted, _ = await loop.sock_accept(listener)
        listener.close()
        got = loop.create_future()

        class Echo(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport

            def data_received(self, data):
                self.transport.write(data)

            def connection_lost(self, exc):
                got.set_result(exc)

        transport, _ = await loop.connect_accepted_socket(Echo, accepted, ssl=pki.server_context())
        reader, writer = await client_task
        echoed = await exchange(reader, writer, b"accepted elsewhere")
        transport.close()
        await got
        return echoed

    assert run(loop, main()) == b"accepted elsewhere"


@pytest.mark.skipif(not PY311, reason="StreamWriter.start_tls is 3.11+")
def test_start_tls_upgrades_a_plain_connection(loop, pki):
    async def main():
        server_ctx = pki.server_context()

        async def handler(reader, writer):
            assert await reader.readline() == b"STARTTLS\n"
            writer.write(b"GO\n")
            await writer.drain()
            await writer.start_tls(server_ctx)
            await echo_handler(reader, writer)

        server = await asyncio.start_server(handler, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"GO\n"
        await writer.start_tls(pki.client_context(), server_hostname="localhost")
        assert writer.get_extra_info("ssl_object") is not None
        got = await exchange(reader, writer, payload(100_000))
        server.close()
        await server.wait_closed()
        return got

    assert run(loop, main()) == payload(100_000)


def test_loop_start_tls_on_a_protocol(loop, pki):
    async def main():
        server = await asyncio.start_server(echo_handler, HOST, 0, ssl=pki.server_context())
        port = server.sockets[0].getsockname()[1]
        received = bytearray()
        done = loop.create_future()

        class Client(asyncio.Protocol):
            def data_received(self, data):
                received.extend(data)
                if len(received) >= 5:
                    done.set_result(None)

        transport, proto = await loop.create_connection(Client, HOST, port)
        tls = await loop.start_tls(
            transport, proto, pki.client_context(), server_hostname="localhost"
        )
        tls.write(b"hello")
        await done
        tls.close()
        server.close()
        await server.wait_closed()
        return bytes(received)

    assert run(loop, main()) == b"hello"


def test_sendfile_over_tls_falls_back(loop, pki, tmp_path):
    data = payload(300_000)
    path = tmp_path / "data"
    path.write_bytes(data)

    async def main():
        got = bytearray()
        done = loop.create_future()

        async def handler(reader, writer):
            got.extend(await reader.read())
            done.set_result(None)
            writer.close()

        server = await asyncio.start_server(handler, HOST, 0, ssl=pki.server_context())
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(
            asyncio.Protocol, HOST, port, ssl=pki.client_context(), server_hostname="localhost"
        )
        with open(path, "rb") as f:
            sent = await loop.sendfile(transport, f)
        transport.close()
        await done
        server.close()
        await server.wait_closed()
        return sent, bytes(got)

    sent, got = run(loop, main())
    assert sent == len(data)
    assert got == data


def test_no_fd_left_behind(loop, pki):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")

    async def main():
        server = await asyncio.start_server(echo_handler, HOST, 0, ssl=pki.server_context())
        port = server.sockets[0].getsockname()[1]
        for _ in range(5):
            reader, writer = await asyncio.open_connection(
                HOST, port, ssl=pki.client_context(), server_hostname="localhost"
            )
            await exchange(reader, writer, b"again")
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)

    run(loop, asyncio.sleep(0))  # rsloop makes its ring and eventfd on the first run
    before = len(os.listdir("/proc/self/fd"))
    run(loop, main())
    assert len(os.listdir("/proc/self/fd")) <= before
