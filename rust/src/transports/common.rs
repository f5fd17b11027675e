//! What the stream and datagram cores share, as asyncio's `_SelectorTransport` is shared.
//! Owns: the state both keep alike (`Base`: protocol, Python shell, closing/paused/lost
//! flags, water marks) and its steps (`close`, `_force_close`, `pause_reading`, pausing and
//! resuming the protocol at the water marks, scheduling `connection_lost`),
//! `set_write_buffer_limits`' rules, asyncio's constants, the receive scratch buffer, the
//! error tests and the queued-bytes type. Not: what counts as the write-buffer size, how a
//! core reads, sends or drops its queue (`stream/`, `datagram/`).

use std::cell::RefCell;
use std::io;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::core::handle::LoopHandle;
use crate::handles::Args;

/// asyncio's `max_size`: the most one receive asks for.
pub(crate) const MAX_READ: usize = 256 * 1024;
/// asyncio's `LOG_THRESHOLD_FOR_CONNLOST_WRITES`.
pub(crate) const LOST_WRITES_LOG_THRESHOLD: u32 = 5;
/// asyncio's default high-water mark (64 KiB); the low one is a quarter of it.
const DEFAULT_HIGH: usize = 64 * 1024;

thread_local! {
    /// One receive buffer per loop thread, shared by its transports: a transport costs no
    /// read buffer while idle, and a read copies only what arrived into its `bytes`.
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; MAX_READ].into_boxed_slice());
}

/// Runs `f` on this thread's receive buffer (`MAX_READ` bytes). `f` must not run Python
/// code that could read from a transport (making the `bytes` of what arrived is fine).
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|cell| f(&mut cell.borrow_mut()))
}

/// `SystemExit` or `KeyboardInterrupt`: asyncio lets these through every `except`.
pub(crate) fn is_exit(err: &PyErr, py: Python<'_>) -> bool {
    err.is_instance_of::<PySystemExit>(py) || err.is_instance_of::<PyKeyboardInterrupt>(py)
}

/// asyncio's `except (BlockingIOError, InterruptedError)`: try again on readiness.
pub(crate) fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Queued bytes: a `bytes` object kept as is, or a copy of anything mutable.
pub(crate) enum Chunk {
    Shared(Py<PyBytes>),
    Owned(Vec<u8>),
}

impl Chunk {
    /// All the chunk's bytes.
    pub(crate) fn bytes<'a>(&'a self, py: Python<'_>) -> &'a [u8] {
        match self {
            Chunk::Shared(b) => b.as_bytes(py),
            Chunk::Owned(v) => v,
        }
    }
}

/// `set_write_buffer_limits(high, low)`'s arguments as asyncio reads them: a missing
/// `high` is four times `low` (else 64 KiB), a missing `low` a quarter of `high`.
/// Checked by [`WaterMarks::set`]; read here, outside the state cell, because reading an
/// `int` subclass may run Python code.
pub(crate) fn requested_limits(
    high: Option<&Bound<'_, PyAny>>,
    low: Option<&Bound<'_, PyAny>>,
) -> PyResult<(i128, i128)> {
    let high = high.filter(|h| !h.is_none());
    let low = low.filter(|l| !l.is_none());
    let high_v: i128 = match (high, low) {
        (Some(h), _) => h.extract()?,
        (None, Some(l)) => 4 * l.extract::<i128>()?,
        (None, None) => DEFAULT_HIGH as i128,
    };
    let low_v: i128 = match low {
        Some(l) => l.extract()?,
        None => high_v.div_euclid(4),
    };
    Ok((high_v, low_v))
}

/// asyncio's `_FlowControlMixin` water marks and its `_protocol_paused` flag.
pub(crate) struct WaterMarks {
    high: usize,
    low: usize,
    /// `pause_writing()` was called, `resume_writing()` not since.
    paused: bool,
}

impl Default for WaterMarks {
    fn default() -> Self {
        WaterMarks {
            high: DEFAULT_HIGH,
            low: DEFAULT_HIGH / 4,
            paused: false,
        }
    }
}

impl WaterMarks {
    /// New marks from [`requested_limits`], with asyncio's check and message. Values past
    /// `usize::MAX` are kept as `usize::MAX`: no buffer gets that large.
    pub(crate) fn set(&mut self, high: i128, low: i128) -> PyResult<()> {
        if !(high >= low && low >= 0) {
            return Err(PyValueError::new_err(format!(
                "high ({high}) must be >= low ({low}) must be >= 0"
            )));
        }
        let clamp = |v: i128| usize::try_from(v).unwrap_or(usize::MAX);
        self.high = clamp(high);
        self.low = clamp(low);
        Ok(())
    }

