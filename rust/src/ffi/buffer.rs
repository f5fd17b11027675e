//! Bytes in and out of Python buffer objects (`bytearray`, `memoryview`, ...) and new
//! `bytes` objects filled by the kernel.
//! Owns: reading and filling a buffer export while it is held. Not: deciding which objects
//! are accepted (the transports and `sock_*` methods check types first, as asyncio does).

#[cfg(unix)]
use std::io;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyBufferError;
#[cfg(unix)]
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PySlice};

/// A copy of a C-contiguous buffer's bytes.
pub fn buffer_to_vec(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let buf = PyUntypedBuffer::get(obj)?;
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("the buffer must be C-contiguous"));
    }
    let len = buf.len_bytes();
    let ptr = buf.buf_ptr() as *const u8;
    if len == 0 || ptr.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the export `buf` is held until the end of this function, so `ptr..ptr+len` is
    // valid, contiguous memory; we hold the GIL and run no Python code while copying, so no
    // Python code can resize or free it meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec())
}

/// Receives from `fd` straight into a writable buffer (a protocol's `get_buffer()`): the
/// bytes received, and whether they filled the buffer. The outer error is a Python one
/// (not a writable buffer); the inner one the kernel's.
#[cfg(unix)]
pub fn recv_into_buffer(fd: i32, obj: &Bound<'_, PyAny>) -> PyResult<io::Result<(usize, bool)>> {
    let buf = PyUntypedBuffer::get(obj)?;
    if buf.readonly() {
        return Err(PyBufferError::new_err("the buffer must be writable"));
    }
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("the buffer must be C-contiguous"));
    }
    let len = buf.len_bytes();
    let ptr = buf.buf_ptr() as *mut u8;
    // SAFETY: the writable export `buf` is held for the call, so `ptr..ptr+len` is valid
    // for writes; no Python code runs meanwhile.
    let got = unsafe { crate::sys::sock::recv_raw(fd, ptr, len) };
    Ok(got.map(|n| (n, n == len)))
}

/// `sock.recv(n)` without the socket object: one `recv(fd, n)` (never blocking) into a new
/// `bytes` of `n` bytes, shrunk in place to what arrived, as CPython's socket module builds
/// it (no copy). The outer error is a Python one (`MemoryError` for an absurd `n`); the
/// inner one the kernel's.
#[cfg(unix)]
pub fn recv_bytes<'py>(
    py: Python<'py>,
    fd: i32,
    n: usize,
) -> PyResult<io::Result<Bound<'py, PyBytes>>> {
    let size = ffi::Py_ssize_t::try_from(n)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("recv size too large"))?;
    // SAFETY: the GIL is held; PyBytesWriter_Create returns a writer owning room for `size`
    // bytes, or NULL with an exception set.
    let writer = unsafe { ffi::compat::PyBytesWriter_Create(size) };
    if writer.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `writer` is live; its data pointer is valid for `size` bytes of writes until
    // the writer is finished or discarded below, and no Python code runs in between.
    let received = unsafe {
        let data = ffi::compat::PyBytesWriter_GetData(writer).cast::<u8>();
        crate::sys::sock::recv_nowait_raw(fd, data, n)
    };
    match received {
        Ok(got) => {
            // SAFETY: `got <= n` bytes were written; FinishWithSize consumes the writer and
            // returns a new reference to a `bytes` of exactly `got` bytes, or NULL with an
            // exception set.
            let obj = unsafe {
                let got = ffi::Py_ssize_t::try_from(got).unwrap_or(size);
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::compat::PyBytesWriter_FinishWithSize(writer, got),
                )?
            };
            Ok(Ok(obj.cast_into::<PyBytes>()?))
        }
        Err(e) => {
            // SAFETY: `writer` is live and not used after this.
            unsafe { ffi::compat::PyBytesWriter_Discard(writer) };
            Ok(Err(e))
        }
    }
}

