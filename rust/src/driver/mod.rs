//! All kernel I/O: one enum over the `uring` and `poll` backends.
//! Owns: backend choice and fallback (with the reason kept), dispatch. Not: deciding when
//! Python runs (`core/`), anything Python (`driver/` never imports pyo3).
//!
//! Contract shared by both backends (checked by `rust/tests/driver_contract.rs`):
//! - `submit` queues an operation; nothing reaches the kernel before the next `wait`
//!   (the `poll` backend may register a new fd at once so that a bad fd fails early, and
//!   makes a send's first `sendmsg` at once: its completion still comes from `wait`);
//! - every submitted operation yields exactly one final completion, `-ECANCELED` when
//!   `cancel` won the race (a multishot accept yields others before its final one);
//! - `wait(Some(ZERO))` with nothing queued makes no syscall on `uring`;
//! - `Waker::wake` from any thread makes a blocked `wait` return.

pub mod op;
pub mod poll;
#[cfg(uring)]
pub mod uring;

use std::io;
use std::time::Duration;

pub use op::{Completion, DriverCounters, Interest, Op, Token, HANGUP};

/// Which backend a caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requested {
    /// io_uring where it can be used, else poll.
    Auto,
    /// io_uring or an error.
    Uring,
    /// The portable readiness driver (mio: epoll/kqueue/IOCP).
    Poll,
}

/// Which backend a driver is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// io_uring.
    Uring,
    /// mio.
    Poll,
}

impl DriverKind {
    /// The short name users see (`RSLOOP_BACKEND` spelling).
    pub fn name(self) -> &'static str {
        match self {
            DriverKind::Uring => "uring",
            DriverKind::Poll => "poll",
        }
    }
}

/// A thread-safe handle that interrupts a blocked [`Driver::wait`].
#[derive(Clone)]
pub enum Waker {
    /// Writes the ring's eventfd.
    #[cfg(uring)]
    Uring(uring::UringWaker),
    /// A `mio::Waker`.
    Poll(poll::PollWaker),
}

impl Waker {
    /// Wakes the driver; cheap and safe to call from any thread, any number of times.
    pub fn wake(&self) -> io::Result<()> {
        match self {
            #[cfg(uring)]
            Waker::Uring(w) => w.wake(),
            Waker::Poll(w) => w.wake(),
        }
    }
}

/// One backend, chosen at run time.
// One per loop, created once and never moved on a hot path: boxing the ring would only add
// an indirection to every submit.
#[allow(clippy::large_enum_variant)]
pub enum Driver {
    /// io_uring (Linux).
    #[cfg(uring)]
    Uring(uring::UringDriver),
    /// mio (epoll, kqueue, IOCP).
    Poll(poll::PollDriver),
}

/// Creates a driver of the requested kind. With [`Requested::Auto`], a failure of io_uring
/// falls back to `poll` and the second value says why (e.g.
/// `"io_uring_setup: EPERM (Operation not permitted)"`).
pub fn select(requested: Requested) -> io::Result<(Driver, Option<String>)> {
    match requested {
        Requested::Poll => Ok((Driver::Poll(poll::PollDriver::new()?), None)),
        Requested::Uring => uring_driver().map(|d| (d, None)),
        Requested::Auto => match uring_driver() {
            Ok(d) => Ok((d, None)),
            Err(e) => Ok((Driver::Poll(poll::PollDriver::new()?), Some(e.to_string()))),
        },
    }
}

#[cfg(uring)]
fn uring_driver() -> io::Result<Driver> {
    uring::UringDriver::new().map(Driver::Uring)
}

#[cfg(not(uring))]
fn uring_driver() -> io::Result<Driver> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "io_uring: not built into this platform's rsloop",
    ))
}

impl Driver {
    /// Which backend this is.
    pub fn kind(&self) -> DriverKind {
        match self {
            #[cfg(uring)]
            Driver::Uring(_) => DriverKind::Uring,
            Driver::Poll(_) => DriverKind::Poll,
        }
    }

    /// Queues `op` under `token`; see the module contract.
    pub fn submit(&mut self, token: Token, op: Op) -> io::Result<()> {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.submit(token, op),
            Driver::Poll(d) => d.submit(token, op),
        }
    }

    /// Asks for the operation under `token` to end early; its final completion still comes.
    pub fn cancel(&mut self, token: Token) -> io::Result<()> {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.cancel(token),
            Driver::Poll(d) => d.cancel(token),
        }
    }

    /// Whether the driver already holds completions, so that the next `wait` returns at
    /// once whatever its timeout: the caller need not release the GIL for it. `false`
    /// promises nothing. `poll` holds what it performed at submit (the usual send: the
    /// socket had room); io_uring holds only the connections an accept it performs took
    /// at submit (its other completions are the kernel's to report).
    pub fn holds_completions(&self) -> bool {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.holds_completions(),
            Driver::Poll(d) => d.holds_completions(),
        }
    }

    /// Hands what is queued to the kernel now, without waiting or reaping: `uring` submits
    /// its queued SQEs (cancels, typically, so the kernel drops its references to an fd
    /// about to be closed); `poll` has nothing queued in the kernel's name.
    pub fn submit_now(&mut self) -> io::Result<()> {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.submit_now(),
            Driver::Poll(_) => Ok(()),
        }
    }

    /// Flushes queued work, then waits up to `timeout` (`None`: until something happens) for
    /// completions or a wake, appending completions to `out`. Interrupted waits (EINTR)
    /// return `Ok` with whatever arrived.
    pub fn wait(&mut self, timeout: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.wait(timeout, out),
            Driver::Poll(d) => d.wait(timeout, out),
        }
    }

    /// A waker for other threads.
    pub fn waker(&self) -> Waker {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => Waker::Uring(d.waker()),
            Driver::Poll(d) => Waker::Poll(d.waker()),
        }
    }

    /// Counters since creation.
    pub fn counters(&self) -> DriverCounters {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.counters(),
            Driver::Poll(d) => d.counters(),
        }
    }

    /// Whether the loop must replace this driver before running on the calling thread:
    /// a forked child's, or a ring created by another thread (its requests complete
    /// through that thread's task work, see `uring::probe`).
    pub fn needs_replacing(&self) -> bool {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.is_inherited() || d.on_other_thread(),
            Driver::Poll(d) => d.is_inherited(),
        }
    }

    /// Ends every operation in flight now (as dropping the driver does) and returns the
    /// connections multishot accepts took meanwhile, whose fds are now the caller's.
    pub fn retire(&mut self) -> Vec<Completion> {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.retire(),
            Driver::Poll(d) => d.retire(),
        }
    }

    /// Whether this driver was created in another process (we are a forked child):
    /// such a driver must be dropped with [`Driver::abandon`] and never used.
    pub fn is_inherited(&self) -> bool {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.is_inherited(),
            Driver::Poll(d) => d.is_inherited(),
        }
    }

    /// Forgets a driver inherited across `fork()` without touching the kernel objects the
    /// parent still uses (no cancel, no unregister); only the child's fd copies are closed.
    pub fn abandon(self) {
        match self {
            #[cfg(uring)]
            Driver::Uring(d) => d.abandon(),
            Driver::Poll(d) => d.abandon(),
        }
    }
}
