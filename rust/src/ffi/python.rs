//! The few CPython C-API calls PyO3 has no safe wrapper for: entering a `contextvars.Context`
//! around a call, copying the current context (or seeing that it is empty without a copy),
//! the interpreter's thread ident.
//! Owns: those calls and their invariants. Not: deciding when callbacks run (`core/`).

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Where a thread state keeps its current context (`PyThreadState.context`), in bytes;
/// 0 while unknown (the field is never first). Set once by [`probe_current_context`].
static CONTEXT_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// `offsetof(PyThreadState, context)` of the CPython versions rsloop builds for, on LP64
/// platforms (Linux and macOS, x86-64 and arm64), from their `cpython/pystate.h`. The
/// field is public in the non-limited headers but has no accessor; an offset is only used
/// after [`probe_current_context`] saw a context entered there.
fn context_offset_for(minor: u8) -> Option<usize> {
    if !cfg!(target_pointer_width = "64") || cfg!(windows) {
        return None;
    }
    match minor {
        10 => Some(240),
        11 => Some(224),
        12 | 13 => Some(208),
        _ => None,
    }
}

/// Checks, once per process, that the current context sits where
/// [`context_offset_for`] says: a fresh context entered must appear there and the one
/// before it come back on exit. Until (or unless) it does, [`current_context_is_empty`]
/// answers `None` and callers copy the context as before.
pub fn probe_current_context(py: Python<'_>) {
    let version = py.version_info();
    // The layout is CPython's: another implementation's thread state is not read at all.
    let cpython = py
        .import("sys")
        .and_then(|sys| sys.getattr("implementation")?.getattr("name"))
        .is_ok_and(|name| name.eq("cpython").unwrap_or(false));
    if version.major != 3 || !cpython {
        return;
    }
    let Some(offset) = context_offset_for(version.minor) else {
        return;
    };
    // SAFETY: the GIL is held, so the thread state is this thread's and live; `offset` is
    // inside `PyThreadState` for this version (its header's `offsetof`, which also makes
    // the read aligned). PyContext_New returns a new reference or NULL with an error set;
    // Enter/Exit take a live context and return 0 or -1 with an error set, each error
    // cleared here; the context is released after its exit.
    let found = unsafe {
        let slot = ffi::PyThreadState_Get()
            .cast::<u8>()
            .add(offset)
            .cast::<*mut ffi::PyObject>();
        let before = *slot;
        let fresh = ffi::PyContext_New();
        if fresh.is_null() {
            ffi::PyErr_Clear();
            return;
        }
        let mut ok = false;
        if ffi::PyContext_Enter(fresh) == 0 {
            let inside = *slot;
            if ffi::PyContext_Exit(fresh) == 0 {
                ok = inside == fresh && *slot == before;
            } else {
                ffi::PyErr_Clear();
            }
        } else {
            ffi::PyErr_Clear();
        }
        ffi::Py_DECREF(fresh);
        ok
    };
    if found {
        CONTEXT_OFFSET.store(offset, Ordering::Relaxed);
    }
}

/// Whether the current context holds no variable, seen without copying it: `Some(true)`
/// for an empty one (or none made yet), `Some(false)` for one with variables, `None` when
/// the thread state's layout is unknown here (the caller copies the context then).
#[inline]
pub fn current_context_is_empty(_py: Python<'_>) -> Option<bool> {
    let offset = CONTEXT_OFFSET.load(Ordering::Relaxed);
    if offset == 0 {
        return None;
    }
    // SAFETY: the GIL is held (`_py`), so the thread state is this thread's and live, and
    // its current context (a strong reference it holds, or NULL) cannot change under us;
    // `offset` was checked by `probe_current_context` against a context entered there.
    // A non-NULL value is an exact `contextvars.Context`, whose `mp_length` (the variable
    // count) cannot fail.
    unsafe {
        let ctx = *ffi::PyThreadState_Get()
            .cast::<u8>()
            .add(offset)
            .cast::<*mut ffi::PyObject>();
        if ctx.is_null() {
            return Some(true);
        }
        let len = (*ffi::Py_TYPE(ctx))
            .tp_as_mapping
            .as_ref()
            .and_then(|m| m.mp_length)?;
        Some(len(ctx) == 0)
    }
}

