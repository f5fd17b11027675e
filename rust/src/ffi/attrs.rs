//! Facts about a Python type that hold until the type changes, checked once per type
//! ([`TypeFacts`]), and one use of them: calling a method an object keeps bound in its
//! own `__dict__` without `getattr`'s look-up on the type ([`OwnMethods`]).
//!
//! CPython gives a type a new version tag whenever the type or a class it inherits from
//! changes (`PyType_Modified`), and never hands a tag out twice, so a type seen again with
//! the same tag is one a fact checked on it still holds for; anything else is checked
//! again.
//!
//! `getattr(obj, name)` is the instance's `__dict__[name]` when the type's
//! `__getattribute__` is `object`'s and no class on its MRO defines `name` as a data
//! descriptor (one with `__set__` or `__delete__`, which comes first); on a miss the class
//! attribute or `__getattr__` answers, so a miss falls back to `getattr` itself. rsloop's
//! transports keep their hot methods bound in their `__dict__` (`rsloop/_transports.py`),
//! and a stream writer calls two of them per `write` and `drain`.
//! Owns: the type checks and the dict read. Not: which methods are called (the callers).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

/// How many types a [`TypeFacts`] remembers: a call site sees one or two (a writer of
/// rsloop's class, a TLS transport beside a TCP one), and one that sees more checks again.
const SEEN: usize = 4;

/// A yes-or-no fact about a type, checked the first time an object of that type comes by
/// and remembered with the type's version tag (see the module docs).
pub struct TypeFacts {
    /// Types checked, each with its version tag then (0: an empty entry) and the answer.
    seen: [Seen; SEEN],
    /// The entry the next new type takes.
    next: AtomicUsize,
}

struct Seen {
    ty: AtomicPtr<ffi::PyTypeObject>,
    tag: AtomicU32,
    holds: AtomicBool,
}

impl Seen {
    const fn new() -> Self {
        Seen {
            ty: AtomicPtr::new(std::ptr::null_mut()),
            tag: AtomicU32::new(0),
            holds: AtomicBool::new(false),
        }
    }
}

impl TypeFacts {
    pub const fn new() -> Self {
        TypeFacts {
            seen: [Seen::new(), Seen::new(), Seen::new(), Seen::new()],
            next: AtomicUsize::new(0),
        }
    }

    /// `check(type(obj))`, from what this remembers where it can. `check` must look up
    /// on the type what it depends on (that gives the type a version tag), and must hold
    /// for as long as neither the type nor a class it inherits from changes.
    #[inline]
    pub fn holds(
        &self,
        obj: &Bound<'_, PyAny>,
        check: impl FnOnce(&Bound<'_, PyType>) -> bool,
    ) -> bool {
        if cfg!(Py_GIL_DISABLED) {
            // A tag read races with another thread's change there: never remembered.
            return false;
        }
        // SAFETY: the GIL is held (a `Bound` is in scope) and `obj` is live, so is its
        // type; `tp_version_tag` is a plain field of every type object, only read here.
        let (ty, tag) = unsafe {
            let ty = ffi::Py_TYPE(obj.as_ptr());
            (ty, (*ty).tp_version_tag)
        };
        if tag != 0 {
            for seen in &self.seen {
                // Relaxed: the GIL orders every access (the entries are only a cache).
                if std::ptr::eq(seen.ty.load(Ordering::Relaxed), ty)
                    && seen.tag.load(Ordering::Relaxed) == tag
                {
                    return seen.holds.load(Ordering::Relaxed);
                }
            }
        }
        self.check(&obj.get_type(), check)
    }

    #[cold]
    fn check(
        &self,
        ty: &Bound<'_, PyType>,
        check: impl FnOnce(&Bound<'_, PyType>) -> bool,
    ) -> bool {
        let holds = check(ty);
        let tag = version_tag(ty);
        if tag != 0 {
            let seen = &self.seen[self.next.fetch_add(1, Ordering::Relaxed) % SEEN];
            seen.ty.store(ty.as_type_ptr(), Ordering::Relaxed);
            seen.tag.store(tag, Ordering::Relaxed);
            seen.holds.store(holds, Ordering::Relaxed);
        }
        holds
    }
}

impl Default for TypeFacts {
    fn default() -> Self {
        Self::new()
    }
}

/// Methods named `names` that objects keep bound in their `__dict__`, called from there
/// where that is what `getattr` would return (see the module docs).
pub struct OwnMethods {
    names: &'static [&'static str],
    facts: TypeFacts,
}

impl OwnMethods {
    pub const fn new(names: &'static [&'static str]) -> Self {
        OwnMethods {
            names,
            facts: TypeFacts::new(),
        }
    }

