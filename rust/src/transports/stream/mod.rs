//! `StreamCore`: the per-packet half of a TCP or Unix stream transport.
//! Owns: its state, the methods Python calls (reading in `read.rs`: `data_received` /
//! `get_buffer`+`buffer_updated`; writing in `write.rs`: the write queue and its vectored
//! sends, one `Op::SendMsg` per iteration on both drivers), `write_eof`, and the stream's steps of closing
//! (what happens to queued bytes and a send in flight).
//! Not: the water marks and the `close`/`_force_close`/`pause_reading` state machine
//! shared with the datagram core (`common.rs`); the transport object Python sees
//! (`rsloop._transports.SocketTransport`, which forwards its hot methods here and keeps the
//! cold ones: extra info, repr, `connection_lost` and socket close, error reporting).
//!
//! Behaviour is asyncio's `_SelectorSocketTransport`'s as its user sees it: one receive
//! per readiness; an iteration's writes leave together in one `sendmsg` with the loop's
//! wait (after a send the kernel took only part of, once `poll` calls the socket
//! writable, as a selector reports it: `State::full`), and wherever
//! asyncio's would differ by sending inside `write()` (past the high-water mark, at
//! `close()`, at `abort()`), the gathered bytes go to the kernel there and then.

mod read;
mod write;

pub use read::{set_feed_hook, FeedHook};

use std::collections::VecDeque;

use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use pyo3::PyTraverseError;

use super::common::{
    is_exit, requested_limits, would_block, Base, TransportCore, WriteBuffer, MAX_READ,
};
use crate::core::handle::LoopHandle;
use crate::core::watchers::Side;
use crate::errors::os_error;
use crate::ffi::gil::GilCell;
use crate::ffi::python::run_in_context;
use crate::handles::Args;
use crate::sys::sock::{self, SendHeader};
use read::BIG_READ;
use write::Pending;

static BUFFERED_PROTOCOL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn buffered_protocol_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    BUFFERED_PROTOCOL
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("asyncio.protocols")?
                    .getattr("BufferedProtocol")?
                    .unbind(),
            )
        })
        .map(|t| t.bind(py))
}

struct State {
    /// Protocol, Python transport, closing/paused/lost flags, water marks.
    base: Base,
    /// The protocol is an `asyncio.BufferedProtocol`.
    buffered: bool,
    eof: bool,
    queue: VecDeque<Pending>,
    queued: usize,
    /// `loop.sendfile` in progress: the future that resolves when the queue is empty.
    empty_waiter: Option<Py<PyAny>>,
    /// The last readiness receive was large (`BIG_READ` or more): the next one goes
    /// straight into its own `bytes` rather than through the scratch buffer.
    big_reads: bool,
    /// The last receive filled a `BufferedProtocol`'s whole buffer and asked to run
    /// again: the next run looks before calling `get_buffer`, which asyncio calls only
    /// when the socket is readable.
    maybe_more: bool,
    /// The send in flight (writes are gathered during an iteration and leave with the wait
    /// as one `Op::SendMsg`, at most one in flight); the queue's front bytes are the
    /// kernel's until it completes, so nothing frees them before.
    send_token: Option<u64>,
    /// `_flush` is registered for the next wait.
    flush_scheduled: bool,
    /// The kernel took only part of the last send (or none, `EAGAIN`): the socket is full,
    /// and the next send waits until `poll` calls it writable (`_write_ready`), as
    /// asyncio's buffered bytes wait for its selector. A ring send submitted now would
    /// wait inside the kernel, which retries it at any wake-up, the peer's FIN included,
    /// and takes whatever room there is: bytes a selector loop would still hold, and whose
    /// loss to a later reset it would report.
    full: bool,
    /// Bytes the send in flight was given (whether it took them all says `full`).
    sending: usize,
    /// `_write_ready` is the fd's writer.
    write_watch: bool,
    /// `_write_ready` waits on a timer (see there).
    write_timer: bool,
    /// Wake-ups in a row that found the socket still full: see `_write_ready`.
    refused: u32,
    /// Reading met the end of a reset connection while a send was in flight: the send
    /// took the reset's error, so its completion reports it (or, if it succeeded, delivers
    /// the end of stream).
    eof_after_send: bool,
    /// The send in flight failed with `ECONNRESET` (its `_on_sent` is queued): the reset's
    /// error went to the send, so a receive now meets only the end of stream.
    send_reset: bool,
    /// `abort()` (or a fatal error) while a send was in flight: its bytes are freed when it
    /// completes.
    aborted: bool,
    /// The header the send in flight reads (boxed: its address is in the SQE).
    hdr: Box<SendHeader>,
    /// The context the protocol's callbacks run in (asyncio 3.15's transport `context`:
    /// the one captured when the connection was made); `None`: each watcher and callback
    /// takes a copy of the current context when it is scheduled, as before 3.15.
    context: Option<Py<PyAny>>,
}

