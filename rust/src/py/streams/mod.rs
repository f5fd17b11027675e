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

mod op;
mod reader;
mod writer;

pub use op::{StreamOp, StreamOpNext};
pub use reader::{feed_from_protocol, StreamReaderCore};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::ffi::attrs::OwnMethods;

/// asyncio's `_DEFAULT_LIMIT`.
const DEFAULT_LIMIT: isize = 1 << 16;

/// What the module looks up once.
struct Cached {
    incomplete: Py<PyAny>,
    overrun: Py<PyAny>,
}

static CACHED: PyOnceLock<Cached> = PyOnceLock::new();

fn cached(py: Python<'_>) -> PyResult<&Cached> {
    CACHED.get_or_try_init(py, || {
        let exceptions = py.import("asyncio.exceptions")?;
        Ok(Cached {
            incomplete: exceptions.getattr("IncompleteReadError")?.unbind(),
            overrun: exceptions.getattr("LimitOverrunError")?.unbind(),
        })
    })
}

/// Registered by `rsloop._streams`: asyncio's own `StreamWriter.drain` (for the waits
/// the native drain leaves to it; taken before anything can rebind `asyncio.StreamWriter`)
/// and the reader class whose instances the transport may feed directly (exactly
/// `rsloop.StreamReader`: a subclass may override `feed_data`).
static ASYNCIO_DRAIN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static FAST_READER: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The methods `write` and `drain` call on the writer's transport: an rsloop transport
/// keeps them bound in its `__dict__`, where they are called without a look-up
/// (`ffi::attrs`).
static TRANSPORT_METHODS: OwnMethods = OwnMethods::new(&["write", "is_closing"]);

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
