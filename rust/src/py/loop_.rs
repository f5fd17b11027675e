//! `rsloop._rsloop.Loop`: the native base of `rsloop.Loop`, and the one home of its impl.
//! Methods are grouped under the same banners as `asyncio.AbstractEventLoop`; each one
//! checks its arguments, converts them, and delegates to `core/`. The scheduling methods'
//! argument reading is `scheduling.rs`'s, the `sock_*` work `sock.rs`'s (both call in here).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyTuple};
use pyo3::PyTraverseError;

use super::convert::{fileobj_to_fd, seconds, watchable_fd};
use super::futures::{asyncio_types, call_on_loop};
use crate::core::backend::planned_backend;
use crate::core::handle::format_module;
use crate::core::watchers::Side;
use crate::core::LoopCore;
use crate::driver::Requested;
use crate::ffi::gil::GilCell;
use crate::ffi::python::{call_kw, thread_ident};
use crate::handles::{lock, Args, Handle, TimerHandle, GC_HEADER_BYTES, HANDLE_BYTES};
use crate::sys::prefetch::prefetch_span;

/// How many scheduling calls ahead `call_later` prefetches a spare timer (the one it
/// takes now is `ahead(0)`).
const FREELIST_PREFETCH_AHEAD: usize = 2;

/// The native event loop. Python code uses it through `rsloop.Loop`.
#[pyclass(subclass, frozen, module = "rsloop._rsloop", name = "Loop")]
pub struct Loop {
    pub(super) core: Arc<LoopCore>,
    pub(super) task_factory: GilCell<Option<Py<PyAny>>>,
    /// The dict behind `loop._transports` (fd -> weak transport), for the `sock_*` check.
    pub(super) transports: GilCell<Option<Py<PyDict>>>,
    /// `{"loop": self}` for `Future(**kwargs)` and `Task(coro, **kwargs)` made on the loop's
    /// thread during a run, before 3.12 (`futures::call_on_loop`); callees copy a
    /// `**kwargs` dict, never keep it. Dropped when the run ends.
    pub(super) run_kwargs: GilCell<Option<Py<PyDict>>>,
}

impl Loop {
    /// The core of `obj` if it is a native loop (`core::handle::set_core_of`).
    pub(super) fn core_of(obj: &Bound<'_, PyAny>) -> Option<Arc<LoopCore>> {
        obj.cast::<Loop>().ok().map(|lp| Arc::clone(&lp.get().core))
    }
}