/// What the running Python's asyncio stream transport says and does where versions
/// differ, as `rsloop._transports` probed it at import ([`set_asyncio_behaviour`]).
static ASYNCIO: std::sync::RwLock<AsyncioBehaviour> = std::sync::RwLock::new(AsyncioBehaviour {
    write_type_error: String::new(),
    writelines_skips_empty: false,
});

struct AsyncioBehaviour {
    /// `write()`'s `TypeError` text before `, not 'TYPE'`; empty: 3.10-3.13's.
    write_type_error: String,
    /// 3.14+: `writelines()` leaves out empty (false) items instead of failing on them.
    writelines_skips_empty: bool,
}

/// Sets what [`ASYNCIO`] holds (called once, by `rsloop._transports`).
#[pyfunction]
pub fn set_asyncio_behaviour(write_type_error: String, writelines_skips_empty: bool) {
    if let Ok(mut b) = ASYNCIO.write() {
        b.write_type_error = write_type_error;
        b.writelines_skips_empty = writelines_skips_empty;
    }
}

/// `write()`'s `TypeError` for `data` of type `name`.
pub(super) fn write_type_error(name: &str) -> String {
    let prefix = ASYNCIO
        .read()
        .map(|b| b.write_type_error.clone())
        .unwrap_or_default();
    if prefix.is_empty() {
        format!("data argument must be a bytes-like object, not '{name}'")
    } else {
        format!("{prefix}, not '{name}'")
    }
}

fn writelines_skips_empty() -> bool {
    ASYNCIO.read().is_ok_and(|b| b.writelines_skips_empty)
}

/// The per-packet core of a stream transport.
#[pyclass(frozen, module = "rsloop._rsloop", name = "StreamCore")]
pub struct StreamCore {
    fd: i32,
    loop_: LoopHandle,
    /// A TCP socket: its reader stays armed for the connection (a short receive drained
    /// it; see `watch_read`). Other stream sockets re-arm a one-shot poll per readiness.
    armed_once: bool,
    state: GilCell<State>,
}

impl TransportCore for StreamCore {
    fn event_loop(&self) -> &LoopHandle {
        &self.loop_
    }

    fn with_base<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Base, WriteBuffer) -> R) -> R {
        self.state.with(py, |s| {
            let buf = WriteBuffer {
                size: s.queued as i128,
                empty: s.queue.is_empty(),
            };
            f(&mut s.base, buf)
        })
    }

    /// The fd's reader.
    fn stop_reading(&self, py: Python<'_>) -> PyResult<()> {
        self.loop_.remove_watcher(py, self.fd, Side::Read)?;
        Ok(())
    }

    /// The fd's writer, `_write_ready`, if the socket was full (see `State::full`).
    fn stop_writing(&self, py: Python<'_>) -> PyResult<()> {
        if self.state.with(py, |s| std::mem::take(&mut s.write_watch)) {
            self.loop_.remove_watcher(py, self.fd, Side::Write)?;
        }
        Ok(())
    }

    /// Bytes a send in flight still reads stay until it completes (cancelled here);
    /// `_on_sent` then drops them.
    fn context(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state
            .with(py, |s| s.context.as_ref().map(|c| c.clone_ref(py)))
    }

    fn drop_queue(&self, py: Python<'_>) -> PyResult<()> {
        let (dropped, in_flight) = self.state.with(py, |s| {
            s.aborted = true;
            let in_flight = s.send_token;
            let mut sent = write::Sent::default();
            if in_flight.is_none() && !s.full {
                // These bytes were gathered for the next wait; asyncio would have handed
                // them to the kernel inside write() (not to a full socket, which its
                // buffer waits on). Give the kernel what it takes now, as it would have
                // then; drop the rest.
                sent = s.send_queued(py, self.fd).1;
            }
            s.forget_queue();
            let rest = match in_flight {
                Some(_) => VecDeque::new(),
                None => std::mem::take(&mut s.queue),
            };
            ((rest, sent), in_flight)
        });
        drop(dropped);
        self.stop_writing(py)?;
        match in_flight {
            Some(token) => self.loop_.send_cancel(py, token),
            None => Ok(()),
        }
    }
}

