//! Fastcall argument parsing (`rust/src/sys/fastcall.rs` and the methods it serves in
//! `py/scheduling.rs` and `py/streams/writer.rs`) through CPython's raw vectorcall
//! protocol: any positional count, any keyword names (duplicates and non-strings too,
//! which only C callers can pass), with and without `PY_VECTORCALL_ARGUMENTS_OFFSET`,
//! in an interpreter embedded in this target (`embed`). The oracle, a Python function
//! with each method's signature called the same way, is `rust/fuzz/harness/fastcall.py`.
#![no_main]

mod embed;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyModule, PyTuple};

/// `vectorcall(callable, values, nargs, kwnames, offset)`: `callable(*values[:nargs],
/// **dict(zip(kwnames, values[nargs:])))` made through `PyObject_Vectorcall` exactly
/// as given (no check of the names), with the offset flag and its spare slot if asked.
#[pyfunction]
fn vectorcall<'py>(
    callable: &Bound<'py, PyAny>,
    values: Vec<Bound<'py, PyAny>>,
    nargs: usize,
    kwnames: Option<Bound<'py, PyTuple>>,
    offset: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let n_kw = kwnames.as_ref().map_or(0, |k| k.len());
    assert_eq!(values.len(), nargs + n_kw, "the harness's values");
    // One spare slot in front: with the offset flag the callee may borrow it.
    let mut slots: Vec<*mut ffi::PyObject> = vec![std::ptr::null_mut()];
    slots.extend(values.iter().map(|v| v.as_ptr()));
    let flag = if offset {
        ffi::PY_VECTORCALL_ARGUMENTS_OFFSET
    } else {
        0
    };
    let names = kwnames
        .as_ref()
        .map_or(std::ptr::null_mut(), |k| k.as_ptr());
    // SAFETY: `slots[1..]` holds `nargs + len(kwnames)` live references (kept alive by
    // `values`), preceded by a writable spare slot as the offset flag allows; `kwnames` is
    // NULL or a live tuple. The result is a new reference or NULL with an exception set.
    unsafe {
        let r = ffi::PyObject_Vectorcall(
            callable.as_ptr(),
            slots.as_ptr().add(1),
            nargs | flag,
            names,
        );
        Bound::from_owned_ptr_or_err(callable.py(), r)
    }
}

fn setup(py: Python<'_>) {
    let m = PyModule::new(py, "_fuzzcall").expect("module");
    m.add_function(wrap_pyfunction!(vectorcall, &m).expect("function"))
        .expect("add");
    py.import("sys")
        .and_then(|s| s.getattr("modules"))
        .and_then(|mods| mods.set_item("_fuzzcall", m))
        .expect("sys.modules");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| embed::run_with("fastcall", data, setup));