/// `contextvars.copy_context()`.
pub fn copy_context(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: the GIL is held (we have `py`); PyContext_CopyCurrent returns a new reference
    // or NULL with an exception set, which `from_owned_ptr_or_err` turns into a PyErr.
    unsafe {
        let ptr = ffi::PyContext_CopyCurrent();
        Bound::from_owned_ptr_or_err(py, ptr)
    }
}

/// Whether `obj` is a `contextvars.Context`.
pub fn is_context(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object borrowed for the call; the check only reads its type.
    unsafe { ffi::PyContext_CheckExact(obj.as_ptr()) != 0 }
}

/// `context.run(f)` for a `contextvars.Context` (see [`is_context`]), without the method
/// lookup and argument repacking: `f` runs with `context` entered, which is exited after,
/// whatever `f` returned.
#[inline(always)]
pub fn run_in_context<'py, T>(
    context: &Bound<'py, PyAny>,
    f: impl FnOnce() -> PyResult<T>,
) -> PyResult<T> {
    let py = context.py();
    // SAFETY: `context` is a live object and the GIL is held. PyContext_Enter checks the
    // type itself (TypeError "an instance of Context was expected", -1) and fails (-1,
    // exception set) if the context is already entered, exactly as `Context.run` does; on
    // success we always exit it below, whatever `f` returned.
    if unsafe { ffi::PyContext_Enter(context.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let result = f();
    // SAFETY: we entered this context just above on this thread, so exiting cannot fail
    // with "not entered"; the GIL is still held.
    let exited = unsafe { ffi::PyContext_Exit(context.as_ptr()) };
    if exited != 0 {
        return Err(PyErr::fetch(py));
    }
    result
}

/// Whether `pthread_self()` is the interpreter's thread ident here (CPython's POSIX
/// `PyThread_get_thread_ident` returns it as is); set once by [`probe_thread_ident`].
#[cfg(unix)]
static PTHREAD_IS_IDENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Checks, once per process, that `pthread_self()` gives what
/// `PyThread_get_thread_ident()` gives on this thread; [`thread_ident`] then reads it
/// directly (every `call_soon` asks which thread it is on). Until (or unless) it does,
/// the interpreter is asked.
pub fn probe_thread_ident() {
    #[cfg(unix)]
    {
        // SAFETY: neither call has preconditions; both read the calling thread's id.
        let same =
            unsafe { libc::pthread_self() as u64 == ffi::PyThread_get_thread_ident() as u64 };
        PTHREAD_IS_IDENT.store(same, Ordering::Relaxed);
    }
}

/// `threading.get_ident()` of the calling thread.
#[inline]
pub fn thread_ident() -> u64 {
    #[cfg(unix)]
    if PTHREAD_IS_IDENT.load(Ordering::Relaxed) {
        // SAFETY: pthread_self has no preconditions; `probe_thread_ident` saw it agree
        // with the interpreter's ident, which is defined as it on POSIX.
        return unsafe { libc::pthread_self() } as u64;
    }
    // SAFETY: PyThread_get_thread_ident has no preconditions; it reads the OS thread id.
    unsafe { ffi::PyThread_get_thread_ident() as u64 }
}

/// The reference count of `obj` (`sys.getrefcount` minus its own argument reference).
pub fn refcnt(obj: &Bound<'_, PyAny>) -> isize {
    // SAFETY: the GIL is held and `obj` is a live object borrowed for the call.
    unsafe { ffi::Py_REFCNT(obj.as_ptr()) }
}

/// `callable(*args, **dict(zip(kwnames, kwvalues)))` through vectorcall, without building
/// a tuple or a dict: used for `Future(loop=...)` and `Task(coro, loop=..., ...)`.
pub fn call_kw<'py>(
    callable: &Bound<'py, PyAny>,
    args: &[&Bound<'py, PyAny>],
    kwnames: &Bound<'py, PyTuple>,
    kwvalues: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let py = callable.py();
    if kwnames.len() != kwvalues.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "call_kw: one value per keyword name",
        ));
    }
    // A slot in front of the arguments lets the callee borrow it (ARGUMENTS_OFFSET).
    const MAX: usize = 7;
    let total = args.len() + kwvalues.len();
    if total > MAX {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "call_kw: at most 7 arguments",
        ));
    }
    let mut stack: [*mut ffi::PyObject; MAX + 1] = [std::ptr::null_mut(); MAX + 1];
    for (slot, obj) in stack[1..]
        .iter_mut()
        .zip(args.iter().chain(kwvalues.iter()))
    {
        *slot = obj.as_ptr();
    }
    let nargs = args.len() | ffi::PY_VECTORCALL_ARGUMENTS_OFFSET;
    let names = if kwvalues.is_empty() {
        std::ptr::null_mut()
    } else {
        kwnames.as_ptr()
    };
    // SAFETY: the GIL is held; every pointer in `stack` after the first is a live object
    // borrowed from `args`/`kwvalues` for the duration of the call; `names` is a live tuple
    // of str with one name per keyword value (checked above) or NULL; `total` <= MAX so
    // the callee reads inside `stack`; slot 0 is ours to let
    // the callee use, as ARGUMENTS_OFFSET promises. The result is a new reference or NULL
    // with an exception set.
    unsafe {
        let result =
            ffi::PyObject_Vectorcall(callable.as_ptr(), stack.as_mut_ptr().add(1), nargs, names);
        Bound::from_owned_ptr_or_err(py, result)
    }
}

