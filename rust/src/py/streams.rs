//! Fast streams: `StreamReaderCore`, the native base of `rsloop.StreamReader` (a Python
//! class that also subclasses `asyncio.StreamReader`, `rsloop/_streams.py`), and
//! `StreamOp`, the awaitable its reads and `rsloop.StreamWriter.drain` return.
//!
//! The reader keeps asyncio's state (`_buffer`, `_eof`, `_waiter`, `_exception`,
//! `_transport`, `_paused`, `_limit`, `_loop`) in Rust fields, exposed under asyncio's
//! names as properties, so asyncio's own `__init__`, `__repr__` and anything that pokes at
//! a reader still work; its `feed_*`, `read*` and `__anext__` are asyncio's algorithms in
//! Rust, and a stream transport whose protocol is a plain `asyncio.StreamReaderProtocol`
//! feeds it directly (`feed_from_protocol`), without `data_received` in Python.
//!
//! A `StreamOp` is a coroutine as `asyncio.iscoroutine` sees it (`send`, `throw`, `close`,
//! `__await__`), so `create_task(reader.readline())` works as with asyncio. Waiting is
//! asyncio's: a future from `loop.create_future()` in `_waiter`, yielded to the task,
//! resolved by `feed_data` / `feed_eof` / `set_exception`.
//! Owns: the reader's state and algorithms, the drain fast path. Not: which classes and
//! functions hand the reader out (`_streams.py`), the transport's receive path
//! (`transports/stream/read.rs`).

use pyo3::exceptions::{
    PyAssertionError, PyConnectionResetError, PyRuntimeError, PyStopAsyncIteration,
    PyStopIteration, PyTypeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyTuple, PyType};
use pyo3::PyTraverseError;
use std::collections::VecDeque;

use crate::sys::buffer::{bytearray_extend, bytearray_find, bytearray_starts_with, take_front};
use crate::sys::gil::GilCell;

/// asyncio's `_DEFAULT_LIMIT`.
const DEFAULT_LIMIT: isize = 1 << 16;

/// What the module looks up once.
struct Cached {
    incomplete: Py<PyAny>,
    overrun: Py<PyAny>,
    stream_reader_protocol: Py<PyType>,
}

static CACHED: PyOnceLock<Cached> = PyOnceLock::new();

fn cached(py: Python<'_>) -> PyResult<&Cached> {
    CACHED.get_or_try_init(py, || {
        let exceptions = py.import("asyncio.exceptions")?;
        let streams = py.import("asyncio.streams")?;
        Ok(Cached {
            incomplete: exceptions.getattr("IncompleteReadError")?.unbind(),
            overrun: exceptions.getattr("LimitOverrunError")?.unbind(),
            stream_reader_protocol: streams
                .getattr("StreamReaderProtocol")?
                .cast_into::<PyType>()?
                .unbind(),
        })
    })
}

