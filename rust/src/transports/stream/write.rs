//! The writing half of `StreamCore`: the write queue, and writes gathered per iteration
//! and sent as one `Op::SendMsg` with the wait, at most one in flight per transport, on
//! both drivers (io_uring's SENDMSG; the `poll` driver's own `sendmsg`, retried on
//! writability inside it). Once the kernel took only part of one, the next waits for the
//! fd's writer and `poll`'s word that the socket is writable (`State::full`).
//! Owns: what happens to bytes between `write()` and the kernel. Not: the closing state
//! machine (`common.rs`), reading (`read.rs`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView};

use super::{State, StreamCore};
use crate::core::watchers::Side;
use crate::errors::os_error;
use crate::ffi::buffer::buffer_to_vec;
use crate::handles::Args;
use crate::sys::sock::{self, MAX_IOV};
use crate::transports::common::{would_block, Chunk, TransportCore, LOST_WRITES_LOG_THRESHOLD};

/// Longest wait between two looks at a full socket that `poll` keeps reporting for the
/// wrong reason (`write_ready`): 2**6 ms.
const MAX_BACKOFF_SHIFT: u32 = 6;

/// A queued chunk and how much of it the kernel already took.
pub(super) struct Pending {
    chunk: Chunk,
    /// Bytes of the chunk already sent.
    start: usize,
    /// Bytes of the chunk not sent yet (`chunk`'s length less `start`), kept so that
    /// settling a send does not look into the chunk.
    left: usize,
}

impl Pending {
    fn rest<'a>(&'a self, py: Python<'_>) -> &'a [u8] {
        &self.chunk.bytes(py)[self.start..]
    }
}

/// Chunks a send finished whole, for the caller to drop outside the cell. Most sends
/// finish exactly one, which needs no vector. The chunks are only held, to be dropped.
#[derive(Default)]
pub(super) enum Sent {
    #[default]
    Nothing,
    One(Chunk),
    // Only held, to be dropped.
    #[allow(dead_code)]
    Many(Vec<Pending>),
}

impl Sent {
    /// Drops the chunks (outside the cell). A `bytes` object is released through the GIL
    /// token the caller holds, so the drop does not ask the thread whether it holds it.
    pub(super) fn release(self, py: Python<'_>) {
        match self {
            Sent::Nothing => {}
            Sent::One(Chunk::Shared(b)) => drop(b.into_bound(py)),
            Sent::One(Chunk::Owned(v)) => drop(v),
            Sent::Many(all) => drop(all),
        }
    }
}

/// Drops `n` sent bytes off the front of `queue`; returns the chunks sent whole, for the
/// caller to drop outside the cell.
fn advance(queue: &mut VecDeque<Pending>, mut n: usize) -> Sent {
    // The common case, one write per iteration: the send took the front chunk whole,
    // and no more.
    match queue.front_mut() {
        None => return Sent::Nothing,
        Some(front) if n < front.left => {
            front.start += n;
            front.left -= n;
            return Sent::Nothing;
        }
        Some(front) if n == front.left => {
            return match queue.pop_front() {
                Some(p) => Sent::One(p.chunk),
                None => Sent::Nothing,
            };
        }
        Some(_) => {}
    }
    let mut done = Vec::new();
    while n > 0 {
        let Some(front) = queue.front_mut() else {
            break;
        };
        if n >= front.left {
            n -= front.left;
            if let Some(p) = queue.pop_front() {
                done.push(p);
            }
        } else {
            front.start += n;
            front.left -= n;
            n = 0;
        }
    }
    Sent::Many(done)
}

impl State {
    /// Every queued byte is gone (sent or dropped).
    pub(super) fn forget_queue(&mut self) {
        self.queued = 0;
    }

    /// The kernel took `n` bytes off the queue's front: they stop counting as buffered;
    /// the chunks sent whole are returned, for the caller to drop outside the cell.
    #[inline]
    fn took(&mut self, n: usize) -> Sent {
        self.queued = self.queued.saturating_sub(n);
        advance(&mut self.queue, n)
    }

    /// Marks `_flush` as registered for the next wait; `true` if the caller must register
    /// it (not already registered, no send in flight: its completion schedules the next).
    fn mark_flush(&mut self) -> bool {
        if self.flush_scheduled || self.send_token.is_some() {
            return false;
        }
        self.flush_scheduled = true;
        true
    }