/// One `recv` (never blocking) into a held writable export; the caller checked that it is
/// writable and C-contiguous.
#[cfg(unix)]
pub fn recv_into_export(fd: i32, buf: &PyUntypedBuffer) -> io::Result<usize> {
    if buf.readonly() || !buf.is_c_contiguous() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: the writable, contiguous export `buf` is held by the caller for the call, so
    // `ptr..ptr+len` is valid for writes; no Python code runs meanwhile.
    unsafe { crate::sys::sock::recv_nowait_raw(fd, buf.buf_ptr().cast(), buf.len_bytes()) }
}

/// One `send` (never blocking) of a held C-contiguous export from byte `start` on.
#[cfg(unix)]
pub fn send_export(fd: i32, buf: &PyUntypedBuffer, start: usize) -> io::Result<usize> {
    if !buf.is_c_contiguous() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let len = buf.len_bytes();
    let ptr = buf.buf_ptr() as *const u8;
    if start >= len || ptr.is_null() {
        return crate::sys::sock::send_nowait(fd, &[]);
    }
    // SAFETY: the export `buf` is held by the caller for the call, so `ptr..ptr+len` is
    // valid, contiguous memory (start < len); no Python code runs while the slice lives, so
    // nothing can resize or write it meanwhile.
    let rest = unsafe { std::slice::from_raw_parts(ptr.add(start), len - start) };
    crate::sys::sock::send_nowait(fd, rest)
}

/// `bytes(buf[:n])` followed by `del buf[:n]`: the front of a `bytearray` (at most `n`
/// bytes) taken out as new `bytes`, as `asyncio.StreamReader` consumes its buffer.
pub fn take_front<'py>(buf: &Bound<'py, PyByteArray>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    let py = buf.py();
    let len = buf.len();
    let n = n.min(len);
    // SAFETY: the slice lives only while `PyBytes::new` copies it; we hold the GIL and
    // neither call runs Python code, so nothing can resize or free the bytearray meanwhile.
    let out = PyBytes::new(py, &unsafe { buf.as_bytes() }[..n]);
    if n > 0 {
        // As asyncio's `del self._buffer[:n]` (not a resize, which reallocates).
        buf.del_item(PySlice::new(py, 0, n as isize, 1))?;
    }
    Ok(out)
}

/// `buf.extend(data)` for bytes already in hand: one resize (CPython's bytearray growth
/// policy, as `extend` has) and one copy.
pub fn bytearray_extend(buf: &Bound<'_, PyByteArray>, data: &[u8]) -> PyResult<()> {
    let old = buf.len();
    buf.resize(old + data.len())?;
    // SAFETY: the bytearray was just resized to `old + data.len()` bytes; we hold the GIL
    // and run no Python code until the copy is done, so nothing else can touch it.
    let bytes = unsafe { buf.as_bytes_mut() };
    bytes[old..].copy_from_slice(data);
    Ok(())
}

/// `buf.find(needle, start)` (the first index at or after `start`), for a `bytes` needle.
pub fn bytearray_find(buf: &Bound<'_, PyByteArray>, needle: &[u8], start: usize) -> Option<usize> {
    // SAFETY: the view lives only inside this function, which runs no Python code and
    // holds the GIL, so nothing can resize or free the bytearray meanwhile.
    let hay = unsafe { buf.as_bytes() };
    let hay = hay.get(start..)?;
    let at = match needle {
        [] => Some(0),
        [b] => hay.iter().position(|c| c == b),
        _ => hay.windows(needle.len()).position(|w| w == needle),
    };
    at.map(|i| i + start)
}

/// `buf.startswith(prefix, start)`.
pub fn bytearray_starts_with(buf: &Bound<'_, PyByteArray>, prefix: &[u8], start: usize) -> bool {
    // SAFETY: as in `bytearray_find`.
    let hay = unsafe { buf.as_bytes() };
    hay.get(start..).is_some_and(|h| h.starts_with(prefix))
}
