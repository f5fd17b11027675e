//! The operation vocabulary both drivers speak.
//! Owns: what an operation is, what its completion carries. Not: how a backend performs it
//! (`uring/`, `poll/`), what the loop does with the result (`core/`).
//!
//! Every operation is completion-style: it is submitted under a caller-chosen [`Token`] and
//! later yields exactly one final [`Completion`] with that token (a result or `-errno`,
//! `-ECANCELED` when it was cancelled first). The exceptions are the multishot ops,
//! [`Op::AcceptMulti`] (one [`Completion`] per accepted connection) and [`Op::PollMulti`]
//! (one per readiness): several completions, exactly one of them final (`more == false`). Completions of every kind come out of one `wait`, in one
//! vector, in the order the driver reaped them. Both drivers take every op: the `poll`
//! driver performs a send itself, retrying on writability inside the driver, and an
//! accept as an `accept4` loop on each readability, as the `uring` driver does on a kernel
//! without multishot accept (`rust/tests/driver_contract.rs` checks both drivers against
//! one contract).
//! Receives are readiness plus `recv` on both drivers (docs/decisions/0004-one-io-model.md).

use crate::sys::RawFd;

/// Caller-chosen identifier of one submitted operation; echoed in its completion.
/// `u64::MAX` is reserved by the drivers for their own use.
pub type Token = u64;

/// Readiness a [`Op::Poll`] waits for, as bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Interest(u8);

impl Interest {
    /// Nothing.
    pub const NONE: Interest = Interest(0);
    /// The fd can be read without blocking (or is at EOF / in error).
    pub const READABLE: Interest = Interest(1);
    /// The fd can be written without blocking (or is in error).
    pub const WRITABLE: Interest = Interest(2);

    /// Builds an interest from raw bits (only the two low bits count).
    pub const fn from_bits(bits: u8) -> Interest {
        Interest(bits & 3)
    }
    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// Whether READABLE is set.
    pub const fn is_readable(self) -> bool {
        self.0 & 1 != 0
    }
    /// Whether WRITABLE is set.
    pub const fn is_writable(self) -> bool {
        self.0 & 2 != 0
    }
    /// Union of two interests.
    pub const fn add(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }
    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One operation handed to a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// One-shot readiness: completes once `fd` is ready for any bit of `interest`.
    /// The result is the ready [`Interest`] bits; error and hang-up conditions report every
    /// requested bit, as `selectors` does, so the watcher runs and finds out itself.
    /// Level-triggered use re-submits after each completion.
    Poll {
        /// The file descriptor to watch; the caller keeps it open until the completion.
        fd: RawFd,
        /// What to wait for; never empty.
        interest: Interest,
    },
    /// Multishot readiness: a [`Completion`] with `more` (the ready [`Interest`] bits) each
    /// time `fd` becomes ready for a bit of `interest`, until it is cancelled or ends.
    /// Armed while the fd is ready, it completes at once; after that it reports new
    /// readiness (data that arrives), not readiness that stays (data left unread): a
    /// caller that did not drain the fd knows it and acts as if it were reported again.
    /// A result with [`HANGUP`] says the fd reached end of stream or failed: that
    /// readiness stays until the fd is closed, and may not be reported again.
    /// It ends with a final completion: `-ECANCELED` after a cancel, `-errno`, or (the
    /// kernel stopped it) the ready bits with `more == false`, after which the caller
    /// submits it again if it still wants it. The ring's `IORING_POLL_ADD_MULTI` (Linux
    /// 5.13); a one-shot POLL_ADD re-armed at each completion on older kernels; the `poll`
    /// driver's edge-triggered registration, kept.
    PollMulti {
        /// The file descriptor to watch; the caller keeps it open until the final completion.
        fd: RawFd,
        /// What to wait for; never empty.
        interest: Interest,
    },
    /// Multishot accept, on every driver: the kernel's on `uring` (Linux 5.19+); performed
    /// by the driver on `poll` (Unix) and on older kernels, as readiness of the listening
    /// socket, then `accept4` until nothing is left. What is waiting is accepted at once; a
    /// socket that does not listen ends the op at once with `-EINVAL`. Unlike `Poll`
    /// it yields a [`Completion`] per accepted connection (`more == true`), whose `result`
    /// is the new fd (opened non-blocking and close-on-exec, owned by the caller from then
    /// on) or `-errno`; the last has `more == false`. The peer's address is not reported (`getpeername`).
    AcceptMulti {
        /// The listening socket, non-blocking (as asyncio's are: the drivers that accept
        /// by readiness call `accept4` until `EAGAIN`); the caller keeps it open until the
        /// final completion.
        fd: RawFd,
    },
    /// One `sendmsg` (`MSG_NOSIGNAL`): completes with the bytes sent, which may be fewer
    /// than offered (one send, never a loop), or `-errno` (`-EPIPE`/`-ECONNRESET` from a
    /// closed peer, `-EBADF`, `-ECANCELED` after a cancel). A send the socket has no room
    /// for waits until it has (io_uring's internal poll; the `poll` driver's own retry on
    /// writability, beside the fd's other ops). `msg` is the address of a `libc::msghdr`
    /// whose iovecs point at the bytes; the caller keeps the header, the iovec array and
    /// the bytes valid and unchanged until the completion (the kernel may read them until
    /// then).
    SendMsg {
        /// The stream socket.
        fd: RawFd,
        /// Address of the `msghdr`.
        msg: usize,
    },
}

/// A bit of an [`Op::PollMulti`] completion's result, beside the ready [`Interest`] bits:
/// the peer hung up (end of stream) or the fd failed.
pub const HANGUP: i32 = 4;

/// One answer for one submitted operation: its final one, or (a multishot accept's
/// connections) one of several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The token the operation was submitted with.
    pub token: Token,
    /// `>= 0`: the operation's result (for `Poll` and `PollMulti`, the ready `Interest` bits; for
    /// `SendMsg`, the bytes sent; for `AcceptMulti`, the accepted fd);
    /// `< 0`: `-errno` (`-ECANCELED` after [`cancel`](super::Driver::cancel)).
    pub result: i32,
    /// More completions follow for this operation (a multishot accept still accepting, a
    /// multishot poll still watching).
    pub more: bool,
}

impl Completion {
    /// The final completion of the operation under `token`.
    pub const fn last(token: Token, result: i32) -> Self {
        Completion {
            token,
            result,
            more: false,
        }
    }
}

/// Cheap counters a driver keeps; read by `loop.stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Operations handed to the kernel (SQEs pushed, or readiness registrations made).
    pub submissions: u64,
    /// Kernel calls made to submit and/or wait (`io_uring_enter`, `epoll_wait`, ...).
    pub enters: u64,
    /// Completions delivered to the caller.
    pub completions: u64,
}
