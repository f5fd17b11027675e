"""Classification data for ``run_cpython.py`` (CPython's test.test_asyncio on rsloop).

Test ids are ``<module>.<Class>.<method>`` without the ``test.test_asyncio.`` prefix,
e.g. ``test_events.RsloopEventLoopTests.test_create_connection``; patterns are
``fnmatch`` globs over that id.

* ``PENDING``: tests that fail today because rsloop has not implemented the area yet
  (the method raises ``NotImplementedError("rsloop: Loop.X() is not implemented yet")``).
  Each area names the issue that removes it. They are run and counted apart; they do
  not fail the run. When an area lands, delete its entry: the runner then requires
  those tests to pass. A pending test that passes is reported as XPASS so the list can
  shrink.
* ``NOT_APPLICABLE``: tests that do not exercise the loop under test at all (stdlib's
  own loop classes, ``BaseEventLoop`` internals with mocked selectors, private
  attributes of the pure-Python loop). They are not run; they are counted as ``n/a``.

Anything else that fails, fails the run. Real rsloop bugs never go here.
"""

from __future__ import annotations

# area -> (what it is, the issue that brings it)
AREAS: dict[str, tuple[str, str]] = {
    "sockets": (
        "loop.sock_* (sock_recv, sock_sendall, sock_connect, sock_accept, ...)",
        "networking issue: low-level socket operations",
    ),
    "tcp": (
        "create_connection / create_server / connect_accepted_socket, TCP and Unix "
        "transports, servers, streams",
        "networking issue: TCP/Unix transports and servers",
    ),
    "udp": (
        "create_datagram_endpoint",
        "networking issue: UDP transports",
    ),
    "tls": (
        "start_tls, ssl= on connections and servers",
        "TLS issue (asyncio.sslproto over rsloop transports)",
    ),
    "pipes": (
        "connect_read_pipe / connect_write_pipe",
        "pipes issue",
    ),
    "subprocess": (
        "subprocess_exec / subprocess_shell and child watchers",
        "subprocess issue",
    ),
    "signals": (
        "add_signal_handler / remove_signal_handler (also used by asyncio's "
        "SafeChildWatcher.attach_loop)",
        "signals issue",
    ),
    "sendfile": (
        "loop.sendfile / sock_sendfile",
        "sendfile issue",
    ),
}

# What a pending failure must show: the NotImplementedError rsloop raises for a method
# of a pending area. A pending-listed test that fails in any other way is an
# unexpected failure (so a real bug cannot hide behind this list).
PENDING_MARKERS: tuple[str, ...] = ("is not implemented yet",)

_EV = "test_events.RsloopEventLoopTests"

# area -> fnmatch patterns over test ids. The first area whose pattern matches wins, so
# "tls" comes before "tcp" (SSL variants of TCP tests are TLS's).
PENDING: dict[str, list[str]] = {
    "tls": [
        f"{_EV}.test_*ssl*",
    ],
    "tcp": [],
    "udp": [],
    "sockets": [
        f"{_EV}.test_prompt_cancellation",  # sock_recv
    ],
    "pipes": [
        f"{_EV}.test_read_pipe",
        f"{_EV}.test_write_pipe*",
        f"{_EV}.test_read_pty_output",
        f"{_EV}.test_write_pty",
        f"{_EV}.test_bidirectional_pty",
        f"{_EV}.test_unclosed_pipe_transport",
    ],
    "subprocess": [
        # setUp attaches asyncio's SafeChildWatcher, which needs add_signal_handler.
        "test_events.RsloopSubprocessTests.*",
    ],
    "signals": [
        f"{_EV}.test_add_signal_handler",
        f"{_EV}.test_signal_handling_*",
        # these attach a SafeChildWatcher (add_signal_handler(SIGCHLD)) to the loop
        "test_events.Test*GetEventLoop.test_get_event_loop_returns_running_loop*",
        "test_events.Test*GetEventLoop.test_get_event_loop_new_process",
    ],
    "sendfile": [],
}

# (pattern, reason): not run, counted as n/a
NOT_APPLICABLE: list[tuple[str, str]] = [
    # test_events: CPython runs EventLoopTestsMixin on its own loops; ours is
    # RsloopEventLoopTests (and RsloopSubprocessTests), added by the runner.
    *[
        (f"test_events.{cls}.*", "stdlib's own loop class (rsloop runs RsloopEventLoopTests)")
        for cls in (
            "SelectEventLoopTests",
            "EPollEventLoopTests",
            "PollEventLoopTests",
            "KqueueEventLoopTests",
            "ProactorEventLoopTests",
        )
    ],
    (
        "test_events.Rsloop*Tests.test_timeout_rounding",
        "counts calls of the private BaseEventLoop._run_once (uvloop skips it too)",
    ),
    (
        "test_events.HandleTests.*",
        "asyncio.Handle on a mock loop (rsloop's handles are its own native class)",
    ),
    (
        "test_events.TimerTests.*",
        "asyncio.TimerHandle on a mock loop (rsloop's handles are its own native class)",
    ),
    ("test_events.AbstractEventLoopTests.*", "the abstract base class's NotImplementedError stubs"),
    (
        "test_tasks.*.test_log_destroyed_pending_task",
        "steps the private BaseEventLoop._run_once and reads _ready",
    ),
    # test_base_events: BaseEventLoop's own machinery, mostly with mocked selectors.
    (
        "test_base_events.BaseEventTests.*",
        "base_events._ipaddr_info and other module helpers, no loop",
    ),
    (
        "test_base_events.BaseEventLoopTests.*",
        "BaseEventLoop internals (_run_once, _ready, _scheduled, mocked selector)",
    ),
    (
        "test_base_events.BaseEventLoopWithSelectorTests.*",
        "SelectorEventLoop internals with mocked sockets and getaddrinfo",
    ),
    (
        "test_base_events.BaseLoopSockSendfileTests.*",
        "BaseSelectorEventLoop's pure-Python sendfile fallback",
    ),
    ("test_base_events.TestSelectorUtils.*", "selector_events helpers, no loop"),
]
