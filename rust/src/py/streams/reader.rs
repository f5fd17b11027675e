//! `StreamReaderCore`: the reader's state, feeding it, and the helpers the reads use.

use pyo3::exceptions::{PyAssertionError, PyTypeError};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyTuple, PyType};
use pyo3::PyTraverseError;
use std::collections::VecDeque;

use crate::ffi::buffer::{bytearray_extend, take_front};
use crate::ffi::gil::GilCell;
use crate::py::futures::{future_cancelled, future_set_result};

use super::op::{Kind, StreamOp};
use super::{ASYNCIO_DRAIN, DEFAULT_LIMIT, FAST_READER};

/// asyncio's `StreamReader` attributes. The bytes of asyncio's `_buffer` are `buffer`
/// followed by `chunks` (received `bytes`, the first with `chunk_off` bytes already
/// consumed): a chunk is copied into the bytearray only when something needs it there
/// (the `_buffer` property, `readuntil`, a read spanning chunks), so a `read(n)` of what
/// one receive brought hands out that very `bytes` object, without a copy in or out.
pub(super) struct ReaderState {
    pub(super) limit: isize,
    pub(super) loop_: Option<Py<PyAny>>,
    pub(super) buffer: Py<PyByteArray>,
    pub(super) chunks: VecDeque<Py<PyBytes>>,
    pub(super) chunk_off: usize,
    /// Bytes in `chunks` after `chunk_off`.
    pub(super) chunked: usize,
    pub(super) eof: bool,
    pub(super) waiter: Option<Py<PyAny>>,
    pub(super) exception: Option<Py<PyAny>>,
    pub(super) transport: Option<Py<PyAny>>,
    pub(super) paused: bool,
}

/// The native half of `rsloop.StreamReader` (see the module docs).
#[pyclass(frozen, subclass, module = "rsloop._rsloop", name = "StreamReaderCore")]
pub struct StreamReaderCore {
    state: GilCell<ReaderState>,
}

pub(super) type Reader<'py> = Bound<'py, StreamReaderCore>;

/// One of the reader's optional object fields.
type Field = fn(&mut ReaderState) -> &mut Option<Py<PyAny>>;

impl StreamReaderCore {
    pub(super) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ReaderState) -> R) -> R {
        self.state.with(py, f)
    }

    /// Sets a field (`None` for Python's `None`); the old value is dropped outside the
    /// cell, as its finaliser may run Python code.
    pub(super) fn put(&self, py: Python<'_>, field: Field, value: Option<Py<PyAny>>) {
        let old = self.with(py, |s| std::mem::replace(field(s), value));
        drop(old);
    }
}

pub(super) fn opt(py: Python<'_>, o: &Option<Py<PyAny>>) -> Py<PyAny> {
    o.as_ref().map_or_else(|| py.None(), |o| o.clone_ref(py))
}

fn some(o: Py<PyAny>, py: Python<'_>) -> Option<Py<PyAny>> {
    (!o.is_none(py)).then_some(o)
}

/// asyncio's `_buffer`: the bytearray, with the chunks copied into it first.
pub(super) fn buffer<'py>(r: &Reader<'py>) -> PyResult<Bound<'py, PyByteArray>> {
    let py = r.py();
    let (buf, chunks, off) = r.get().with(py, |s| {
        s.chunked = 0;
        (
            s.buffer.clone_ref(py),
            std::mem::take(&mut s.chunks),
            std::mem::replace(&mut s.chunk_off, 0),
        )
    });
    let buf = buf.into_bound(py);
    for (i, c) in chunks.iter().enumerate() {
        let bytes = c.bind(py).as_bytes();
        bytearray_extend(&buf, if i == 0 { &bytes[off..] } else { bytes })?;
    }
    Ok(buf)
}

/// `len(self._buffer)`.
pub(super) fn buffer_len(r: &Reader<'_>) -> usize {
    let py = r.py();
    r.get().with(py, |s| s.buffer.bind(py).len() + s.chunked)
}

