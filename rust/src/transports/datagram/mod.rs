//! `DatagramCore`: the per-datagram half of a UDP or Unix datagram transport.
//! Owns: receiving into the protocol (`datagram_received` / `error_received`), `sendto`
//! and its queue of (datagram, address), the write-buffer count the water marks compare
//! with. Not: the water marks and the `close`/`_force_close`/`pause_reading` state machine
//! shared with the stream core (`common.rs`); the transport object Python sees
//! (`rsloop._transports.DatagramTransport`: extra info, repr, `connection_lost` and socket
//! close, error reporting), turning addresses into Python objects (`transports/sockaddr.rs`).
//!
//! Behaviour is asyncio's `_SelectorDatagramTransport` step for step, for the running
//! Python's version (the shell passes what differs: empty datagrams and the write-buffer
//! count): one `recvfrom` per readiness, a datagram that can leave at once leaves at once,
//! the rest queues with its address and leaves on writability. Addresses of the three
//! native families are converted here; any other family or address form goes through the
//! Python socket's own `recvfrom`/`send`/`sendto`, so its errors are Python's.

use std::collections::VecDeque;

use pyo3::exceptions::{PyAttributeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};
use pyo3::PyTraverseError;

mod send;

use self::send::{classify, native_result, Dest, Payload, Queued, Sent};
use super::addrs::AddrCache;
use super::common::{
    is_exit, requested_limits, with_scratch, would_block, Base, Chunk, TransportCore, WriteBuffer,
    LOST_WRITES_LOG_THRESHOLD, MAX_READ,
};
use super::sockaddr;
use crate::core::handle::LoopHandle;
use crate::core::watchers::Side;
use crate::errors::os_error;
use crate::ffi::gil::GilCell;
use crate::handles::Args;
use crate::sys::sock;
use crate::sys::sockaddr::SockAddr;

const WRITE_ERROR: &str = "Fatal write error on datagram transport";
/// Datagrams read per readiness event at most: a socket with many queued costs one loop
/// iteration per batch instead of one per datagram, while one busy socket cannot hold the
/// loop for long.
const READ_BATCH: usize = 16;
const READ_ERROR: &str = "Fatal read error on datagram transport";

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

struct State {
    /// Protocol, Python transport, closing/paused/lost flags, water marks.
    base: Base,
    /// The Python socket, for what is left to it (cleared after `connection_lost`).
    sock: Option<Py<PyAny>>,
    /// The `remote_addr` given at creation, if truthy.
    address: Option<Py<PyAny>>,
    writing: bool,
    queue: VecDeque<Queued>,
    /// Bytes in the queue.
    queued: usize,
    /// asyncio's `_buffer_size` (3.11+): `len(data)` (+ 8 from 3.13) in, bytes out (+ 8
    /// from 3.14).
    counter: i64,
    /// Recent peers' address objects: a repeat sender gets the same object, and a reply
    /// to it skips the parsing.
    addrs: AddrCache,
}

/// The per-datagram core of a datagram transport.
#[pyclass(frozen, module = "rsloop._rsloop", name = "DatagramCore")]
pub struct DatagramCore {
    fd: i32,
    family: i32,
    /// The socket had a peer at creation: asyncio then uses `send`, never `sendto`.
    connected: bool,
    /// 3.13+: empty datagrams are sent, not dropped.
    allow_empty: bool,
    /// `None`: the write-buffer size is the queued bytes (3.10); `Some(n)`: asyncio's
    /// counter, with `n` header bytes per datagram queued (0 on 3.11/3.12, 8 from 3.13).
    size_header: Option<i64>,
    /// The header bytes the counter gives back per datagram sent: 0 on 3.13, which counts
    /// them only in; from 3.14 (`_header_size`) as many as it took.
    size_header_out: i64,
    /// 3.15+: a forced close (`abort()`, a fatal error) that drops the queue sets the
    /// counter back to 0; before, it keeps what the queue held.
    size_reset_on_drop: bool,
    loop_: LoopHandle,
    state: GilCell<State>,
}

fn native_family(family: i32) -> bool {
    matches!(family, libc::AF_INET | libc::AF_INET6 | libc::AF_UNIX)
}

impl TransportCore for DatagramCore {
    fn event_loop(&self) -> &LoopHandle {
        &self.loop_
    }

