//! The portable readiness driver: mio (epoll on Linux, kqueue on macOS/BSD, IOCP on Windows).
//! Owns: the `mio::Poll`, its reused `Events`, the `mio::Waker`, and turning edge-triggered
//! readiness into the completions of `op.rs`: one-shot Poll ops; `SendMsg` emulated (tried
//! at once, retried on writability inside the driver, one completion either way, as
//! io_uring's); `AcceptMulti` emulated (`accept4` at once and on each readability, one
//! completion per connection). Not: the per-fd table (`sources.rs`), anything the
//! loop decides.
//!
//! Behaviour the contract leaves to each backend:
//! - a closed fd fails in `submit` with `EBADF` when the fd is new to the driver; if the driver
//!   still has it registered (an earlier op on it), the op completes with `-EBADF` or
//!   `-ENOENT` in the next `wait` instead;
//! - a send to a closed fd completes with `-EBADF` (io_uring's answer), not a refusal;
//! - regular files and directories fail in `submit` with `EPERM` (epoll refuses them);
//! - on Windows, Poll ops watch sockets only (mio's IOCP selector polls them through AFD;
//!   anything else fails in `submit` with Winsock's error); sends and accepts on raw fds
//!   return `Unsupported` there.

mod registrations;
mod sources;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::driver::op::{Completion, DriverCounters, Interest, Op, Token};
use registrations::{write_went_stale, Registrations};
use sources::{Added, Change, OpKind, Perform, Sources};

use crate::sys::RawFd;

/// The mio token of the driver's waker; fds use their own number as token.
const TOKEN_WAKER: mio::Token = mio::Token(usize::MAX);

/// How many readiness events one `wait` takes from the kernel at most.
const EVENTS_CAPACITY: usize = 256;

/// Connections one readiness of a listening socket accepts at most (asyncio's default
/// backlog): the rest wait for the next `wait`, which reports the socket again.
#[cfg(unix)]
const ACCEPT_BATCH: usize = 100;

/// A thread-safe handle that interrupts [`PollDriver::wait`].
#[derive(Clone)]
pub struct PollWaker {
    inner: Arc<mio::Waker>,
}

impl PollWaker {
    /// Wakes the driver; safe from any thread, any number of times.
    pub fn wake(&self) -> io::Result<()> {
        self.inner.wake()
    }
}

/// Completion-style driver over mio readiness.
pub struct PollDriver {
    poll: std::mem::ManuallyDrop<mio::Poll>,
    waker: std::mem::ManuallyDrop<Arc<mio::Waker>>,
    events: mio::Events,
    sources: Sources,
    /// The mio source of each registered fd (kept on Windows, where mio needs its own).
    regs: Registrations,
    /// Completions made without the kernel (cancel, failed re-registration), delivered by the
    /// next `wait`, which then does not block.
    pending: Vec<Completion>,
    /// Accepted connections and accept ends, delivered by the next `wait` (which then does
    /// not block); kept apart from `pending` so that connections no one took are closed
    /// with the driver.
    multi: Vec<Completion>,
    /// Scratch for `Sources::take_changes`.
    changes: Vec<(i32, Change)>,
    counters: DriverCounters,
    pid: u32,
}