/// At most `n` bytes off the front of the buffer when it is one chunk: the chunk itself
/// when `n` covers all of it, else a copy of its front; `None` when the bytearray holds
/// bytes or there are several chunks.
fn take_chunk<'py>(r: &Reader<'py>, n: usize) -> Option<Bound<'py, PyBytes>> {
    let py = r.py();
    let (chunk, off, whole) = r.get().with(py, |s| {
        if s.chunks.len() != 1 || s.buffer.bind(py).len() != 0 {
            return None;
        }
        let off = s.chunk_off;
        if s.chunked <= n {
            s.chunked = 0;
            s.chunk_off = 0;
            return s.chunks.pop_front().map(|c| (c, off, true));
        }
        s.chunked -= n;
        s.chunk_off += n;
        Some((s.chunks[0].clone_ref(py), off, false))
    })?;
    let chunk = chunk.into_bound(py);
    if whole && off == 0 {
        return Some(chunk);
    }
    let bytes = chunk.as_bytes();
    let end = if whole { bytes.len() } else { off + n };
    Some(PyBytes::new(py, &bytes[off..end]))
}

pub(super) fn eof(r: &Reader<'_>) -> bool {
    r.get().with(r.py(), |s| s.eof)
}

pub(super) fn limit(r: &Reader<'_>) -> isize {
    r.get().with(r.py(), |s| s.limit)
}

pub(super) fn check_exception(r: &Reader<'_>) -> PyResult<()> {
    let py = r.py();
    match r
        .get()
        .with(py, |s| s.exception.as_ref().map(|e| e.clone_ref(py)))
    {
        None => Ok(()),
        Some(exc) => Err(PyErr::from_value(exc.into_bound(py))),
    }
}

pub(super) fn buffer_empty_not_eof(r: &Reader<'_>) -> bool {
    buffer_len(r) == 0 && !eof(r)
}

/// At most `n` bytes off the front of the buffer (`bytes(buf[:n]); del buf[:n]`).
pub(super) fn take_raw<'py>(r: &Reader<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    match take_chunk(r, n) {
        Some(chunk) => Ok(chunk),
        None => take_front(&buffer(r)?, n),
    }
}

/// At most `n` bytes off the front of the buffer, then `_maybe_resume_transport()`.
pub(super) fn take<'py>(r: &Reader<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    let data = take_raw(r, n)?;
    maybe_resume_transport(r)?;
    Ok(data)
}

/// `_maybe_resume_transport()`.
pub(super) fn maybe_resume_transport(r: &Reader<'_>) -> PyResult<()> {
    let py = r.py();
    let len = buffer_len(r) as isize;
    let transport = r.get().with(py, |s| {
        if s.paused && len <= s.limit {
            s.paused = false;
            Some(opt(py, &s.transport))
        } else {
            None
        }
    });
    if let Some(t) = transport {
        t.call_method0(py, intern!(py, "resume_reading"))?;
    }
    Ok(())
}

/// Takes the waiter and, unless it was cancelled, sets its result to `None` or, given
/// `exc`, its exception.
fn resolve_waiter(r: &Reader<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
    let py = r.py();
    if let Some(w) = r.get().with(py, |s| s.waiter.take()) {
        let w = w.into_bound(py);
        if !future_cancelled(&w)? {
            match exc {
                None => future_set_result(&w, &py.None().into_bound(py))?,
                Some(exc) => drop(w.call_method1(intern!(py, "set_exception"), (exc,))?),
            }
        }
    }
    Ok(())
}

/// `_wakeup_waiter()`.
fn wakeup_waiter(r: &Reader<'_>) -> PyResult<()> {
    resolve_waiter(r, None)
}

