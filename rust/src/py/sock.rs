//! The hot half of `sock_recv`, `sock_recv_into` and `sock_sendall`: one native call per
//! attempt, and a native waiter that retries on readiness.
//! Owns: the syscall attempts, the parked future and its fd watcher. Not: the coroutines,
//! their checks and every case this file declines (`rsloop/_sock.py`), the watcher table
//! (`core/watchers.rs`).
//!
//! Same steps as asyncio's `SelectorEventLoop` (`selector_events.py`): try the syscall; if
//! it would block, create a future, refuse an fd a live transport owns, install a reader
//! (writer) whose callback retries unless the future is done (so a cancelled receive never
//! consumes bytes), and remove that watcher, only while it is still ours, when the future
//! completes or is cancelled. The difference is who runs the steps: the callback is a
//! [`SockWaiter`] that retries in Rust, unwatches itself before completing the future, and
//! takes back its done callback (which only matters on cancellation).
//!
//! A call is taken here only when the outcome is the same as asyncio's by construction: a
//! plain `socket.socket` (not a subclass, whose methods may be overridden), non-blocking,
//! outside debug mode, with an `int` size or a contiguous byte buffer. Anything else
//! returns `NotImplemented` and `rsloop/_sock.py` runs asyncio's code.

use std::io;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyInt, PyTuple};
use pyo3::PyTraverseError;

use super::futures::new_future;
use super::loop_::Loop;
use crate::core::watchers::Side;
use crate::errors::os_error;
use crate::ffi::buffer::{recv_bytes, recv_into_export, send_export};
use crate::ffi::gil::GilCell;
use crate::handles::{Args, Handle};
use crate::sys::sock;
use crate::transports::common::would_block;

static SOCKET_TYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn socket_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    SOCKET_TYPE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("socket")?.getattr("socket")?.unbind())
        })
        .map(|t| t.bind(py))
}

/// The fd of a socket this file may handle, or `None` when `rsloop/_sock.py` must: debug
/// mode (its non-blocking check), a subclass or another type, a blocking socket (asyncio
/// would block in `sock.recv`; doing so here would hold the GIL).
fn plain_socket_fd(lp: &Bound<'_, Loop>, sock: &Bound<'_, PyAny>) -> PyResult<Option<i32>> {
    let py = lp.py();
    if lp.get().core.debug() || !sock.get_type().is(socket_type(py)?) {
        return Ok(None);
    }
    if sock.call_method0(intern!(py, "getblocking"))?.is_truthy()? {
        return Ok(None);
    }
    Ok(Some(sock_fileno(sock)?))
}

/// `sock.fileno()` (-1 once closed: the syscall then fails with `EBADF`, as the socket's
/// own method would).
fn sock_fileno(sock: &Bound<'_, PyAny>) -> PyResult<i32> {
    sock.call_method0(intern!(sock.py(), "fileno"))?.extract()
}

/// What a parked call still has to do.
enum Op {
    /// `sock.recv(n)`.
    Recv(usize),
    /// `sock.recv_into(buf)`: the buffer is exported again for each attempt, as the socket
    /// method does.
    RecvInto(Py<PyAny>),
    /// `sock_sendall` of a `bytes`, `sent` bytes of it gone.
    SendBytes { data: Py<PyBytes>, sent: usize },
    /// `sock_sendall` of another buffer: its export is held until the call ends, as
    /// asyncio's `memoryview(data)` holds it (a `bytearray` cannot be resized meanwhile,
    /// and what the caller writes into it before it leaves is what is sent).
    SendBuffer { data: PyUntypedBuffer, sent: usize },
}

struct Parked {
    fut: Py<PyAny>,
    sock: Py<PyAny>,
    /// Our watcher's handle, set right after the watcher is installed.
    handle: Option<Py<Handle>>,
    op: Op,
}

/// What one attempt found.
enum Attempt {
    /// Not ready after all (`EAGAIN`, `EINTR`, or a partial send): keep waiting.
    Wait,
    /// Complete the future with this result.
    Done(Py<PyAny>),
    /// Fail the future with this exception.
    Failed(PyErr),
}