impl PollDriver {
    /// Creates the poller and its waker.
    pub fn new() -> io::Result<Self> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), TOKEN_WAKER)?);
        Ok(PollDriver {
            poll: std::mem::ManuallyDrop::new(poll),
            waker: std::mem::ManuallyDrop::new(waker),
            events: mio::Events::with_capacity(EVENTS_CAPACITY),
            sources: Sources::default(),
            regs: Registrations::default(),
            pending: Vec::new(),
            multi: Vec::new(),
            changes: Vec::new(),
            counters: DriverCounters::default(),
            pid: std::process::id(),
        })
    }

    /// Queues `op` under `token`. A new fd is registered at once, so a bad fd fails here.
    /// A send is tried at once (see [`submit_send`](Self::submit_send)).
    pub fn submit(&mut self, token: Token, op: Op) -> io::Result<()> {
        match op {
            Op::Poll { fd, interest } => self.submit_poll(token, fd, interest, false),
            Op::PollMulti { fd, interest } => self.submit_poll(token, fd, interest, true),
            Op::SendMsg { fd, msg } => self.submit_send(token, fd, msg),
            Op::AcceptMulti { fd } => self.submit_accept(token, fd),
        }
    }

    /// `Op::AcceptMulti` emulated, as io_uring performs it: what is waiting is accepted at
    /// once, then the listening socket waits for readability in the fd's table (beside
    /// any other op on it); each time it is readable the driver accepts what is
    /// waiting (up to `ACCEPT_BATCH`, non-blocking and close-on-exec), each connection a
    /// completion with `more`. An accept error other than "nothing left"
    /// (`EAGAIN`, `ECONNABORTED`, `EINTR`) ends it with a final `-errno`; a cancel with a
    /// final `-ECANCELED`.
    #[cfg(unix)]
    fn submit_accept(&mut self, token: Token, fd: RawFd) -> io::Result<()> {
        check_token(token)?;
        self.check_new(token, fd)?;
        self.counters.submissions += 1;
        // As the ring does: what is waiting is accepted now, and a socket that cannot
        // accept (not listening: EINVAL) ends the op at once rather than waiting forever.
        let mut io = Kernel {
            multi: &mut self.multi,
        };
        if io.accept(fd, token) {
            return Ok(());
        }
        let added = self.sources.add_accept(token, fd);
        if let Err(e) = self.register_new(token, fd, added) {
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            self.multi.push(Completion::last(token, -code));
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn submit_accept(&mut self, token: Token, _fd: crate::sys::RawFd) -> io::Result<()> {
        check_token(token)?;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "poll driver: accepting on raw fds is not supported on this platform yet",
        ))
    }

    /// Whether completions are already made (a send or accept performed at submit, a
    /// cancel): the next `wait` delivers them without blocking, whatever its timeout.
    pub fn holds_completions(&self) -> bool {
        !self.pending.is_empty() || !self.multi.is_empty()
    }

    /// Returns the connections accepted but not yet taken, whose fds are now the caller's;
    /// the ops in flight end with the driver (nothing of the kernel's to reap here).
    pub fn retire(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.multi)
    }

    fn submit_poll(
        &mut self,
        token: Token,
        fd: RawFd,
        interest: Interest,
        multi: bool,
    ) -> io::Result<()> {
        check_op(token, interest)?;
        self.check_new(token, fd)?;
        let added = self.sources.add(token, fd, interest, multi);
        self.register_new(token, fd, added)
    }

    /// `Op::SendMsg` emulated, as io_uring performs it: one `sendmsg` now (non-blocking,
    /// `MSG_NOSIGNAL`); if the kernel takes bytes or fails, that is the completion, delivered
    /// by the next `wait`. If it would block, the send waits in the fd's table beside any
    /// reader or writer (one mio registration, interests merged) and is retried each time
    /// the fd is writable, until it takes bytes or fails; a cancel meanwhile ends it with
    /// `-ECANCELED`. Either way one final completion, never a partial retry: a short send
    /// completes with the bytes the kernel took, as the ring's does.
    #[cfg(unix)]
    fn submit_send(&mut self, token: Token, fd: RawFd, msg: usize) -> io::Result<()> {
        check_token(token)?;
        if msg == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "driver: SendMsg without a msghdr",
            ));
        }
        self.check_new(token, fd)?;
        self.counters.submissions += 1;
        if let Some(result) = try_send(fd, msg) {
            self.pending.push(Completion::last(token, result));
            return Ok(());
        }
        let added = self.sources.add_send(token, fd, msg);
        if let Err(e) = self.register_new(token, fd, added) {
            // The kernel's answer, as the ring would give it: a completion, not a refusal.
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            self.pending.push(Completion::last(token, -code));
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn submit_send(&mut self, token: Token, _fd: crate::sys::RawFd, _msg: usize) -> io::Result<()> {
        check_token(token)?;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "poll driver: sending on raw fds is not supported on this platform yet",
        ))
    }

    /// Refuses a token already in flight and a negative fd.
    fn check_new(&self, token: Token, fd: RawFd) -> io::Result<()> {
        if self.sources.contains(token) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "driver: token already has an operation in flight",
            ));
        }
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Ok(())
    }

    /// Registers `fd` with mio now if `added` asks for it (an fd new to the driver), so a
    /// bad fd fails at once; on failure the op under `token` is forgotten.
    #[inline]
    fn register_new(&mut self, token: Token, fd: RawFd, added: Added) -> io::Result<()> {
        if let Added::Register(interest) = added {
            self.counters.submissions += 1;
            let res = self.regs.register(self.poll.registry(), fd, interest);
            match res {
                Ok(()) => self.sources.set_registered(fd, Some(interest)),
                Err(e) => {
                    self.sources.add_failed(token, fd);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Removes the op under `token`; its `-ECANCELED` completion comes with the next `wait`.
    /// Unknown (or already completed) tokens are ignored.
    pub fn cancel(&mut self, token: Token) -> io::Result<()> {
        match self.sources.remove(token) {
            None => {}
            Some(OpKind::Accept) => self.multi.push(Completion::last(token, -ECANCELED)),
            Some(_) => self.pending.push(Completion::last(token, -ECANCELED)),
        }
        Ok(())
    }

    /// Applies queued registration changes, waits up to `timeout` for readiness or a wake,
    /// and appends the completions to `out`.
    pub fn wait(&mut self, timeout: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        self.apply_changes();
        let timeout = if self.pending.is_empty() && self.multi.is_empty() {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        let start = out.len();
        out.append(&mut self.pending);
        out.append(&mut self.multi);
        if timeout != Some(Duration::ZERO) || !self.sources.is_empty() {
            self.counters.enters += 1;
            match self.poll.poll(&mut self.events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.counters.completions += (out.len() - start) as u64;
                    return Err(e);
                }
            }
            let mut io = Kernel {
                multi: &mut self.multi,
            };
            for event in self.events.iter() {
                if event.token() == TOKEN_WAKER {
                    continue;
                }
                let mut ready = ready_interest(event);
                let fd = event.token().0 as i32;
                if event.is_writable()
                    && !event.is_error()
                    && !event.is_write_closed()
                    && write_went_stale(fd)
                {
                    // Writable when the kernel looked, full again now: a selector asked
                    // now would not report it, and a writer that finds the socket full is
                    // not harmless (asyncio's datagram writer resumes a paused protocol
                    // even then). Wait again, as the uring driver does.
                    ready = Interest::from_bits(ready.bits() & !Interest::WRITABLE.bits());
                    self.sources.rearm(fd);
                }
                let hangup = event.is_error() || event.is_read_closed();
                self.sources
                    .ready(fd, ready, event.is_error(), hangup, out, &mut io);
            }
            // Connections accepted on this readiness, after it.
            out.append(&mut self.multi);
        }
        self.counters.completions += (out.len() - start) as u64;
        Ok(())
    }

    /// Brings mio's registrations up to date with the pending ops; an fd that cannot be
    /// re-registered (the user closed it) fails its ops with `-errno`.
    fn apply_changes(&mut self) {
        self.sources.take_changes(&mut self.changes);
        for (fd, change) in self.changes.drain(..) {
            let registry = self.poll.registry();
            match change {
                Change::Remove => {
                    // The fd may already be closed (and so gone from the poller).
                    self.regs.deregister(registry, fd);
                }
                Change::Arm {
                    registered,
                    interest,
                } => {
                    self.counters.submissions += 1;
                    let mut res = if registered {
                        self.regs.reregister(registry, fd, interest)
                    } else {
                        self.regs.register(registry, fd, interest)
                    };
                    // Closing an fd removes it from epoll; a new file under the same
                    // number needs a fresh registration.
                    if registered && res.as_ref().is_err_and(is_enoent) {
                        self.counters.submissions += 1;
                        res = self.regs.register(registry, fd, interest);
                    }
                    match res {
                        Ok(()) => self.sources.set_registered(fd, Some(interest)),
                        Err(e) => {
                            let errno = e.raw_os_error().unwrap_or(libc::EIO);
                            let (out, multi) = (&mut self.pending, &mut self.multi);
                            self.sources.fail_fd(fd, errno, out, multi);
                        }
                    }
                }
            }
        }
    }

    /// A waker for other threads.
    pub fn waker(&self) -> PollWaker {
        PollWaker {
            inner: Arc::clone(&self.waker),
        }
    }

    /// Counters since creation.
    pub fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// Whether this driver was created by another process (we are a forked child).
    pub fn is_inherited(&self) -> bool {
        self.pid != std::process::id()
    }

    /// Forgets a driver inherited across `fork()`: nothing is deregistered (the parent's
    /// registrations live in the shared epoll set). On Linux the child's copies of the epoll
    /// fd and the waker's eventfd are closed; kqueue is not inherited by a child at all, so
    /// elsewhere the numbers are leaked instead of closing whatever now has them.
    pub fn abandon(self) {
        // `Drop` sees `is_inherited()` and does exactly this.
        drop(self);
    }
}

impl Drop for PollDriver {
    fn drop(&mut self) {
        // The "portable" build forgets as kqueue platforms do.
        let epoll = cfg!(all(
            any(target_os = "linux", target_os = "android"),
            not(feature = "portable")
        ));
        let close = !self.is_inherited() || epoll;
        // Connections accepted that no one took: ours to close (a forked child's copies too).
        for c in self.multi.drain(..) {
            if c.result >= 0 {
                crate::sys::close_raw(c.result);
            }
        }
        if close {
            // SAFETY: the fields are dropped exactly once, here, and never used again.
            unsafe {
                std::mem::ManuallyDrop::drop(&mut self.waker);
                std::mem::ManuallyDrop::drop(&mut self.poll);
            }
        }
    }
}

// The C runtime's value on Windows (105), where a cancelled Poll op completes with it too.
const ECANCELED: i32 = libc::ECANCELED;

fn check_token(token: Token) -> io::Result<()> {
    if token == u64::MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: token u64::MAX is reserved",
        ));
    }
    Ok(())
}