/// `feed_data(data)`.
fn feed_data(r: &Reader<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = r.py();
    if eof(r) {
        return Err(PyAssertionError::new_err("feed_data after feed_eof"));
    }
    match data.cast_exact::<PyBytes>() {
        Ok(bytes) => {
            let n = bytes.as_bytes().len();
            if n == 0 {
                return Ok(());
            }
            r.get().with(py, |s| {
                s.chunks.push_back(bytes.clone().unbind());
                s.chunked += n;
            });
        }
        Err(_) => {
            if !data.is_truthy()? {
                return Ok(());
            }
            buffer(r)?.call_method1(intern!(py, "extend"), (data,))?;
        }
    }
    wakeup_waiter(r)?;
    let len = buffer_len(r) as isize;
    let transport = r.get().with(py, |s| match &s.transport {
        Some(t) if !s.paused && len > 2 * s.limit => Some(t.clone_ref(py)),
        _ => None,
    });
    if let Some(t) = transport {
        match t.call_method0(py, intern!(py, "pause_reading")) {
            Ok(_) => r.get().with(py, |s| s.paused = true),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyNotImplementedError>(py) => {
                r.get().put(py, |s| &mut s.transport, None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A received chunk for a plain `asyncio.StreamReaderProtocol` (the stream transport
/// checked the type: `transports::stream::FeedHook`), as its `data_received` would hand it
/// to its reader. `None`: the fast streams are not in place, the caller calls
/// `data_received` itself.
pub fn feed_from_protocol(
    protocol: &Bound<'_, PyAny>,
    data: &Bound<'_, PyBytes>,
) -> Option<PyResult<()>> {
    let py = protocol.py();
    let fast = FAST_READER.get(py)?;
    Some((|| {
        // `reader = self._stream_reader` (a property over a weak reference).
        let wr = protocol.getattr(intern!(py, "_stream_reader_wr"))?;
        if wr.is_none() {
            return Ok(());
        }
        let reader = wr.call0()?;
        if reader.is_none() {
            return Ok(());
        }
        if reader.get_type().is(fast.bind(py)) {
            if let Ok(r) = reader.cast::<StreamReaderCore>() {
                return feed_data(r, data);
            }
        }
        reader
            .call_method1(intern!(py, "feed_data"), (data,))
            .map(drop)
    })())
}

#[pymethods]
impl StreamReaderCore {
    /// Takes any arguments: asyncio's `StreamReader.__init__` (further down the MRO of
    /// `rsloop.StreamReader`) checks them and sets the state through the properties.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        py: Python<'_>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> Self {
        StreamReaderCore {
            state: GilCell::new(ReaderState {
                limit: DEFAULT_LIMIT,
                loop_: None,
                buffer: PyByteArray::new(py, b"").unbind(),
                chunks: VecDeque::new(),
                chunk_off: 0,
                chunked: 0,
                eof: false,
                waiter: None,
                exception: None,
                transport: None,
                paused: false,
            }),
        }
    }

    #[getter(_limit)]
    fn get_limit(&self, py: Python<'_>) -> isize {
        self.with(py, |s| s.limit)
    }

    #[setter(_limit)]
    fn set_limit(&self, py: Python<'_>, value: isize) {
        self.with(py, |s| s.limit = value);
    }

    #[getter(_loop)]
    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.loop_))
    }

    #[setter(_loop)]
    fn set_loop(&self, py: Python<'_>, value: Py<PyAny>) {
        self.put(py, |s| &mut s.loop_, some(value, py));
    }

    #[getter(_buffer)]
    fn get_buffer<'py>(slf: &Reader<'py>) -> PyResult<Bound<'py, PyByteArray>> {
        buffer(slf)
    }

    #[setter(_buffer)]
    fn set_buffer(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = value
            .cast::<PyByteArray>()
            .map_err(|_| PyTypeError::new_err("StreamReader._buffer must be a bytearray"))?
            .clone()
            .unbind();
        let old = self.with(py, |s| {
            s.chunked = 0;
            s.chunk_off = 0;
            (
                std::mem::replace(&mut s.buffer, value),
                std::mem::take(&mut s.chunks),
            )
        });
        drop(old);
        Ok(())
    }

    #[getter(_eof)]
    fn get_eof(&self, py: Python<'_>) -> bool {
        self.with(py, |s| s.eof)
    }

    #[setter(_eof)]
    fn set_eof(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = value.is_truthy()?;
        self.with(py, |s| s.eof = value);
        Ok(())
    }

    #[getter(_paused)]
    fn get_paused(&self, py: Python<'_>) -> bool {
        self.with(py, |s| s.paused)
    }

    #[setter(_paused)]
    fn set_paused(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = value.is_truthy()?;
        self.with(py, |s| s.paused = value);
        Ok(())
    }

    #[getter(_waiter)]
    fn get_waiter(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.waiter))
    }

    #[setter(_waiter)]
    fn set_waiter(&self, py: Python<'_>, value: Py<PyAny>) {
        self.put(py, |s| &mut s.waiter, some(value, py));
    }

    #[getter(_exception)]
    pub(super) fn get_exception(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.exception))
    }

    #[setter(_exception)]
    fn set_exception_attr(&self, py: Python<'_>, value: Py<PyAny>) {
        self.put(py, |s| &mut s.exception, some(value, py));
    }

    #[getter(_transport)]
    fn get_transport(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.transport))
    }

    #[setter(_transport)]
    fn set_transport_attr(&self, py: Python<'_>, value: Py<PyAny>) {
        self.put(py, |s| &mut s.transport, some(value, py));
    }

    fn exception(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_exception(py)
    }

    fn set_exception(slf: &Reader<'_>, exc: Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        slf.get()
            .put(py, |s| &mut s.exception, Some(exc.clone_ref(py)));
        resolve_waiter(slf, Some(exc))
    }

    fn _wakeup_waiter(slf: &Reader<'_>) -> PyResult<()> {
        wakeup_waiter(slf)
    }

    fn set_transport(&self, py: Python<'_>, transport: Py<PyAny>) -> PyResult<()> {
        let set = self.with(py, |s| {
            if s.transport.is_some() {
                return false;
            }
            s.transport = some(transport, py);
            true
        });
        if !set {
            return Err(PyAssertionError::new_err("Transport already set"));
        }
        Ok(())
    }

    fn _maybe_resume_transport(slf: &Reader<'_>) -> PyResult<()> {
        maybe_resume_transport(slf)
    }

    fn feed_eof(slf: &Reader<'_>) -> PyResult<()> {
        slf.get().with(slf.py(), |s| s.eof = true);
        wakeup_waiter(slf)
    }

    fn at_eof(slf: &Reader<'_>) -> bool {
        eof(slf) && buffer_len(slf) == 0
    }

    fn feed_data(slf: &Reader<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        feed_data(slf, data)
    }

    /// `read(n=-1)` (`read(None)` reads to the end too, where asyncio's raises).
    #[pyo3(signature = (n = None))]
    fn read<'py>(slf: &Reader<'py>, n: Option<Py<PyAny>>) -> PyResult<Bound<'py, StreamOp>> {
        let n = n.unwrap_or_else(|| PyInt::new(slf.py(), -1).into_any().unbind());
        StreamOp::reader(slf, Kind::Read(n))
    }

    fn readline<'py>(slf: &Reader<'py>) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::reader(slf, Kind::line(false))
    }

    fn readexactly<'py>(slf: &Reader<'py>, n: Py<PyAny>) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::reader(slf, Kind::Exactly(n))
    }

    #[pyo3(signature = (separator = None))]
    fn readuntil<'py>(
        slf: &Reader<'py>,
        separator: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, StreamOp>> {
        let py = slf.py();
        let sep = separator.unwrap_or_else(|| PyBytes::new(py, b"\n").into_any().unbind());
        StreamOp::reader(slf, Kind::UntilArg(sep))
    }

    fn __anext__<'py>(slf: &Reader<'py>) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::reader(slf, Kind::line(true))
    }

    /// Registers the class the transport feeds directly (`rsloop.StreamReader`) and
    /// asyncio's own `StreamWriter.drain` (once; later calls are ignored), and puts the
    /// native `write` and `drain` on `writer_class` (`rsloop.StreamWriter`).
    #[staticmethod]
    fn _register(
        py: Python<'_>,
        reader_class: Py<PyType>,
        asyncio_drain: Py<PyAny>,
        writer_class: &Bound<'_, PyType>,
    ) -> PyResult<()> {
        let _ = FAST_READER.set(py, reader_class);
        let _ = ASYNCIO_DRAIN.set(py, asyncio_drain);
        super::writer::install(writer_class)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(s) = self.state.peek_for_gc(&visit) {
            visit.call(&s.buffer)?;
            for o in [&s.loop_, &s.waiter, &s.exception, &s.transport]
                .into_iter()
                .flatten()
            {
                visit.call(o)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = Python::attach(|py| {
            self.with(py, |s| {
                (
                    s.loop_.take(),
                    s.waiter.take(),
                    s.exception.take(),
                    s.transport.take(),
                )
            })
        });
        drop(taken);
    }
}
