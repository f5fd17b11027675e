"""Signals, pipes and subprocesses: the Unix half of the loop.

* Signals: asyncio's design. A Python-level no-op handler makes CPython's C signal
  handler write the signal number into a wakeup fd (``signal.set_wakeup_fd``); the loop
  watches the other end of that socket pair and queues the registered handler. A wait in
  the kernel that the signal interrupts returns at once (EINTR), and the wakeup byte makes
  sure the loop wakes even when another thread took the signal.
* Pipes: ``connect_read_pipe`` / ``connect_write_pipe`` are asyncio's own code and pipe
  transports (``unix_events._UnixReadPipeTransport`` / ``_UnixWritePipeTransport``), which
  only need the loop's fd watchers and ``call_soon``.
* Subprocesses: asyncio's ``subprocess_exec`` / ``subprocess_shell`` and its
  ``_UnixSubprocessTransport`` (``base_subprocess``), with the child's exit observed by
  the loop itself through a pidfd (Linux 5.3+): no child watcher, no thread, no SIGCHLD
  handler. Where ``pidfd_open`` is missing a thread per child waits for it instead (what
  asyncio's default ThreadedChildWatcher does). A child still running when the loop closes
  is remembered, no thread started for it, and reaped without blocking the next time any
  rsloop loop starts a child or closes (``_reap_orphans``): it stays a zombie at most
  until then, and the pid cannot be reused meanwhile because it is still ours to reap.
  macOS and the BSDs have no pidfd: there the thread per child is the only way, and a
  portable build (``_backend.PORTABLE``) takes it on Linux too, so that it runs here.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading
import warnings
from asyncio import base_events, coroutines, events
from asyncio.log import logger
from typing import Any

from . import _backend
from ._compat import iscoroutinefunction

_Base: Any = base_events.BaseEventLoop

if sys.platform != "win32":
    from asyncio import unix_events

    _Unix: Any = unix_events._UnixSelectorEventLoop
else:  # pragma: no cover - no signals, pipes or Unix subprocesses there
    _Unix = None


def _sighandler_noop(signum, frame) -> None:
    """Installed with ``signal.signal`` so that CPython writes ``signum`` to the wakeup fd."""


def _run_signal_handle(handle) -> None:
    # The handle may be cancelled between the signal and this turn of the loop.
    if not handle._cancelled:
        handle._run()


class UnixMixin:
    """Signals, pipes and subprocesses, mixed into :class:`rsloop._loop.Loop`."""

    def _init_unix(self) -> None:
        self._signal_handlers: dict[int, events.Handle] = {}
        # The wakeup socket pair, made on the first add_signal_handler().
        self._ssock: socket.socket | None = None
        self._csock: socket.socket | None = None
        # pid -> pidfd (or None while a waiting thread owns the pid) of children we watch.
        self._children: dict[int, int | None] = {}

    def _close_unix(self) -> None:
        if not sys.is_finalizing():
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        elif self._signal_handlers:
            warnings.warn(
                f"Closing the loop {self!r} on interpreter shutdown stage, "
                "skipping signal handlers removal",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
            self._signal_handlers.clear()
        if self._ssock is not None:
            self._remove_reader(self._ssock.fileno())  # type: ignore[attr-defined]
            self._ssock.close()
            self._ssock = None
        if self._csock is not None:
            self._csock.close()
            self._csock = None
        children, self._children = self._children, {}
        for pid, pidfd in children.items():
            if pidfd is None:
                continue  # its waiting thread reaps it
            self._remove_reader(pidfd)  # type: ignore[attr-defined]
            os.close(pidfd)
            _orphans.add(pid)
            self._virtual_work(-1)  # type: ignore[attr-defined]
        _reap_orphans()

    # ----- signals -----

    def _check_signal(self, sig) -> None:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")

    def add_signal_handler(self, sig, callback, *args) -> None:
        """Run ``callback(*args)`` on the loop when signal ``sig`` arrives. Unix only.

        Raise ValueError if the signal number is invalid or uncatchable, RuntimeError if
        the handler cannot be set up (for example outside the main thread).
        """
        if coroutines.iscoroutine(callback) or iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()  # type: ignore[attr-defined]
        csock = self._wakeup_sockets()
        try:
            # Raises ValueError outside the main thread: called before anything changes,
            # so a loop running in another thread cannot add a handler.
            signal.set_wakeup_fd(csock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None

        handle = events.Handle(callback, args, self, None)  # type: ignore[arg-type]
        self._signal_handlers[sig] = handle
        try:
            signal.signal(sig, _sighandler_noop)
            # SA_RESTART: fewer EINTRs in code the callbacks run.
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                try:
                    signal.set_wakeup_fd(-1)
                except (ValueError, OSError) as nexc:
                    logger.info("set_wakeup_fd(-1) failed: %s", nexc)
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig} cannot be caught") from None
            raise

    def remove_signal_handler(self, sig) -> bool:
        """Remove the handler for ``sig``; True if there was one. Unix only."""
        self._check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig} cannot be caught") from None
            raise
        if not self._signal_handlers:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as exc:
                logger.info("set_wakeup_fd(-1) failed: %s", exc)
        return True

    def _wakeup_sockets(self) -> socket.socket:
        if self._csock is None:
            ssock, csock = socket.socketpair()
            ssock.setblocking(False)
            csock.setblocking(False)
            self._ssock, self._csock = ssock, csock
            self._add_reader(ssock.fileno(), self._read_signals)  # type: ignore[attr-defined]
        return self._csock

    def _read_signals(self) -> None:
        ssock = self._ssock
        while ssock is not None:
            try:
                data = ssock.recv(4096)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            if not data:
                return
            for signum in data:
                if signum:  # a zero byte is a plain wake-up
                    self._handle_signal(signum)

    def _handle_signal(self, sig: int) -> None:
        handle = self._signal_handlers.get(sig)
        if handle is None:
            return  # removed after the signal came
        if handle._cancelled:
            self.remove_signal_handler(sig)
        else:
            self.call_soon(_run_signal_handle, handle)  # type: ignore[attr-defined]

    # ----- pipes: asyncio's code and transports -----

    if _Unix is not None:
        connect_read_pipe = _Base.connect_read_pipe
        connect_write_pipe = _Base.connect_write_pipe
        _make_read_pipe_transport = _Unix._make_read_pipe_transport
        _make_write_pipe_transport = _Unix._make_write_pipe_transport

        # ----- subprocesses -----

        subprocess_exec = _Base.subprocess_exec
        subprocess_shell = _Base.subprocess_shell
        _log_subprocess = _Base._log_subprocess

    async def _make_subprocess_transport(
        self, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=None, **kwargs
    ):
        waiter = self.create_future()  # type: ignore[attr-defined]
        transp = unix_events._UnixSubprocessTransport(
            self,
            protocol,
            args,
            shell,
            stdin,
            stdout,
            stderr,
            bufsize,
            waiter=waiter,
            extra=extra,
            **kwargs,
        )
        self._watch_child(transp.get_pid(), transp)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transp.close()
            await transp._wait()
            raise
        return transp

    def _watch_child(self, pid: int, transp) -> None:
        _reap_orphans()
        # Under virtual time a running child is real work: the clock waits for it.
        self._virtual_work(1)  # type: ignore[attr-defined]
        pidfd = None
        # No pidfd on macOS and the BSDs; the portable build does without, as they do.
        if not _backend.PORTABLE and hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                # Already reaped by someone else's waitpid(-1): asyncio reports 255.
                self._child_exited(pid, None, transp)
                return
            except OSError:
                pass  # a kernel before 5.3
        if pidfd is None:
            # A thread waits for the child.
            self._children[pid] = None
            threading.Thread(
                target=self._wait_child_thread,
                args=(pid, transp),
                name=f"rsloop-waitpid-{pid}",
                daemon=True,
            ).start()
            return
        self._children[pid] = pidfd
        self._add_reader(pidfd, self._child_exited, pid, pidfd, transp)  # type: ignore[attr-defined]

    def _child_exited(self, pid: int, pidfd: int | None, transp) -> None:
        if pidfd is not None:
            self._remove_reader(pidfd)  # type: ignore[attr-defined]
            os.close(pidfd)
        self._children.pop(pid, None)
        returncode = _wait_exit_status(pid)
        if _PUBLISH_AT_REAP:
            # As asyncio 3.14+ (gh-127049): the exit is published as the child is reaped,
            # so send_signal() never finds a reaped (maybe reused) pid still running.
            transp._process_exited(returncode)
        else:
            self.call_soon(transp._process_exited, returncode)  # type: ignore[attr-defined]
        self._virtual_work(-1)  # type: ignore[attr-defined]

    def _wait_child_thread(self, pid: int, transp) -> None:
        if _PUBLISH_AT_REAP and hasattr(os, "waitid"):
            # Wait without reaping; the loop's thread reaps and publishes in one step.
            try:
                while True:
                    res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                    # macOS reports a stopped child here too: consume it, wait on.
                    if res is not None and res.si_code == getattr(os, "CLD_STOPPED", -1):
                        os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
                        continue
                    break
            except ChildProcessError:
                pass  # reaped elsewhere: the loop's waitpid reports 255
            try:
                self.call_soon_threadsafe(self._child_exited, pid, None, transp)  # type: ignore[attr-defined]
            except RuntimeError:
                _wait_exit_status(pid)  # the loop closed meanwhile: reap it here
                self._children.pop(pid, None)
            return
        returncode = _wait_exit_status(pid)
        self._children.pop(pid, None)
        try:
            self.call_soon_threadsafe(transp._process_exited, returncode)  # type: ignore[attr-defined]
        except RuntimeError:
            pass  # the loop closed meanwhile; the child is reaped all the same
        self._virtual_work(-1)  # type: ignore[attr-defined]


class _Published:
    def __init__(self) -> None:
        self.now = False

    def _process_exited(self, returncode) -> None:
        self.now = True

    def call_soon_threadsafe(self, *args, **kwargs) -> None:
        pass

    call_soon = call_soon_threadsafe


def _probe_publish_at_reap() -> bool:
    """Whether the running asyncio publishes a child's exit in the step that reaps it
    (3.14+, gh-127049), asked of its own ``_child_watcher_callback`` on stand-ins: it then
    calls the transport at once instead of scheduling the call."""
    if _Unix is None:
        return False
    seen = _Published()
    try:
        _Unix._child_watcher_callback(seen, 1, 0, seen)
    except Exception:  # noqa: BLE001 - another shape: the older behaviour
        return False
    return seen.now


_PUBLISH_AT_REAP = _probe_publish_at_reap()


def _wait_exit_status(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        logger.warning(
            "child process pid %d exit status already read:  will report returncode 255",
            pid,
        )
        return 255
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:  # an exit status Python does not understand: pass it on as is
        return status


# Children of closed loops that were still running then: reaped by _reap_orphans.
_orphans: set[int] = set()


def _reap_orphans() -> None:
    """Reap, without blocking, every orphaned child that has exited."""
    for pid in list(_orphans):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # reaped by someone else's waitpid(-1)
        if done:
            _orphans.discard(pid)