    /// `get_write_buffer_limits()`: `(low, high)`.
    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.low, self.high)
    }

    /// `_protocol_paused`.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// Whether a buffer of `size` bytes is above the high-water mark.
    pub(crate) fn above_high(&self, size: usize) -> bool {
        size > self.high
    }

    /// The buffer went above the high mark while the protocol was writing: it is paused
    /// now, and `pause_writing()` is due.
    pub(crate) fn should_pause(&mut self, size: i128) -> bool {
        if self.paused || size <= self.high as i128 {
            return false;
        }
        self.paused = true;
        true
    }

    /// The buffer fell to the low mark while the protocol was paused: it is resumed now,
    /// and `resume_writing()` is due.
    pub(crate) fn should_resume(&mut self, size: i128) -> bool {
        if !(self.paused && size <= self.low as i128) {
            return false;
        }
        self.paused = false;
        true
    }
}

/// What both cores keep alike: asyncio's `_SelectorTransport` attributes.
pub(crate) struct Base {
    pub(crate) protocol: Option<Py<PyAny>>,
    /// The Python transport object (cleared after `connection_lost`).
    pub(crate) shell: Option<Py<PyAny>>,
    pub(crate) closing: bool,
    /// `pause_reading()` is in force.
    pub(crate) paused: bool,
    /// Set once `connection_lost` is scheduled; counts writes made after that.
    pub(crate) conn_lost: u32,
    pub(crate) marks: WaterMarks,
}

impl Base {
    /// A new transport's: open, reading, default water marks.
    pub(crate) fn new(protocol: Py<PyAny>, shell: Py<PyAny>) -> Self {
        Base {
            protocol: Some(protocol),
            shell: Some(shell),
            closing: false,
            paused: false,
            conn_lost: 0,
            marks: WaterMarks::default(),
        }
    }

    /// `is_reading()`.
    pub(crate) fn is_reading(&self) -> bool {
        !self.closing && !self.paused
    }

    /// `pause_reading()`: `true` when reading must stop now.
    pub(crate) fn pause_reading(&mut self) -> bool {
        if self.closing || self.paused {
            return false;
        }
        self.paused = true;
        true
    }

    /// `resume_reading()`: `true` when reading must start again now.
    pub(crate) fn resume_reading(&mut self) -> bool {
        if self.closing || !self.paused {
            return false;
        }
        self.paused = false;
        true
    }
}

/// The write buffer as the shared steps see it.
pub(crate) struct WriteBuffer {
    /// `get_write_buffer_size()`.
    pub(crate) size: i128,
    /// Nothing is queued.
    pub(crate) empty: bool,
}

/// A transport core, as the shared steps below see it.
pub(crate) trait TransportCore {
    /// The loop the transport runs on.
    fn event_loop(&self) -> &LoopHandle;

