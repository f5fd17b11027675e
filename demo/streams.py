"""Streams on rsloop: asyncio.start_server / open_connection over TCP and a Unix socket,
and connect_accepted_socket for a socket accepted elsewhere.

python demo/streams.py            # RSLOOP_BACKEND=uring|poll|asyncio to choose
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile

import rsloop


async def upper_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line.upper())
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def talk(reader, writer, lines) -> list[bytes]:
    answers = []
    for line in lines:
        writer.write(line + b"\n")
        await writer.drain()
        answers.append((await reader.readline()).strip())
    writer.close()
    await writer.wait_closed()
    return answers


async def main() -> None:
    print("backend:", rsloop.backend().name)

    server = await asyncio.start_server(upper_lines, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print("tcp:", await talk(*await asyncio.open_connection("127.0.0.1", port), [b"a", b"bc"]))
    server.close()
    await server.wait_closed()

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "demo.sock")
        server = await asyncio.start_unix_server(upper_lines, path)
        print("unix:", await talk(*await asyncio.open_unix_connection(path), [b"unix"]))
        server.close()
        await server.wait_closed()

    # A socket accepted by plain blocking code, handed to the loop afterwards.
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    listener.close()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_accepted_socket(
        lambda: asyncio.StreamReaderProtocol(reader), accepted
    )
    client.sendall(b"accepted elsewhere\n")
    print("accepted:", (await reader.readline()).strip())
    client.close()
    transport.close()


if __name__ == "__main__":
    rsloop.run(main())