    /// One `sendmsg` of the queue's front (up to `MAX_IOV` slices). The bytes sent leave the
    /// queue; the chunks sent whole are returned, for the caller to drop outside the cell.
    pub(super) fn send_queued(&mut self, py: Python<'_>, fd: i32) -> (io::Result<usize>, Sent) {
        let slices: Vec<IoSlice<'_>> = self
            .queue
            .iter()
            .take(MAX_IOV)
            .map(|p| IoSlice::new(p.rest(py)))
            .collect();
        let given: usize = slices.iter().map(|b| b.len()).sum();
        let res = sock::send_vectored(fd, &slices);
        drop(slices);
        let done = match res {
            Ok(n) => {
                self.full = n < given;
                self.took(n)
            }
            Err(ref e) => {
                self.full = would_block(e);
                Sent::default()
            }
        };
        (res, done)
    }
}

impl StreamCore {
    /// `write(data)`: asyncio's `_SelectorSocketTransport.write`, gathered for the next wait.
    pub(super) fn write_data(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let bytes = data.cast::<PyBytes>().ok();
        if bytes.is_none()
            && !data.is_instance_of::<PyByteArray>()
            && !data.is_instance_of::<PyMemoryView>()
        {
            return Err(PyTypeError::new_err(super::write_type_error(
                &data.get_type().name()?.to_string(),
            )));
        }
        let (eof, sendfile, lost) = this
            .state
            .with(py, |s| (s.eof, s.empty_waiter.is_some(), s.base.conn_lost));
        if eof {
            return Err(PyRuntimeError::new_err(
                "Cannot call write() after write_eof()",
            ));
        }
        if sendfile {
            return Err(PyRuntimeError::new_err(
                "unable to write; sendfile is in progress",
            ));
        }
        let owned;
        let view: &[u8] = match bytes {
            Some(b) => b.as_bytes(),
            None => {
                owned = buffer_to_vec(data)?;
                &owned
            }
        };
        if view.is_empty() {
            return Ok(());
        }
        if lost > 0 {
            if lost >= LOST_WRITES_LOG_THRESHOLD {
                if let Some(shell) = this.shell(py) {
                    shell.call_method0(py, intern!(py, "_log_lost_write"))?;
                }
            }
            this.state.with(py, |s| s.base.conn_lost += 1);
            return Ok(());
        }
        // Gathered, and sent with the next wait (see `_flush`): the bytes count as
        // buffered until the kernel took them. Past the high-water mark, everything
        // gathered goes to the kernel now instead, as asyncio's write() hands it over;
        // only what the kernel refuses stays buffered.
        let chunk = match bytes {
            Some(b) => Chunk::Shared(b.clone().unbind()),
            None => Chunk::Owned(view.to_vec()),
        };
        let left = view.len();
        let (gather, register) = this.state.with(py, |s| {
            // Gathering is only for bytes that cannot make flow control differ from
            // asyncio's: while the buffer stays at or under the high-water mark, or while
            // a send is in flight (the kernel has refused nothing yet; asyncio's buffer is
            // not empty either), or while the socket is full (asyncio's write() only
            // appends to a buffer that waits for writability).
            let within = !s.base.marks.above_high(s.queued + left);
            let gather = s.send_token.is_some() || within || s.full;
            s.queued += left;
            s.queue.push_back(Pending {
                chunk,
                start: 0,
                left,
            });
            // The usual case: gathered, and its flush asked for in the same look.
            (gather, gather && s.mark_flush())
        });
        if register {
            this.schedule_flush_marked(slf);
        }
        if !gather {
            let (res, sent) = this.flush(py);
            sent.release(py);
            if let Err(e) = res {
                if !would_block(&e) {
                    let message = "Fatal write error on socket transport";
                    return this.fatal(py, os_error(&e), message);
                }
            }
            if this.state.with(py, |s| !s.queue.is_empty()) {
                this.schedule_flush(slf);
            }
        }
        this.maybe_pause_protocol(py)
    }

