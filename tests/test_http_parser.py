"""rsloop's HTTP/1.1 request parser against h11's reading of the same bytes.

Generated requests (methods, targets, header lists, bodies framed by length or chunks,
pipelined, cut at random points) must read the same through both. Generated requests
with a byte changed must never be read by rsloop where h11 refuses them, nor read
differently: rsloop may be stricter than h11 (it refuses a bare LF, an obs-fold and
transfer codings other than chunked, control bytes in field values, targets that are not
origin or absolute form, which h11 takes), never looser.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

h11 = pytest.importorskip("h11")

from rsloop._rsloop import HttpRequestParser  # noqa: E402

HEAD, BODY, COMPLETE, UPGRADED, ERROR, WHOLE = range(6)
MAX_HEAD = 16 * 1024

TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
PCHAR = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@%/"
VCHAR = "".join(chr(c) for c in range(0x21, 0x7F))

token = st.text(TCHAR, min_size=1, max_size=12)
# Names the framing reads are chosen by the test, not drawn.
FRAMING = {"content-length", "transfer-encoding", "host", "connection", "upgrade", "expect"}
name = token.filter(lambda n: n.lower() not in FRAMING)
value = st.text(VCHAR + " \t", max_size=30).map(str.strip)


@st.composite
def requests(draw) -> tuple[bytes, list[tuple]]:
    """Bytes of one request and what reading it must give."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) | token)
    path = "/" + draw(st.text(PCHAR, max_size=20))
    query = draw(st.none() | st.text(PCHAR + "?", max_size=20))
    target = path if query is None else f"{path}?{query}"
    headers = [("Host", draw(st.text(TCHAR, min_size=1, max_size=10)))]
    headers += draw(st.lists(st.tuples(name, value), max_size=6))
    body = draw(st.binary(max_size=300))
    framing = draw(
        st.sampled_from(["length", "chunked", "none"] if not body else ["length", "chunked"])
    )
    out = f"{method} {target} HTTP/1.1\r\n".encode()
    if framing == "length":
        headers.append(("Content-Length", str(len(body))))
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
    headers = draw(st.permutations(headers))
    out += b"".join(f"{n}: {v}\r\n".encode() for n, v in headers) + b"\r\n"
    if framing == "chunked":
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
        for piece in pieces:
            ext = draw(st.sampled_from(["", ";a=b", ";x"]))
            out += b"%x%s\r\n" % (len(piece), ext.encode()) + piece + b"\r\n"
        out += b"0\r\n" + draw(st.sampled_from([b"", b"Trailer-One: x\r\n"])) + b"\r\n"
    else:
        out += body
    path_part, _, query_part = target.partition("?")
    expected_headers = [(n.lower().encode(), v.encode()) for n, v in headers]
    return out, [(method, path_part.encode(), query_part.encode(), expected_headers, body)]


def ours(data: bytes, cuts: list[int]) -> tuple[list[tuple], str | None]:
    """What rsloop's parser reads from ``data`` fed in pieces: requests and the error."""
    parser = HttpRequestParser(MAX_HEAD, False)
    events = []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        events += parser.feed(data[a:b])
    read: list[tuple] = []
    current = None
    for event in events:
        if event[0] == HEAD:
            _, method, path, query, _version, headers, *_ = event
            current = [method, path, query, headers, b""]
        elif event[0] == BODY:
            current[4] += event[1]
        elif event[0] == COMPLETE:
            read.append(tuple(current))
        elif event[0] == ERROR:
            return read, event[1]
    return read, None


