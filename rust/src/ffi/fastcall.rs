//! Native methods that read CPython's vectorcall arguments as they arrive.
//!
//! PyO3's generated parsing serves any signature, and pays for it: a keyword's name is
//! converted to UTF-8 and searched among the parameters, `*args` becomes a new tuple.
//! `call_soon` is called with `context=` by asyncio's C `Future` and `Task` on every
//! wake-up, and there that parsing cost more than the scheduling itself. A method
//! installed here reads its fixed shape from the raw arguments instead.
//! Owns: the raw entry point, the method descriptor, panics at the boundary.
//! Not: what a method does (a safe [`FastMethod`] implementation elsewhere).

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};
use pyo3::PyTypeInfo;

/// The arguments of one call: positional ones, then keyword values named by `kwnames`.
pub struct FastArgs<'a, 'py> {
    py: Python<'py>,
    values: &'a [*mut ffi::PyObject],
    nargs: usize,
    kwnames: Option<Borrowed<'a, 'py, PyTuple>>,
}

impl<'a, 'py> FastArgs<'a, 'py> {
    /// How many positional arguments were passed.
    #[inline(always)]
    pub fn nargs(&self) -> usize {
        self.nargs
    }

    /// The positional argument at `i` (`i < nargs()`), or a keyword's value
    /// (`nargs() + k`, see [`FastArgs::keyword`]).
    #[inline(always)]
    pub fn value(&self, i: usize) -> Borrowed<'a, 'py, PyAny> {
        // SAFETY: `values` holds `nargs + len(kwnames)` live references, borrowed from the
        // caller for the whole call ('a); an index out of range panics on the slice first.
        unsafe { Borrowed::from_ptr(self.py, self.values[i]) }
    }

    /// The positional arguments from `start` on, as a new tuple (the shared empty tuple if
    /// there are none).
    #[inline(always)]
    pub fn tuple_from(&self, start: usize) -> PyResult<Bound<'py, PyTuple>> {
        if start >= self.nargs {
            return Ok(PyTuple::empty(self.py));
        }
        PyTuple::new(self.py, (start..self.nargs).map(|i| self.value(i)))
    }

    /// How many keyword arguments were passed.
    #[inline(always)]
    pub fn n_keywords(&self) -> usize {
        self.kwnames.as_ref().map_or(0, |k| k.len())
    }

    /// The interpreter token of the call.
    #[inline(always)]
    pub fn py(&self) -> Python<'py> {
        self.py
    }

    /// The name of keyword argument `k` (`k < n_keywords()`); its value is
    /// `value(nargs() + k)`.
    pub fn keyword(&self, k: usize) -> PyResult<Bound<'py, PyString>> {
        let names = self.kwnames.as_ref().expect("keyword() without keywords");
        Ok(names.get_item(k)?.cast_into::<PyString>()?)
    }
}

/// A method whose arguments are read from [`FastArgs`].
pub trait FastMethod {
    /// The class the method is installed on; `self` is an instance of it (`PyAny` for a
    /// method installed on a Python class with [`install_on`]).
    type Class: PyTypeInfo;
    /// The attribute name (and `__name__`).
    const NAME: &'static CStr;
    /// The docstring, starting with CPython's `name($self, ...)\n--\n\n` text signature
    /// so `inspect.signature` sees the parameters.
    const DOC: &'static CStr;
    /// Whether the call can skip raising PyO3's count of the thread as attached: `true`
    /// when PyO3 already counts it (the caller runs inside one of PyO3's own methods), or
    /// when the call's success path drops no `Py` (see `trampoline`; an error is raised
    /// attached, `restore_attached`). `false` is always correct, only slower: raising the
    /// count on a thread PyO3 does not count costs a `PyGILState_Ensure`/`Release` pair
    /// per call.
    fn skip_attach_count(slf: &Bound<'_, Self::Class>) -> bool;
    /// The call itself, on `slf` (an instance of the type the method was installed on,
    /// checked by the descriptor).
    fn call<'py>(
        slf: &Bound<'py, Self::Class>,
        args: &FastArgs<'_, 'py>,
    ) -> PyResult<Bound<'py, PyAny>>;
}

// The METH_FASTCALL | METH_KEYWORDS entry point for `M`.
unsafe extern "C" fn trampoline<M: FastMethod>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a method's C function with the GIL held.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `slf` is a live instance of `M::Class`, borrowed for the call: the method
    // descriptor, made for that class by `install`, checked its type before calling us
    // (with `install_on`, `M::Class` is `PyAny`, which every object is).
    let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<M::Class>() };
    if M::skip_attach_count(&this) {
        // SAFETY: the arguments are CPython's, as received.
        unsafe { run::<M>(py, slf, args, nargs, kwnames) }
    } else {
        // PyO3 counts a thread as attached (a thread-local) while one of its own methods
        // runs, and queues a `Py` dropped by a thread it does not count until its next
        // attach, on whichever thread, instead of releasing it at once (later, never
        // wrongly: CPython holds the GIL for this call). `attach` raises that count here,
        // as PyO3's generated methods do, for callers outside any PyO3 call.
        // SAFETY: the arguments are CPython's, as received.
        with_attach_count(|py| unsafe { run::<M>(py, slf, args, nargs, kwnames) })
    }
}