    /// Just before the loop waits: one `sendmsg` of everything queued (up to
    /// 1024 slices), submitted with the wait. At most one send is in flight.
    pub(super) fn flush_ring(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let watch = this.state.with(py, |s| {
            s.flush_scheduled = false;
            if s.send_token.is_some() || s.queue.is_empty() || s.base.conn_lost > 0 {
                return false;
            }
            if s.full {
                // Wait for `poll` to call the socket writable (`State::full`).
                let watch = !s.write_watch && !s.write_timer;
                s.write_watch |= watch;
                return watch;
            }
            // The iovecs are built straight into the header's reused vector; the core
            // only stores the owner and queues the send (no Python code runs here).
            let msg = s.hdr.point_at(s.queue.iter().map(|p| p.rest(py)));
            s.sending = s.queue.iter().take(MAX_IOV).map(|p| p.left).sum();
            let owner = slf.clone().into_any().unbind();
            s.send_token = Some(this.loop_.send_submit(py, this.fd, msg, owner, sent_hook));
            false
        });
        if watch {
            let cb = slf.getattr(intern!(py, "_write_ready"))?.unbind();
            if let Err(e) =
                this.loop_
                    .add_watcher(py, this.fd, Side::Write, cb, Args::Zero, this.context(py))
            {
                this.state.with(py, |s| s.write_watch = false);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The fd's writer ran (or its timer fired) for a full socket: send with the next
    /// wait if `poll` now calls it writable, as asyncio's selector would.
    pub(super) fn write_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.stop_writing(py)?;
        let live = this.state.with(py, |s| {
            s.write_timer = false;
            s.base.conn_lost == 0 && !s.aborted && s.base.shell.is_some() && !s.queue.is_empty()
        });
        if !live {
            return Ok(());
        }
        if sock::writable_now(this.fd) {
            this.state.with(py, |s| {
                s.full = false;
                s.refused = 0;
            });
            this.schedule_flush(slf);
            return Ok(());
        }
        // Still full: woken for another reason. On io_uring, the peer's half-close: its
        // polls report that (EPOLLRDHUP) to every poll on the socket, so the writer would
        // run again at once, every iteration, a busy loop. Look again on a doubling timer
        // instead (1 to 64 ms); any progress starts over.
        let refused = this.state.with(py, |s| {
            s.refused += 1;
            s.write_timer = true;
            s.refused
        });
        let delay = 0.001 * f64::from(1u32 << (refused - 1).min(MAX_BACKOFF_SHIFT));
        let again = slf.getattr(intern!(py, "_write_ready"))?;
        let kwargs = match this.context(py) {
            Some(context) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item(intern!(py, "context"), context)?;
                Some(kwargs)
            }
            None => None,
        };
        this.loop_.obj().call_method(
            py,
            intern!(py, "call_later"),
            (delay, again),
            kwargs.as_ref(),
        )?;
        Ok(())
    }

    /// As the loop reaps the completion: a send that took bytes, on a transport
    /// with nothing to tell its protocol or a waiter (not paused for flow control, not
    /// closing, no `write_eof()`, no `loop.sendfile`, no reset pending), is bookkeeping
    /// only: the sent bytes leave the queue, and what was gathered since leaves with the
    /// next wait. Anything else returns `false`, and `on_sent` runs as a ready handle.
    fn sent_quietly(slf: &Bound<'_, Self>, result: i32) -> bool {
        let py = slf.py();
        let this = slf.get();
        let sent = this.state.with(py, |s| {
            if result == -libc::ECONNRESET {
                s.send_reset = true;
            }
            let quiet = result > 0
                && !s.aborted
                && s.base.shell.is_some()
                && s.base.conn_lost == 0
                && !s.base.closing
                && !s.base.marks.paused()
                && !s.eof
                && !s.eof_after_send
                && s.empty_waiter.is_none();
            if !quiet {
                return None;
            }
            s.send_token = None;
            s.full = (result as usize) < s.sending;
            Some((s.took(result as usize), !s.queue.is_empty()))
        });
        let Some((chunks, more)) = sent else {
            return false;
        };
        chunks.release(py);
        if more {
            this.schedule_flush(slf);
        }
        true
    }

    /// The send in flight ended with `result` (bytes sent, or `-errno`).
    pub(super) fn on_sent(slf: &Bound<'_, Self>, result: i32) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (lost, sent_chunks) = this.state.with(py, |s| {
            s.send_token = None;
            s.send_reset = false;
            if s.aborted || s.base.shell.is_none() {
                // Aborted (or detached) while the kernel read the bytes: free them now.
                s.forget_queue();
                return (
                    true,
                    Sent::Many(std::mem::take(&mut s.queue).into_iter().collect()),
                );
            }
            let done = if result > 0 {
                s.full = (result as usize) < s.sending;
                s.took(result as usize)
            } else {
                Sent::default()
            };
            (false, done)
        });
        sent_chunks.release(py);
        if lost {
            return Ok(());
        }
        if result < 0 {
            let code = -result;
            if code == libc::EAGAIN || code == libc::EINTR {
                // Full (`State::full`): the next send waits for writability.
                this.state.with(py, |s| s.full |= code == libc::EAGAIN);
                this.schedule_flush(slf);
                return Ok(());
            }
            return this.write_failed(py, &io::Error::from_raw_os_error(code));
        }
        if this
            .state
            .with(py, |s| std::mem::take(&mut s.eof_after_send))
        {
            if let Some(protocol) = this.protocol(py) {
                this.on_eof(slf, protocol)?;
            }
        }
        if !this.queue_drained(py)? {
            this.schedule_flush(slf);
            return Ok(());
        }
        this.finish_writes(py)
    }

    /// Sends what the queue holds, in one `sendmsg`. Returns the error if the send failed
    /// for good; drops sent `bytes` objects outside the cell.
    pub(super) fn flush(&self, py: Python<'_>) -> (io::Result<usize>, Sent) {
        self.state.with(py, |s| s.send_queued(py, self.fd))
    }

    /// A send failed for good: drop the queue, report, fail `loop.sendfile`'s waiter.
    pub(super) fn write_failed(&self, py: Python<'_>, e: &io::Error) -> PyResult<()> {
        let (dropped, waiter) = self.state.with(py, |s| {
            s.forget_queue();
            (
                std::mem::take(&mut s.queue),
                s.empty_waiter.as_ref().map(|w| w.clone_ref(py)),
            )
        });
        drop(dropped);
        let exc = os_error(e);
        let value = exc.value(py).clone().into_any().unbind();
        self.fatal(py, exc, "Fatal write error on socket transport")?;
        if let Some(w) = waiter {
            w.call_method1(py, intern!(py, "set_exception"), (value,))?;
        }
        Ok(())
    }

    /// After a send: resume the protocol at the low mark; `true` once the queue is empty.
    pub(super) fn queue_drained(&self, py: Python<'_>) -> PyResult<bool> {
        self.maybe_resume_protocol(py)?;
        Ok(self.state.with(py, |s| s.queue.is_empty()))
    }

    /// The queue is empty: wake `loop.sendfile`'s waiter, then finish a `close()` or a
    /// `write_eof()` made meanwhile.
    pub(super) fn finish_writes(&self, py: Python<'_>) -> PyResult<()> {
        let (waiter, closing, eof) = self.state.with(py, |s| {
            (
                s.empty_waiter.as_ref().map(|w| w.clone_ref(py)),
                s.base.closing,
                s.eof,
            )
        });
        if let Some(w) = waiter {
            w.call_method1(py, intern!(py, "set_result"), (py.None(),))?;
        }
        if closing {
            self.connection_lost_now(py)?;
        } else if eof {
            sock::shutdown_write(self.fd).map_err(|e| os_error(&e))?;
        }
        Ok(())
    }

    /// Make sure `_flush` runs before the next wait (unless a send is in flight:
    /// its completion schedules the next).
    pub(super) fn schedule_flush(&self, slf: &Bound<'_, Self>) {
        if self.state.with(slf.py(), State::mark_flush) {
            self.schedule_flush_marked(slf);
        }
    }

    /// `State::mark_flush` said yes: register `_flush` for the next wait.
    fn schedule_flush_marked(&self, slf: &Bound<'_, Self>) {
        let owner = slf.clone().into_any().unbind();
        self.loop_.mark_dirty(slf.py(), owner, flush_hook);
    }
}

/// The core's `FlushHook` for stream transports: `flush_ring`.
fn flush_hook(owner: &Bound<'_, PyAny>) -> PyResult<()> {
    StreamCore::flush_ring(owner.cast::<StreamCore>()?)
}

/// The core's `SentHook` for stream transports: `sent_quietly`.
fn sent_hook(owner: &Bound<'_, PyAny>, result: i32) -> bool {
    owner
        .cast::<StreamCore>()
        .is_ok_and(|slf| StreamCore::sent_quietly(slf, result))
}
