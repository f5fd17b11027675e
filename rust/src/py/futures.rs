//! `asyncio.Future` and `asyncio.Task` as the loop makes them: the cached types and
//! keyword tuples, and the call that leaves out `loop=` where asyncio defaults to it.
//! Owns: those calls. Not: when a task is made natively (`Loop::create_task`).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use super::loop_::Loop;
use crate::ffi::python::call_kw;

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