/// Runs `f` with PyO3 counting the thread as attached (`Python::attach`), for a slot or
/// method that CPython called with the GIL held. `attach` itself may panic (PyO3 refuses
/// while the interpreter finalizes); that becomes a Python exception here instead of an
/// abort at the `extern "C"` boundary. `f` catches its own panics.
pub(crate) fn with_attach_count(
    f: impl FnOnce(Python<'_>) -> *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    match catch_unwind(AssertUnwindSafe(|| Python::attach(f))) {
        Ok(ptr) => ptr,
        Err(payload) => {
            // SAFETY: CPython calls slots and methods with the GIL held.
            let py = unsafe { Python::assume_attached() };
            panic_error(payload).restore(py);
            std::ptr::null_mut()
        }
    }
}

/// A caught panic as PyO3 raises it: `PanicException` with the panic's message.
pub(crate) fn panic_error(payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic in rsloop".to_string());
    PanicException::new_err(text)
}

// The call itself, with panics caught.
//
// # Safety
// The arguments must be those CPython passed to the METH_FASTCALL | METH_KEYWORDS method,
// during that call, with the GIL held.
#[inline(always)]
unsafe fn run<M: FastMethod>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: for METH_FASTCALL | METH_KEYWORDS, `kwnames` is NULL or a tuple of names,
    // borrowed for the call.
    let kwnames = unsafe { Borrowed::from_ptr_or_opt(py, kwnames) }
        // SAFETY: see above: a non-NULL `kwnames` is a tuple.
        .map(|k| unsafe { k.cast_unchecked::<PyTuple>() });
    // `nargs` is the plain positional count (the vectorcall offset flag is stripped).
    let nargs = nargs.max(0) as usize;
    let total = nargs + kwnames.as_ref().map_or(0, |k| k.len());
    let values = if total == 0 {
        // `args` may be NULL when nothing was passed.
        &[][..]
    } else {
        // SAFETY: `args` points at `nargs + len(kwnames)` borrowed references that stay
        // valid for the call.
        unsafe { std::slice::from_raw_parts(args, total) }
    };
    // SAFETY: `slf` is a live instance of `M::Class`, borrowed for the call (see
    // `trampoline`).
    let slf = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<M::Class>() };
    let args = FastArgs {
        py,
        values,
        nargs,
        kwnames,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| M::call(&slf, &args)));
    let err = match outcome {
        Ok(Ok(obj)) => return obj.into_ptr(),
        Ok(Err(e)) => e,
        Err(payload) => panic_error(payload),
    };
    restore_attached(py, err);
    std::ptr::null_mut()
}

// Raises `err` with PyO3 counting the thread as attached. Only a method that skipped the
// count (`FastMethod::skip_attach_count`) can be unattached here, and an error is where it
// may have dropped a `Py` (its arguments, on the way out) and where `restore` drops the
// error's own lazy parts: attaching releases those now, not at PyO3's next attach. On a
// thread already counted this is a counter increment.
#[cold]
fn restore_attached(py: Python<'_>, err: PyErr) {
    let mut err = Some(err);
    let attached = catch_unwind(AssertUnwindSafe(|| {
        Python::attach(|py| err.take().map(|e| e.restore(py)))
    }));
    // `attach` refused (PyO3 does while the interpreter finalizes): raised as it is.
    if let (Err(_), Some(e)) = (attached, err) {
        e.restore(py);
    }
}

/// Installs `M` on its class as a method, replacing an attribute of that name.
pub fn install<M: FastMethod>(py: Python<'_>) -> PyResult<()> {
    install_into::<M>(&py.get_type::<M::Class>())
}

/// Installs `M` as a method of `ty`, a class defined in Python.
pub fn install_on<M: FastMethod<Class = PyAny>>(ty: &Bound<'_, PyType>) -> PyResult<()> {
    install_into::<M>(ty)
}

// `ty` is `M::Class`'s type object, or any type when `M::Class` is `PyAny`.
fn install_into<M: FastMethod>(ty: &Bound<'_, PyType>) -> PyResult<()> {
    let py = ty.py();
    // Leaked on purpose: a method's definition must outlive every descriptor and bound
    // method made from it, and each method is installed once per class.
    let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: M::NAME.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: trampoline::<M>,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: M::DOC.as_ptr(),
    }));
    // SAFETY: `ty` is a live type object, `def` lives forever; PyDescr_NewMethod returns a
    // new reference or NULL with an exception set.
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def)) }?;
    ty.setattr(M::NAME.to_str().expect("method names are ASCII"), descr)
}
