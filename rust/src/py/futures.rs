//! `asyncio.Future` and `asyncio.Task` as the loop makes them: the cached types and
//! keyword tuples, the call that leaves out `loop=` where asyncio defaults to it, and the
//! methods a stream waiter calls, without their look-up.
//! Owns: those calls. Not: when a task is made natively (`Loop::create_task`).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyTuple, PyType};

use super::loop_::Loop;
use crate::ffi::attrs::TypeFacts;
use crate::ffi::python::{call_kw, descr_set, is_immutable};

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

/// `asyncio.Future`'s methods a stream waiter goes through on every wait, taken from the
/// class once: called on a future of exactly that class (whose attributes cannot change:
/// it is immutable), they skip the per-call method look-up, a fifth of each call's cost.
/// Any other future gets the method by name.
struct WaiterMethods {
    future: Py<PyType>,
    cancelled: Py<PyAny>,
    set_result: Py<PyAny>,
    result: Py<PyAny>,
    /// The `_asyncio_future_blocking` attribute (a data descriptor).
    blocking: Py<PyAny>,
}

static WAITER: PyOnceLock<Option<WaiterMethods>> = PyOnceLock::new();

fn waiter_methods<'py>(fut: &Bound<'py, PyAny>) -> PyResult<Option<&'static WaiterMethods>> {
    let py = fut.py();
    let methods = WAITER.get_or_try_init(py, || -> PyResult<_> {
        let future = asyncio_types(py)?.future.bind(py).cast::<PyType>()?.clone();
        if !is_immutable(&future) {
            return Ok(None);
        }
        let dict = |name: &str| -> PyResult<Py<PyAny>> {
            Ok(future.getattr("__dict__")?.get_item(name)?.unbind())
        };
        Ok(Some(WaiterMethods {
            cancelled: dict("cancelled")?,
            set_result: dict("set_result")?,
            result: dict("result")?,
            blocking: dict("_asyncio_future_blocking")?,
            future: future.unbind(),
        }))
    })?;
    Ok(methods
        .as_ref()
        .filter(|m| fut.get_type().is(m.future.bind(py))))
}

/// `fut.cancelled()`.
pub(crate) fn future_cancelled(fut: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = fut.py();
    match waiter_methods(fut)? {
        Some(m) => m.cancelled.bind(py).call1((fut,))?.is_truthy(),
        None => fut.call_method0(intern!(py, "cancelled"))?.is_truthy(),
    }
}

/// `fut.set_result(value)`.
pub(crate) fn future_set_result(fut: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    match waiter_methods(fut)? {
        Some(m) => m.set_result.bind(py).call1((fut, value)).map(drop),
        None => fut
            .call_method1(intern!(py, "set_result"), (value,))
            .map(drop),
    }
}

/// `fut.result()`.
pub(crate) fn future_result<'py>(fut: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = fut.py();
    match waiter_methods(fut)? {
        Some(m) => m.result.bind(py).call1((fut,)),
        None => fut.call_method0(intern!(py, "result")),
    }
}

/// `fut._asyncio_future_blocking = True`, what `Future.__await__` sets before it yields
/// the future to its task.
pub(crate) fn future_set_blocking(fut: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    let yes = PyBool::new(py, true);
    match waiter_methods(fut)? {
        Some(m) => descr_set(m.blocking.bind(py), fut, &yes),
        None => fut.setattr(intern!(py, "_asyncio_future_blocking"), yes),
    }
}

/// `loop.create_future()`. On rsloop's loop whose class keeps the native method (not
/// overridden by a subclass), the native call, without the method's look-up.
pub(crate) fn create_future_on<'py>(loop_: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static NATIVE: TypeFacts = TypeFacts::new();
    let py = loop_.py();
    if let Ok(lp) = loop_.cast::<Loop>() {
        if NATIVE.holds(loop_, |ty| keeps_native(ty, "create_future")) {
            return new_future(lp);
        }
    }
    loop_.call_method0(intern!(py, "create_future"))
}

/// Whether `ty.<name>` is the native `Loop`'s own method.
fn keeps_native(ty: &Bound<'_, PyType>, name: &str) -> bool {
    let native = ty.py().get_type::<Loop>();
    let own = native.getattr("__dict__").and_then(|d| d.get_item(name));
    match (ty.getattr(name), own) {
        (Ok(found), Ok(own)) => found.is(&own),
        _ => false,
    }
}
