//! The reading half of `StreamCore`: readiness then `recv` (both drivers; see
//! docs/decisions/0004-one-io-model.md), the reader armed once (a receive that filled
//! its buffer asks to run again, see `core/watchers.rs`), handing each chunk to a `Protocol`
//! (`data_received`) or a `BufferedProtocol` (`get_buffer` / `buffer_updated`), end of
//! stream (`eof_received`).
//! Owns: reading and delivering what was read, and the slot through
//! which the fast stream reader (`py/streams/`, above) takes chunks straight from the
//! transport. Not: the state machine and the write queue (`mod.rs`).

use std::io;
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyType};

use super::StreamCore;
use crate::errors::os_error;
use crate::ffi::buffer::{recv_bytes, recv_into_buffer};
use crate::sys::malloc::heap_serves;
use crate::sys::sock;
use crate::transports::common::{with_scratch, would_block, TransportCore, MAX_READ};

/// A readiness receive at least this large makes the next one go straight into its `bytes`
/// (`recv_chunk`).
pub(super) const BIG_READ: usize = 8 * 1024;

/// Hands a received chunk for a protocol of exactly `asyncio.StreamReaderProtocol` to its
/// reader directly, as the protocol's own `data_received` would; `None` when the reader is
/// not one it knows (the caller then calls `data_received`).
pub type FeedHook = for<'py> fn(&Bound<'py, PyAny>, &Bound<'py, PyBytes>) -> Option<PyResult<()>>;

/// Set once by the bindings (`py::register`), which own the fast stream reader.
static FEED: OnceLock<FeedHook> = OnceLock::new();

/// Installs the reader fast path (a second call is ignored).
pub fn set_feed_hook(hook: FeedHook) {
    let _ = FEED.set(hook);
}

static STREAM_READER_PROTOCOL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Whether `protocol` is exactly `asyncio.StreamReaderProtocol` (a subclass may override
/// `data_received`): the only protocol the feed hook is called for, so every other one
/// pays a type comparison here and no call.
fn is_stream_reader_protocol(protocol: &Bound<'_, PyAny>) -> bool {
    let py = protocol.py();
    STREAM_READER_PROTOCOL
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("asyncio.streams")?
                    .getattr("StreamReaderProtocol")?
                    .cast_into::<PyType>()?
                    .unbind(),
            )
        })
        .is_ok_and(|t| protocol.get_type().is(t.bind(py)))
}

impl StreamCore {
    /// Starts reading: the fd's reader. A BufferedProtocol then `recv_into`s its own
    /// buffer (no copy), and bytes no protocol took stay in the kernel, as with asyncio (a
    /// failing protocol's socket then closes with an RST, not a FIN).
    pub(super) fn start_read(&self, slf: &Bound<'_, Self>) -> PyResult<()> {
        self.watch_read(slf)
    }