/// Registered by `rsloop._streams`: asyncio's own `StreamWriter.drain` (for the waits
/// the native drain leaves to it; taken before anything can rebind `asyncio.StreamWriter`)
/// and the reader class whose instances the transport may feed directly (exactly
/// `rsloop.StreamReader`: a subclass may override `feed_data`).
static ASYNCIO_DRAIN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static FAST_READER: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn incomplete_read(py: Python<'_>, partial: Bound<'_, PyAny>, expected: Option<usize>) -> PyErr {
    match cached(py).and_then(|c| c.incomplete.bind(py).call1((partial, expected))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

fn limit_overrun(py: Python<'_>, message: &str, consumed: usize) -> PyErr {
    match cached(py).and_then(|c| c.overrun.bind(py).call1((message, consumed))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// asyncio's `StreamReader` attributes. The bytes of asyncio's `_buffer` are `buffer`
/// followed by `chunks` (received `bytes`, the first with `chunk_off` bytes already
/// consumed): a chunk is copied into the bytearray only when something needs it there
/// (the `_buffer` property, `readuntil`, a read spanning chunks), so a `read(n)` of what
/// one receive brought hands out that very `bytes` object, without a copy in or out.
struct ReaderState {
    limit: isize,
    loop_: Option<Py<PyAny>>,
    buffer: Py<PyByteArray>,
    chunks: VecDeque<Py<PyBytes>>,
    chunk_off: usize,
    /// Bytes in `chunks` after `chunk_off`.
    chunked: usize,
    eof: bool,
    waiter: Option<Py<PyAny>>,
    exception: Option<Py<PyAny>>,
    transport: Option<Py<PyAny>>,
    paused: bool,
}

/// The native half of `rsloop.StreamReader` (see the module docs).
#[pyclass(frozen, subclass, module = "rsloop._rsloop", name = "StreamReaderCore")]
pub struct StreamReaderCore {
    state: GilCell<ReaderState>,
}

type Reader<'py> = Bound<'py, StreamReaderCore>;

impl StreamReaderCore {
    fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut ReaderState) -> R) -> R {
        self.state.with(py, f)
    }
}

fn opt(py: Python<'_>, o: &Option<Py<PyAny>>) -> Py<PyAny> {
    o.as_ref().map_or_else(|| py.None(), |o| o.clone_ref(py))
}

fn some(o: Py<PyAny>, py: Python<'_>) -> Option<Py<PyAny>> {
    (!o.is_none(py)).then_some(o)
}

/// asyncio's `_buffer`: the bytearray, with the chunks copied into it first.
fn buffer<'py>(r: &Reader<'py>) -> PyResult<Bound<'py, PyByteArray>> {
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
fn buffer_len(r: &Reader<'_>) -> usize {
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

fn eof(r: &Reader<'_>) -> bool {
    r.get().with(r.py(), |s| s.eof)
}

fn limit(r: &Reader<'_>) -> isize {
    r.get().with(r.py(), |s| s.limit)
}

fn check_exception(r: &Reader<'_>) -> PyResult<()> {
    let py = r.py();
    match r
        .get()
        .with(py, |s| s.exception.as_ref().map(|e| e.clone_ref(py)))
    {
        None => Ok(()),
        Some(exc) => Err(PyErr::from_value(exc.into_bound(py))),
    }
}

fn buffer_empty_not_eof(r: &Reader<'_>) -> bool {
    buffer_len(r) == 0 && !eof(r)
}

/// At most `n` bytes off the front of the buffer (`bytes(buf[:n]); del buf[:n]`).
fn take_raw<'py>(r: &Reader<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    match take_chunk(r, n) {
        Some(chunk) => Ok(chunk),
        None => take_front(&buffer(r)?, n),
    }
}

/// At most `n` bytes off the front of the buffer, then `_maybe_resume_transport()`.
fn take<'py>(r: &Reader<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    let data = take_raw(r, n)?;
    maybe_resume_transport(r)?;
    Ok(data)
}

