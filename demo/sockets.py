"""Sockets on rsloop: the sock_* coroutines, a Protocol echo server over TCP, UDP.

python demo/sockets.py            # RSLOOP_BACKEND=uring|poll|asyncio to choose
"""

from __future__ import annotations

import asyncio
import socket

import rsloop


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data.upper(), addr)


async def main() -> None:
    loop = asyncio.get_running_loop()
    print("backend:", rsloop.backend().name)

    # 1. sock_* on a socket pair: non-blocking sockets, awaited like the loop's I/O.
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    await loop.sock_sendall(a, b"hello over a socket pair")
    print("sock_recv:", await loop.sock_recv(b, 100))
    a.close()
    b.close()

    # 2. A Protocol echo server, and a client connected with sock_connect.
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, ("127.0.0.1", port))
    await loop.sock_sendall(client, b"ping")
    print("tcp echo:", await loop.sock_recv(client, 100))
    client.close()
    server.close()
    await server.wait_closed()

    # 3. UDP: a datagram endpoint that answers in upper case, and one that asks.
    server_tr, _ = await loop.create_datagram_endpoint(UdpEcho, local_addr=("127.0.0.1", 0))
    reply = loop.create_future()

    class Asker(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            reply.set_result(data)

    client_tr, _ = await loop.create_datagram_endpoint(
        Asker, remote_addr=server_tr.get_extra_info("sockname")
    )
    client_tr.sendto(b"datagram")
    print("udp echo:", await reply)
    client_tr.close()
    server_tr.close()


if __name__ == "__main__":
    rsloop.run(main())
