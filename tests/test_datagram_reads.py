"""Datagrams already queued in the socket when the loop reads it: rsloop's transports take
several per readiness event (as libuv under uvloop does), asyncio's one. What a protocol
can see must not differ: order, a close or pause_reading() from datagram_received taking
effect at once, an exception reaching the handler without losing the datagrams after it.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest
from test_datagram import Recorder, endpoint, run

QUEUED = 40  # more than one batch


def _queue(addr, count: int) -> None:
    """Sends ``count`` numbered datagrams to ``addr`` from a plain socket, at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(count):
            s.sendto(b"%d" % i, addr)


def test_queued_datagrams_arrive_in_order(loop):
    async def main():
        st, server = await endpoint(loop, local_addr=("127.0.0.1", 0))
        _queue(st.get_extra_info("sockname"), QUEUED)
        await server.wait(QUEUED)
        assert [d for d, _ in server.datagrams] == [b"%d" % i for i in range(QUEUED)]
        st.close()

    run(loop, main())


def test_close_in_datagram_received_stops_reading_at_once(loop):
    class CloseOnFirst(Recorder):
        def datagram_received(self, data, addr):
            super().datagram_received(data, addr)
            self.transport.close()

    async def main():
        st, server = await endpoint(loop, CloseOnFirst, local_addr=("127.0.0.1", 0))
        _queue(st.get_extra_info("sockname"), QUEUED)
        assert await server.lost is None
        assert server.events == ["made", "datagram", ("lost", None)]

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.11+ datagram transports pause")
def test_pause_in_datagram_received_holds_the_rest_until_resume(loop):
    class PauseOnFirst(Recorder):
        def datagram_received(self, data, addr):
            super().datagram_received(data, addr)
            if len(self.datagrams) == 1:
                self.transport.pause_reading()

    async def main():
        st, server = await endpoint(loop, PauseOnFirst, local_addr=("127.0.0.1", 0))
        _queue(st.get_extra_info("sockname"), QUEUED)
        await server.wait(1)
        await asyncio.sleep(0.05)
        assert len(server.datagrams) == 1
        st.resume_reading()
        await server.wait(QUEUED)
        assert [d for d, _ in server.datagrams] == [b"%d" % i for i in range(QUEUED)]
        st.close()

    run(loop, main())


def test_exception_in_datagram_received_loses_nothing_after_it(loop, handler_log):
    class FailOnThird(Recorder):
        def datagram_received(self, data, addr):
            super().datagram_received(data, addr)
            if data == b"2":
                raise RuntimeError("third")

    async def main():
        st, server = await endpoint(loop, FailOnThird, local_addr=("127.0.0.1", 0))
        _queue(st.get_extra_info("sockname"), QUEUED)
        await server.wait(QUEUED)
        assert [d for d, _ in server.datagrams] == [b"%d" % i for i in range(QUEUED)]
        assert not st.is_closing()
        st.close()

    run(loop, main())
    (ctx,) = handler_log.take()
    assert isinstance(ctx["exception"], RuntimeError)