impl StreamCore {
    /// Installs `_read_ready` as the fd's reader (its writer, `_write_ready`, is there
    /// only while the socket is full: `State::full`). On a TCP socket it stays armed
    /// across readiness: a receive that filled what it asked for says the socket may hold
    /// more (`read_again`), and one that did not has drained it. A Unix socket's short
    /// receive may not have (it stops at a message that carried fds), so there the reader
    /// is re-armed after each readiness, level-triggered as a selector is.
    fn watch_read(&self, slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let cb = slf.getattr(intern!(py, "_read_ready"))?.unbind();
        let context = self.context(py);
        if self.armed_once {
            self.loop_.add_stream_reader(py, self.fd, cb, context)
        } else {
            self.loop_
                .add_watcher(py, self.fd, Side::Read, cb, Args::Zero, context)
                .map(drop)
        }
    }

    /// A receive filled what it asked for: a reader armed once runs again next iteration.
    fn read_again(&self, py: Python<'_>) {
        if self.armed_once {
            self.loop_.read_again(py, self.fd);
        }
    }

    /// `transport._fatal_error(exc, message)` on the Python side: reports (or logs an
    /// `OSError` in debug mode) and force-closes.
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        match self.shell(py) {
            Some(shell) => {
                shell.call_method1(
                    py,
                    intern!(py, "_fatal_error"),
                    (err.into_value(py), message),
                )?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A protocol callback's outcome, as asyncio's read path takes it: an exit goes up,
    /// any other exception is fatal to the transport (`None`: reading stops here).
    fn checked(
        &self,
        py: Python<'_>,
        res: PyResult<Py<PyAny>>,
        message: &str,
    ) -> PyResult<Option<Py<PyAny>>> {
        match res {
            Ok(v) => Ok(Some(v)),
            Err(e) if is_exit(&e, py) => Err(e),
            Err(e) => self.fatal(py, e, message).map(|()| None),
        }
    }
}

#[pymethods]
impl StreamCore {
    #[new]
    #[pyo3(signature = (loop_, shell, fd, protocol, context=None))]
    fn new(
        py: Python<'_>,
        loop_: &Bound<'_, PyAny>,
        shell: Py<PyAny>,
        fd: i32,
        protocol: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let loop_ = LoopHandle::of(loop_)?;
        let buffered = protocol.bind(py).is_instance(buffered_protocol_type(py)?)?;
        Ok(StreamCore {
            fd,
            loop_,
            armed_once: sock::is_tcp(fd),
            state: GilCell::new(State {
                base: Base::new(protocol, shell),
                buffered,
                eof: false,
                queue: VecDeque::new(),
                queued: 0,
                empty_waiter: None,
                big_reads: false,
                maybe_more: false,
                send_token: None,
                flush_scheduled: false,
                full: false,
                sending: 0,
                write_watch: false,
                write_timer: false,
                refused: 0,
                eof_after_send: false,
                send_reset: false,
                aborted: false,
                hdr: Box::default(),
                context: context.filter(|c| !c.is_none(py)),
            }),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(self.loop_.obj())?;
        if let Some(s) = self.state.peek_for_gc(&visit) {
            for o in [&s.base.protocol, &s.base.shell, &s.empty_waiter, &s.context]
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
            self.state.with(py, |s| {
                (
                    s.base.protocol.take(),
                    s.base.shell.take(),
                    s.empty_waiter.take(),
                    std::mem::take(&mut s.queue),
                    s.context.take(),
                )
            })
        });
        drop(taken);
    }

    // ----- reading -----

    /// Starts watching for data (scheduled right after `connection_made`).
    fn _start_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        if slf.get().is_reading(slf.py()) {
            slf.get().start_read(slf)?;
        }
        Ok(())
    }

    /// The fd is readable: one receive, handed to the protocol.
    fn _read_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (lost, buffered, big, protocol) = this.state.with(py, |s| {
            (
                s.base.conn_lost,
                s.buffered,
                s.big_reads,
                s.base.protocol.as_ref().map(|p| p.clone_ref(py)),
            )
        });
        let Some(protocol) = protocol else {
            return Ok(());
        };
        if lost > 0 {
            return Ok(());
        }
        if buffered {
            return this.read_buffered(slf, protocol);
        }
        let got = match this.recv_chunk(py, big) {
            Ok(got) => got,
            Err(e) if is_exit(&e, py) => return Err(e),
            Err(e) => return this.fatal(py, e, "Fatal read error on socket transport"),
        };
        let data = match got {
            Ok(d) => d,
            Err(e) if would_block(&e) => return Ok(()),
            Err(e) => return this.fatal(py, os_error(&e), "Fatal read error on socket transport"),
        };
        let n = data.as_bytes().len();
        if n == 0 {
            return this.on_eof(slf, protocol);
        }
        if n >= MAX_READ {
            this.read_again(py);
        }
        this.state.with(py, |s| s.big_reads = n >= BIG_READ);
        this.data_received(py, &protocol, data)
    }

    // ----- writing -----

    fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::write_data(slf, data)
    }