def theirs(data: bytes) -> tuple[list[tuple], str | None]:
    """What h11 reads from ``data``: requests and the error."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    conn.receive_data(data)
    read: list[tuple] = []
    current = None
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if event is h11.PAUSED and conn.their_state is h11.DONE:
                    conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                    conn.send(h11.EndOfMessage())
                    conn.start_next_cycle()
                    continue
                return read, None
            if isinstance(event, h11.Request):
                path, _, query = event.target.partition(b"?")
                current = [
                    event.method.decode(),
                    path,
                    query,
                    [(n, v) for n, v in event.headers],
                    b"",
                ]
            elif isinstance(event, h11.Data):
                current[4] += event.data
            elif isinstance(event, h11.EndOfMessage):
                read.append(tuple(current))
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        return read, str(exc)


@given(st.lists(requests(), min_size=1, max_size=3), st.data())
def test_valid_requests_read_as_h11_reads_them(reqs, data):
    raw = b"".join(r for r, _ in reqs)
    expected = [e for _, exp in reqs for e in exp]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=5)))
    got, error = ours(raw, cuts)
    assert error is None
    assert got == expected
    assert theirs(raw) == (expected, None)


@given(requests(), st.data())
def test_a_changed_byte_is_never_read_more_loosely_than_h11_reads_it(req, data):
    raw, _ = req
    at = data.draw(st.integers(0, len(raw) - 1))
    how = data.draw(st.sampled_from(["replace", "insert", "delete"]))
    byte = bytes(
        [
            data.draw(
                st.sampled_from([0, 9, 10, 13, 32, 44, 58, 59, 0x7F, 0x80]) | st.integers(0, 255)
            )
        ]
    )
    if how == "replace":
        mutated = raw[:at] + byte + raw[at + 1 :]
    elif how == "insert":
        mutated = raw[:at] + byte + raw[at:]
    else:
        mutated = raw[:at] + raw[at + 1 :]
    assume(mutated != raw)
    got, error = ours(mutated, [])
    h11_read, h11_error = theirs(mutated)
    # Every request rsloop reads, h11 reads the same (so a request h11 refuses, rsloop
    # never reads: it refuses it too, or earlier, or waits for more).
    assert got == h11_read[: len(got)], (mutated, error, h11_error)


def test_set_scope_makes_each_head_its_asgi_scope():
    state = {"db": 1}
    asgi = {"version": "3.0", "spec_version": "2.3"}
    base = {"type": "http", "asgi": asgi, "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 4000), "scheme": "http", "root_path": "/api",
            "state": state}  # fmt: skip
    parser = HttpRequestParser(MAX_HEAD, True)
    parser.set_scope(base)
    events = parser.feed(
        b"GET /a%20b/%E2%82%AC?x=%20 HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\n\r\n"
        b"GET / HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n"
    )
    # Each request came whole, without a body: one event for its head and its end.
    assert [e[0] for e in events] == [WHOLE, WHOLE]
    _, scope, keep_alive, expect_continue, upgrade = events[0]
    assert (keep_alive, expect_continue, upgrade) == (True, False, None)
    assert scope == {**base, "http_version": "1.1", "method": "GET",
                     "headers": [(b"host", b"t"), (b"connection", b"keep-alive")],
                     "path": "/api/a b/\u20ac", "raw_path": b"/api/a%20b/%E2%82%AC",
                     "query_string": b"x=%20"}  # fmt: skip
    # Each request has its own copies of the connection's dicts.
    assert scope["state"] is not state and scope["asgi"] is not asgi
    second = events[1][1]
    assert second["path"] == "/api/" and second["raw_path"] == b"/api/"
    # HTTP/1.0: not kept alive, whatever its Connection field says.
    assert second["http_version"] == "1.0" and events[1][2] is False
    assert second["state"] is not scope["state"]


def test_with_a_scope_only_a_request_whole_in_one_read_is_one_event():
    """A head whose body, or whose end, comes in a later read stays a head event; a body,
    an upgrade and an error keep their order after the head."""
    parser = HttpRequestParser(MAX_HEAD, True)
    parser.set_scope({"type": "http", "root_path": "", "state": {}})
    events = parser.feed(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nh")
    assert [e[0] for e in events] == [HEAD, BODY]
    assert [e[0] for e in parser.feed(b"i")] == [BODY, COMPLETE]
    events = parser.feed(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\nGET")
    assert [e[0] for e in events] == [WHOLE]
    assert (
        parser.feed(b" / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")[0][0] == HEAD
    )
    assert parser.feed(b"0\r\n\r\n") == [(COMPLETE,)]
    events = parser.feed(
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"
    )
    assert [e[0] for e in events] == [WHOLE, ERROR]
    parser = HttpRequestParser(MAX_HEAD, True)
    parser.set_scope({"type": "http", "root_path": "", "state": {}})
    events = parser.feed(
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nxy"
    )
    assert [e[0] for e in events] == [HEAD, UPGRADED]
    assert events[0][4] == b"websocket" and events[1][1] == b"xy"


def test_a_cycle_through_the_scope_base_is_collected():
    """The parser shows the collector the scope base it holds: an app's `state` that leads
    back to the parser's owner is freed with it, not leaked."""
    import gc
    import weakref

    class Owner:
        pass

    owner = Owner()
    owner.parser = HttpRequestParser(MAX_HEAD, True)
    owner.parser.set_scope({"type": "http", "root_path": "", "state": {"owner": owner}})
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None