    /// `getattr(obj, name)()`; `name` is one of this set's names.
    #[inline]
    pub fn call0<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.own(obj, name) {
            Some(method) => method.call0(),
            None => obj.call_method0(name),
        }
    }

    /// `getattr(obj, name)(arg)`; `name` is one of this set's names.
    #[inline]
    pub fn call1<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        arg: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.own(obj, name) {
            Some(method) => method.call1((arg,)),
            None => obj.call_method1(name, (arg,)),
        }
    }

    /// `obj.__dict__[name]` where that is `getattr(obj, name)`.
    #[inline]
    fn own<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
    ) -> Option<Bound<'py, PyAny>> {
        debug_assert!(self.names.iter().any(|n| name == *n));
        let plain = self
            .facts
            .holds(obj, |ty| is_plain(ty, self.names).unwrap_or(false));
        if plain {
            own_attr(obj, name)
        } else {
            None
        }
    }
}

/// Whether `getattr(obj, name)` is `obj.__dict__[name]` for instances of `ty` that have the
/// key, for every name in `names`.
fn is_plain(ty: &Bound<'_, PyType>, names: &[&str]) -> PyResult<bool> {
    if !generic_getattr(ty) || !has_dict(ty) {
        return Ok(false);
    }
    let py = ty.py();
    let mro = ty.getattr(pyo3::intern!(py, "__mro__"))?;
    for name in names {
        // Also what gives the type a version tag, if it has none yet.
        let _ = ty.hasattr(*name)?;
        for klass in mro.try_iter()? {
            let dict = klass?.getattr(pyo3::intern!(py, "__dict__"))?;
            let Some(attr) = dict.get_item(*name).ok() else {
                continue;
            };
            if has_descr_set(&attr.get_type()) {
                return Ok(false);
            }
            break;
        }
    }
    Ok(true)
}

/// The type's version tag (0: none assigned).
#[inline]
fn version_tag(ty: &Bound<'_, PyType>) -> u32 {
    // SAFETY: the GIL is held (a `Bound` is in scope) and `ty` is a live type object;
    // `tp_version_tag` is a plain field of every type object, only read here.
    unsafe { (*ty.as_type_ptr()).tp_version_tag }
}

/// Whether the type's instances get their attributes through `object.__getattribute__`.
fn generic_getattr(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY: the GIL is held and `ty` is live, as is `object`, a static type; the
    // `tp_getattro` fields are only read, and compared as addresses.
    let (ours, objects) = unsafe {
        (
            (*ty.as_type_ptr()).tp_getattro,
            (*std::ptr::addr_of!(ffi::PyBaseObject_Type)).tp_getattro,
        )
    };
    ours.is_some() && ours.map(|f| f as usize) == objects.map(|f| f as usize)
}

/// Whether the type's instances have a `__dict__` (a class whose bases all define
/// `__slots__` and that defines them too has none: looking there would only raise).
fn has_dict(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY: the GIL is held and `ty` is live; `tp_dictoffset` is a field of every type
    // object (0: no instance dict; negative for a dict CPython places itself), only read.
    unsafe { (*ty.as_type_ptr()).tp_dictoffset != 0 }
}

/// Whether objects of type `ty`, as class attributes, are data descriptors.
fn has_descr_set(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY: the GIL is held and `ty` is live; `tp_descr_set` is a field of every type
    // object (set for a class defining `__set__` or `__delete__`), only read here.
    unsafe { (*ty.as_type_ptr()).tp_descr_set.is_some() }
}

/// `obj.__dict__.get(name)`, or `None` where there is no such key or no `__dict__`.
#[inline]
fn own_attr<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> Option<Bound<'py, PyAny>> {
    let py = obj.py();
    // SAFETY: the GIL is held and `obj` and `name` are live. PyObject_GenericGetDict
    // returns a new reference to the instance's dict (made if the values were kept
    // inline), or NULL with an exception set where there is none, which is taken. The
    // item PyDict_GetItemWithError returns is borrowed from that dict, which `obj` keeps
    // alive, and is taken as a new reference before the dict's is released; NULL there is
    // a missing key or, with an exception set, a failed comparison, which is taken too.
    unsafe {
        let dict = ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut());
        if dict.is_null() {
            drop(PyErr::take(py));
            return None;
        }
        let item = ffi::PyDict_GetItemWithError(dict, name.as_ptr());
        let found = Bound::from_borrowed_ptr_or_opt(py, item);
        ffi::Py_DECREF(dict);
        if found.is_none() && !ffi::PyErr_Occurred().is_null() {
            drop(PyErr::take(py));
        }
        found
    }
}