/// `descr.__set__(obj, value)`: sets an attribute through the data descriptor the class
/// defines for it (looked up once by the caller), without `setattr`'s look-up.
pub fn descr_set(
    descr: &Bound<'_, PyAny>,
    obj: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: the GIL is held and the three objects are live, borrowed for the call; the
    // descriptor's type outlives it, and `tp_descr_set` is NULL or the type's setter,
    // which returns 0 or -1 with an exception set.
    unsafe {
        match (*ffi::Py_TYPE(descr.as_ptr())).tp_descr_set {
            Some(set) if set(descr.as_ptr(), obj.as_ptr(), value.as_ptr()) == 0 => Ok(()),
            Some(_) => Err(PyErr::fetch(descr.py())),
            None => Err(pyo3::exceptions::PyTypeError::new_err(
                "descr_set: not a data descriptor",
            )),
        }
    }
}

/// Whether `ty`'s attributes cannot be set or deleted (`Py_TPFLAGS_IMMUTABLETYPE`: static
/// types and the C types that ask for it, such as `_asyncio.Future`).
pub fn is_immutable(ty: &Bound<'_, pyo3::types::PyType>) -> bool {
    // SAFETY: the GIL is held and `ty` is a live type; PyType_GetFlags only reads it.
    let flags = unsafe { ffi::PyType_GetFlags(ty.as_type_ptr()) };
    flags & ffi::Py_TPFLAGS_IMMUTABLETYPE != 0
}

/// `contextvars.Context()`: a new, empty context.
pub fn new_context(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: the GIL is held; PyContext_New returns a new reference or NULL with an
    // exception set.
    unsafe {
        let ptr = ffi::PyContext_New();
        Bound::from_owned_ptr_or_err(py, ptr).map(Bound::unbind)
    }
}

/// Whether a `contextvars.Context` holds no variable.
pub fn context_is_empty(ctx: &Bound<'_, PyAny>) -> bool {
    if !is_context(ctx) {
        return false;
    }
    // `len(ctx)` through the type's own slot, without `PyObject_Size`'s two generic
    // layers: this runs twice per callback scheduled from an empty context.
    // SAFETY: `ctx` is a live, exact Context (checked above) and the GIL is held; its type
    // object outlives it, and `tp_as_mapping` is NULL or points at the type's static
    // table. Context's `mp_length` cannot fail (it returns the variable count).
    let slot = unsafe {
        let ty = ffi::Py_TYPE(ctx.as_ptr());
        (*ty).tp_as_mapping.as_ref().and_then(|m| m.mp_length)
    };
    match slot {
        // SAFETY: as above; the slot is called with the object of its own type.
        Some(len) => unsafe { len(ctx.as_ptr()) == 0 },
        None => ctx.len().map(|n| n == 0).unwrap_or(false),
    }
}