    fn writelines(slf: &Bound<'_, Self>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (eof, sendfile) = this.state.with(py, |s| (s.eof, s.empty_waiter.is_some()));
        if eof {
            return Err(PyRuntimeError::new_err(
                "Cannot call writelines() after write_eof()",
            ));
        }
        if sendfile {
            return Err(PyRuntimeError::new_err(
                "unable to writelines; sendfile is in progress",
            ));
        }
        // One write of the whole list, as asyncio makes one send of it (3.10/3.11 join the
        // items and call write(); 3.12+ hand them all to one sendmsg). Item by item, a
        // reset arriving between two sends failed a writelines() that asyncio completes.
        let mut items = list_of_data.try_iter()?.collect::<PyResult<Vec<_>>>()?;
        if writelines_skips_empty() {
            // 3.14+: `[memoryview(data) for data in list_of_data if data]`.
            let mut kept = Vec::with_capacity(items.len());
            for item in items {
                if item.is_truthy()? {
                    kept.push(item);
                }
            }
            items = kept;
        }
        if items.len() < 2 {
            for item in &items {
                Self::write(slf, item)?;
            }
            return Ok(());
        }
        for item in &items {
            if !(item.is_instance_of::<PyBytes>()
                || item.is_instance_of::<PyByteArray>()
                || item.is_instance_of::<PyMemoryView>())
            {
                return Self::write(slf, item); // write()'s TypeError
            }
        }
        let joined = PyBytes::new(py, b"").call_method1(intern!(py, "join"), (items,))?;
        Self::write(slf, &joined)
    }

