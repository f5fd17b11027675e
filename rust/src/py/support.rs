//! The slow-path and shared helpers behind `py/loop_.rs`: argument checks, handle
//! construction (with the freelist), timers, fd watchers, the cached asyncio types.
//! Owns: nothing Python sees directly. Not: the `#[pymethods]` themselves.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

use super::convert::{fileobj_to_fd, watchable_fd};
use super::loop_::Loop;
use crate::core::handle::format_module;
use crate::core::watchers::Side;
use crate::ffi::python::{call_kw, thread_ident};
use crate::handles::{Args, Handle, TimerHandle};

/// `asyncio.Future`, `asyncio.Task` and the keyword-name tuples used to call them.
pub(super) struct AsyncioTypes {
    pub(super) future: Py<PyAny>,
    pub(super) task: Py<PyAny>,
    pub(super) kw_loop: Py<PyTuple>,
    pub(super) kw_loop_name: Py<PyTuple>,
    pub(super) kw_loop_context: Py<PyTuple>,
    pub(super) kw_loop_name_context: Py<PyTuple>,
}

static ASYNCIO: PyOnceLock<AsyncioTypes> = PyOnceLock::new();

pub(super) fn asyncio_types(py: Python<'_>) -> PyResult<&AsyncioTypes> {
    ASYNCIO.get_or_try_init(py, || {
        Ok(AsyncioTypes {
            future: py.import("asyncio.futures")?.getattr("Future")?.unbind(),
            task: py.import("asyncio.tasks")?.getattr("Task")?.unbind(),
            kw_loop: PyTuple::new(py, ["loop"])?.unbind(),
            kw_loop_name: PyTuple::new(py, ["loop", "name"])?.unbind(),
            kw_loop_context: PyTuple::new(py, ["loop", "context"])?.unbind(),
            kw_loop_name_context: PyTuple::new(py, ["loop", "name", "context"])?.unbind(),
        })
    })
}

/// `asyncio.Future(loop=lp)`.
pub(super) fn new_future<'py>(lp: &Bound<'py, Loop>) -> PyResult<Bound<'py, PyAny>> {
    let t = asyncio_types(lp.py())?;
    call_on_loop(lp, t.future.bind(lp.py()), &[])
}

/// `cls(*args, loop=lp)`.
///
/// On the thread running `lp`, `lp` is asyncio's running loop, which `Future` and `Task`
/// default to. From 3.12 on the keyword is left out there: a call without keywords skips
/// `__init__`'s keyword parsing and the dict `type.__call__` would build (a fifth of what
/// `create_future` cost). Before 3.12 that default is looked up with a `getpid()` system
/// call (the running-loop holder's fork check), which costs more than the keyword, so the
/// run's own `{"loop": lp}` dict is passed instead (dropped when the run ends, so that a
/// loop that has stopped refers to itself through nothing).
pub(super) fn call_on_loop<'py>(
    lp: &Bound<'py, Loop>,
    cls: &Bound<'py, PyAny>,
    args: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    if lp.get().on_loop_thread() {
        if cfg!(Py_3_12) {
            return match args {
                [] => cls.call0(),
                _ => cls.call1(PyTuple::new(py, args)?),
            };
        }
        let kwargs = lp.get().loop_kwarg(lp)?;
        return cls.call(PyTuple::new(py, args)?, Some(&kwargs));
    }
    call_kw(
        cls,
        args,
        asyncio_types(py)?.kw_loop.bind(py),
        &[lp.as_any()],
    )
}

// Some of these serve only the Unix transports and `sock_*` (absent on Windows).
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

    /// Starts a multishot accept for a server (`None`: accept by readiness instead).
    pub(super) fn accept_start(
        &self,
        py: Python<'_>,
        fd: i32,
        callback: Py<PyAny>,
    ) -> PyResult<Option<u64>> {
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
        let timer = match self.core.queues.with(py, |q| q.free_timers.pop()) {
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
        let fileobj = fd.clone().unbind();
        let fd = watchable_fd(fileobj_to_fd(fd)?)?;
        self.core
            .add_watcher_checked(py, fileobj, fd, side, callback, args)
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
}