    fn with_base<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Base, WriteBuffer) -> R) -> R {
        self.state.with(py, |s| {
            let buf = WriteBuffer {
                size: i128::from(self.size(s)),
                empty: s.queue.is_empty(),
            };
            f(&mut s.base, buf)
        })
    }

    fn stop_reading(&self, py: Python<'_>) -> PyResult<()> {
        self.unwatch(py, Side::Read)
    }

    fn stop_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.unwatch(py, Side::Write)
    }

    /// asyncio clears the deque but not its `_buffer_size` (3.11+).
    fn drop_queue(&self, py: Python<'_>) -> PyResult<()> {
        let reset = self.size_reset_on_drop;
        let dropped = self.state.with(py, |s| {
            s.queued = 0;
            if reset && !s.queue.is_empty() {
                s.counter = 0;
            }
            std::mem::take(&mut s.queue)
        });
        drop(dropped);
        self.unwatch(py, Side::Write)
    }
}

impl DatagramCore {
    fn watch(&self, slf: &Bound<'_, Self>, side: Side) -> PyResult<()> {
        let py = slf.py();
        let name = match side {
            Side::Read => intern!(py, "_read_ready"),
            Side::Write => intern!(py, "_sendto_ready"),
        };
        let cb = slf.getattr(name)?.unbind();
        self.loop_
            .add_watcher(py, self.fd, side, cb, Args::Zero, None)?;
        if side == Side::Write {
            self.state.with(py, |s| s.writing = true);
        }
        Ok(())
    }

    fn unwatch(&self, py: Python<'_>, side: Side) -> PyResult<()> {
        if side == Side::Write {
            self.state.with(py, |s| s.writing = false);
        }
        self.loop_.remove_watcher(py, self.fd, side)?;
        Ok(())
    }