/// `_maybe_resume_transport()`.
fn maybe_resume_transport(r: &Reader<'_>) -> PyResult<()> {
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

/// `_wakeup_waiter()`.
fn wakeup_waiter(r: &Reader<'_>) -> PyResult<()> {
    let py = r.py();
    if let Some(w) = r.get().with(py, |s| s.waiter.take()) {
        let w = w.into_bound(py);
        if !w.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
            w.call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
    }
    Ok(())
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
                let old = r.get().with(py, |s| s.transport.take());
                drop(old);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A received chunk for a plain `asyncio.StreamReaderProtocol`, as its `data_received`
/// would hand it to its reader. `None`: not such a protocol, the caller calls
/// `data_received` itself.
pub fn feed_from_protocol(
    protocol: &Bound<'_, PyAny>,
    data: &Bound<'_, PyBytes>,
) -> Option<PyResult<()>> {
    let py = protocol.py();
    let fast = FAST_READER.get(py)?;
    let ty = &cached(py).ok()?.stream_reader_protocol;
    if !protocol.get_type().is(ty.bind(py)) {
        return None;
    }
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
        let old = self.with(py, |s| std::mem::replace(&mut s.loop_, some(value, py)));
        drop(old);
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
        let old = self.with(py, |s| std::mem::replace(&mut s.waiter, some(value, py)));
        drop(old);
    }

    #[getter(_exception)]
    fn get_exception(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.exception))
    }

    #[setter(_exception)]
    fn set_exception_attr(&self, py: Python<'_>, value: Py<PyAny>) {
        let old = self.with(py, |s| std::mem::replace(&mut s.exception, some(value, py)));
        drop(old);
    }

    #[getter(_transport)]
    fn get_transport(&self, py: Python<'_>) -> Py<PyAny> {
        self.with(py, |s| opt(py, &s.transport))
    }

    #[setter(_transport)]
    fn set_transport_attr(&self, py: Python<'_>, value: Py<PyAny>) {
        let old = self.with(py, |s| std::mem::replace(&mut s.transport, some(value, py)));
        drop(old);
    }

    fn exception(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_exception(py)
    }

    fn set_exception(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        let (old, waiter) = self.with(py, |s| {
            let old = s.exception.replace(exc.clone_ref(py));
            (old, s.waiter.take())
        });
        drop(old);
        if let Some(w) = waiter {
            let w = w.into_bound(py);
            if !w.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
                w.call_method1(intern!(py, "set_exception"), (exc,))?;
            }
        }
        Ok(())
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
    fn read(slf: &Reader<'_>, n: Option<Py<PyAny>>) -> StreamOp {
        let n = n.unwrap_or_else(|| PyInt::new(slf.py(), -1).into_any().unbind());
        StreamOp::reader(slf, Kind::Read(n))
    }

    fn readline(slf: &Reader<'_>) -> StreamOp {
        StreamOp::reader(slf, Kind::line(false))
    }

    fn readexactly(slf: &Reader<'_>, n: Py<PyAny>) -> StreamOp {
        StreamOp::reader(slf, Kind::Exactly(n))
    }

    #[pyo3(signature = (separator = None))]
    fn readuntil(slf: &Reader<'_>, separator: Option<Py<PyAny>>) -> StreamOp {
        let py = slf.py();
        let sep = separator.unwrap_or_else(|| PyBytes::new(py, b"\n").into_any().unbind());
        StreamOp::reader(slf, Kind::UntilArg(sep))
    }

    fn __anext__(slf: &Reader<'_>) -> StreamOp {
        StreamOp::reader(slf, Kind::line(true))
    }

    /// Registers the class the transport feeds directly (`rsloop.StreamReader`) and
    /// asyncio's own `StreamWriter.drain` (once; later calls are ignored).
    #[staticmethod]
    fn _register(py: Python<'_>, reader_class: Py<PyType>, asyncio_drain: Py<PyAny>) {
        let _ = FAST_READER.set(py, reader_class);
        let _ = ASYNCIO_DRAIN.set(py, asyncio_drain);
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

/// How `readuntil`'s search ended, before it is turned into a result or an exception
/// (`readline` maps the two failures differently).
enum Until<'py> {
    Found(Bound<'py, PyBytes>),
    Wait,
    /// End of stream first: `IncompleteReadError(partial, None)`.
    Incomplete(Bound<'py, PyAny>),
    /// `LimitOverrunError(message, consumed)`.
    Overrun(&'static str, usize),
}

enum Kind {
    /// `read(n)`; `n` is checked at the first step, as asyncio's coroutine checks it.
    Read(Py<PyAny>),
    /// `read(-1)`: `read(limit)` until it returns `b""`.
    ReadAll(Vec<Py<PyAny>>),
    /// `read(n)`, `n > 0`, after the checks.
    ReadSome(usize),
    Exactly(Py<PyAny>),
    ExactlyN(usize),
    /// `readuntil(separator)`: the separator as given, then the sorted list and the
    /// offset up to which the buffer holds no separator.
    UntilArg(Py<PyAny>),
    Until(Vec<(Py<PyAny>, usize)>, usize),
    /// `readline()`: `readuntil(b"\n")` with its errors mapped; `anext` as `__anext__`.
    Line {
        offset: usize,
        started: bool,
        anext: bool,
    },
    Drain,
}

impl Kind {
    fn line(anext: bool) -> Self {
        Kind::Line {
            offset: 0,
            started: false,
            anext,
        }
    }
}

/// One awaited stream method (see the module docs).
#[pyclass(module = "rsloop._rsloop", name = "StreamOp")]
pub struct StreamOp {
    /// The reader, or the writer for `drain`.
    target: Py<PyAny>,
    kind: Kind,
    /// The future yielded to the task (the reader's `_waiter`) while suspended on it.
    waiter: Option<Py<PyAny>>,
    /// asyncio's own coroutine, which the op runs from then on (drain's slow path).
    inner: Option<Py<PyAny>>,
    done: bool,
}

impl StreamOp {
    fn reader(r: &Reader<'_>, kind: Kind) -> Self {
        StreamOp::new(r.as_any(), kind)
    }

    fn new(target: &Bound<'_, PyAny>, kind: Kind) -> Self {
        StreamOp {
            target: target.clone().unbind(),
            kind,
            waiter: None,
            inner: None,
            done: false,
        }
    }

    /// One step: `Ok(Some(future))` yields, `Ok(None)` returns `None`, a `StopIteration`
    /// error returns its value.
    fn step(
        &mut self,
        py: Python<'_>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        if self.done {
            return Err(PyRuntimeError::new_err(
                "cannot reuse already awaited coroutine",
            ));
        }
        let res = match &self.inner {
            Some(inner) => forward(py, inner.bind(py), value),
            None if matches!(self.kind, Kind::Drain) => self.drain_step(py),
            None => {
                let target = self.target.bind(py).clone();
                match target.cast::<StreamReaderCore>() {
                    Ok(r) => self.advance(r),
                    Err(e) => Err(e.into()),
                }
            }
        };
        if !matches!(res, Ok(Some(_))) {
            self.finish(py);
        }
        res
    }

    fn finish(&mut self, py: Python<'_>) {
        self.done = true;
        self.inner = None;
        if self.waiter.take().is_some() {
            // `_wait_for_data`'s `finally: self._waiter = None`.
            if let Ok(r) = self.target.bind(py).cast::<StreamReaderCore>() {
                let old = r.get().with(py, |s| s.waiter.take());
                drop(old);
            }
        }
    }

    fn advance(&mut self, reader: &Reader<'_>) -> PyResult<Option<Py<PyAny>>> {
        let py = reader.py();
        // Back from a wait: `await self._waiter` returns (or raises) the waiter's result.
        if let Some(w) = self.waiter.take() {
            let old = reader.get().with(py, |s| s.waiter.take());
            drop(old);
            w.bind(py).call_method0(intern!(py, "result"))?;
        }
        loop {
            match &mut self.kind {
                Kind::Read(n) => {
                    check_exception(reader)?;
                    let n: isize = n.bind(py).extract()?;
                    if n == 0 {
                        return done(PyBytes::new(py, b"").into_any());
                    }
                    if n < 0 {
                        self.kind = Kind::ReadAll(Vec::new());
                        return self.next_block(reader);
                    }
                    if buffer_empty_not_eof(reader) {
                        self.kind = Kind::ReadSome(n as usize);
                        return self.wait(reader, "read");
                    }
                    return done(take(reader, n as usize)?.into_any());
                }
                Kind::ReadSome(n) => {
                    // Back from the wait: the data, or b"" at the end of the stream.
                    let n = *n;
                    return done(take(reader, n)?.into_any());
                }
                Kind::ReadAll(_) => {
                    // Back from the wait of one `read(limit)`: its block.
                    let block = take(reader, limit(reader).max(0) as usize)?;
                    if let Some(joined) = self.push_block(py, block)? {
                        return done(joined);
                    }
                    return self.next_block(reader);
                }
                Kind::Exactly(n) => {
                    let n: isize = n.bind(py).extract()?;
                    if n < 0 {
                        return Err(PyValueError::new_err(
                            "readexactly size can not be less than zero",
                        ));
                    }
                    check_exception(reader)?;
                    if n == 0 {
                        return done(PyBytes::new(py, b"").into_any());
                    }
                    self.kind = Kind::ExactlyN(n as usize);
                }
                Kind::ExactlyN(n) => {
                    let n = *n;
                    if buffer_len(reader) < n {
                        if eof(reader) {
                            let partial = take_raw(reader, usize::MAX)?;
                            return Err(incomplete_read(py, partial.into_any(), Some(n)));
                        }
                        return self.wait(reader, "readexactly");
                    }
                    return done(take(reader, n)?.into_any());
                }
                Kind::UntilArg(sep) => {
                    let seps = separators(sep.bind(py))?;
                    check_exception(reader)?;
                    self.kind = Kind::Until(seps, 0);
                }
                Kind::Until(seps, offset) => {
                    return match search(reader, seps, offset)? {
                        Until::Found(chunk) => done(chunk.into_any()),
                        Until::Wait => self.wait(reader, "readuntil"),
                        Until::Incomplete(partial) => Err(incomplete_read(py, partial, None)),
                        Until::Overrun(message, consumed) => {
                            Err(limit_overrun(py, message, consumed))
                        }
                    };
                }
                Kind::Line {
                    offset,
                    started,
                    anext,
                } => {
                    let anext = *anext;
                    if !*started {
                        *started = true;
                        check_exception(reader)?;
                    }
                    let newline = PyBytes::new(py, b"\n").into_any().unbind();
                    let seps = [(newline, 1usize)];
                    let line = match search(reader, &seps, offset)? {
                        Until::Found(chunk) => chunk.into_any(),
                        Until::Wait => return self.wait(reader, "readuntil"),
                        Until::Incomplete(partial) => partial,
                        Until::Overrun(message, consumed) => {
                            // readline(): `if self._buffer.startswith(sep, e.consumed)`,
                            // drop through the separator, else clear the buffer.
                            let buf = buffer(reader)?;
                            if bytearray_starts_with(&buf, b"\n", consumed) {
                                take(reader, consumed + 1)?;
                            } else {
                                buf.resize(0)?;
                            }
                            maybe_resume_transport(reader)?;
                            return Err(PyValueError::new_err(message));
                        }
                    };
                    if anext && line.len()? == 0 {
                        return Err(PyStopAsyncIteration::new_err(()));
                    }
                    return done(line);
                }
                Kind::Drain => return Err(PyRuntimeError::new_err("StreamOp: not a read")),
            }
        }
    }

    /// `read(-1)`: the next `read(limit)`, from its start, until one returns `b""`.
    fn next_block(&mut self, reader: &Reader<'_>) -> PyResult<Option<Py<PyAny>>> {
        let py = reader.py();
        loop {
            check_exception(reader)?;
            if buffer_empty_not_eof(reader) {
                return self.wait(reader, "read");
            }
            let block = take(reader, limit(reader).max(0) as usize)?;
            if let Some(joined) = self.push_block(py, block)? {
                return done(joined);
            }
        }
    }

    /// Keeps a block of `read(-1)`; at the empty one, all of them joined.
    fn push_block<'py>(
        &mut self,
        py: Python<'py>,
        block: Bound<'py, PyBytes>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Kind::ReadAll(blocks) = &mut self.kind else {
            return Err(PyRuntimeError::new_err("StreamOp: not a read(-1)"));
        };
        if !block.as_bytes().is_empty() {
            blocks.push(block.into_any().unbind());
            return Ok(None);
        }
        let blocks = std::mem::take(blocks);
        PyBytes::new(py, b"")
            .call_method1(intern!(py, "join"), (blocks,))
            .map(Some)
    }

    /// `_wait_for_data(func_name)` up to its `await`.
    fn wait(&mut self, reader: &Reader<'_>, func_name: &str) -> PyResult<Option<Py<PyAny>>> {
        let py = reader.py();
        let (busy, at_eof, resume, loop_) = reader.get().with(py, |s| {
            let resume = (s.paused && s.waiter.is_none() && !s.eof).then(|| {
                s.paused = false;
                opt(py, &s.transport)
            });
            (s.waiter.is_some(), s.eof, resume, opt(py, &s.loop_))
        });
        if busy {
            return Err(PyRuntimeError::new_err(format!(
                "{func_name}() called while another coroutine is already waiting for incoming data"
            )));
        }
        if at_eof {
            return Err(PyAssertionError::new_err("_wait_for_data after EOF"));
        }
        if let Some(t) = resume {
            t.call_method0(py, intern!(py, "resume_reading"))?;
        }
        let fut = loop_.call_method0(py, intern!(py, "create_future"))?;
        let old = reader
            .get()
            .with(py, |s| s.waiter.replace(fut.clone_ref(py)));
        drop(old);
        // What `Future.__await__` sets before yielding itself to the task.
        fut.setattr(py, intern!(py, "_asyncio_future_blocking"), true)?;
        self.waiter = Some(fut.clone_ref(py));
        Ok(Some(fut))
    }

    /// `StreamWriter.drain()`: done at once when the reader has no exception, the
    /// transport is open and the protocol neither lost nor paused; else asyncio's own
    /// coroutine runs (`sleep(0)` on a closing transport, the drain waiter).
    fn drain_step(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let writer = self.target.bind(py).clone();
        let reader = writer.getattr(intern!(py, "_reader"))?;
        if !reader.is_none() {
            let exc = match reader.cast::<StreamReaderCore>() {
                Ok(r) => r.get().get_exception(py).into_bound(py),
                Err(_) => reader.call_method0(intern!(py, "exception"))?,
            };
            if !exc.is_none() {
                return Err(PyErr::from_value(exc));
            }
        }
        let closing = writer
            .getattr(intern!(py, "_transport"))?
            .call_method0(intern!(py, "is_closing"))?
            .is_truthy()?;
        if !closing {
            let protocol = writer.getattr(intern!(py, "_protocol"))?;
            let lost = protocol.getattr(intern!(py, "_connection_lost"));
            let paused = protocol.getattr(intern!(py, "_paused"));
            if let (Ok(lost), Ok(paused)) = (lost, paused) {
                if lost.is_truthy()? {
                    return Err(PyConnectionResetError::new_err("Connection lost"));
                }
                if !paused.is_truthy()? {
                    return Ok(None);
                }
            }
        }
        let Some(asyncio_drain) = ASYNCIO_DRAIN.get(py) else {
            return Err(PyRuntimeError::new_err(
                "StreamOp.drain: rsloop._streams did not register asyncio's drain",
            ));
        };
        let coro = asyncio_drain.bind(py).call1((&writer,))?;
        self.inner = Some(coro.clone().unbind());
        forward(py, &coro, None)
    }
}

