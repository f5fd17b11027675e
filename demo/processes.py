"""Pipes, subprocesses and signals on rsloop.

python demo/processes.py          # RSLOOP_BACKEND=uring|poll|asyncio to choose
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import rsloop


async def main() -> None:
    loop = asyncio.get_running_loop()
    print("backend:", rsloop.backend().name)

    # A subprocess: its stdout read line by line, its exit status awaited.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "print('one'); print('two')", stdout=asyncio.subprocess.PIPE
    )
    lines = [line.strip() async for line in proc.stdout]
    print("child said:", lines, "exit", await proc.wait())

    # A shell pipeline fed through stdin.
    proc = await asyncio.create_subprocess_shell(
        "tr a-z A-Z", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate(b"shouted\n")
    print("shell:", out.strip())

    # A pipe read through the loop.
    r, w = os.pipe()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb")
    )
    os.write(w, b"through a pipe\n")
    os.close(w)
    print("pipe:", (await reader.read()).strip())
    transport.close()

    # A signal handler, run by the loop when the signal arrives.
    got = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, got.set_result, "SIGUSR1")
    os.kill(os.getpid(), signal.SIGUSR1)
    print("signal:", await got)
    loop.remove_signal_handler(signal.SIGUSR1)


if __name__ == "__main__":
    rsloop.run(main())