#[pymethods]
impl Loop {
    // A loop that is never closed must still be collectable (a pending timer or task
    // refers back to it), so its `__del__` can warn and close it as asyncio's does.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(f) = self.task_factory.peek_for_gc(&visit) {
            visit.call(f)?;
        }
        if let Some(t) = self.transports.peek_for_gc(&visit) {
            visit.call(t)?;
        }
        if let Some(k) = self.run_kwargs.peek_for_gc(&visit) {
            visit.call(k)?;
        }
        self.core.traverse(&visit)
    }

    fn __clear__(&self) {
        let dropped = Python::attach(|py| {
            let factory = (
                self.task_factory.with(py, Option::take),
                self.transports.with(py, Option::take),
                self.run_kwargs.with(py, Option::take),
            );
            let queued = if self.core.thread_id.load(Ordering::Relaxed) == 0 {
                self.core.clear(py)
            } else {
                Vec::new()
            };
            (factory, queued)
        });
        drop(dropped);
    }

    #[new]
    #[pyo3(signature = (*_args, backend = None, clock = None, **_kwargs))]
    fn new(
        _args: &Bound<'_, PyTuple>,
        backend: Option<&str>,
        clock: Option<&Bound<'_, PyAny>>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let requested = match backend.unwrap_or("auto") {
            "auto" => Requested::Auto,
            "uring" => Requested::Uring,
            "poll" => Requested::Poll,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown rsloop backend {other:?}: expected 'auto', 'uring' or 'poll'"
                )))
            }
        };
        let info = planned_backend(requested)?;
        let mut core = LoopCore::new(requested, info);
        core.vclock = match clock.filter(|c| !c.is_none()) {
            None => None,
            Some(c) => Some(super::clock::ClockState::of(c)?),
        };
        Ok(Loop {
            core: Arc::new(core),
            task_factory: GilCell::new(None),
            transports: GilCell::new(None),
            run_kwargs: GilCell::new(None),
        })
    }

    // ----- Running and stopping the event loop -----

    /// Runs iterations until `stop()`; the Python `run_forever` wraps it.
    fn _run_forever_native(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let core = Arc::clone(&slf.get().core);
        // Claimed atomically: two threads racing past the Python-side check must not both
        // run (the second would wait on the driver forever).
        if core
            .thread_id
            .compare_exchange(0, thread_ident(), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Err(PyRuntimeError::new_err(
                "This event loop is already running",
            ));
        }
        let result = core.run_forever(py, slf.as_any());
        core.thread_id.store(0, Ordering::Relaxed);
        let kwargs = slf.get().run_kwargs.with(py, Option::take);
        drop(kwargs);
        result
    }

    fn stop(&self) {
        self.core.stopping.store(true, Ordering::Relaxed);
    }

    fn is_running(&self) -> bool {
        self.core.thread_id.load(Ordering::Relaxed) != 0
    }

    fn is_closed(&self) -> bool {
        self.core.closed.load(Ordering::Relaxed)
    }

    /// Marks the loop closed and releases queues, timers, watchers and the driver.
    fn _close_native(&self, py: Python<'_>) -> PyResult<()> {
        if self.core.thread_id.load(Ordering::Relaxed) != 0 {
            return Err(PyRuntimeError::new_err("Cannot close a running event loop"));
        }
        self.core.closed.store(true, Ordering::Relaxed);
        let dropped = self.core.clear(py);
        drop(dropped);
        Ok(())
    }

    /// asyncio's (and uvloop's) private flag, read by some libraries and tests.
    #[getter]
    fn _closed(&self) -> bool {
        self.core.closed.load(Ordering::Relaxed)
    }

    /// Makes timers follow the loop's Python `time` (`on`) or the native clock: called by
    /// `rsloop.Loop` when `time` is set on the instance or overridden in a subclass.
    fn _set_python_time(&self, on: bool) {
        self.core.python_time.store(on, Ordering::Relaxed);
    }

    #[getter]
    fn _stopping(&self) -> bool {
        self.core.stopping.load(Ordering::Relaxed)
    }

    #[getter]
    fn _thread_id(&self) -> Option<u64> {
        match self.core.thread_id.load(Ordering::Relaxed) {
            0 => None,
            id => Some(id),
        }
    }

    // ----- Methods scheduling callbacks -----

    fn time(&self) -> f64 {
        self.core.time()
    }

    /// Under virtual time, counts a piece of real work in flight (`delta` 1) or ended
    /// (-1; wakes the loop, which may now jump). Any thread; a no-op without a clock.
    fn _virtual_work(&self, delta: i32) {
        let Some(clock) = &self.core.vclock else {
            return;
        };
        if delta > 0 {
            clock.work_started();
        } else {
            clock.work_ended();
            self.core.wake();
        }
    }

    // ----- Future, Task and task factory -----

    fn set_task_factory(&self, py: Python<'_>, factory: Option<Py<PyAny>>) -> PyResult<()> {
        let factory = factory.filter(|f| !f.is_none(py));
        if let Some(f) = &factory {
            if !f.bind(py).is_callable() {
                return Err(PyTypeError::new_err(
                    "task factory must be a callable or None",
                ));
            }
        }
        let old = self
            .task_factory
            .with(py, |slot| std::mem::replace(slot, factory));
        drop(old);
        Ok(())
    }

    fn get_task_factory(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.task_factory
            .with(py, |f| f.as_ref().map(|f| f.clone_ref(py)))
    }

    #[getter]
    fn _task_factory(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.get_task_factory(py)
    }

    // ----- Ready-based callback registration methods -----

    #[pyo3(signature = (fd, callback, *args))]
    fn add_reader(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        callback: Py<PyAny>,
        args: Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        self.add_watcher(py, fd, Side::Read, callback, Args::from_tuple(args))?;
        Ok(())
    }

    /// `add_reader` returning the handle (asyncio's private `_add_reader`): the `sock_*`
    /// methods remove a watcher only while it is still theirs.
    /// `context`: the handle runs in it (asyncio 3.15's transports pass theirs).
    #[pyo3(signature = (fd, callback, *args, context=None))]
    fn _add_reader(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        callback: Py<PyAny>,
        args: Bound<'_, PyTuple>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.add_watcher_in(
            py,
            fd,
            Side::Read,
            callback,
            Args::from_tuple(args),
            context,
        )
    }

    fn _remove_reader(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.remove_watcher(py, fd, Side::Read)
    }

    #[pyo3(signature = (fd, callback, *args, context=None))]
    fn _add_writer(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        callback: Py<PyAny>,
        args: Bound<'_, PyTuple>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.add_watcher_in(
            py,
            fd,
            Side::Write,
            callback,
            Args::from_tuple(args),
            context,
        )
    }

    fn _remove_writer(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.remove_watcher(py, fd, Side::Write)
    }

    fn remove_reader(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.remove_watcher(py, fd, Side::Read)
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn add_writer(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        callback: Py<PyAny>,
        args: Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        self.add_watcher(py, fd, Side::Write, callback, Args::from_tuple(args))?;
        Ok(())
    }

    fn remove_writer(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.remove_watcher(py, fd, Side::Write)
    }

    // ----- Low-level socket operations (the hot half; rsloop/_sock.py has the rest) -----

    /// `sock_recv`'s work: the `bytes`, a future to await, or `NotImplemented` when
    /// `rsloop/_sock.py` must run asyncio's code (see `py/sock.rs` for when).
    #[cfg(unix)]
    fn _sock_recv<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        n: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        super::sock::recv(slf, sock, n)
    }

    /// `sock_recv_into`'s work: the byte count, a future, or `NotImplemented`.
    #[cfg(unix)]
    fn _sock_recv_into<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        buf: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        super::sock::recv_into(slf, sock, buf)
    }

    /// `sock_sendall`'s work: `None` once all is sent, a future, or `NotImplemented`.
    #[cfg(unix)]
    fn _sock_sendall<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        super::sock::sendall(slf, sock, data)
    }

    /// Starts a multishot accept on the listening socket `fd` (every driver performs one):
    /// `callback(n)` runs once per new connection with its fd (`n >= 0`, non-blocking, the
    /// callback's to own) and once with the `-errno` that ends the accept early. Returns
    /// the token `_accept_stop` takes.
    fn _accept_start(&self, py: Python<'_>, fd: i32, callback: Py<PyAny>) -> PyResult<u64> {
        self.accept_start(py, fd, callback)
    }

    /// Stops an accept started by `_accept_start`, telling the kernel at once (the
    /// listening socket can be closed right after); connections it already took still
    /// reach the callback.
    fn _accept_stop(&self, py: Python<'_>, token: u64) -> PyResult<()> {
        self.core.stop_accept(py, token)
    }

    /// Tells the `sock_*` methods which dict maps fds to transports (`loop._transports`'
    /// `data`): an fd found there goes through `_sock_check_fd_free` before a wait.
    fn _set_transport_table(&self, py: Python<'_>, table: Option<Py<PyDict>>) {
        let old = self.transports.with(py, |t| std::mem::replace(t, table));
        drop(old);
    }

    // ----- Debug flag management -----

    fn get_debug(&self) -> bool {
        self.core.debug()
    }

    /// Sets the native flag; `rsloop.Loop.set_debug` adds coroutine origin tracking.
    fn _set_debug_native(&self, enabled: bool) {
        self.core.debug.store(enabled, Ordering::Relaxed);
    }

    #[getter]
    fn get_slow_callback_duration(&self) -> f64 {
        f64::from_bits(self.core.slow_callback_bits.load(Ordering::Relaxed))
    }

    #[setter]
    fn set_slow_callback_duration(&self, value: f64) {
        self.core
            .slow_callback_bits
            .store(value.to_bits(), Ordering::Relaxed);
    }

    // ----- rsloop extras -----

    /// `(backend name, reason or None)`: which driver this loop uses and, if it is not the
    /// preferred one, why.
    fn _backend_info(&self) -> (String, Option<String>) {
        let info = lock(&self.core.backend);
        (info.name.to_string(), info.reason.clone())
    }

    /// Counters since the loop was created (cheap; safe from any thread).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.core.stats;
        let d = PyDict::new(py);
        d.set_item("backend", lock(&self.core.backend).name)?;
        d.set_item("iterations", s.iterations.get())?;
        d.set_item("callbacks", s.callbacks.get())?;
        d.set_item("callback_errors", s.callback_errors.get())?;
        d.set_item("timers_fired", s.timers_fired.get())?;
        d.set_item("io_events", s.io_events.get())?;
        d.set_item("blocking_waits", s.blocking_waits.get())?;
        d.set_item("wait_seconds", s.wait_ns.get() as f64 * 1e-9)?;
        let run = s.run_ns.get();
        d.set_item(
            "run_seconds",
            run.saturating_sub(s.wait_ns.get()) as f64 * 1e-9,
        )?;
        d.set_item("slow_callbacks", s.slow_callbacks.get())?;
        d.set_item("threadsafe_calls", s.threadsafe_calls.get())?;
        d.set_item("inject_batches", s.inject_batches.get())?;
        d.set_item("inject_max_batch", s.inject_max_batch.get())?;
        d.set_item("wakeups", s.wakeups.load(Ordering::Relaxed))?;
        d.set_item("submissions", s.driver.submissions.load(Ordering::Relaxed))?;
        d.set_item("kernel_enters", s.driver.enters.load(Ordering::Relaxed))?;
        d.set_item("completions", s.driver.completions.load(Ordering::Relaxed))?;
        let (ready, timers, watchers, spare) = self.core.queues.with(py, |q| {
            (
                q.ready.len(),
                q.timers.len(),
                q.watchers.len(),
                q.free.len() + q.free_timers.len(),
            )
        });
        d.set_item("ready", ready)?;
        d.set_item("timers", timers)?;
        d.set_item("fd_watchers", watchers)?;
        d.set_item("spare_handles", spare)?;
        Ok(d)
    }
}