/// `Ok(None)` (return `None`) or `Err(StopIteration(value))`.
fn done(value: Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
    Err(PyStopIteration::new_err((value.unbind(),)))
}

/// One step of a delegated coroutine.
fn forward(
    py: Python<'_>,
    inner: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let value = value.cloned().unwrap_or_else(|| py.None().into_bound(py));
    inner
        .call_method1(intern!(py, "send"), (value,))
        .map(|v| Some(v.unbind()))
}

/// `readuntil`'s separators with their lengths, shortest first, checked as asyncio
/// checks them (a tuple of several only from 3.13 on).
fn separators(sep: &Bound<'_, PyAny>) -> PyResult<Vec<(Py<PyAny>, usize)>> {
    let mut seps = Vec::new();
    match sep.cast::<PyTuple>() {
        Ok(tuple) if cfg!(Py_3_13) => {
            for s in tuple.iter() {
                let len = s.len()?;
                seps.push((s.unbind(), len));
            }
            // `sorted(separator, key=len)`: stable.
            seps.sort_by_key(|(_, len)| *len);
            if seps.is_empty() {
                return Err(PyValueError::new_err(
                    "Separator should contain at least one element",
                ));
            }
        }
        _ => seps.push((sep.clone().unbind(), sep.len()?)),
    }
    if seps[0].1 == 0 {
        return Err(PyValueError::new_err(
            "Separator should be at least one-byte string",
        ));
    }
    Ok(seps)
}