    /// Just before the loop waits: one `sendmsg` of everything queued (up to
    /// 1024 slices), submitted with the wait. At most one send is in flight.
    fn _flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::flush_ring(slf)
    }

    /// The send in flight ended with `result` (bytes sent, or `-errno`).
    /// The completion is queued as the loop's own handle; with a transport context, what
    /// it tells the protocol (`resume_writing`, `connection_lost`) runs in that context.
    fn _on_sent(slf: &Bound<'_, Self>, result: i32) -> PyResult<()> {
        match slf.get().context(slf.py()) {
            Some(context) => run_in_context(context.bind(slf.py()), || Self::on_sent(slf, result)),
            None => Self::on_sent(slf, result),
        }
    }

    /// The fd's writer, or its timer: the socket that was full may have room.
    fn _write_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::write_ready(slf)
    }

    fn write_eof(&self, py: Python<'_>) -> PyResult<()> {
        let shut = self.state.with(py, |s| {
            if s.base.closing || s.eof {
                return false;
            }
            s.eof = true;
            s.queue.is_empty()
        });
        if shut {
            sock::shutdown_write(self.fd).map_err(|e| os_error(&e))?;
        }
        Ok(())
    }

    fn can_write_eof(&self) -> bool {
        true
    }

    // ----- closing -----

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Bytes gathered for the next wait and none in flight: asyncio would have
        // handed them to the kernel inside write() (unless the socket was full), and its
        // close() sees an empty buffer if the kernel took them all. Hand them over now, to
        // decide the same way.
        let sent = self.state.with(py, |s| {
            if !s.base.closing && s.send_token.is_none() && !s.full && !s.queue.is_empty() {
                s.send_queued(py, self.fd).1
            } else {
                write::Sent::default()
            }
        });
        let res = self.close_transport(py);
        drop(sent);
        res
    }

    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.force_close(py, py.None())
    }

    fn _force_close(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        self.force_close(py, exc)
    }

    /// After `connection_lost`: forget the protocol, the queue and the Python transport, so
    /// no cycle outlives the connection. Returns the sendfile waiter, if one was pending.
    fn _detach(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        // Errors (a closed loop) leave nothing to stop.
        let _ = self.stop_writing(py);
        let (taken, waiter) = self.state.with(py, |s| {
            s.forget_queue();
            // Bytes a send in flight still reads stay until `_on_sent`.
            let queue = if s.send_token.is_some() {
                VecDeque::new()
            } else {
                std::mem::take(&mut s.queue)
            };
            (
                (s.base.protocol.take(), s.base.shell.take(), queue),
                s.empty_waiter.take(),
            )
        });
        drop(taken);
        waiter
    }

    // ----- state -----

    fn is_closing(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.closing)
    }

    fn is_reading(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.is_reading())
    }

    fn pause_reading(&self, py: Python<'_>) -> PyResult<()> {
        self.pause_reads(py)
    }

    fn resume_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if this.state.with(py, |s| s.base.resume_reading()) {
            this.start_read(slf)?;
        }
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.protocol(py)
    }

    fn set_protocol(slf: &Bound<'_, Self>, protocol: Py<PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let buffered = protocol.bind(py).is_instance(buffered_protocol_type(py)?)?;
        let (old, switched) = this.state.with(py, |s| {
            let switched = s.buffered != buffered;
            s.buffered = buffered;
            (s.base.protocol.replace(protocol), switched)
        });
        drop(old);
        if switched && this.is_reading(py) {
            // Change how this transport reads (receive vs readiness, see `start_read`).
            this.stop_reading(py)?;
            this.start_read(slf)?;
        }
        Ok(())
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> usize {
        self.state.with(py, |s| s.queued)
    }

    fn get_write_buffer_limits(&self, py: Python<'_>) -> (usize, usize) {
        self.state.with(py, |s| s.base.marks.limits())
    }

    #[pyo3(signature = (high = None, low = None))]
    fn set_write_buffer_limits(
        &self,
        py: Python<'_>,
        high: Option<&Bound<'_, PyAny>>,
        low: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (high, low) = requested_limits(high, low)?;
        self.state.with(py, |s| s.base.marks.set(high, low))?;
        self.maybe_pause_protocol(py)
    }

    // ----- for the Python side: loop.sendfile, repr, tests -----

    fn _make_empty_waiter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.state.with(py, |s| s.empty_waiter.is_some()) {
            return Err(PyRuntimeError::new_err("Empty waiter is already set"));
        }
        let fut = self
            .loop_
            .obj()
            .call_method0(py, intern!(py, "create_future"))?;
        let empty = self.state.with(py, |s| {
            s.empty_waiter = Some(fut.clone_ref(py));
            s.queue.is_empty()
        });
        if empty {
            fut.call_method1(py, intern!(py, "set_result"), (py.None(),))?;
        }
        Ok(fut)
    }

    fn _reset_empty_waiter(&self, py: Python<'_>) {
        let w = self.state.with(py, |s| s.empty_waiter.take());
        drop(w);
    }

    #[getter]
    fn _empty_waiter(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state
            .with(py, |s| s.empty_waiter.as_ref().map(|w| w.clone_ref(py)))
    }

    #[getter]
    fn _conn_lost(&self, py: Python<'_>) -> u32 {
        self.state.with(py, |s| s.base.conn_lost)
    }

    #[getter]
    fn _eof(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.eof)
    }

    #[getter]
    fn _paused(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.paused)
    }

    #[getter]
    fn _protocol_paused(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.marks.paused())
    }
}
