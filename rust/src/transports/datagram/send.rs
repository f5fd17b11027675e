//! One datagram on its way out: where it goes, the data `sendto` was given (checked as
//! asyncio checks it), and what a send attempt found.
//! Owns: those three shapes and turning an error into one of them. Not: sending, the
//! queue and its accounting (`mod.rs`).

use std::io;

use pyo3::exceptions::{PyBlockingIOError, PyInterruptedError, PyOSError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

use crate::errors::os_error;
use crate::ffi::buffer::buffer_to_vec;
use crate::sys::sockaddr::SockAddr;
use crate::transports::common::{is_exit, would_block, Chunk};

/// Where a datagram goes.
pub(super) enum Dest {
    /// The connected peer: `send`.
    Peer,
    /// `sendto` this address.
    Addr(SockAddr),
    /// Python's `socket.sendto(data, addr)`: a form or family parsed there.
    Python(Py<PyAny>),
}

pub(super) struct Queued {
    pub(super) chunk: Chunk,
    pub(super) dest: Dest,
}

/// What one send attempt found.
pub(super) enum Sent {
    Done,
    WouldBlock,
    /// An `OSError`: for `protocol.error_received`.
    Os(PyErr),
    /// Anything else: a fatal error.
    Fatal(PyErr),
}

/// asyncio's `except` ladder around a socket call made in Python.
pub(super) fn classify(py: Python<'_>, e: PyErr) -> PyResult<Sent> {
    if is_exit(&e, py) {
        return Err(e);
    }
    if e.is_instance_of::<PyBlockingIOError>(py) || e.is_instance_of::<PyInterruptedError>(py) {
        return Ok(Sent::WouldBlock);
    }
    if e.is_instance_of::<PyOSError>(py) {
        return Ok(Sent::Os(e));
    }
    Ok(Sent::Fatal(e))
}

pub(super) fn native_result(res: io::Result<usize>) -> Sent {
    match res {
        Ok(_) => Sent::Done,
        Err(e) if would_block(&e) => Sent::WouldBlock,
        Err(e) => Sent::Os(os_error(&e)),
    }
}

/// The data given to `sendto`, checked as asyncio checks it.
pub(super) enum Payload<'py> {
    Bytes(Bound<'py, PyBytes>),
    /// A copy of a readable buffer.
    Copied(Vec<u8>),
    /// A buffer we cannot read as plain bytes: Python's socket call raises for it.
    Foreign(Bound<'py, PyAny>),
}

impl<'py> Payload<'py> {
    pub(super) fn of(data: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = data.cast::<PyBytes>() {
            return Ok(Payload::Bytes(b.clone()));
        }
        if !data.is_instance_of::<PyByteArray>() && !data.is_instance_of::<PyMemoryView>() {
            return Err(PyTypeError::new_err(format!(
                "data argument must be a bytes-like object, not {}",
                data.get_type().name()?.repr()?
            )));
        }
        Ok(match buffer_to_vec(data) {
            Ok(v) => Payload::Copied(v),
            Err(_) => Payload::Foreign(data.clone()),
        })
    }

    pub(super) fn is_empty(&self, data: &Bound<'py, PyAny>) -> PyResult<bool> {
        match self {
            Payload::Bytes(b) => Ok(b.as_bytes().is_empty()),
            _ => Ok(!data.is_truthy()?),
        }
    }

    /// `len(data)` as asyncio counts it (elements, for a memoryview).
    pub(super) fn py_len(&self, data: &Bound<'py, PyAny>) -> PyResult<usize> {
        match self {
            Payload::Bytes(b) => Ok(b.as_bytes().len()),
            _ => data.len(),
        }
    }

    /// `bytes(data)`, for the queue.
    pub(super) fn into_chunk(self) -> PyResult<Chunk> {
        Ok(match self {
            Payload::Bytes(b) => Chunk::Shared(b.unbind()),
            Payload::Copied(v) => Chunk::Owned(v),
            Payload::Foreign(obj) => {
                let b = obj.py().get_type::<PyBytes>().call1((obj,))?;
                Chunk::Shared(b.cast_into::<PyBytes>()?.unbind())
            }
        })
    }
}