/// `buf.find(sep, offset)`: in Rust for a `bytes` separator, else bytearray's own.
fn find(buf: &Bound<'_, PyByteArray>, sep: &Bound<'_, PyAny>, offset: usize) -> PyResult<isize> {
    if let Ok(b) = sep.cast::<PyBytes>() {
        return Ok(bytearray_find(buf, b.as_bytes(), offset).map_or(-1, |i| i as isize));
    }
    buf.call_method1(intern!(buf.py(), "find"), (sep, offset))?
        .extract()
}

/// One pass of `readuntil`'s loop over what is buffered now.
fn search<'py>(
    reader: &Reader<'py>,
    seps: &[(Py<PyAny>, usize)],
    offset: &mut usize,
) -> PyResult<Until<'py>> {
    let py = reader.py();
    let buf = buffer(reader)?;
    let buflen = buf.len();
    let min_len = seps[0].1;
    let max_len = seps[seps.len() - 1].1;
    let limit = limit(reader);
    if buflen >= *offset + min_len {
        let mut found: Option<(usize, usize)> = None;
        for (sep, len) in seps {
            let isep = find(&buf, sep.bind(py), *offset)?;
            if isep >= 0 {
                let (start, end) = (isep as usize, isep as usize + len);
                if found.is_none_or(|(_, e)| end < e) {
                    found = Some((start, end));
                }
            }
        }
        if let Some((start, end)) = found {
            if start as isize > limit {
                return Ok(Until::Overrun(
                    "Separator is found, but chunk is longer than limit",
                    start,
                ));
            }
            return Ok(Until::Found(take(reader, end)?));
        }
        *offset = (buflen + 1).saturating_sub(max_len);
        if *offset as isize > limit {
            return Ok(Until::Overrun(
                "Separator is not found, and chunk exceed the limit",
                *offset,
            ));
        }
    }
    if eof(reader) {
        let chunk = take_front(&buf, usize::MAX)?;
        return Ok(Until::Incomplete(chunk.into_any()));
    }
    Ok(Until::Wait)
}

