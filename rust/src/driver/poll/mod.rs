//! The portable readiness driver: mio (epoll on Linux, kqueue on macOS/BSD, IOCP on Windows).
//! Owns: the `mio::Poll`, its reused `Events`, the `mio::Waker`, and turning edge-triggered
//! readiness into the one-shot Poll completions of `op.rs`. Not: the per-fd table
//! (`sources.rs`), anything the loop decides.
//!
//! Behaviour the contract leaves to each backend:
//! - a closed fd fails in `submit` with `EBADF` when the fd is new to the driver; if the driver
//!   still has it registered (an earlier op on it), the op completes with `-EBADF` or
//!   `-ENOENT` in the next `wait` instead;
//! - regular files and directories fail in `submit` with `EPERM` (epoll refuses them);
//! - on Windows, fds are not supported yet: `submit` of a Poll op returns `Unsupported`.

mod sources;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::driver::op::{Completion, DriverCounters, Interest, Op, Token};
#[cfg(unix)]
use sources::Added;
use sources::{Change, Sources};

#[cfg(unix)]
use crate::sys::RawFd;

/// The mio token of the driver's waker; fds use their own number as token.
const TOKEN_WAKER: mio::Token = mio::Token(usize::MAX);

/// How many readiness events one `wait` takes from the kernel at most.
const EVENTS_CAPACITY: usize = 256;

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
    /// Completions made without the kernel (cancel, failed re-registration), delivered by the
    /// next `wait`, which then does not block.
    pending: Vec<Completion>,
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
            pending: Vec::new(),
            changes: Vec::new(),
            counters: DriverCounters::default(),
            pid: std::process::id(),
        })
    }

    /// Queues `op` under `token`. A new fd is registered at once, so a bad fd fails here.
    pub fn submit(&mut self, token: Token, op: Op) -> io::Result<()> {
        match op {
            Op::Poll { fd, interest } => self.submit_poll(token, fd, interest),
            // Readiness drivers go by readiness: callers check `supports_send_msg` and
            // `supports_accept_multi`.
            Op::AcceptMulti { .. } | Op::SendMsg { .. } => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "driver: the poll backend reads, writes and accepts by readiness",
            )),
        }
    }

    #[cfg(unix)]
    fn submit_poll(&mut self, token: Token, fd: RawFd, interest: Interest) -> io::Result<()> {
        check_op(token, interest)?;
        if self.sources.contains(token) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "driver: token already has an operation in flight",
            ));
        }
        if fd < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        if let Added::Register(interest) = self.sources.add(token, fd, interest) {
            self.counters.submissions += 1;
            let res = self.poll.registry().register(
                &mut mio::unix::SourceFd(&fd),
                fd_token(fd),
                mio_interest(interest),
            );
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

    #[cfg(not(unix))]
    fn submit_poll(
        &mut self,
        token: Token,
        _fd: crate::sys::RawFd,
        interest: Interest,
    ) -> io::Result<()> {
        check_op(token, interest)?;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "poll driver: watching raw fds is not supported on this platform yet",
        ))
    }

    /// Removes the op under `token`; its `-ECANCELED` completion comes with the next `wait`.
    /// Unknown (or already completed) tokens are ignored.
    pub fn cancel(&mut self, token: Token) -> io::Result<()> {
        if self.sources.remove(token) {
            self.pending.push(Completion {
                token,
                result: -ECANCELED,
            });
        }
        Ok(())
    }

    /// Applies queued registration changes, waits up to `timeout` for readiness or a wake,
    /// and appends the completions to `out`.
    pub fn wait(&mut self, timeout: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        self.apply_changes();
        let timeout = if self.pending.is_empty() {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        let start = out.len();
        out.append(&mut self.pending);
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
            for event in self.events.iter() {
                if event.token() == TOKEN_WAKER {
                    continue;
                }
                let ready = ready_interest(event);
                self.sources.ready(event.token().0 as i32, ready, out);
            }
        }
        self.counters.completions += (out.len() - start) as u64;
        Ok(())
    }

    /// Brings mio's registrations up to date with the pending ops; an fd that cannot be
    /// re-registered (the user closed it) fails its ops with `-errno`.
    fn apply_changes(&mut self) {
        self.sources.take_changes(&mut self.changes);
        for (fd, change) in self.changes.drain(..) {
            #[cfg(unix)]
            {
                let registry = self.poll.registry();
                match change {
                    Change::Remove => {
                        // The fd may already be closed (and so gone from the poller).
                        let _ = registry.deregister(&mut mio::unix::SourceFd(&fd));
                    }
                    Change::Arm {
                        registered,
                        interest,
                    } => {
                        self.counters.submissions += 1;
                        let mut source = mio::unix::SourceFd(&fd);
                        let (token, mio_int) = (fd_token(fd), mio_interest(interest));
                        let mut res = if registered {
                            registry.reregister(&mut source, token, mio_int)
                        } else {
                            registry.register(&mut source, token, mio_int)
                        };
                        // Closing an fd removes it from epoll; a new file under the same
                        // number needs a fresh registration.
                        if registered && res.as_ref().is_err_and(is_enoent) {
                            self.counters.submissions += 1;
                            res = registry.register(&mut source, token, mio_int);
                        }
                        match res {
                            Ok(()) => self.sources.set_registered(fd, Some(interest)),
                            Err(e) => {
                                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                                self.sources.fail_fd(fd, errno, &mut self.pending);
                            }
                        }
                    }
                }
            }
            #[cfg(not(unix))]
            let _ = (fd, change);
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
        if close {
            // SAFETY: the fields are dropped exactly once, here, and never used again.
            unsafe {
                std::mem::ManuallyDrop::drop(&mut self.waker);
                std::mem::ManuallyDrop::drop(&mut self.poll);
            }
        }
    }
}

#[cfg(unix)]
const ECANCELED: i32 = libc::ECANCELED;
// Windows' C runtime value; no Poll op completes there yet.
#[cfg(not(unix))]
const ECANCELED: i32 = 105;

fn check_op(token: Token, interest: Interest) -> io::Result<()> {
    if token == u64::MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: token u64::MAX is reserved",
        ));
    }
    if interest.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: Poll op with empty interest",
        ));
    }
    Ok(())
}

#[cfg(unix)]
fn fd_token(fd: RawFd) -> mio::Token {
    mio::Token(fd as usize)
}

#[cfg(unix)]
fn is_enoent(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOENT)
}

#[cfg(unix)]
fn mio_interest(interest: Interest) -> mio::Interest {
    match (interest.is_readable(), interest.is_writable()) {
        (true, true) => mio::Interest::READABLE | mio::Interest::WRITABLE,
        (false, true) => mio::Interest::WRITABLE,
        _ => mio::Interest::READABLE,
    }
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
