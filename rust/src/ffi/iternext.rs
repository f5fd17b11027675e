//! A native `tp_iternext` that returns a value the way CPython's own generators do.
//!
//! An awaitable that is not a generator ends by raising `StopIteration(value)`, and the
//! interpreter's `await` takes the value back out (`_PyGen_FetchStopIterationValue`).
//! PyO3's `__next__` raises it through a lazy error: a tuple `(value,)`, then an exception
//! instance made by calling `StopIteration`, normalised again by the reader. Setting the
//! error as `PyErr_SetObject(StopIteration, value)` does what `return value` in a
//! generator does: up to 3.11 no exception object is made at all, from 3.12 on one; and
//! a `None` result sets no exception at all, as a generator's `tp_iternext` does.
//! Owns: the slot, panics at its boundary, the `StopIteration` shape. Not: what a step
//! does (a safe [`IterNext`] implementation elsewhere).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyClass;

use super::fastcall::{panic_error, with_attach_count};

/// What one step of an awaitable did.
pub enum Next {
    /// Suspend, handing this object to the task driving the coroutine.
    Yield(Py<PyAny>),
    /// Finish with this value (`None`: return `None`).
    Return(Option<Py<PyAny>>),
}

/// A class whose `next(obj)` is a step of an awaitable.
pub trait IterNext {
    /// The class the slot is installed on.
    type Class: PyClass;
    /// One step, on an instance of `Class`.
    fn next(slf: &Bound<'_, Self::Class>) -> PyResult<Next>;
}

// The `tp_iternext` slot for `I`.
unsafe extern "C" fn trampoline<I: IterNext>(slf: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // The slot may be called from outside any PyO3 call (a thread driving the awaitable
    // by hand): count the thread as PyO3's own methods do, cheaply when it already is.
    with_attach_count(|py| {
        // SAFETY: CPython calls a type's `tp_iternext` with a live, borrowed instance of
        // that type (or of a subclass, which shares its layout); `install` put this slot
        // only on `I::Class`.
        let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<I::Class>() };
        let outcome = catch_unwind(AssertUnwindSafe(|| I::next(&this)));
        match outcome {
            Ok(Ok(Next::Yield(obj))) => obj.into_ptr(),
            // Returning `None`: NULL with no exception set, as a generator's `tp_iternext`
            // does; `await`, `next()` and `PyIter_Send` all read it as `None`.
            Ok(Ok(Next::Return(None))) => std::ptr::null_mut(),
            Ok(Ok(Next::Return(Some(value)))) => {
                set_stop_iteration(py, value.into_bound(py));
                std::ptr::null_mut()
            }
            Ok(Err(e)) => {
                e.restore(py);
                std::ptr::null_mut()
            }
            Err(payload) => {
                panic_error(payload).restore(py);
                std::ptr::null_mut()
            }
        }
    })
}

// `StopIteration(value)` as a generator's `return value` sets it (`_PyGen_SetStopIterationValue`).
fn set_stop_iteration(py: Python<'_>, value: Bound<'_, PyAny>) {
    let bare = !value.is_instance_of::<PyTuple>()
        && !value.is_instance_of::<pyo3::exceptions::PyBaseException>();
    if bare {
        // SAFETY: the GIL is held; the exception type is static and `value` a live
        // reference that `PyErr_SetObject` increfs for itself.
        unsafe { ffi::PyErr_SetObject(ffi::PyExc_StopIteration, value.as_ptr()) };
        return;
    }
    // A tuple or an exception would be taken as the exception's arguments or as the
    // exception itself: wrap it in an instance first, as CPython does.
    match py
        .get_type::<pyo3::exceptions::PyStopIteration>()
        .call1((value,))
    {
        Ok(exc) => PyErr::from_value(exc).restore(py),
        Err(e) => e.restore(py),
    }
}

/// Installs `I`'s step as its class's `tp_iternext`, in place of the one PyO3 generated
/// for `__next__` (which stays as the `__next__` method, with the same behaviour).
pub fn install<I: IterNext>(py: Python<'_>) {
    let ty = py.get_type::<I::Class>();
    let ptr = ty.as_type_ptr();
    // SAFETY: `ptr` is the live heap type PyO3 created for `I::Class`, kept alive by `ty`;
    // writing a slot of a heap type under the GIL and then calling `PyType_Modified` is
    // how a slot is replaced after creation.
    unsafe {
        (*ptr).tp_iternext = Some(trampoline::<I>);
        ffi::PyType_Modified(ptr);
    }
}
