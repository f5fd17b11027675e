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
  attributes of the pure-Python loop), or that assert a private asyncio class rsloop
  deliberately does not return, where the suite tests the behaviour on rsloop against
  asyncio's. They are not run; they are counted as ``n/a``.

* ``KNOWN_BUGS``: real rsloop differences found by these suites and not fixed yet, each
  with what differs and a reproducer. They are counted in their own ``known`` column and
  listed loudly on every run (never as n/a or pending); one that starts passing is
  reported as FIXED.

Anything else that fails, fails the run. Real rsloop bugs never go in PENDING or
NOT_APPLICABLE.
"""

from __future__ import annotations

import sys

# area -> (what it is, the issue that brings it). Empty: every area has landed (pipes,
# subprocesses and signals were the last).
AREAS: dict[str, tuple[str, str]] = {}

# What a pending failure must show: the NotImplementedError rsloop raises for a method
# of a pending area. A pending-listed test that fails in any other way is an
# unexpected failure (so a real bug cannot hide behind this list).
PENDING_MARKERS: tuple[str, ...] = ("is not implemented yet",)

# Pending tests whose NotImplementedError is raised in a forked child, so the parent
# only sees its consequence: pattern -> the text the failure must show instead.
PENDING_CHILD_MARKERS: dict[str, str] = {}

# area -> fnmatch patterns over test ids. The first area whose pattern matches wins.
# (Every area has landed: all tests not listed below must pass.)
PENDING: dict[str, list[str]] = {}

# (pattern, reason): not run, counted as n/a
NOT_APPLICABLE: list[tuple[str, str]] = [
    # test_events: CPython runs EventLoopTestsMixin on its own loops; ours is
    # RsloopEventLoopTests (and RsloopSubprocessTests), added by the runner.
    # test_sock_lowlevel and test_sendfile likewise (mixin per selector class; rsloop's
    # is RsloopEventLoopTests).
    *[
        (f"{mod}.{cls}.*", "stdlib's own loop class (rsloop runs RsloopEventLoopTests)")
        for mod in ("test_events", "test_sock_lowlevel", "test_sendfile")
        for cls in (
            "SelectEventLoopTests",
            "EPollEventLoopTests",
            "PollEventLoopTests",
            "KqueueEventLoopTests",
            "ProactorEventLoopTests",
        )
    ],
    # Functional tests run per loop class; the runner adds the Rsloop* class.
    *[
        (f"{mod}.{cls}.*", f"stdlib's own loop class (rsloop runs {ours})")
        for mod, cls, ours in (
            ("test_server", "SelectorStartServerTests", "RsloopStartServerTests"),
            ("test_server", "ProactorStartServerTests", "RsloopStartServerTests"),
            ("test_buffered_proto", "BufferedProtocolSelectorTests", "RsloopBufferedProtocolTests"),
            ("test_buffered_proto", "BufferedProtocolProactorTests", "RsloopBufferedProtocolTests"),
            ("test_sslproto", "SelectorStartTLSTests", "RsloopStartTLSTests"),
            ("test_sslproto", "ProactorStartTLSTests", "RsloopStartTLSTests"),
            ("test_unix_events", "SelectorEventLoopUnixSocketTests", "RsloopUnixSocketTests"),
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
    # test_selector_events: BaseSelectorEventLoop and its transports on mocked sockets,
    # driven by CPython's TestLoop (assert_reader, readers/writers bookkeeping).
    (
        "test_selector_events.BaseSelectorEventLoopTests.*",
        "BaseSelectorEventLoop internals (_selector, _accept_connection, sock_* on a mock)",
    ),
    *[
        (
            f"test_selector_events.{cls}.*",
            f"stdlib's {what} on a mocked socket; needs CPython's TestLoop "
            "(assert_reader, readers/writers)",
        )
        for cls, what in (
            ("SelectorTransportTests", "_SelectorTransport"),
            ("SelectorSocketTransportTests", "_SelectorSocketTransport"),
            ("SelectorSocketTransportBufferedProtocolTests", "_SelectorSocketTransport"),
            # rsloop's DatagramTransport is native (DatagramCore); its behaviour on a
            # real loop is covered by test_events' UDP tests and tests/test_datagram.py.
            ("SelectorDatagramTransportTests", "_SelectorDatagramTransport"),
        )
    ],
    # test_unix_events
    (
        "test_unix_events.SelectorEventLoopSignalTests.*",
        "asyncio.SelectorEventLoop's signal handling with a mocked signal module",
    ),
    (
        "test_unix_events.SelectorEventLoopUnixSockSendfileTests.*",
        "private _UnixSelectorEventLoop._sock_sendfile_native[_impl] and loop._selector "
        "(loop.sock_sendfile itself: test_sendfile.RsloopEventLoopTests)",
    ),
    *[
        (
            f"test_unix_events.{cls}.*",
            f"stdlib's {what} on a mocked pipe; needs CPython's TestLoop "
            "(assert_reader, readers/writers)",
        )
        for cls, what in (
            ("UnixReadPipeTransportTests", "_UnixReadPipeTransport"),
            ("UnixWritePipeTransportTests", "_UnixWritePipeTransport"),
        )
    ],
    (
        "test_subprocess.GenericWatcherTests.test_create_subprocess_fails_with_inactive_watcher",
        "asyncio's child-watcher protocol with a mock watcher: rsloop observes its own "
        "children through a pidfd and never consults the policy's child watcher (as "
        "uvloop); see docs/compatibility.md",
    ),
    # 3.14+: these read asyncio's child watcher object on the loop (`loop._watcher`, its
    # per-child threads); rsloop has none. The behaviour they guard (gh-127049: the exit
    # is published as the child is reaped, so send_signal() never targets a reaped pid)
    # runs as test_send_signal_never_targets_reaped_pid in the same classes.
    *[
        (
            f"test_subprocess.{cls}.{test}",
            "reads asyncio's child watcher object (loop._watcher); rsloop watches its "
            "children through a pidfd (docs/compatibility.md)",
        )
        for cls in ("SubprocessPidfdWatcherTests", "SubprocessThreadedWatcherTests")
        for test in ("test_watcher_implementation", "test_pid_not_reaped_before_exit_published")
    ],
    # 3.14+: each asserts, in a thread, that call_soon_threadsafe's handle is asyncio's
    # private class events._ThreadSafeHandle; the assertion ends the thread before it
    # stops the loop. rsloop returns its native handle (a deliberate difference: the
    # Python class cost 7x per post), with that class's behaviour: cancel()/cancelled()
    # from another thread wait for a run in progress. tests/test_callbacks.py runs these
    # scenarios on rsloop against asyncio's own loop on each version.
    *[
        (
            f"test_events.RsloopEventLoopTests.test_call_soon_threadsafe_handle_{test}",
            "asserts the private class events._ThreadSafeHandle; rsloop's native handle "
            "has its behaviour (tests/test_callbacks.py, docs/compatibility.md)",
        )
        for test in (
            "block_cancellation",
            "block_check_cancelled",
            "cancel_other_thread",
            "cancel_same_thread",
        )
    ],
    # 3.14+: test_taskgroups' classes run on asyncio.EventLoop (their loop_factory); the
    # runner adds the same tests on rsloop.
    *[
        (f"test_taskgroups.{cls}.*", f"stdlib's own loop class (rsloop runs {ours})")
        for cls, ours in (
            ("TestTaskGroup", "RsloopTestTaskGroup"),
            ("TestEagerTaskTaskGroup", "RsloopEagerTaskTaskGroup"),
        )
    ],
    (
        # 3.14+: simulates a full socket by swapping the `_sock` of asyncio's
        # _SelectorSocketTransport, found through its `_read_ready_cb`; rsloop's transport
        # has neither (test_remote_shutdown_receives_trailing_data, the same exchange
        # without the swap, runs on rsloop).
        "test_ssl.TestSSL.test_remote_shutdown_receives_trailing_data_on_slow_socket",
        "patches asyncio's _SelectorSocketTransport internals (_read_ready_cb, _sock)",
    ),
    (
        "test_unix_events.*ChildWatcherTests.*",
        "stdlib child watchers driven by a mocked os.waitpid; the loop is a placeholder "
        "whose add/remove_signal_handler are mocked",
    ),
    # CPython 3.12's copy fails on its own loop when run alone (`python3.12 -m test
    # test_asyncio.test_subprocess -m test_create_subprocess_with_pidfd`): it expects the
    # policy's get_event_loop() to raise, which 3.12's does only once an earlier test has
    # called set_event_loop(). 3.11 and 3.13 run it here and pass on both drivers.
    *(
        [
            (
                "test_subprocess.GenericWatcherTests.test_create_subprocess_with_pidfd",
                "fails on CPython 3.12's own loop when run alone: it depends on an earlier "
                "test having called set_event_loop()",
            )
        ]
        if sys.version_info[:2] == (3, 12)
        else []
    ),
]


# (pattern, what differs + reproducer, hangs): real rsloop differences these suites
# found, to be fixed in rsloop (never hidden as n/a). Counted in the "known" column and
# listed loudly on every run; they do not fail the run, and one that passes is reported
# as FIXED so it can be deleted. hangs=True: not run at all (it would sit out
# --test-timeout every run); ``--run-known-hangs`` runs them anyway.
KNOWN_BUGS: list[tuple[str, str, bool]] = []


def _portable_build() -> bool:
    """Whether rsloop's native module runs the macOS/BSD code paths (``nox -s portable``)."""
    try:
        from rsloop import _backend
    except ImportError:
        return False
    return _backend.PORTABLE


if _portable_build():
    KNOWN_BUGS.append(
        (
            "test_subprocess.SubprocessFastWatcherTests.*",
            "portable build (macOS's child wait): these tests install asyncio's "
            "FastChildWatcher, which reaps every child with waitpid(-1) when SIGCHLD "
            "comes; rsloop never consults the policy's watcher, and its thread per child "
            "then finds its short-lived child already reaped and reports returncode 255 "
            "(asyncio gets the status from the watcher). Which tests lose the race varies "
            "from run to run; with a pidfd the loop has reaped first in every run here. "
            "Reproducer: "
            "run_cpython.py --backend poll -m test_subprocess on a --features portable build",
            False,
        )
    )