fn check_op(token: Token, interest: Interest) -> io::Result<()> {
    check_token(token)?;
    if interest.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: Poll op with empty interest",
        ));
    }
    Ok(())
}

/// The kernel work of sends and accepts that readiness makes (`sources::Perform`).
struct Kernel<'a> {
    // Off Unix no accept runs (the driver refuses accepts on raw fds there).
    #[cfg_attr(not(unix), allow(dead_code))]
    multi: &'a mut Vec<Completion>,
}

impl Perform for Kernel<'_> {
    fn send(&mut self, fd: crate::sys::RawFd, msg: usize) -> Option<i32> {
        try_send(fd, msg)
    }

    #[cfg(unix)]
    fn accept(&mut self, fd: RawFd, token: Token) -> bool {
        for _ in 0..ACCEPT_BATCH {
            match crate::sys::sock::accept_nowait(fd) {
                Ok(conn) => self.multi.push(Completion {
                    token,
                    result: conn,
                    more: true,
                }),
                Err(e) => {
                    let code = e.raw_os_error().unwrap_or(libc::EIO);
                    // asyncio's "nothing to accept now": wait for the next readiness.
                    if [
                        libc::EAGAIN,
                        libc::EWOULDBLOCK,
                        libc::ECONNABORTED,
                        libc::EINTR,
                    ]
                    .contains(&code)
                    {
                        return false;
                    }
                    self.multi.push(Completion::last(token, -code));
                    return true;
                }
            }
        }
        false
    }

    #[cfg(not(unix))]
    fn accept(&mut self, _fd: crate::sys::RawFd, _token: Token) -> bool {
        false
    }
}

