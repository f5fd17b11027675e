//! Conversions at the Python boundary: file objects to fds, delays to deadlines.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};

/// `selectors._fileobj_to_fd`: an int, or an object whose `fileno()` gives one; as wide
/// as the selector's own conversion, so a number no fd can have is told apart from a bad
/// object (see [`watchable_fd`]).
pub fn fileobj_to_fd(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    let fd: i64 = if obj.is_instance_of::<PyInt>() {
        match obj.extract() {
            Ok(fd) => fd,
            // Past an i64 either way: a negative one is invalid, a positive one no fd.
            Err(_) if obj.lt(0)? => {
                return Err(PyValueError::new_err(format!(
                    "Invalid file descriptor: {}",
                    obj.repr()?
                )))
            }
            Err(_) => i64::MAX,
        }
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
    Ok(fd)
}

/// An fd from [`fileobj_to_fd`] that a watcher can be put on: one past a C `int` raises the
/// `OverflowError` epoll's and kqueue's `register` raise for it under asyncio.
pub fn watchable_fd(fd: i64) -> PyResult<i32> {
    i32::try_from(fd)
        .map_err(|_| PyOverflowError::new_err("Python int too large to convert to C int"))
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
