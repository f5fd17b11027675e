//! `StreamOp`: asyncio's read algorithms and `drain()`, stepped as a coroutine.

use pyo3::exceptions::{
    PyAssertionError, PyConnectionResetError, PyRuntimeError, PyStopAsyncIteration,
    PyStopIteration, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyTuple, PyType};
use pyo3::PyTraverseError;

use crate::ffi::buffer::{bytearray_find, bytearray_starts_with, take_front};
use crate::ffi::gil::GilCell;
use crate::ffi::iternext::{IterNext, Next};
use crate::ffi::python::refcnt;
use crate::py::futures::{create_future_on, future_result, future_set_blocking};

use super::reader::{
    buffer, buffer_empty_not_eof, buffer_len, check_exception, eof, limit, maybe_resume_transport,
    opt, take, take_raw, Reader, StreamReaderCore,
};
use super::{incomplete_read, limit_overrun, ASYNCIO_DRAIN, TRANSPORT_METHODS};

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

pub(super) enum Kind {
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
    pub(super) fn line(anext: bool) -> Self {
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

/// Ops that finished through `await` (`StreamOpNext`), cleared, for the next read or
/// drain to take instead of a new object, if nobody else holds them by then (a read is a
/// new object in asyncio too: a coroutine; making one and freeing it cost two thirds as
/// much as the whole `readexactly` that found its bytes buffered).
static SPARE: GilCell<Vec<Py<StreamOp>>> = GilCell::new(Vec::new());

/// How many finished ops [`SPARE`] keeps: more than one task's read and drain at a time.
const SPARE_MAX: usize = 16;

impl StreamOp {
    pub(super) fn reader<'py>(r: &Reader<'py>, kind: Kind) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::make(r.as_any(), kind)
    }

