"""The private asyncio names rsloop depends on, against the running Python's asyncio.

rsloop runs asyncio's own networking code (``create_connection``, ``create_server``,
``Server``, ``_accept_connection2``, sslproto...) over hooks of its own, which that code
calls: ``_make_socket_transport``, ``_start_serving`` and the others below. When a new
CPython passes a hook a new argument (3.15 passes ``context`` to three of them), the
hook must take it, or servers and clients break. These tests read asyncio's definitions
of the same hooks and fail the day one takes a parameter rsloop's does not, or a name
rsloop borrows is gone. ``docs/architecture.md`` ("Private asyncio names") says why each
is used.
"""

from __future__ import annotations

import inspect
import sys
from asyncio import base_events, selector_events

import pytest

import rsloop
from rsloop import _backend

pytestmark = pytest.mark.skipif(
    _backend.NATIVE_ERROR is not None, reason="the native loop is not built here"
)

if sys.platform != "win32":
    from asyncio import unix_events

    _UNIX = unix_events._UnixSelectorEventLoop
else:  # pragma: no cover
    _UNIX = None

_SELECTOR = selector_events.BaseSelectorEventLoop
_BASE = base_events.BaseEventLoop

# Hook -> the asyncio class whose definition asyncio's own code calls.
HOOKS = {
    "_make_socket_transport": _SELECTOR,
    "_make_ssl_transport": _SELECTOR,
    "_make_datagram_transport": _SELECTOR,
    "_start_serving": _SELECTOR,
    "_stop_serving": _SELECTOR,
    "_add_reader": _SELECTOR,
    "_add_writer": _SELECTOR,
    "_remove_reader": _SELECTOR,
    "_remove_writer": _SELECTOR,
    "_ensure_fd_no_transport": _SELECTOR,
    "_check_closed": _BASE,
    "_make_read_pipe_transport": _UNIX,
    "_make_write_pipe_transport": _UNIX,
    "_make_subprocess_transport": _UNIX,
}

# Parameters asyncio passes by position that rsloop's hook takes through *args, with why.
BY_POSITION = {
    "_start_serving": {
        # Server._start_serving() and the accept retry pass the two TLS timeouts by
        # position; rsloop hands them on to _accept_connection2 as they came.
        "ssl_handshake_timeout",
        "ssl_shutdown_timeout",
    },
}

# Private names of asyncio that rsloop takes and runs as they are: they must exist.
BORROWED = [
    (_BASE, "_ensure_resolved"),
    (_BASE, "_connect_sock"),
    (_BASE, "_create_connection_transport"),
    (_BASE, "_create_server_getaddrinfo"),
    (_BASE, "_sendfile_fallback"),
    (_BASE, "_log_subprocess"),
    (_SELECTOR, "_accept_connection"),
    (_SELECTOR, "_accept_connection2"),
    (_SELECTOR, "_sendfile_native"),
    (_SELECTOR, "_ensure_fd_no_transport"),
    (selector_events, "_SelectorSocketTransport"),
    (selector_events, "_SelectorDatagramTransport"),
    (selector_events, "_SelectorTransport"),
    (base_events, "_set_nodelay"),
    (base_events, "_check_ssl_socket"),
    (base_events, "_ipaddr_info"),
]
if _UNIX is not None:
    BORROWED += [
        (_UNIX, "_make_read_pipe_transport"),
        (_UNIX, "_make_write_pipe_transport"),
        (_UNIX, "_child_watcher_callback"),
        (unix_events, "_UnixSubprocessTransport"),
        (unix_events, "_UnixReadPipeTransport"),
    ]


def _params(func) -> dict[str, inspect.Parameter]:
    params = dict(inspect.signature(func).parameters)
    params.pop("self", None)
    return params


@pytest.mark.parametrize("name", [n for n, owner in HOOKS.items() if owner is not None])
def test_each_hook_takes_every_parameter_asyncio_defines_for_it(name):
    ours = _params(getattr(rsloop.Loop, name))
    theirs = _params(getattr(HOOKS[name], name))
    if any(p.kind is p.VAR_KEYWORD for p in ours.values()):
        return  # takes any keyword
    allowed = BY_POSITION.get(name, set())
    missing = [
        p
        for p in theirs
        if p not in ours
        and p not in allowed
        and theirs[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    assert not missing, (
        f"asyncio's {HOOKS[name].__name__}.{name}{inspect.signature(getattr(HOOKS[name], name))} "
        f"takes {missing}, which rsloop.Loop.{name}{inspect.signature(getattr(rsloop.Loop, name))} "
        "does not: asyncio's code will pass them"
    )
    if allowed:
        assert any(p.kind is p.VAR_POSITIONAL for p in ours.values())


@pytest.mark.parametrize(
    "owner,name", BORROWED, ids=[f"{getattr(o, '__name__', o)}.{n}" for o, n in BORROWED]
)
def test_each_borrowed_name_exists(owner, name):
    assert hasattr(owner, name), f"asyncio no longer has {owner.__name__}.{name}"


def test_the_check_would_fail_on_a_missing_keyword():
    # The check itself: a hook without 3.15's `context` fails it where asyncio has one.
    def old_hook(self, sock, protocol, waiter=None, *, extra=None, server=None):
        pass

    theirs = _params(_SELECTOR._make_socket_transport)
    missing = [p for p in theirs if p not in _params(old_hook)]
    assert missing == (["context"] if "context" in theirs else [])
