//! Conversions at the Python boundary: file objects to fds, delays to deadlines.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};

/// `selectors._fileobj_to_fd`: an int, or an object whose `fileno()` gives one.
pub fn fileobj_to_fd(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let fd: i64 = if obj.is_instance_of::<PyInt>() {
        obj.extract()?
    } else {
        let as_int = obj
            .call_method0("fileno")
            .and_then(|n| {
                n.call_method0("__index__")
                    .or_else(|_| n.call_method0("__int__"))
            })
            .and_then(|n| n.extract::<i64>());
        match as_int {
            Ok(fd) => fd,
            Err(_) => {
                return Err(PyValueError::new_err(format!(
                    "Invalid file object: {}",
                    obj.repr()?
                )))
            }
        }
    };
    if fd < 0 {
        return Err(PyValueError::new_err(format!(
            "Invalid file descriptor: {fd}"
        )));
    }
    i32::try_from(fd).map_err(|_| PyValueError::new_err(format!("Invalid file descriptor: {fd}")))
}

/// A number of seconds as f64: floats and ints directly, anything else through `float()`
/// like the arithmetic asyncio does on it would.
pub fn seconds(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<f64> {
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(f.value());
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<f64>();
    }
    obj.extract::<f64>().map_err(|_| {
        let tname = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        PyTypeError::new_err(format!("{what} must be a number, not {tname}"))
    })
}
