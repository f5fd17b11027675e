//! Bytes in and out of Python buffer objects (`bytearray`, `memoryview`, ...).
//! Owns: reading and filling a buffer export while it is held. Not: deciding which objects
//! are accepted (the transports check types first, as asyncio does).

use std::io;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

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

/// Receives from `fd` straight into a writable buffer (a protocol's `get_buffer()`).
/// The outer error is a Python one (not a writable buffer); the inner one the kernel's.
pub fn recv_into_buffer(fd: i32, obj: &Bound<'_, PyAny>) -> PyResult<io::Result<usize>> {
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
    Ok(unsafe { super::sock::recv_raw(fd, ptr, len) })
}

/// Copies as much of `data` as fits into a writable buffer (a protocol's `get_buffer()`);
/// returns the number of bytes copied.
pub fn copy_into_buffer(obj: &Bound<'_, PyAny>, data: &[u8]) -> PyResult<usize> {
    let buf = PyUntypedBuffer::get(obj)?;
    if buf.readonly() {
        return Err(PyBufferError::new_err("the buffer must be writable"));
    }
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("the buffer must be C-contiguous"));
    }
    let n = buf.len_bytes().min(data.len());
    let ptr = buf.buf_ptr() as *mut u8;
    if n == 0 || ptr.is_null() {
        return Ok(0);
    }
    // SAFETY: the writable export `buf` is held for the copy, so `ptr..ptr+n` is valid for
    // writes (n <= its length); `data` is a distinct Rust slice; no Python code runs.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, n) };
    Ok(n)
}