// The scheduling methods' bodies; Python reaches them through `py/scheduling.rs`, which
// reads their arguments.
impl Loop {
    /// Schedules a coroutine as an `asyncio.Task`; the common case (no task factory, no
    /// debug mode, no extra keywords) is native, the rest is `_create_task_slow`. Python
    /// reaches it through `py/scheduling.rs`, which reads its arguments.
    pub(super) fn create_task<'py>(
        slf: &Bound<'py, Self>,
        coro: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
        context: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        this.core.check_closed()?;
        let has_kwargs = kwargs.is_some_and(|k| !k.is_empty());
        let has_factory = this.task_factory.with(py, |f| f.is_some());
        let context_unsupported = context.is_some() && !cfg!(Py_3_11);
        if has_kwargs || has_factory || this.core.debug() || context_unsupported {
            // Every keyword as the caller gave it, `name=None` included: a 3.14+ task
            // factory is handed exactly those.
            let all = PyDict::new(py);
            if let Some(n) = name {
                all.set_item(intern!(py, "name"), n)?;
            }
            if let Some(c) = context {
                all.set_item(intern!(py, "context"), c)?;
            }
            if let Some(k) = kwargs {
                all.update(k.as_mapping())?;
            }
            return slf.call_method1(intern!(py, "_create_task_slow"), (coro, all));
        }
        let name = name.filter(|n| !n.is_none());
        let context = context.filter(|c| !c.is_none());
        let t = asyncio_types(py)?;
        let task = t.task.bind(py);
        let me = slf.as_any();
        match (name, context) {
            (None, None) => call_on_loop(slf, task, &[coro]),
            (Some(n), None) => call_kw(task, &[coro], t.kw_loop_name.bind(py), &[me, n]),
            (None, Some(c)) => call_kw(task, &[coro], t.kw_loop_context.bind(py), &[me, c]),
            (Some(n), Some(c)) => {
                call_kw(task, &[coro], t.kw_loop_name_context.bind(py), &[me, n, c])
            }
        }
    }

    #[inline(always)]
    pub(super) fn call_soon(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.core.check_closed()?;
        let debug = self.core.debug();
        if debug {
            self.debug_checks(py, &callback, "call_soon")?;
        }
        let handle = self.core.make_handle(py, callback, args, context, debug)?;
        self.core.push_ready(py, handle.clone_ref(py));
        Ok(handle)
    }

    pub(super) fn call_soon_threadsafe(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.core.check_closed()?;
        let debug = self.core.debug();
        if debug {
            format_module(py)?.call_method1(
                intern!(py, "check_callback"),
                (&callback, "call_soon_threadsafe"),
            )?;
        }
        let handle = self.core.make_handle(py, callback, args, context, debug)?;
        handle.get().mark_threadsafe(py);
        if self.on_loop_thread() {
            self.core.push_ready(py, handle.clone_ref(py));
        } else {
            self.core.push_ready_threadsafe(py, handle.clone_ref(py));
        }
        Ok(handle)
    }

    pub(super) fn call_later<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        delay: &Bound<'py, PyAny>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if delay.is_none() {
            return Err(PyTypeError::new_err("delay must not be None"));
        }
        let this = slf.get();
        if this.core.python_time.load(Ordering::Relaxed) {
            // A Python `time` (see `_set_python_time`): asyncio's own
            // `self.call_at(self.time() + delay, ...)`, whatever type that makes.
            let when = slf.call_method0(intern!(py, "time"))?.add(delay)?;
            return Loop::call_at(slf, py, &when, callback, args, context);
        }
        // asyncio computes `self.time() + delay`: the same arithmetic, so the same
        // results and errors (TypeError for a str or Decimal, OverflowError for 10**400).
        let now = this.core.time();
        let when = if let Ok(f) = delay.cast::<PyFloat>() {
            now + f.value()
        } else if delay.is_exact_instance_of::<PyInt>() {
            now + delay.extract::<f64>()?
        } else {
            PyFloat::new(py, now).add(delay)?.extract::<f64>()?
        };
        this.schedule_at(py, when, callback, args, context, "call_at")
    }

    pub(super) fn call_at<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        when: &Bound<'py, PyAny>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if when.is_none() {
            return Err(PyTypeError::new_err("when cannot be None"));
        }
        let deadline = seconds(when, "when")?;
        let timer = slf
            .get()
            .schedule_at(py, deadline, callback, args, context, "call_at")?;
        // asyncio keeps the `int` it was given (aiohttp rounds its deadlines up to whole
        // seconds and reads `_when` back): so does the handle, when f64 holds it exactly.
        if when.is_exact_instance_of::<PyInt>() {
            if let Ok(n) = when.extract::<i64>() {
                if deadline as i64 == n && n as f64 == deadline {
                    TimerHandle::set_int_deadline(timer.bind(py));
                }
            }
        }
        Ok(timer)
    }
}