#[pymethods]
impl StreamOp {
    /// `writer.drain()`.
    #[staticmethod]
    fn drain(writer: &Bound<'_, PyAny>) -> Self {
        StreamOp::new(writer, Kind::Drain)
    }

    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.step(py, None)
    }

    fn send(&mut self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.step(py, Some(value))
    }

    /// Raises `typ` (or `typ(val)`) where the op waits, as a coroutine would.
    #[pyo3(signature = (typ, val = None, tb = None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        if let Some(inner) = self.inner.as_ref().map(|i| i.clone_ref(py)) {
            // With the caller's arity: the three-argument form warns from 3.12 on.
            let inner = inner.bind(py);
            let res = match (val, tb) {
                (None, None) => inner.call_method1(intern!(py, "throw"), (typ,)),
                _ => inner.call_method1(intern!(py, "throw"), (typ, val, tb)),
            }
            .map(|v| Some(v.unbind()));
            if !matches!(res, Ok(Some(_))) {
                self.finish(py);
            }
            return res;
        }
        self.finish(py);
        let exc = match typ.cast::<PyType>() {
            Ok(t) => match val {
                Some(v) if v.is_instance(t)? => v.clone(),
                Some(v) if !v.is_none() => t.call1((v,))?,
                _ => t.call0()?,
            },
            Err(_) => typ.clone(),
        };
        if let Some(tb) = tb.filter(|t| !t.is_none()) {
            exc.setattr(intern!(py, "__traceback__"), tb)?;
        }
        Err(PyErr::from_value(exc))
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(inner) = self.inner.as_ref().map(|i| i.clone_ref(py)) {
            inner.bind(py).call_method0(intern!(py, "close"))?;
        }
        self.finish(py);
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.target)?;
        visit.call(&self.waiter)?;
        visit.call(&self.inner)?;
        match &self.kind {
            Kind::Read(o) | Kind::Exactly(o) | Kind::UntilArg(o) => visit.call(o)?,
            Kind::ReadAll(blocks) => {
                for b in blocks {
                    visit.call(b)?;
                }
            }
            Kind::Until(seps, _) => {
                for (s, _) in seps {
                    visit.call(s)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.waiter = None;
        self.inner = None;
        self.kind = Kind::Drain;
        self.done = true;
    }
}