/// The watcher callback and done callback of one parked `sock_*` call. Called with no
/// argument, the fd is ready; with one (the future), the future is done.
#[pyclass(frozen, module = "rsloop._rsloop", name = "SockWaiter")]
pub struct SockWaiter {
    loop_: Py<Loop>,
    fd: i32,
    side: Side,
    /// `None` once the call ended.
    state: GilCell<Option<Parked>>,
}

#[pymethods]
impl SockWaiter {
    #[pyo3(signature = (*args))]
    fn __call__(slf: &Bound<'_, Self>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        if args.is_empty() {
            Self::on_ready(slf)
        } else {
            Self::on_done(slf)
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        if let Some(Some(p)) = self.state.peek_for_gc(&visit) {
            visit.call(&p.fut)?;
            visit.call(&p.sock)?;
            if let Some(h) = &p.handle {
                visit.call(h)?;
            }
            match &p.op {
                Op::RecvInto(buf) => visit.call(buf)?,
                Op::SendBytes { data, .. } => visit.call(data)?,
                Op::Recv(_) | Op::SendBuffer { .. } => {}
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = Python::attach(|py| self.state.with(py, Option::take));
        drop(taken);
    }
}

impl SockWaiter {
    /// The watcher fired: one more attempt, unless the future is already done (cancelled:
    /// the data stays in the kernel for the next receive; the done callback unwatches).
    fn on_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let refs = this.state.with(py, |s| {
            s.as_ref()
                .map(|p| (p.fut.clone_ref(py), p.sock.clone_ref(py)))
        });
        let Some((fut, sock)) = refs else {
            return Ok(());
        };
        if fut.call_method0(py, intern!(py, "done"))?.is_truthy(py)? {
            return Ok(());
        }
        let attempt = match sock_fileno(sock.bind(py)) {
            Ok(fd) => this.attempt(py, fd),
            Err(e) => Attempt::Failed(e),
        };
        match attempt {
            Attempt::Wait => Ok(()),
            Attempt::Done(v) => Self::finish(slf, Ok(v)),
            Attempt::Failed(e) => Self::finish(slf, Err(e)),
        }
    }

    /// The future is done and not by us (cancelled): drop the watcher if it is still ours.
    fn on_done(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Some(parked) = this.state.with(py, Option::take) else {
            return Ok(());
        };
        let result = match &parked.handle {
            Some(h) => this
                .loop_
                .get()
                .core
                .remove_watcher_if(py, this.fd, this.side, h)
                .map(drop),
            None => Ok(()),
        };
        drop(parked);
        result
    }

    /// One syscall for the parked call.
    fn attempt(&self, py: Python<'_>, fd: i32) -> Attempt {
        enum Step {
            Recv(usize),
            RecvInto(Py<PyAny>),
            Sent(io::Result<bool>),
        }
        // Sends advance inside the cell (no Python code runs there); receives need Python
        // objects built or exported, so they run outside it.
        let step = self.state.with(py, |s| {
            let p = s.as_mut()?;
            Some(match &mut p.op {
                Op::Recv(n) => Step::Recv(*n),
                Op::RecvInto(buf) => Step::RecvInto(buf.clone_ref(py)),
                Op::SendBytes { data, sent } => {
                    let all = data.as_bytes(py);
                    Step::Sent(advance(
                        sock::send_nowait(fd, &all[*sent..]),
                        sent,
                        all.len(),
                    ))
                }
                Op::SendBuffer { data, sent } => {
                    let len = data.len_bytes();
                    Step::Sent(advance(send_export(fd, data, *sent), sent, len))
                }
            })
        });
        match step {
            None => Attempt::Wait,
            Some(Step::Recv(n)) => match recv_bytes(py, fd, n) {
                Ok(Ok(b)) => Attempt::Done(b.into_any().unbind()),
                Ok(Err(e)) if would_block(&e) => Attempt::Wait,
                Ok(Err(e)) => Attempt::Failed(os_error(&e)),
                Err(e) => Attempt::Failed(e),
            },
            Some(Step::RecvInto(buf)) => {
                let got = PyUntypedBuffer::get(buf.bind(py)).map(|export| {
                    let r = recv_into_export(fd, &export);
                    export.release(py);
                    r
                });
                match got {
                    Ok(Ok(n)) => Attempt::Done(PyInt::new(py, n).into_any().unbind()),
                    Ok(Err(e)) if would_block(&e) => Attempt::Wait,
                    Ok(Err(e)) => Attempt::Failed(os_error(&e)),
                    Err(e) => Attempt::Failed(e),
                }
            }
            Some(Step::Sent(Ok(true))) => Attempt::Done(py.None()),
            Some(Step::Sent(Ok(false))) => Attempt::Wait,
            Some(Step::Sent(Err(e))) if would_block(&e) => Attempt::Wait,
            Some(Step::Sent(Err(e))) => Attempt::Failed(os_error(&e)),
        }
    }

    /// Ends the call: unwatch (if still ours), take back the done callback, then complete
    /// the future, so the awaiting task resumes with the watcher already gone, as after
    /// asyncio's done callback.
    fn finish(slf: &Bound<'_, Self>, outcome: PyResult<Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Some(parked) = this.state.with(py, Option::take) else {
            return Ok(());
        };
        let unwatched = match &parked.handle {
            Some(h) => this
                .loop_
                .get()
                .core
                .remove_watcher_if(py, this.fd, this.side, h)
                .map(drop),
            None => Ok(()),
        };
        let completed = complete(parked.fut.bind(py), slf, outcome);
        drop(parked);
        completed.and(unwatched)
    }
}

