//! The crate's error type and the ONLY conversion of it into a Python exception.
//! Owns: keeping `errno` on the way to Python (`OSError(errno, strerror)`, so Python picks
//! `ConnectionResetError` and friends). Not: deciding which errors are worth raising.

use std::io;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::PyErr;

/// Errors produced by the native core.
#[derive(Debug)]
pub enum Error {
    /// A kernel call failed.
    Os(io::Error),
    /// The loop is in a state where the request makes no sense (closed, running, ...).
    State(&'static str),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Os(e)
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        match e {
            Error::Os(e) => os_error(&e),
            Error::State(msg) => PyRuntimeError::new_err(msg),
        }
    }
}

/// `OSError(errno, strerror)` for an `io::Error` that has an errno, else `OSError(text)`.
pub fn os_error(e: &io::Error) -> PyErr {
    match crate::sys::error_code(e) {
        Some(code) => PyOSError::new_err((code, crate::sys::strerror(code))),
        None => PyOSError::new_err(e.to_string()),
    }
}