    /// `transport._fatal_error(exc, message)` on the Python side.
    /// After `connection_lost` (only `sendto` gets here then) asyncio's `_fatal_error`
    /// fails on its cleared `_loop`; so does this.
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        let Some(shell) = self.shell(py) else {
            let lost = PyAttributeError::new_err(
                "'NoneType' object has no attribute 'call_exception_handler'",
            );
            lost.set_context(py, Some(err));
            return Err(lost);
        };
        shell.call_method1(
            py,
            intern!(py, "_fatal_error"),
            (err.into_value(py), message),
        )?;
        Ok(())
    }

    fn error_received(&self, py: Python<'_>, err: PyErr) -> PyResult<()> {
        if let Some(p) = self.protocol(py) {
            p.call_method1(py, intern!(py, "error_received"), (err.into_value(py),))?;
        }
        Ok(())
    }

    fn size(&self, s: &State) -> i64 {
        match self.size_header {
            None => s.queued as i64,
            Some(_) => s.counter,
        }
    }

    /// Where `addr` sends to (the cached kernel form when `addr` is the last address).
    fn dest(&self, py: Python<'_>, addr: &Bound<'_, PyAny>) -> Dest {
        if self.connected {
            return Dest::Peer;
        }
        // `None` (an unnamed sender's address) is for Python's socket to refuse.
        if addr.is_none() {
            return Dest::Python(addr.clone().unbind());
        }
        let cached = self.state.with(py, |s| s.addrs.sockaddr_for(addr));
        if let Some(sa) = cached {
            return Dest::Addr(sa);
        }
        if !native_family(self.family) {
            return Dest::Python(addr.clone().unbind());
        }
        match sockaddr::from_python(self.family, addr) {
            Some(sa) => {
                let obj = addr.clone().unbind();
                let old = self.state.with(py, |s| s.addrs.remember_sent(sa, obj));
                drop(old);
                Dest::Addr(sa)
            }
            None => Dest::Python(addr.clone().unbind()),
        }
    }

    /// The Python object for a received address (the cached one when it repeats).
    fn addr_object(&self, py: Python<'_>, addr: &SockAddr) -> PyResult<Py<PyAny>> {
        let cached = self.state.with(py, |s| s.addrs.object_for(py, addr));
        if let Some(obj) = cached {
            return Ok(obj);
        }
        let obj = sockaddr::to_python(py, addr)?.unbind();
        let keep = obj.clone_ref(py);
        let old = self
            .state
            .with(py, |s| s.addrs.remember_received(*addr, keep));
        drop(old);
        Ok(obj)
    }

    /// A socket method called in Python (`send`/`sendto`/`recvfrom`). After
    /// `connection_lost` the socket is gone, as asyncio's `self._sock` is `None`.
    fn sock_call<'py>(
        &self,
        py: Python<'py>,
        method: &Bound<'py, PyString>,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sock = self
            .state
            .with(py, |s| s.sock.as_ref().map(|x| x.clone_ref(py)));
        match sock {
            Some(sock) => sock.bind(py).call_method1(method, args),
            None => Err(PyAttributeError::new_err(format!(
                "'NoneType' object has no attribute '{}'",
                method.to_str()?
            ))),
        }
    }

    /// Whether the Python socket no longer holds `fd` (closed or detached under the
    /// transport): the number may already name another socket, and a native send on it
    /// would reach that socket's peer (a closing transport's queue, sent when a new
    /// transport on the reused number re-arms the write watch; found by the `datagram`
    /// fuzz target). asyncio's sends go through the socket object (closed: `EBADF`, for
    /// `error_received`); ours then do too. Reads need no check: asyncio refuses a second
    /// transport on an fd whose transport is not closing, and closing stops reading.
    /// Asked only of a closing transport (its queue is what outlives the socket), so an
    /// open transport's sends make no Python call.
    fn detached(&self, py: Python<'_>) -> bool {
        let sock = self.state.with(py, |s| {
            s.base
                .closing
                .then(|| s.sock.as_ref().map(|x| x.clone_ref(py)))
                .flatten()
        });
        let Some(sock) = sock else {
            return false; // gone after connection_lost: `sock_call` raises as asyncio
        };
        sock.bind(py)
            .call_method0(intern!(py, "fileno"))
            .and_then(|f| f.extract::<i32>())
            .map_or(true, |f| f != self.fd)
    }

    /// One send of `data` to `dest`; `addr` is the address object asyncio would pass.
    /// `foreign`: send this object through the Python socket instead (a buffer we cannot
    /// read, or no socket any more).
    fn send_one(
        &self,
        py: Python<'_>,
        data: &[u8],
        foreign: Option<&Bound<'_, PyAny>>,
        dest: &Dest,
        addr: &Bound<'_, PyAny>,
    ) -> PyResult<Sent> {
        let through_python = |obj: Bound<'_, PyAny>| -> PyResult<Sent> {
            let res = match dest {
                Dest::Peer => self.sock_call(py, intern!(py, "send"), (obj,)),
                _ => self.sock_call(py, intern!(py, "sendto"), (obj, addr)),
            };
            match res {
                Ok(_) => Ok(Sent::Done),
                Err(e) => classify(py, e),
            }
        };
        if let Some(obj) = foreign {
            return through_python(obj.clone());
        }
        if self.detached(py) {
            return through_python(PyBytes::new(py, data).into_any());
        }
        match dest {
            Dest::Peer => Ok(native_result(sock::send(self.fd, data))),
            Dest::Addr(sa) => Ok(native_result(sock::send_to(self.fd, data, sa))),
            Dest::Python(_) => through_python(PyBytes::new(py, data).into_any()),
        }
    }

    fn log_lost_write(py: Python<'_>) -> PyResult<()> {
        let logger = LOGGER.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio.log")?.getattr("logger")?.unbind())
        })?;
        logger.call_method1(
            py,
            intern!(py, "warning"),
            ("socket.send() raised exception.",),
        )?;
        Ok(())
    }

    /// A receive through Python's `socket.recvfrom` (a family not converted here).
    fn read_python(&self, py: Python<'_>, protocol: Py<PyAny>) -> PyResult<()> {
        match self.sock_call(py, intern!(py, "recvfrom"), (MAX_READ,)) {
            Ok(pair) => {
                let (data, addr): (Py<PyAny>, Py<PyAny>) = pair.extract()?;
                protocol.call_method1(py, intern!(py, "datagram_received"), (data, addr))?;
                Ok(())
            }
            Err(e) => match classify(py, e)? {
                Sent::Done | Sent::WouldBlock => Ok(()),
                Sent::Os(e) => self.error_received(py, e),
                Sent::Fatal(e) => self.fatal(py, e, READ_ERROR),
            },
        }
    }
}