    /// Runs `f` on the shared state and the write buffer, under the state cell (so `f`
    /// must not run Python code).
    fn with_base<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Base, WriteBuffer) -> R) -> R;

    /// Stops reading (the fd's reader, or the loop's receive).
    fn stop_reading(&self, py: Python<'_>) -> PyResult<()>;

    /// Stops waiting for writability.
    fn stop_writing(&self, py: Python<'_>) -> PyResult<()>;

    /// `_force_close` found bytes queued: drop them (and stop sending them).
    fn drop_queue(&self, py: Python<'_>) -> PyResult<()>;

    /// The context its protocol's callbacks run in, if the transport was given one
    /// (asyncio 3.15's `context`); `None`: a copy of the current one at scheduling.
    fn context(&self, _py: Python<'_>) -> Option<Py<PyAny>> {
        None
    }

    /// The Python transport object (`None` after `connection_lost`).
    fn shell(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.with_base(py, |b, _| b.shell.as_ref().map(|x| x.clone_ref(py)))
    }

    /// The protocol (`None` after `connection_lost`).
    fn protocol(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.with_base(py, |b, _| b.protocol.as_ref().map(|x| x.clone_ref(py)))
    }

    /// asyncio's `close()`: stop reading; with nothing queued, `connection_lost` is next
    /// (else the send that empties the queue schedules it).
    fn close_transport(&self, py: Python<'_>) -> PyResult<()> {
        let (was_closing, empty) = self.with_base(py, |b, buf| {
            let was = b.closing;
            b.closing = true;
            (was, buf.empty)
        });
        if was_closing {
            return Ok(());
        }
        self.stop_reading(py)?;
        if empty {
            self.with_base(py, |b, _| b.conn_lost += 1);
            self.stop_writing(py)?;
            self.schedule_connection_lost(py, py.None())?;
        }
        Ok(())
    }

    /// asyncio's `_force_close(exc)`: drop the queue, stop reading, `connection_lost` next.
    fn force_close(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        let (lost, had_queue, was_closing) =
            self.with_base(py, |b, buf| (b.conn_lost, !buf.empty, b.closing));
        if lost > 0 {
            return Ok(());
        }
        if had_queue {
            self.drop_queue(py)?;
        }
        if !was_closing {
            self.with_base(py, |b, _| b.closing = true);
            self.stop_reading(py)?;
        }
        self.with_base(py, |b, _| b.conn_lost += 1);
        self.schedule_connection_lost(py, exc)
    }

    /// asyncio's `pause_reading()`.
    fn pause_reads(&self, py: Python<'_>) -> PyResult<()> {
        if self.with_base(py, |b, _| b.pause_reading()) {
            self.stop_reading(py)?;
        }
        Ok(())
    }

    /// asyncio's `_maybe_pause_protocol`.
    fn maybe_pause_protocol(&self, py: Python<'_>) -> PyResult<()> {
        if self.with_base(py, |b, buf| b.marks.should_pause(buf.size)) {
            self.flow_hook(py, intern!(py, "pause_writing"))?;
        }
        Ok(())
    }

    /// asyncio's `_maybe_resume_protocol`.
    fn maybe_resume_protocol(&self, py: Python<'_>) -> PyResult<()> {
        if self.with_base(py, |b, buf| b.marks.should_resume(buf.size)) {
            self.flow_hook(py, intern!(py, "resume_writing"))?;
        }
        Ok(())
    }

    /// `protocol.pause_writing()` / `resume_writing()`: an exception (but an exit) goes to
    /// the loop's handler through the shell's `_report`.
    fn flow_hook(&self, py: Python<'_>, method: &Bound<'_, PyString>) -> PyResult<()> {
        let Some(protocol) = self.protocol(py) else {
            return Ok(());
        };
        match protocol.call_method0(py, method) {
            Ok(_) => Ok(()),
            Err(e) if is_exit(&e, py) => Err(e),
            Err(e) => {
                if let Some(shell) = self.shell(py) {
                    let message = format!("protocol.{}() failed", method.to_str()?);
                    shell.call_method1(py, intern!(py, "_report"), (message, e.into_value(py)))?;
                }
                Ok(())
            }
        }
    }

    /// `call_soon(transport._call_connection_lost, exc, context=...)`.
    fn schedule_connection_lost(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        if let Some(shell) = self.shell(py) {
            let cb = shell.getattr(py, intern!(py, "_call_connection_lost"))?;
            let context = self.context(py);
            self.event_loop()
                .call_soon(py, cb, Args::One(exc), context)?;
        }
        Ok(())
    }

    /// The queue drained while closing: `transport._call_connection_lost(None)` now, as
    /// asyncio's `_write_ready`/`_sendto_ready` do.
    fn connection_lost_now(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(shell) = self.shell(py) {
            shell.call_method1(py, intern!(py, "_call_connection_lost"), (py.None(),))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::WaterMarks;

    #[test]
    fn pauses_above_high_and_resumes_at_low_once_per_crossing() {
        let mut m = WaterMarks::default();
        m.set(100, 25).expect("valid marks");
        assert!(!m.should_pause(100));
        assert!(m.should_pause(101));
        assert!(!m.should_pause(500), "already paused");
        assert!(!m.should_resume(26));
        assert!(m.should_resume(25));
        assert!(!m.should_resume(0), "already resumed");
        // asyncio 3.11+'s datagram counter can go below zero.
        assert!(!m.should_pause(-8));
    }

    #[test]
    fn limits_are_checked_and_clamped() {
        let mut m = WaterMarks::default();
        assert_eq!(m.limits(), (16 * 1024, 64 * 1024));
        assert!(m.set(1, 2).is_err());
        assert!(m.set(-4, -1).is_err());
        assert_eq!(
            m.limits(),
            (16 * 1024, 64 * 1024),
            "unchanged by a refused set"
        );
        m.set(1 << 70, 7).expect("valid marks");
        assert_eq!(m.limits(), (7, usize::MAX));
    }
}