// The helpers of the methods above: thread and closed checks, timers, fd watchers.
// Some serve only `sock_*` (absent on Windows).
#[cfg_attr(not(unix), allow(dead_code))]
impl Loop {
    // Whether the caller is the thread inside this loop's `run_forever`, which made the
    // loop asyncio's running loop (`events._set_running_loop`) before entering it.
    pub(super) fn on_loop_thread(&self) -> bool {
        self.core.thread_id.load(Ordering::Relaxed) == thread_ident()
    }

    /// The running loop's `{"loop": lp}` dict (see `call_on_loop`), made at the run's
    /// first call; only the loop's thread may call this, while it runs the loop.
    pub(super) fn loop_kwarg<'py>(&self, lp: &Bound<'py, Loop>) -> PyResult<Bound<'py, PyDict>> {
        let py = lp.py();
        if let Some(d) = self
            .run_kwargs
            .with(py, |k| k.as_ref().map(|d| d.clone_ref(py)))
        {
            return Ok(d.into_bound(py));
        }
        let d = PyDict::new(py);
        d.set_item(intern!(py, "loop"), lp)?;
        self.run_kwargs.with(py, |k| *k = Some(d.clone().unbind()));
        Ok(d)
    }

    // BaseEventLoop._check_thread (debug mode only).
    pub(super) fn check_thread(&self) -> PyResult<()> {
        let owner = self.core.thread_id.load(Ordering::Relaxed);
        if owner != 0 && owner != thread_ident() {
            return Err(PyRuntimeError::new_err(
                "Non-thread-safe operation invoked on an event loop other than the current one",
            ));
        }
        Ok(())
    }

    // The debug-mode checks asyncio makes before scheduling.
    pub(super) fn debug_checks(
        &self,
        py: Python<'_>,
        callback: &Py<PyAny>,
        method: &str,
    ) -> PyResult<()> {
        self.check_thread()?;
        format_module(py)?.call_method1(intern!(py, "check_callback"), (callback, method))?;
        Ok(())
    }

    /// Starts a multishot accept for a server; returns its token.
    pub(super) fn accept_start(
        &self,
        py: Python<'_>,
        fd: i32,
        callback: Py<PyAny>,
    ) -> PyResult<u64> {
        self.core.check_closed()?;
        Ok(self.core.accept_start(py, fd, callback))
    }

    pub(super) fn schedule_at(
        &self,
        py: Python<'_>,
        when: f64,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        method: &str,
    ) -> PyResult<Py<TimerHandle>> {
        self.core.check_closed()?;
        let debug = self.core.debug();
        if debug {
            self.debug_checks(py, &callback, method)?;
        }
        let (context, tb) = self.core.handle_parts(py, context, debug)?;
        let spare = self.core.queues.with(py, |q| {
            // The freelist hands out handles in the order a burst ran them, at random
            // places in memory: start loading the one a later call takes.
            if let Some(next) = q.free_timers.ahead(FREELIST_PREFETCH_AHEAD) {
                prefetch_span(next.as_ptr(), GC_HEADER_BYTES, HANDLE_BYTES);
            }
            q.free_timers.pop()
        });
        let timer = match spare {
            Some(t) => {
                let bound = t.bind(py);
                bound
                    .as_super()
                    .get()
                    .refill(py, callback, args, context, tb, debug);
                bound.get().rearm(when);
                t
            }
            None => {
                let base = Handle::new(callback, args, context, tb, debug);
                let timer = TimerHandle::new(when, Arc::clone(&self.core.cancelled_timers));
                Py::new(py, PyClassInitializer::from(base).add_subclass(timer))?
            }
        };
        self.core.push_timer(py, when, timer.clone_ref(py));
        Ok(timer)
    }

    pub(super) fn add_watcher(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
    ) -> PyResult<Py<Handle>> {
        self.add_watcher_in(py, fd, side, callback, args, None)
    }

    /// [`add_watcher`](Self::add_watcher) whose handle runs in `context` (`None`: a copy
    /// of the current one).
    pub(super) fn add_watcher_in(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let fileobj = fd.clone().unbind();
        let fd = watchable_fd(fileobj_to_fd(fd)?)?;
        self.core
            .add_watcher_checked(py, fileobj, fd, side, callback, args, context)
    }

    pub(super) fn remove_watcher(
        &self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        side: Side,
    ) -> PyResult<bool> {
        if self.core.closed() {
            return Ok(false);
        }
        let fd = match fileobj_to_fd(fd).map(i32::try_from) {
            Ok(Ok(n)) => n,
            // No watcher can be on an fd past a C int: nothing to remove, as asyncio says.
            Ok(Err(_)) => return Ok(false),
            Err(e) => match self.core.queues.with(py, |q| q.watchers.fd_of_object(fd)) {
                Some(n) => n,
                None => return Err(e),
            },
        };
        self.core.remove_watcher_fd(py, fd, side)
    }

    /// Whether `fd` is a key of the fd -> transport table (`_set_transport_table`), so that
    /// `_sock_check_fd_free` must look: a dict lookup, no Python call, in the common case.
    pub(super) fn fd_has_owner(&self, py: Python<'_>, fd: &Bound<'_, PyInt>) -> PyResult<bool> {
        let table = self
            .transports
            .with(py, |t| t.as_ref().map(|d| d.clone_ref(py)));
        match table {
            Some(d) => {
                let d = d.bind(py);
                Ok(!d.is_empty() && d.contains(fd)?)
            }
            None => Ok(false),
        }
    }
}
