//! New instances of a frozen pyclass without PyO3's generic initializer.
//!
//! PyO3 makes an instance by calling its base type's `tp_new` (for a class based on
//! `object`, `object.__new__` with a new empty argument tuple: an argument check, an
//! abstract-class check and an instance-dict check) and then writing the Rust value into
//! the object. For a class based on `object` with no `__dict__`, all that amounts to
//! `tp_alloc` (which zero-fills) and the write; one of those per `call_soon` was a tenth of
//! rsloop's own instructions for it. [`FastNew`] does exactly the two, for a class whose
//! layout it has checked at import against an instance PyO3 made; where a check fails it
//! is not made and callers use `Py::new`.
//! Owns: the layout check and the allocation. Not: which classes use it (`handles/`).

use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::PyClass;

/// `Py_TPFLAGS_MANAGED_DICT` (3.12+): instances keep a `__dict__` outside the basic size.
const MANAGED_DICT: std::os::raw::c_ulong = 1 << 4;

/// How to make an instance of `T` by hand, learned from one PyO3 made: the type, its
/// `tp_alloc`, and where the Rust value sits in the object.
pub struct FastNew<T> {
    /// `T`'s type object (a heap type that lives as long as the module).
    ty: usize,
    alloc: ffi::allocfunc,
    /// Bytes from the object's start to the value.
    offset: usize,
    _value: PhantomData<fn(T) -> T>,
}

impl<T: PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync> FastNew<T> {
    /// Checks `sample`, an instance of exactly `T` that PyO3 just made (`Py::new`) and that
    /// nothing else has seen: `T` is based on `object`, with no `__dict__`, not abstract,
    /// not variable-sized, allocated by CPython's `PyType_GenericAlloc` (which zero-fills);
    /// the value lies inside the basic size, after the object header, aligned; and every
    /// other byte PyO3 wrote after the header is zero (its borrow flag, thread checker,
    /// dict and weak-reference slots, whichever the class has), so a zero-filled object
    /// with the value written is what PyO3 would have made. `None` if any of it fails.
    pub fn probe(sample: &Bound<'_, T>) -> Option<Self> {
        let py = sample.py();
        let ty = T::type_object_raw(py);
        let obj = sample.as_ptr();
        let value = (sample.get() as *const T).cast::<u8>();
        // SAFETY: the GIL is held (`sample`); `ty` is `T`'s live type object (PyO3 made it
        // for `type_object_raw`), and `obj` is a live object borrowed from `sample`, of
        // `basicsize` bytes once its type is checked to be exactly `ty` with no items; the
        // bytes read are inside it. `PyBaseObject_Type` is a static.
        unsafe {
            if ffi::Py_TYPE(obj) != ty
                || (*ty).tp_base != std::ptr::addr_of_mut!(ffi::PyBaseObject_Type)
                || (*ty).tp_itemsize != 0
                || (*ty).tp_dictoffset != 0
                || (*ty).tp_flags & (MANAGED_DICT | ffi::Py_TPFLAGS_IS_ABSTRACT) != 0
                || (*ty).tp_alloc.map(|f| f as *const () as usize)
                    != Some(ffi::PyType_GenericAlloc as *const () as usize)
            {
                return None;
            }
            let basicsize = usize::try_from((*ty).tp_basicsize).ok()?;
            let offset = (value as usize).checked_sub(obj as usize)?;
            let header = size_of::<ffi::PyObject>();
            if offset < header
                || offset + size_of::<T>() > basicsize
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
                .filter(|(i, _)| !(offset..offset + size_of::<T>()).contains(i))
                .all(|(_, b)| *b == 0);
            if !outside_zero {
                return None;
            }
            Some(FastNew {
                ty: ty as usize,
                alloc: ffi::PyType_GenericAlloc,
                offset,
                _value: PhantomData,
            })
        }
    }

    /// A new instance of `T` holding `value`, as `Py::new` would make it.
    #[inline]
    pub fn make(&self, py: Python<'_>, value: T) -> PyResult<Py<T>> {
        let ty = self.ty as *mut ffi::PyTypeObject;
        // SAFETY: the GIL is held (`py`); `ty` is `T`'s type object, alive for the module's
        // life, and `alloc` its `tp_alloc` (`probe` checked both), which returns a new,
        // zero-filled, tracked object of `ty` with one reference, or NULL with an error
        // set. The value's place is inside that object, aligned and not yet initialised
        // (`probe`), so it is written, not assigned; the other bytes stay zero as PyO3
        // leaves them. The object is then exactly one PyO3 would have made, and its own
        // `tp_dealloc` drops the value.
        unsafe {
            let obj = (self.alloc)(ty, 0);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            std::ptr::write(obj.cast::<u8>().add(self.offset).cast::<T>(), value);
            Ok(Bound::from_owned_ptr(py, obj)
                .cast_into_unchecked::<T>()
                .unbind())
        }
    }
}
