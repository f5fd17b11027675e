//! New instances of a frozen pyclass without PyO3's generic initializer.
//!
//! PyO3 makes an instance by calling its base type's `tp_new` (for a class based on
//! `object`, `object.__new__` with a new empty argument tuple: an argument check, an
//! abstract-class check and an instance-dict check), which calls `tp_alloc`
//! (`PyType_GenericAlloc`: allocate, zero-fill, track by the collector), and then writes the
//! Rust value into the object. For a class based on `object` with no `__dict__`, [`FastNew`]
//! makes the same object with `PyObject_GC_New` (allocate, not tracked), zeroes what
//! follows the header and writes the value: a handle goes into one of the loop's queues
//! next, untracked there, so tracking it only to untrack it was waste. It does so for a
//! class whose layout it has checked at import against an instance PyO3 made; where a check
//! fails it is not made and callers use `Py::new`.
//! Owns: the layout check and the allocation. Not: which classes use it (`handles/`).

use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyClass;

/// `Py_TPFLAGS_MANAGED_WEAKREF` (3.12+) and `Py_TPFLAGS_MANAGED_DICT` (3.11+): instances
/// keep a `__dict__` or weak references in front of the object (a "pre-header"), which
/// `PyObject_GC_New` would have to size and clear.
const PREHEADER: std::os::raw::c_ulong = (1 << 3) | (1 << 4);

/// How to make an instance of `T` by hand, learned from one PyO3 made: the type, its
/// size, and where the Rust value sits in the object.
pub struct FastNew<T> {
    /// `T`'s type object (a heap type that lives as long as the module).
    ty: usize,
    /// `tp_basicsize`.
    size: usize,
    /// Bytes from the object's start to the value.
    offset: usize,
    _value: PhantomData<fn(T) -> T>,
}

/// Whether `alloc` is CPython's `PyType_GenericAlloc`. `object`'s own slot is that function
/// (Objects/typeobject.c), and is the one to compare with: on Windows the address this
/// module has for a function of python3XY.dll is its import thunk, never equal to the
/// function's own address that CPython stores in a slot.
fn is_generic_alloc(alloc: Option<ffi::allocfunc>) -> bool {
    let Some(alloc) = alloc else { return false };
    let alloc = alloc as *const () as usize;
    // SAFETY: `PyBaseObject_Type` is a static of CPython's, alive as long as the
    // interpreter; reading its `tp_alloc` slot reads a function pointer set at build time.
    let object = unsafe { (*std::ptr::addr_of!(ffi::PyBaseObject_Type)).tp_alloc };
    alloc == ffi::PyType_GenericAlloc as *const () as usize
        || object.is_some_and(|f| f as *const () as usize == alloc)
}

impl<T: PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync> FastNew<T> {
    /// Checks `sample`, an instance of exactly `T` that PyO3 just made (`Py::new`) and that
    /// nothing else has seen: `T` is based on `object`, collected by the collector, with no
    /// `__dict__` and nothing in front of the object, not abstract, not variable-sized,
    /// allocated by CPython's `PyType_GenericAlloc` (which zero-fills);
    /// the value lies inside the basic size, after the object header, aligned; and every
    /// other byte PyO3 wrote after the header is zero (its borrow flag, thread checker,
    /// dict and weak-reference slots, whichever the class has), so a zero-filled object
    /// with the value written is what PyO3 would have made. `None` if any of it fails.
    pub fn probe(sample: &Bound<'_, T>) -> Option<Self> {
        if cfg!(Py_GIL_DISABLED) {
            // A free-threaded build's object header (owning thread, shared refcount, GC
            // bits) is PyO3's and CPython's to set up: its handles are made by PyO3.
            return None;
        }
        let py = sample.py();
        let ty = T::type_object_raw(py);
        let obj = sample.as_ptr();
        let value = (sample.get() as *const T).cast::<u8>();
        // SAFETY: the GIL is held (`sample`); `ty` is `T`'s live type object (PyO3 made it
        // for `type_object_raw`), and `obj` is a live object borrowed from `sample`, of
        // `basicsize` bytes once its type is checked to be exactly `ty` with no items; the
        // bytes read are inside it. `PyBaseObject_Type` is a static.
        unsafe {
            // `PyType_GetFlags`, not the field: free-threaded builds make it an atomic.
            let flags = ffi::PyType_GetFlags(ty);
            if ffi::Py_TYPE(obj) != ty
                || (*ty).tp_base != std::ptr::addr_of_mut!(ffi::PyBaseObject_Type)
                || (*ty).tp_itemsize != 0
                || (*ty).tp_dictoffset != 0
                || flags & (PREHEADER | ffi::Py_TPFLAGS_IS_ABSTRACT) != 0
                || flags & ffi::Py_TPFLAGS_HAVE_GC == 0
                || !is_generic_alloc((*ty).tp_alloc)
            {
                return None;
            }
            let basicsize = usize::try_from((*ty).tp_basicsize).ok()?;
            let offset = (value as usize).checked_sub(obj as usize)?;
            let header = size_of::<ffi::PyObject>();
            // The value and its padding to the next word (which nobody reads).
            let end = (offset + size_of::<T>()).next_multiple_of(8);
            if offset < header
                || end > basicsize
                || offset % align_of::<T>() != 0
                || align_of::<T>() > align_of::<ffi::PyObject>()
            {
                return None;
            }
            let bytes = std::slice::from_raw_parts(obj.cast::<u8>(), basicsize);
            let outside_zero = bytes
                .iter()
                .enumerate()
                .skip(header)
                .filter(|(i, _)| !(offset..end).contains(i))
                .all(|(_, b)| *b == 0);
            if !outside_zero {
                return None;
            }
            Some(FastNew {
                ty: ty as usize,
                size: basicsize,
                offset,
                _value: PhantomData,
            })
        }
    }

    /// A new instance of `T` holding `value`, as `Py::new` would make it except that the
    /// collector does not track it yet (a recycled handle is not tracked either: the
    /// queue it goes into next keeps it so, `Handle::enter_queue`).
    #[inline(always)]
    pub fn make(&self, py: Python<'_>, value: T) -> PyResult<Py<T>> {
        let ty = self.ty as *mut ffi::PyTypeObject;
        // SAFETY: the GIL is held (`py`); `ty` is `T`'s type object, alive for the module's
        // life, a collected type with no pre-header (`probe`), so `PyObject_GC_New`
        // returns a new object of `ty` with one reference, its collector header cleared and
        // not tracked, `size` bytes long, or NULL with an error set. Its bytes after the
        // object header are zeroed, as `tp_alloc` leaves them for PyO3, and the value's
        // place, inside them and aligned (`probe`), is then written, not assigned. The
        // object is then one PyO3 would have made, untracked; its own `tp_dealloc` drops
        // the value.
        unsafe {
            let obj = ffi::PyObject_GC_New::<ffi::PyObject>(ty);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            // One `memset` of the body (the value's place included) was measured cheaper
            // than word stores around the value.
            let header = size_of::<ffi::PyObject>();
            std::ptr::write_bytes(obj.cast::<u8>().add(header), 0, self.size - header);
            std::ptr::write(obj.cast::<u8>().add(self.offset).cast::<T>(), value);
            Ok(Bound::from_owned_ptr(py, obj)
                .cast_into_unchecked::<T>()
                .unbind())
        }
    }
}