fn complete(
    fut: &Bound<'_, PyAny>,
    waiter: &Bound<'_, SockWaiter>,
    outcome: PyResult<Py<PyAny>>,
) -> PyResult<()> {
    let py = fut.py();
    fut.call_method1(intern!(py, "remove_done_callback"), (waiter,))?;
    match outcome {
        Ok(v) => fut.call_method1(intern!(py, "set_result"), (v,))?,
        Err(e) => fut.call_method1(intern!(py, "set_exception"), (e.into_value(py),))?,
    };
    Ok(())
}

/// Adds a send's count to `sent`; `Ok(true)` once all `len` bytes are gone.
fn advance(res: io::Result<usize>, sent: &mut usize, len: usize) -> io::Result<bool> {
    let n = res?;
    *sent += n;
    Ok(*sent >= len)
}

/// Creates the future, refuses an fd a live transport owns, installs the waiter as the
/// fd's reader or writer and as the future's done callback; returns the future.
fn park<'py>(
    lp: &Bound<'py, Loop>,
    sock: &Bound<'py, PyAny>,
    fd: i32,
    side: Side,
    op: Op,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    let this = lp.get();
    let fut = new_future(lp)?;
    let fd_obj = PyInt::new(py, fd);
    if this.fd_has_owner(py, &fd_obj)? {
        // mirrors selector_events._ensure_fd_no_transport, in Python.
        lp.call_method1(intern!(py, "_sock_check_fd_free"), (&fd_obj,))?;
    }
    let waiter = Bound::new(
        py,
        SockWaiter {
            loop_: lp.clone().unbind(),
            fd,
            side,
            state: GilCell::new(Some(Parked {
                fut: fut.clone().unbind(),
                sock: sock.clone().unbind(),
                handle: None,
                op,
            })),
        },
    )?;
    let handle = this.core.add_watcher_fd(
        py,
        fd_obj.into_any().unbind(),
        fd,
        side,
        waiter.clone().into_any().unbind(),
        Args::Zero,
    )?;
    waiter.get().state.with(py, |s| {
        if let Some(p) = s.as_mut() {
            p.handle = Some(handle);
        }
    });
    fut.call_method1(intern!(py, "add_done_callback"), (&waiter,))?;
    Ok(fut)
}