    /// One readiness receive of up to `MAX_READ` bytes. A small one lands in the thread's
    /// scratch buffer and only what arrived is copied into its `bytes`. After a large one
    /// (`big`), where the heap serves a `MAX_READ` block without `mmap`, the kernel writes
    /// straight into a new `bytes`, shrunk in place to what arrived, as `socket.recv` does:
    /// that saves copying up to 256 KiB a read.
    pub(super) fn recv_chunk<'py>(
        &self,
        py: Python<'py>,
        big: bool,
    ) -> PyResult<io::Result<Bound<'py, PyBytes>>> {
        // The block is a little larger than the payload (the `bytes` header and malloc's
        // own); a page of margin covers both.
        if big && heap_serves(MAX_READ + 4096) {
            return recv_bytes(py, self.fd, MAX_READ);
        }
        Ok(with_scratch(|buf| {
            sock::recv(self.fd, buf).map(|n| PyBytes::new(py, &buf[..n]))
        }))
    }

    /// `protocol.data_received(data)`; a plain `asyncio.StreamReaderProtocol` has its
    /// reader fed here instead, as its `data_received` would.
    pub(super) fn data_received(
        &self,
        py: Python<'_>,
        protocol: &Py<PyAny>,
        data: Bound<'_, PyBytes>,
    ) -> PyResult<()> {
        let protocol_obj = protocol.bind(py);
        let fed = match FEED.get() {
            Some(feed) if is_stream_reader_protocol(protocol_obj) => feed(protocol_obj, &data),
            _ => None,
        };
        let res = match fed {
            Some(fed) => fed.map(|()| py.None()),
            None => protocol.call_method1(py, intern!(py, "data_received"), (data,)),
        };
        let message = "Fatal error: protocol.data_received() call failed.";
        self.checked(py, res, message).map(drop)
    }

    /// `protocol.get_buffer(-1)`, which must not be empty (`None`: it failed, and the
    /// transport with it).
    pub(super) fn get_buffer(
        &self,
        py: Python<'_>,
        protocol: &Py<PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let res = protocol
            .call_method1(py, intern!(py, "get_buffer"), (-1,))
            .and_then(|b| {
                if b.bind(py).len()? == 0 {
                    Err(PyRuntimeError::new_err(
                        "get_buffer() returned an empty buffer",
                    ))
                } else {
                    Ok(b)
                }
            });
        self.checked(py, res, "Fatal error: protocol.get_buffer() call failed.")
    }

    /// `protocol.buffer_updated(n)` (`false`: it failed, and the transport with it).
    pub(super) fn buffer_updated(
        &self,
        py: Python<'_>,
        protocol: &Py<PyAny>,
        n: usize,
    ) -> PyResult<bool> {
        let res = protocol.call_method1(py, intern!(py, "buffer_updated"), (n,));
        let message = "Fatal error: protocol.buffer_updated() call failed.";
        Ok(self.checked(py, res, message)?.is_some())
    }

    pub(super) fn on_eof(&self, slf: &Bound<'_, Self>, protocol: Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        // A reset meets the first call on the socket: asyncio's next `recv` raises
        // ECONNRESET, but a send in flight took the error already and the receive sees
        // only the end. That send's completion reports it (`on_sent`).
        // Known from the send's own result where it already came (every platform), else
        // asked of the kernel (Linux's TCP_INFO).
        let (in_flight, reset) = self
            .state
            .with(py, |s| (s.send_token.is_some(), s.send_reset));
        if in_flight && (reset || sock::tcp_closed(self.fd)) {
            self.state.with(py, |s| s.eof_after_send = true);
            return self.stop_reading(py);
        }
        let res = protocol.call_method0(py, intern!(py, "eof_received"));
        let message = "Fatal error: protocol.eof_received() call failed.";
        let Some(keep_open) = self.checked(py, res, message)? else {
            return Ok(());
        };
        if keep_open.bind(py).is_truthy()? {
            self.stop_reading(py)
        } else {
            self.close(py)
        }
    }

    pub(super) fn read_buffered(&self, slf: &Bound<'_, Self>, protocol: Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        if self.state.with(py, |s| std::mem::take(&mut s.maybe_more))
            && !sock::readable_now(self.fd)
        {
            // The last receive filled the buffer and the socket turned out empty: asyncio's
            // selector would not have called the protocol.
            return Ok(());
        }
        let Some(buf) = self.get_buffer(py, &protocol)? else {
            return Ok(());
        };
        let (n, full) = match recv_into_buffer(self.fd, buf.bind(py)) {
            Ok(Ok(got)) => got,
            Ok(Err(e)) if would_block(&e) => return Ok(()),
            Ok(Err(e)) => {
                return self.fatal(py, os_error(&e), "Fatal read error on socket transport")
            }
            Err(e) => return self.fatal(py, e, "Fatal read error on socket transport"),
        };
        drop(buf);
        if n == 0 {
            return self.on_eof(slf, protocol);
        }
        if full && self.armed_once {
            self.state.with(py, |s| s.maybe_more = true);
            self.read_again(py);
        }
        self.buffer_updated(py, &protocol, n).map(drop)
    }
}