#[pymethods]
impl DatagramCore {
    #[new]
    #[pyo3(signature = (loop_, shell, sock, fd, family, protocol, address, connected, allow_empty, size_header, size_header_out=0, size_reset_on_drop=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        loop_: &Bound<'_, PyAny>,
        shell: Py<PyAny>,
        sock: Py<PyAny>,
        fd: i32,
        family: i32,
        protocol: Py<PyAny>,
        address: Option<Py<PyAny>>,
        connected: bool,
        allow_empty: bool,
        size_header: Option<i64>,
        size_header_out: i64,
        size_reset_on_drop: bool,
    ) -> PyResult<Self> {
        Ok(DatagramCore {
            fd,
            family,
            connected,
            allow_empty,
            size_header,
            size_header_out,
            size_reset_on_drop,
            loop_: LoopHandle::of(loop_)?,
            state: GilCell::new(State {
                base: Base::new(protocol, shell),
                sock: Some(sock),
                address,
                writing: false,
                queue: VecDeque::new(),
                queued: 0,
                counter: 0,
                addrs: AddrCache::default(),
            }),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(self.loop_.obj())?;
        if let Some(s) = self.state.peek_for_gc(&visit) {
            for o in [&s.base.protocol, &s.base.shell, &s.sock, &s.address]
                .into_iter()
                .flatten()
            {
                visit.call(o)?;
            }
            s.addrs.traverse(&visit)?;
            for q in &s.queue {
                if let Chunk::Shared(b) = &q.chunk {
                    visit.call(b)?;
                }
                if let Dest::Python(a) = &q.dest {
                    visit.call(a)?;
                }
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = Python::attach(|py| self.state.with(py, |s| (take_all(s), s.address.take())));
        drop(taken);
    }

    // ----- reading -----

    /// Starts watching for datagrams (scheduled right after `connection_made`).
    fn _start_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        if slf.get().is_reading(slf.py()) {
            slf.get().watch(slf, Side::Read)?;
        }
        Ok(())
    }

    /// The fd is readable: `recvfrom` and hand each datagram to the protocol, up to
    /// [`READ_BATCH`] of them while the socket has more and the transport still reads
    /// (asyncio takes one per readiness event; libuv, under uvloop, up to 32).
    fn _read_ready(&self, py: Python<'_>) -> PyResult<()> {
        for i in 0..READ_BATCH {
            let (lost, reading, protocol) = self.state.with(py, |s| {
                (
                    s.base.conn_lost,
                    s.base.is_reading(),
                    s.base.protocol.as_ref().map(|p| p.clone_ref(py)),
                )
            });
            // The first read is asyncio's, whatever the flags; later ones stop once the
            // protocol paused or closed the transport.
            let Some(protocol) = protocol.filter(|_| lost == 0 && (i == 0 || reading)) else {
                return Ok(());
            };
            if !native_family(self.family) {
                return self.read_python(py, protocol);
            }
            let got = with_scratch(|buf| {
                sock::recv_from(self.fd, buf).map(|(n, addr)| (PyBytes::new(py, &buf[..n]), addr))
            });
            let (data, addr) = match got {
                Ok(got) => got,
                Err(e) if would_block(&e) => return Ok(()),
                Err(e) => return self.error_received(py, os_error(&e)),
            };
            let addr = match self.addr_object(py, &addr) {
                Ok(a) => a,
                Err(e) if is_exit(&e, py) => return Err(e),
                Err(e) => return self.fatal(py, e, READ_ERROR),
            };
            // As asyncio: an exception from the protocol goes to the loop's handler (the
            // datagrams after it wait for the next readiness event).
            protocol.call_method1(py, intern!(py, "datagram_received"), (data, addr))?;
        }
        Ok(())
    }

    // ----- writing -----

    #[pyo3(signature = (data, addr = None))]
    fn sendto(
        slf: &Bound<'_, Self>,
        data: &Bound<'_, PyAny>,
        addr: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let payload = Payload::of(data)?;
        if !this.allow_empty && payload.is_empty(data)? {
            return Ok(());
        }
        let none = py.None().into_bound(py);
        let mut addr = addr.unwrap_or(&none).clone();
        let (address, lost, idle, gone) = this.state.with(py, |s| {
            (
                s.address.as_ref().map(|a| a.clone_ref(py)),
                s.base.conn_lost,
                s.queue.is_empty(),
                s.sock.is_none(),
            )
        });
        if let Some(address) = &address {
            let address = address.bind(py);
            if !(addr.is_none() || address.is(&addr) || address.eq(&addr)?) {
                return Err(PyValueError::new_err(format!(
                    "Invalid address: must be None or {}",
                    address.str()?
                )));
            }
            addr = address.clone();
            if lost > 0 {
                if lost >= LOST_WRITES_LOG_THRESHOLD {
                    Self::log_lost_write(py)?;
                }
                this.state.with(py, |s| s.base.conn_lost += 1);
                return Ok(());
            }
        }
        let py_len = payload.py_len(data)?;
        let dest = this.dest(py, &addr);
        if idle {
            let (bytes, foreign): (&[u8], _) = match &payload {
                _ if gone => (&[], Some(data)),
                Payload::Bytes(b) => (b.as_bytes(), None),
                Payload::Copied(v) => (v, None),
                Payload::Foreign(obj) => (&[], Some(obj)),
            };
            match this.send_one(py, bytes, foreign, &dest, &addr)? {
                Sent::Done => return Ok(()),
                Sent::WouldBlock => this.watch(slf, Side::Write)?,
                Sent::Os(e) => return this.error_received(py, e),
                Sent::Fatal(e) => return this.fatal(py, e, WRITE_ERROR),
            }
        }
        let chunk = payload.into_chunk()?;
        let header = this.size_header.unwrap_or(0);
        this.state.with(py, |s| {
            s.queued += chunk.bytes(py).len();
            s.counter += py_len as i64 + header;
            s.queue.push_back(Queued { chunk, dest });
        });
        this.maybe_pause_protocol(py)
    }

    /// The fd is writable: send what is queued, in order, until the kernel pushes back.
    fn _sendto_ready(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            let item = self.state.with(py, |s| {
                let q = s.queue.pop_front()?;
                let n = q.chunk.bytes(py).len();
                s.queued -= n;
                s.counter -= n as i64 + self.size_header_out;
                Some(q)
            });
            let Some(item) = item else { break };
            let addr = match &item.dest {
                Dest::Python(a) => a.clone_ref(py),
                _ => py.None(),
            };
            let sent = self.send_one(py, item.chunk.bytes(py), None, &item.dest, addr.bind(py))?;
            match sent {
                Sent::Done => drop(item),
                Sent::WouldBlock => {
                    self.state.with(py, |s| {
                        let n = item.chunk.bytes(py).len();
                        s.queued += n;
                        s.counter += n as i64 + self.size_header_out;
                        s.queue.push_front(item);
                    });
                    break;
                }
                Sent::Os(e) => {
                    drop(item);
                    return self.error_received(py, e);
                }
                Sent::Fatal(e) => {
                    drop(item);
                    return self.fatal(py, e, WRITE_ERROR);
                }
            }
        }
        self.maybe_resume_protocol(py)?;
        let (empty, closing) = self
            .state
            .with(py, |s| (s.queue.is_empty(), s.base.closing));
        if empty {
            self.unwatch(py, Side::Write)?;
            if closing {
                self.connection_lost_now(py)?;
            }
        }
        Ok(())
    }

    // ----- closing -----

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.close_transport(py)
    }

    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.force_close(py, py.None())
    }

    fn _force_close(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        self.force_close(py, exc)
    }

    /// After `connection_lost`: forget the protocol, the socket, the queue and the Python
    /// transport, so no cycle outlives the transport. The remote address stays: `sendto`
    /// still checks against it, as asyncio's does.
    fn _detach(&self, py: Python<'_>) {
        let taken = self.state.with(py, |s| {
            s.queued = 0;
            take_all(s)
        });
        drop(taken);
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
        let this = slf.get();
        if this.state.with(slf.py(), |s| s.base.resume_reading()) {
            this.watch(slf, Side::Read)?;
        }
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.protocol(py)
    }

    fn set_protocol(&self, py: Python<'_>, protocol: Py<PyAny>) {
        let old = self.state.with(py, |s| s.base.protocol.replace(protocol));
        drop(old);
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> i64 {
        self.state.with(py, |s| self.size(s))
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

    // ----- for the Python side: repr, tests -----

    #[getter]
    fn _conn_lost(&self, py: Python<'_>) -> u32 {
        self.state.with(py, |s| s.base.conn_lost)
    }

    #[getter]
    fn _paused(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.paused)
    }

    #[getter]
    fn _protocol_paused(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.base.marks.paused())
    }

    #[getter]
    fn _writing(&self, py: Python<'_>) -> bool {
        self.state.with(py, |s| s.writing)
    }
}

/// The state's Python objects but the address, taken out to drop outside the cell.
type Taken = ([Option<Py<PyAny>>; 3], AddrCache, VecDeque<Queued>);

fn take_all(s: &mut State) -> Taken {
    (
        [s.base.protocol.take(), s.base.shell.take(), s.sock.take()],
        s.addrs.take(),
        std::mem::take(&mut s.queue),
    )
}