/// One try of a send: `Some(bytes or -errno)`, or `None` if the kernel would block.
#[cfg(unix)]
fn try_send(fd: RawFd, msg: usize) -> Option<i32> {
    loop {
        // SAFETY: `Op::SendMsg`'s contract: the caller keeps the `msghdr` at `msg`, its
        // iovecs and the bytes valid and unchanged until the op's completion, which has not
        // been delivered yet (this try makes it).
        let res = unsafe { crate::sys::sock::send_header_nowait(fd, msg as *const libc::msghdr) };
        return match res {
            Ok(n) => Some(i32::try_from(n).unwrap_or(i32::MAX)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(code) if code == libc::EAGAIN || code == libc::EWOULDBLOCK => None,
                Some(code) => Some(-code),
                None => Some(-libc::EIO),
            },
        };
    }
}

#[cfg(not(unix))]
fn try_send(_fd: crate::sys::RawFd, _msg: usize) -> Option<i32> {
    Some(-ECANCELED)
}

fn is_enoent(e: &io::Error) -> bool {
    cfg!(unix) && e.raw_os_error() == Some(libc::ENOENT)
}

/// Readiness bits of one event. Errors wake every interest and hang-up both directions, as
/// `selectors` reports them; a half-close (`RDHUP`) wakes only readers, so a writer is not
/// woken forever by a peer that stopped sending.
fn ready_interest(event: &mio::event::Event) -> Interest {
    let mut ready = Interest::NONE;
    if event.is_readable() || event.is_read_closed() {
        ready = ready.add(Interest::READABLE);
    }
    if event.is_writable() || event.is_write_closed() {
        ready = ready.add(Interest::WRITABLE);
    }
    if event.is_error() {
        ready = Interest::READABLE.add(Interest::WRITABLE);
    }
    ready
}

#[allow(dead_code)]
fn _assert_kinds() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<PollDriver>();
    send_sync::<PollWaker>();
}
