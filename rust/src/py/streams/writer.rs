//! `rsloop.StreamWriter.write` and `.drain` as native methods of that Python class
//! (`ffi::fastcall::install_on`, from `StreamReaderCore._register`). As Python methods
//! each cost a frame per call: `write(data)` is asyncio's `self._transport.write(data)`,
//! and `drain()` returns a `StreamOp`.
//! Owns: those two methods' argument shapes (Python's wording for a method of a class).
//! Not: draining (`op.rs`), the transport's write (`transports/stream/`).

use std::ffi::CStr;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyType;

use super::op::StreamOp;
use super::TRANSPORT_METHODS;
use crate::ffi::fastcall::{install_on, FastArgs, FastMethod};

/// Installs both methods on `cls` (`rsloop.StreamWriter`).
pub(super) fn install(cls: &Bound<'_, PyType>) -> PyResult<()> {
    install_on::<Write>(cls)?;
    install_on::<Drain>(cls)
}

/// `TypeError` for a call that passed anything but `expected` (a parameter list of at
/// most one name), in Python's words for `StreamWriter.<method>()` and in its order:
/// keywords first, then too many positional arguments, then a missing one.
#[cold]
fn bad_arguments(a: &FastArgs<'_, '_>, method: &str, expected: Option<&str>) -> PyErr {
    let max = usize::from(expected.is_some());
    for k in 0..a.n_keywords() {
        let Ok(name) = a.keyword(k) else { continue };
        if Some(name.to_string().as_str()) != expected {
            return PyTypeError::new_err(format!(
                "StreamWriter.{method}() got an unexpected keyword argument '{name}'"
            ));
        }
        if a.nargs() >= 1 {
            return PyTypeError::new_err(format!(
                "StreamWriter.{method}() got multiple values for argument '{name}'"
            ));
        }
    }
    if a.nargs() > max {
        let takes = if max == 0 {
            "1 positional argument".to_string()
        } else {
            format!("{} positional arguments", max + 1)
        };
        return PyTypeError::new_err(format!(
            "StreamWriter.{method}() takes {takes} but {} were given",
            a.nargs() + 1
        ));
    }
    let missing = expected.unwrap_or("");
    PyTypeError::new_err(format!(
        "StreamWriter.{method}() missing 1 required positional argument: '{missing}'"
    ))
}

/// `write(data)`: `self._transport.write(data)`.
struct Write;

impl FastMethod for Write {
    const NAME: &'static CStr = c"write";
    const DOC: &'static CStr = c"write($self, data)\n--\n\n\
Write data to the transport (asyncio.StreamWriter.write).";

    type Class = PyAny;

    fn skip_attach_count(_slf: &Bound<'_, PyAny>) -> bool {
        false
    }

    fn call<'py>(slf: &Bound<'py, PyAny>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let data = match (a.nargs(), a.n_keywords()) {
            (1, 0) => a.value(0),
            (0, 1) if a.keyword(0).is_ok_and(|k| k == "data") => a.value(0),
            _ => return Err(bad_arguments(a, "write", Some("data"))),
        };
        let transport = slf.getattr(intern!(py, "_transport"))?;
        TRANSPORT_METHODS.call1(&transport, intern!(py, "write"), &data)?;
        Ok(py.None().into_bound(py))
    }
}

/// `drain()`: a `StreamOp` (done at once unless the writer has to wait).
struct Drain;

impl FastMethod for Drain {
    const NAME: &'static CStr = c"drain";
    const DOC: &'static CStr = c"drain($self)\n--\n\n\
Flush the write buffer (asyncio.StreamWriter.drain); native when nothing has to wait.";

    type Class = PyAny;

    fn skip_attach_count(_slf: &Bound<'_, PyAny>) -> bool {
        false
    }

    fn call<'py>(slf: &Bound<'py, PyAny>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        if a.nargs() != 0 || a.n_keywords() != 0 {
            return Err(bad_arguments(a, "drain", None));
        }
        Ok(StreamOp::drain_of(slf)?.into_any())
    }
}
