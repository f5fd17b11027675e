"""``rsloop.Loop``: the native loop plus the per-loop glue asyncio keeps in Python.

What runs per callback (scheduling, the run loop, timers, fd watchers) is native
(``rsloop._rsloop.Loop``). What runs once per loop or per error -- run_forever's set-up,
run_until_complete, exception handlers, executors, async generator hooks, task
factories -- lives here, with asyncio's behaviour and messages.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import sys
import threading
import traceback
import warnings
from asyncio import base_events, constants, coroutines, events, futures, tasks

from . import _compat, _format, _malloc, _rsloop, _streams
from ._net import NetMixin
from ._rsloop import Loop as _NativeLoop
from ._rsloop import set_malloc_thresholds as _set_malloc_thresholds
from ._rsloop import set_threadsafe_handles_wait as _set_threadsafe_handles_wait
from ._sock import SockMixin
from ._unix import UnixMixin

# asyncio's create_task() parameters, which the two probes below read.
_CREATE_TASK_PARAMS = inspect.signature(base_events.BaseEventLoop.create_task).parameters

# 3.14+ (probed: create_task() has no `name` of its own, only **kwargs): the task
# factory is handed every keyword of create_task(), the name included.
_FACTORY_TAKES_NAME = "name" not in _CREATE_TASK_PARAMS

# Probed, not read off the version: asyncio's create_task() takes keywords beyond name
# and context (eager_start, or a task factory's own) from 3.14 and from a later 3.13
# bug-fix release; 3.13.0 refuses them.
_CREATE_TASK_TAKES_KWARGS = any(
    p.kind is inspect.Parameter.VAR_KEYWORD for p in _CREATE_TASK_PARAMS.values()
)

# Where asyncio has a handle class of its own for call_soon_threadsafe() (3.14+, probed),
# its cancel() and cancelled() wait for a run in progress in another thread: so do the
# native handles call_soon_threadsafe() makes.
_set_threadsafe_handles_wait(hasattr(events, "_ThreadSafeHandle"))


__all__ = ["Loop"]

# asyncio's stream functions build rsloop's reader and writer on native loops (unless
# RSLOOP_FAST_STREAMS=0); see rsloop/_streams.py.
_streams.install()


def _run_until_complete_cb(fut):
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # Let the exception propagate from run_until_complete() instead of stopping.
            return
    fut.get_loop().stop()


# A native module whose loop runs nothing built on fds beyond the fd watchers (Windows:
# mio's IOCP selector watches sockets for add_reader/add_writer, and runs timers and
# callbacks) lacks the rest: sock_*, transports, servers, pipes, subprocesses, signals.
# Those methods raise NotImplementedError naming themselves, as asyncio's Proactor loop
# does for add_reader; `auto` gives that loop there instead.
_BUILD_FDS: bool = _rsloop.BUILD_FDS
_BUILD_FD_WATCHERS: bool = _rsloop.BUILD_FD_WATCHERS
_NO_FDS_WHY = (
    "rsloop's native loop runs no sockets on this platform yet beyond add_reader/add_writer "
    "(on Windows mio's IOCP watches them; sock_*, transports, servers, pipes, subprocesses "
    "and signals are not built on it there); asyncio's Proactor loop, which "
    "RSLOOP_BACKEND=auto gives here, has them; see docs/platforms.md"
)


def _not_implemented(name: str, why: str = "see docs/compatibility.md"):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"rsloop: Loop.{name}() is not implemented yet; {why}")

    method.__name__ = name
    method.__qualname__ = f"Loop.{name}"
    method._not_implemented = True  # type: ignore[attr-defined]
    return method


_BIND_CALL_SOON = sys.version_info < (3, 12)


class Loop(SockMixin, NetMixin, UnixMixin, _NativeLoop, asyncio.AbstractEventLoop):  # type: ignore[misc]
    """An asyncio event loop on rsloop's native core (io_uring or mio)."""

    # The loop's own state is in slots, so its instance dict is never made unless a user
    # sets a name of their own. On 3.13 a subclass of a native type keeps no values
    # inline: CPython specialises a method read on such an instance (`loop.call_soon`)
    # only while its dict does not exist (LOAD_ATTR_METHOD_LAZY_DICT). On 3.12 and
    # 3.14+ the values are inline and slots change nothing for reads. The dict itself
    # (and weak references) come from the mixins.
    __slots__ = (
        # The virtual clock (rsloop.testing.VirtualClock) the native core reads, if any,
        # and the future of its advance() in progress.
        "_clock",
        "_virtual_advance_waiter",
        "_exception_handler",
        "_default_executor",
        "_executor_shutdown_called",
        "_asyncgens",
        "_asyncgens_shutdown_called",
        "_coroutine_origin_tracking_enabled",
        "_coroutine_origin_tracking_saved_depth",
        "_current_handle",
        # NetMixin's
        "_transports",
        "_unix_server_sockets",
        "_acceptors",
        # UnixMixin's
        "_signal_handlers",
        "_ssock",
        "_csock",
        "_children",
    )

    def __init__(self, backend: str | None = None, clock=None) -> None:
        self._clock = None
        self._virtual_advance_waiter = None
        if clock is not None:
            self._clock = clock
            try:
                clock._attach(self)
            except BaseException:
                self._close_native()  # type: ignore[attr-defined]
                raise
        self._exception_handler = None
        self._default_executor = None
        self._executor_shutdown_called = False
        self._asyncgens: set = set()
        self._asyncgens_shutdown_called = False
        self._coroutine_origin_tracking_enabled = False
        self._coroutine_origin_tracking_saved_depth = None
        self._current_handle = None
        self._init_net()
        self._init_unix()
        self._set_debug_native(coroutines._is_debug_mode())  # type: ignore[attr-defined]
        _malloc.apply(_set_malloc_thresholds)
        self._check_time_source()

    # ----- A Python `time` -----

    # asyncio's `_run_once` reads `self.time()`, so a `time` patched on the instance
    # (`mock.patch.object(loop, "time")`) or overridden in a subclass drives its timers.
    # rsloop's timers read the native clock unless told that `time` is Python's: checked
    # here when the loop is made, at each run, and whenever `time` is set or deleted on the
    # instance (attributes of a loop are set rarely, never per callback), so the default
    # path costs nothing per iteration. A class attribute changed during a run is seen at
    # the next run.
    #
    # A `time` set on the instance is kept out of the instance's attributes: the loop moves
    # to a subclass made for it whose class attribute `time` is the value, and back to its
    # class when the attribute is deleted. An instance attribute named `time` would join
    # the keys CPython shares between all instances of the class, after which no later
    # loop's `loop.time` read is specialised; and the check never reads `self.__dict__`,
    # which on 3.12 makes the dict a real one and ends specialisation of every attribute
    # read on that loop (`loop.call_soon` & co. in user code and asyncio's own layers).
    _own_time_base: type | None = None

    def _check_time_source(self) -> None:
        python_time = type(self).time is not _NativeLoop.time
        self._set_python_time(python_time)  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value) -> None:
        if name != "time":
            super().__setattr__(name, value)
            return
        cls = type(self)
        base = cls._own_time_base or cls
        if getattr(value, "__self__", None) is self and value == _NativeLoop.time.__get__(self):
            # The loop's own clock set back (pytest's monkeypatch undoes this way).
            object.__setattr__(self, "__class__", base)
            self._check_time_source()
            return
        namespace = {
            "time": staticmethod(value),  # the value itself, as an instance attribute is
            "_own_time_base": base,
            "_own_time_layer": True,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        }
        # Stacked on the current class: a nested mock.patch.object(loop, "time") restores
        # the outer value when it ends, as with an instance attribute.
        object.__setattr__(self, "__class__", type(base.__name__, (cls,), namespace))
        self._check_time_source()

    def __delattr__(self, name: str) -> None:
        cls = type(self)
        if name == "time" and "_own_time_layer" in vars(cls):
            object.__setattr__(self, "__class__", cls.__bases__[0])
            self._check_time_source()
            return
        super().__delattr__(name)
        if name == "time":
            self._check_time_source()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    # ----- Running and stopping the event loop -----

    def _check_closed(self) -> None:
        if self.is_closed():
            raise RuntimeError("Event loop is closed")

    def _check_running(self) -> None:
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def run_forever(self) -> None:
        """Run until stop() is called."""
        self._check_closed()
        self._check_running()
        self._check_time_source()
        self._set_coroutine_origin_tracking(self.get_debug())
        old_hooks = sys.get_asyncgen_hooks()
        try:
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook,
                finalizer=self._asyncgen_finalizer_hook,
            )
            events._set_running_loop(self)
            bound = self._bind_call_soon()
            try:
                self._run_forever_native()
            finally:
                self._unbind_call_soon(bound)
        finally:
            events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_hooks)

    # CPython 3.10/3.11's C Task and Future schedule every wake-up with
    # `getattr(loop, "call_soon")(cb, arg, context=ctx)`, which makes a new bound-method
    # object each time. While the loop runs, the instance keeps one bound `call_soon` in
    # its __dict__, so that lookup finds it ready-made. (3.12+ calls the method without
    # binding it; a subclass overriding call_soon, or an instance attribute set by the
    # user, is left alone.) Dropped when the run ends: a stopped loop holds no reference
    # to itself.
    def _bind_call_soon(self):
        if _BIND_CALL_SOON and type(self).call_soon is _NativeLoop.call_soon:
            d = self.__dict__
            if "call_soon" not in d:
                bound = d["call_soon"] = self.call_soon
                return bound
        return None

    def _unbind_call_soon(self, bound) -> None:
        if bound is not None and self.__dict__.get("call_soon") is bound:
            del self.__dict__["call_soon"]

    def run_until_complete(self, future):
        """Run until the Future is done; return its result or raise its exception."""
        self._check_closed()
        self._check_running()
        new_task = not futures.isfuture(future)
        future = tasks.ensure_future(future, loop=self)
        if new_task:
            # The caller cannot reach this task: an exception is raised below if it did
            # not finish, so don't log "Task was destroyed but it is pending".
            future._log_destroy_pending = False
        future.add_done_callback(_run_until_complete_cb)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                # Consume the task's BaseException: the caller gets it raised here.
                future.exception()
            raise
        finally:
            future.remove_done_callback(_run_until_complete_cb)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def close(self) -> None:
        """Close the loop: drop pending callbacks, shut the default executor down."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        if self.get_debug():
            base_events.logger.debug("Close %r", self)  # type: ignore[attr-defined]
        # Signal handlers, the wakeup socket pair and child pidfds go first, while the
        # watchers can still be removed.
        self._close_unix()
        self._close_native()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)

    def __del__(self, _warn=warnings.warn) -> None:
        try:
            closed = self.is_closed()
        except Exception:
            return
        if not closed:
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # ----- Async generators -----

    def _asyncgen_firstiter_hook(self, agen) -> None:
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen) -> None:
        self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    async def shutdown_asyncgens(self) -> None:
        """Close every asynchronous generator still alive."""
        self._asyncgens_shutdown_called = True
        if not self._asyncgens:
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await tasks.gather(*[agen.aclose() for agen in closing], return_exceptions=True)
        for result, agen in zip(results, closing, strict=False):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": "an error occurred during closing of "
                        f"asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )

    # ----- Executors -----

    def _check_default_executor(self) -> None:
        if self._executor_shutdown_called:
            raise RuntimeError("Executor shutdown has been called")

    def run_in_executor(self, executor, func, *args):
        self._check_closed()
        if self.get_debug():
            _format.check_callback(func, "run_in_executor")
        if executor is None:
            self._check_default_executor()
            executor = self._default_executor
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        job = executor.submit(func, *args)
        future = futures.wrap_future(job, loop=self)
        if self._clock is not None:
            # Virtual time waits for the job until the worker is done with it. Counted
            # down after wrap_future's own callback has posted the result to the loop:
            # the loop sees either the count or the post, never neither.
            self._virtual_work(1)  # type: ignore[attr-defined]
            job.add_done_callback(self._virtual_job_done)
        return future

    def _virtual_job_done(self, _job) -> None:
        self._virtual_work(-1)  # type: ignore[attr-defined]

    def _virtual_advance_done(self, _arg=None) -> None:
        # The native loop calls this when a VirtualClock.advance() reached its end.
        waiter, self._virtual_advance_waiter = self._virtual_advance_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def set_default_executor(self, executor) -> None:
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default_executor = executor  # type: ignore[assignment]

    async def shutdown_default_executor(self, timeout=None) -> None:
        """Wait for the default executor's threads to finish (``timeout`` on 3.12+)."""
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        future = self.create_future()
        thread = threading.Thread(target=self._do_shutdown, args=(executor, future))
        if self._clock is not None:
            self._virtual_work(1)  # type: ignore[attr-defined]
        thread.start()
        try:
            if timeout is None:
                await future
            else:
                await tasks.wait_for(tasks.shield(future), timeout)
        except asyncio.TimeoutError:
            warnings.warn(
                f"The executor did not finishing joining its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=2,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _do_shutdown(self, executor, future) -> None:
        try:
            executor.shutdown(wait=True)
            if not self.is_closed():
                self.call_soon_threadsafe(_set_result_unless_cancelled, future, None)
        except Exception as ex:
            if not self.is_closed():
                self.call_soon_threadsafe(_set_exception_unless_cancelled, future, ex)
        finally:
            if self._clock is not None:
                self._virtual_work(-1)  # type: ignore[attr-defined]

    # ----- Futures and tasks -----

    # create_future, create_task, set_task_factory and get_task_factory are native; this
    # is create_task's path for a task factory, debug mode and 3.13's extra keywords.
    def _create_task_slow(self, coro, kwargs):
        # `kwargs`: every keyword create_task() was given, as given (name=None included).
        if "context" in kwargs and not _compat.PY311:
            raise TypeError("create_task() got an unexpected keyword argument 'context'")
        extra = [k for k in kwargs if k not in ("name", "context")]
        if extra and not _CREATE_TASK_TAKES_KWARGS:
            raise TypeError(f"create_task() got an unexpected keyword argument {extra[0]!r}")
        factory = self.get_task_factory()
        if factory is not None and _FACTORY_TAKES_NAME:
            # 3.14+: the factory is handed every keyword, exactly as given.
            return factory(self, coro, **kwargs)
        name = kwargs.pop("name", None)
        if "context" in kwargs and kwargs["context"] is None:
            del kwargs["context"]
        if factory is None:
            task = tasks.Task(coro, loop=self, name=name, **kwargs)
            if task._source_traceback:
                del task._source_traceback[-1]
        else:
            task = factory(self, coro, **kwargs)
            if name is not None:
                task.set_name(name)
        return task

    # ----- Error handlers -----

    def get_exception_handler(self):
        return self._exception_handler

    def set_exception_handler(self, handler) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context) -> None:
        """Log ``context`` the way asyncio's default handler does."""
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info = (
            (type(exception), exception, exception.__traceback__)
            if exception is not None
            else False
        )
        current = self._current_handle
        if "source_traceback" not in context and current is not None and current._source_traceback:
            context["handle_traceback"] = current._source_traceback
        lines = [message]
        for key in sorted(context):
            if key in {"message", "exception"}:
                continue
            value = context[key]
            if key == "source_traceback":
                tb = "".join(traceback.format_list(value))
                value = "Object created at (most recent call last):\n" + tb.rstrip()
            elif key == "handle_traceback":
                tb = "".join(traceback.format_list(value))
                value = "Handle created at (most recent call last):\n" + tb.rstrip()
            else:
                value = repr(value)
            lines.append(f"{key}: {value}")
        base_events.logger.error("\n".join(lines), exc_info=exc_info)  # type: ignore[attr-defined]

    def call_exception_handler(self, context) -> None:
        """Pass ``context`` to the handler set by set_exception_handler(), or log it."""
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                base_events.logger.error("Exception in default exception handler", exc_info=True)  # type: ignore[attr-defined]
            return
        try:
            ctx = _handler_context(context) if _compat.PY312 else None
            if ctx is not None:
                ctx.run(handler, self, context)
            else:
                handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                base_events.logger.error(
                    "Exception in default exception handler "
                    "while handling an unexpected error "
                    "in custom exception handler",
                    exc_info=True,
                )

    def _report_callback_error(self, handle, exc) -> None:
        """Called by the native loop when a callback raised (``Handle._run``)."""
        context = {
            "message": f"Exception in callback {_format.callback_source(handle)}",
            "exception": exc,
            "handle": handle,
        }
        tb = handle._source_traceback
        if tb:
            context["source_traceback"] = tb
        self.call_exception_handler(context)

    def _warn_slow_callback(self, handle, seconds: float) -> None:
        """Debug mode: a callback ran for at least ``slow_callback_duration``."""
        callback = handle._callback
        owner = getattr(callback, "__self__", None)
        text = repr(owner) if isinstance(owner, tasks.Task) else str(handle)
        base_events.logger.warning("Executing %s took %.3f seconds", text, seconds)  # type: ignore[attr-defined]

    # ----- Debug flag management -----

    def set_debug(self, enabled: bool) -> None:
        self._set_debug_native(bool(enabled))
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _set_coroutine_origin_tracking(self, enabled: bool) -> None:
        if bool(enabled) == bool(self._coroutine_origin_tracking_enabled):
            return
        if enabled:
            self._coroutine_origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()  # type: ignore[assignment]
            sys.set_coroutine_origin_tracking_depth(constants.DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._coroutine_origin_tracking_saved_depth)  # type: ignore[arg-type]
        self._coroutine_origin_tracking_enabled = enabled

    # ----- rsloop extras -----

    @property
    def backend(self) -> str:
        """The driver this loop runs on: ``"uring"`` or ``"poll"``."""
        return self._backend_info()[0]

    @property
    def backend_reason(self) -> str | None:
        """Why the preferred driver is not used, or None."""
        return self._backend_info()[1]