/// Takes `obj`, an object of a garbage-collected type, off the collector's lists: the
/// collector stops walking it (and what it holds) until [`gc_track`] puts it back.
/// A no-op for an object that is not tracked.
#[inline]
pub fn gc_untrack(obj: &Bound<'_, PyAny>) {
    // SAFETY: the GIL is held and `obj` is live; PyObject_GC_UnTrack accepts any object of
    // a GC type (ours are: PyO3 gives a class with `__traverse__` Py_TPFLAGS_HAVE_GC) and
    // checks for itself whether it is tracked.
    unsafe { ffi::PyObject_GC_UnTrack(obj.as_ptr().cast()) }
}

/// Puts `obj` (of a garbage-collected type) back on the collector's lists if
/// [`gc_untrack`] took it off; a no-op if it is tracked.
#[inline]
pub fn gc_track(obj: &Bound<'_, PyAny>) {
    // SAFETY: the GIL is held and `obj` is live and of a GC type whose `tp_traverse` is
    // valid at any time; PyObject_GC_Track must not be called on a tracked object, which
    // the PyObject_GC_IsTracked check rules out.
    unsafe {
        if ffi::PyObject_GC_IsTracked(obj.as_ptr()) == 0 {
            ffi::PyObject_GC_Track(obj.as_ptr().cast());
        }
    }
}

/// Whether the collector tracks `obj`.
#[inline]
pub fn gc_is_tracked(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the GIL is held and `obj` is live; the call only reads its GC header.
    unsafe { ffi::PyObject_GC_IsTracked(obj.as_ptr()) != 0 }
}

/// Whether the loop's reference is the only one to `obj` and the collector does not
/// track it: then the loop may show the collector what `obj` holds as its own (see
/// `Handle::traverse_queued`). Called from a `__traverse__` (the `PyVisit` proves it).
#[inline]
pub fn sole_and_untracked<T>(obj: &Py<T>, _visit: &pyo3::gc::PyVisit<'_>) -> bool {
    // SAFETY: CPython runs tp_traverse with the GIL held and `obj` is a live reference
    // owned by the traversed object; both calls only read its header.
    unsafe { ffi::Py_REFCNT(obj.as_ptr()) == 1 && ffi::PyObject_GC_IsTracked(obj.as_ptr()) == 0 }
}

/// A reference to a pyclass instance as a reference to its base class's instance, without
/// a `Python` token (a `__traverse__` has none): `Bound::as_super` for `Py`.
#[inline]
pub fn as_base<T: pyo3::PyClass>(obj: &Py<T>) -> &Py<T::BaseType> {
    // SAFETY: `Py<U>` is a `#[repr(transparent)]` pointer to the object for every `U`, and
    // an instance of a pyclass is an instance of its base class (the cast `as_super`
    // makes), so the same pointer is a valid `Py<T::BaseType>` for the same lifetime.
    unsafe { &*(obj as *const Py<T>).cast::<Py<T::BaseType>>() }
}

/// Whether a weak reference to `obj` exists. `true` when its type keeps its weak
/// references where this cannot look (a managed slot): callers only use the answer to
/// decide whether an object may be reused, and "maybe" means no.
pub fn has_weakrefs(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the GIL is held and `obj` is live; a type with a positive
    // `tp_weaklistoffset` keeps at that offset inside each instance the head of its list
    // of weak references (NULL when there is none), which we only read.
    unsafe {
        let offset = (*ffi::Py_TYPE(obj.as_ptr())).tp_weaklistoffset;
        if offset <= 0 {
            return offset != 0;
        }
        let slot = obj
            .as_ptr()
            .cast::<u8>()
            .offset(offset)
            .cast::<*mut ffi::PyObject>();
        !(*slot).is_null()
    }
}