/// `Loop._sock_recv`: the bytes, a future, or `NotImplemented`.
pub(super) fn recv<'py>(
    lp: &Bound<'py, Loop>,
    sock: &Bound<'py, PyAny>,
    n: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    // A negative, huge or non-int size: the socket method raises asyncio's error.
    let size = match n.cast_exact::<PyInt>().map(|i| i.extract::<isize>()) {
        Ok(Ok(size)) if size >= 0 => size.unsigned_abs(),
        _ => return Ok(py.NotImplemented().into_bound(py)),
    };
    let Some(fd) = plain_socket_fd(lp, sock)? else {
        return Ok(py.NotImplemented().into_bound(py));
    };
    match recv_bytes(py, fd, size)? {
        Ok(b) => Ok(b.into_any()),
        Err(e) if would_block(&e) => park(lp, sock, fd, Side::Read, Op::Recv(size)),
        Err(e) => Err(os_error(&e)),
    }
}

/// `Loop._sock_recv_into`: the byte count, a future, or `NotImplemented`.
pub(super) fn recv_into<'py>(
    lp: &Bound<'py, Loop>,
    sock: &Bound<'py, PyAny>,
    buf: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    let Some(fd) = plain_socket_fd(lp, sock)? else {
        return Ok(py.NotImplemented().into_bound(py));
    };
    // Not a writable contiguous buffer: the socket method raises asyncio's error.
    let export = match PyUntypedBuffer::get(buf) {
        Ok(e) if !e.readonly() && e.is_c_contiguous() => e,
        Ok(e) => {
            e.release(py);
            return Ok(py.NotImplemented().into_bound(py));
        }
        Err(_) => return Ok(py.NotImplemented().into_bound(py)),
    };
    let got = recv_into_export(fd, &export);
    export.release(py);
    match got {
        Ok(n) => Ok(PyInt::new(py, n).into_any()),
        Err(e) if would_block(&e) => {
            park(lp, sock, fd, Side::Read, Op::RecvInto(buf.clone().unbind()))
        }
        Err(e) => Err(os_error(&e)),
    }
}

/// `Loop._sock_sendall`: `None` when all left at once, a future, or `NotImplemented`.
pub(super) fn sendall<'py>(
    lp: &Bound<'py, Loop>,
    sock: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    let Some(fd) = plain_socket_fd(lp, sock)? else {
        return Ok(py.NotImplemented().into_bound(py));
    };
    if let Ok(bytes) = data.cast_exact::<PyBytes>() {
        let all = bytes.as_bytes();
        let sent = match sock::send_nowait(fd, all) {
            Ok(n) => n,
            Err(e) if would_block(&e) => 0,
            Err(e) => return Err(os_error(&e)),
        };
        if sent == all.len() {
            return Ok(py.None().into_bound(py));
        }
        let op = Op::SendBytes {
            data: bytes.clone().unbind(),
            sent,
        };
        return park(lp, sock, fd, Side::Write, op);
    }
    // Only flat byte buffers: asyncio compares what `send` returned (bytes) with
    // `len(data)` (items, or rows), which only agree there.
    let export = match PyUntypedBuffer::get(data) {
        Ok(e) if e.is_c_contiguous() && e.item_size() == 1 && e.dimensions() <= 1 => e,
        Ok(e) => {
            e.release(py);
            return Ok(py.NotImplemented().into_bound(py));
        }
        Err(_) => return Ok(py.NotImplemented().into_bound(py)),
    };
    let sent = match send_export(fd, &export, 0) {
        Ok(n) => n,
        Err(e) if would_block(&e) => 0,
        Err(e) => {
            export.release(py);
            return Err(os_error(&e));
        }
    };
    if sent == export.len_bytes() {
        export.release(py);
        return Ok(py.None().into_bound(py));
    }
    let op = Op::SendBuffer { data: export, sent };
    park(lp, sock, fd, Side::Write, op)
}