def _handler_context(context):
    """3.12+: the custom exception handler runs in the context of the task, future or
    handle the error came from."""
    thing = context.get("task")
    if thing is None:
        thing = context.get("future")
    if thing is None:
        thing = context.get("handle")
    if thing is None or not hasattr(thing, "get_context"):
        return None
    ctx = thing.get_context()
    return ctx if ctx is not None and hasattr(ctx, "run") else None


def _set_result_unless_cancelled(fut, result) -> None:
    if not fut.cancelled():
        fut.set_result(result)


def _set_exception_unless_cancelled(fut, exc) -> None:
    if not fut.cancelled():
        fut.set_exception(exc)


# AbstractEventLoop methods a platform's build may lack (on Windows: Unix sockets, pipes,
# subprocesses, signals). There they fail loudly, naming the method, instead of asyncio's
# bare NotImplementedError. On Unix every one of them is implemented.
_PENDING = (
    "create_connection create_server sendfile start_tls create_unix_connection "
    "create_unix_server connect_accepted_socket create_datagram_endpoint "
    "connect_read_pipe connect_write_pipe subprocess_shell subprocess_exec "
    "sock_recv sock_recv_into sock_recvfrom sock_recvfrom_into sock_sendall "
    "sock_sendto sock_connect sock_accept sock_sendfile add_signal_handler "
    "remove_signal_handler"
).split()
for _name in _PENDING:
    if getattr(Loop, _name, None) is getattr(asyncio.AbstractEventLoop, _name, None):
        setattr(Loop, _name, _not_implemented(_name))
del _name

# Everything built on fds beyond the watchers, where the native loop lacks it
# (_BUILD_FDS); the watchers themselves (and asyncio's private names for them), where the
# driver watches no fds at all (_BUILD_FD_WATCHERS). The mixins' Python code would
# otherwise arm watchers that never fire, or run half of a method.
_FD_WATCHERS = "add_reader add_writer remove_reader remove_writer"
_NEEDS_WATCHERS = [*_FD_WATCHERS.split(), *(f"_{n}" for n in _FD_WATCHERS.split())]
_NEEDS_FDS = list(_PENDING)
_LACKING = [*(() if _BUILD_FDS else _NEEDS_FDS), *(() if _BUILD_FD_WATCHERS else _NEEDS_WATCHERS)]
for _name in _LACKING:
    setattr(Loop, _name, _not_implemented(_name, _NO_FDS_WHY))


def _decline(self, *args):
    return NotImplemented


# Platforms whose native module has no sock_* fast path (not Unix): the Python code runs.
for _name in ("_sock_recv", "_sock_recv_into", "_sock_sendall"):
    if not hasattr(Loop, _name):
        setattr(Loop, _name, _decline)
del _name