    /// `writer.drain()`.
    pub(super) fn drain_of<'py>(writer: &Bound<'py, PyAny>) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::make(writer, Kind::Drain)
    }

    /// A new op: a spare one that only [`SPARE`] still refers to, reset, or a new object.
    fn make<'py>(target: &Bound<'py, PyAny>, kind: Kind) -> PyResult<Bound<'py, StreamOp>> {
        let py = target.py();
        let fresh = StreamOp::new(target, kind);
        if cfg!(Py_GIL_DISABLED) {
            return Bound::new(py, fresh);
        }
        while let Some(op) = SPARE.with(py, Vec::pop) {
            let op = op.into_bound(py);
            if refcnt(op.as_any()) != 1 {
                // Still held (finished: it can only refuse to run again): theirs now.
                continue;
            }
            let Ok(mut slot) = op.try_borrow_mut() else {
                continue;
            };
            // A spare op holds no object (`recycle`): nothing is freed here.
            *slot = fresh;
            drop(slot);
            return Ok(op);
        }
        Bound::new(py, fresh)
    }

    /// After an op finished through `await`: drops what it holds and keeps it in
    /// [`SPARE`] (it stays finished for anyone still holding it).
    fn recycle(slf: &Bound<'_, StreamOp>) {
        let py = slf.py();
        if cfg!(Py_GIL_DISABLED) || SPARE.with(py, |v| v.len()) >= SPARE_MAX {
            return;
        }
        let Ok(mut op) = slf.try_borrow_mut() else {
            return;
        };
        let held = (
            std::mem::replace(&mut op.target, py.None()),
            std::mem::replace(&mut op.kind, Kind::Drain),
            op.waiter.take(),
            op.inner.take(),
        );
        op.done = true;
        drop(op);
        // Freed outside the borrow: a finaliser may run Python code.
        drop(held);
        SPARE.with(py, |v| v.push(slf.clone().unbind()));
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

    /// One step: yield a future or return a value (a delegated coroutine's return still
    /// arrives as a `StopIteration` error).
    fn step(&mut self, py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Next> {
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
        if !matches!(res, Ok(Next::Yield(_))) {
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
                r.get().put(py, |s| &mut s.waiter, None);
            }
        }
    }

    fn advance(&mut self, reader: &Reader<'_>) -> PyResult<Next> {
        let py = reader.py();
        // Back from a wait: `await self._waiter` returns (or raises) the waiter's result.
        if let Some(w) = self.waiter.take() {
            reader.get().put(py, |s| &mut s.waiter, None);
            future_result(w.bind(py))?;
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
    fn next_block(&mut self, reader: &Reader<'_>) -> PyResult<Next> {
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
    fn wait(&mut self, reader: &Reader<'_>, func_name: &str) -> PyResult<Next> {
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
        let fut = create_future_on(loop_.bind(py))?.unbind();
        reader
            .get()
            .put(py, |s| &mut s.waiter, Some(fut.clone_ref(py)));
        // What `Future.__await__` sets before yielding itself to the task.
        future_set_blocking(fut.bind(py))?;
        self.waiter = Some(fut.clone_ref(py));
        Ok(Next::Yield(fut))
    }

    /// `StreamWriter.drain()`: done at once when the reader has no exception, the
    /// transport is open and the protocol neither lost nor paused; else asyncio's own
    /// coroutine runs (`sleep(0)` on a closing transport, the drain waiter).
    fn drain_step(&mut self, py: Python<'_>) -> PyResult<Next> {
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
        let transport = writer.getattr(intern!(py, "_transport"))?;
        let closing = TRANSPORT_METHODS
            .call0(&transport, intern!(py, "is_closing"))?
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
                    return Ok(Next::Return(None));
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

/// Return `value` from the op.
fn done(value: Bound<'_, PyAny>) -> PyResult<Next> {
    Ok(Next::Return(Some(value.unbind())))
}

/// One step of a delegated coroutine.
fn forward(
    py: Python<'_>,
    inner: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Next> {
    let value = value.cloned().unwrap_or_else(|| py.None().into_bound(py));
    inner
        .call_method1(intern!(py, "send"), (value,))
        .map(|v| Next::Yield(v.unbind()))
}

/// A step's outcome as a Python method returns it: the yielded object, or
/// `StopIteration(value)`.
fn as_method_result(next: PyResult<Next>) -> PyResult<Py<PyAny>> {
    match next? {
        Next::Yield(obj) => Ok(obj),
        Next::Return(None) => Err(PyStopIteration::new_err(())),
        Next::Return(Some(value)) => Err(PyStopIteration::new_err((value,))),
    }
}

/// `next(op)`, the path of every `await` (see `ffi::iternext`).
pub struct StreamOpNext;

impl IterNext for StreamOpNext {
    type Class = StreamOp;

    fn next(slf: &Bound<'_, StreamOp>) -> PyResult<Next> {
        let res = slf.try_borrow_mut()?.step(slf.py(), None);
        if !matches!(res, Ok(Next::Yield(_))) {
            StreamOp::recycle(slf);
        }
        res
    }
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
    fn drain<'py>(writer: &Bound<'py, PyAny>) -> PyResult<Bound<'py, StreamOp>> {
        StreamOp::drain_of(writer)
    }

    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Replaced as the type's `tp_iternext` by `StreamOpNext`; kept as the method.
    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        as_method_result(self.step(py, None))
    }

    fn send(&mut self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        as_method_result(self.step(py, Some(value)))
    }

    /// Raises `typ` (or `typ(val)`) where the op waits, as a coroutine would.
    #[pyo3(signature = (typ, val = None, tb = None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if let Some(inner) = self.inner.as_ref().map(|i| i.clone_ref(py)) {
            // With the caller's arity: the three-argument form warns from 3.12 on.
            let inner = inner.bind(py);
            let res = match (val, tb) {
                (None, None) => inner.call_method1(intern!(py, "throw"), (typ,)),
                _ => inner.call_method1(intern!(py, "throw"), (typ, val, tb)),
            }
            .map(|v| v.unbind());
            if res.is_err() {
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
