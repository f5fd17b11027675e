//! The io_uring driver (Linux).
//! Owns: the ring, pushing SQEs and reaping CQEs, the eventfd waker kept armed in the ring,
//! wait timeouts, fork safety. Not: SQE shapes (`ops.rs`), ring setup and probe (`probe.rs`),
//! the in-flight table (`inflight.rs`).
//!
//! Behaviour the contract leaves to each backend: a closed or invalid fd is accepted by
//! `submit` and completes with `-EBADF` in the next `wait` (the kernel checks the fd when it
//! reads the SQE). A regular file polls as always ready; the loop rejects those up front with
//! `sys::fd_check_pollable`. An op whose submitting thread exits is cancelled by the kernel
//! (`-ECANCELED`) when it next fires, like every io_uring request of an exiting task; the
//! driver re-arms such ops from the waiting thread, so `-ECANCELED` still means "you
//! cancelled it".
//!
//! `Op::AcceptMulti` is the kernel's multishot ACCEPT where it has one (Linux 5.19, probed).
//! Elsewhere, or when the kernel refuses it on a listening socket (`-EINVAL`), the driver
//! performs it as the `poll` driver does: what is waiting is accepted at once (`accept4`,
//! up to `ACCEPT_BATCH`), then a POLL_ADD waits for the listening socket to be readable,
//! and each time it is the driver accepts again and re-arms it. Same contract either way:
//! one completion per connection, one final (`-ECANCELED` after a cancel, `-EINVAL`
//! for a socket that does not listen, or the accept's error). Test hook:
//! `RSLOOP_TEST_URING_NO_ACCEPT_MULTI=1`, read by [`UringDriver::new`], takes that path on
//! a kernel that has multishot accept (the Python server tests run with it too); Rust tests
//! use [`UringOptions::no_accept_multi`].
//!
//! `Op::PollMulti` is the kernel's multishot POLL_ADD (Linux 5.13, known by a feature flag
//! of the same release). Elsewhere the driver re-arms a one-shot POLL_ADD each time it
//! completes and reports each completion with `more`; a re-armed poll finds readiness that
//! stayed, which the contract allows. Test hook: `RSLOOP_TEST_URING_NO_POLL_MULTI=1`;
//! Rust tests use [`UringOptions::no_poll_multi`].

mod inflight;
mod ops;
mod probe;

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{cqueue, squeue, types, IoUring};

use crate::driver::op::{Completion, DriverCounters, Interest, Op, Token};
use crate::sys;
use crate::sys::RawFd;
use inflight::{Inflight, Kind};

/// user_data of the waker's eventfd READ (or POLL_ADD) op.
const TOKEN_WAKER: u64 = u64::MAX;
/// user_data of every ASYNC_CANCEL SQE; their CQEs are dropped.
const TOKEN_CANCEL: u64 = u64::MAX - 1;
/// user_data of the TIMEOUT SQE that bounds a wait on kernels without `EXT_ARG`.
const TOKEN_TIMEOUT: u64 = u64::MAX - 2;

/// asyncio never waits longer than a day (`MAXIMUM_SELECT_TIMEOUT`); neither do we, which
/// also keeps the timespec in range.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Bounded rounds of waiting for the waker read's final CQE on drop.
const RETIRE_ROUNDS: u32 = 5;

/// Connections one readiness of a listening socket accepts at most when the driver performs
/// `Op::AcceptMulti` itself (asyncio's default backlog, as on `poll`): the rest are taken
/// after the re-armed POLL_ADD, which completes at once while some wait.
const ACCEPT_BATCH: usize = 100;

/// Test knobs: run the paths older kernels take on a new kernel.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UringOptions {
    /// Bound waits with a TIMEOUT SQE as if `IORING_FEAT_EXT_ARG` (5.11) were missing.
    pub no_ext_arg: bool,
    /// Wake through POLL_ADD + read(2) as if eventfd reads could not wait in the ring.
    pub poll_waker: bool,
    /// Perform `Op::AcceptMulti` by POLL_ADD + `accept4` as if multishot accept (5.19)
    /// were missing.
    pub no_accept_multi: bool,
    /// Perform `Op::PollMulti` by re-armed one-shot POLL_ADDs as if multishot poll (5.13)
    /// were missing.
    pub no_poll_multi: bool,
}

/// A thread-safe handle that interrupts [`UringDriver::wait`] by writing its eventfd.
#[derive(Clone)]
pub struct UringWaker {
    fd: Arc<OwnedFd>,
}

impl UringWaker {
    /// Wakes the driver; safe from any thread, any number of times.
    pub fn wake(&self) -> io::Result<()> {
        sys::eventfd::eventfd_signal(&self.fd)
    }
}

/// How the waker op watches the eventfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WakeMode {
    /// READ into the 8-byte buffer: one CQE per wake, no extra syscall (Linux 5.12+).
    Read,
    /// POLL_ADD, then drain with read(2): for kernels whose eventfd reads cannot wait.
    Poll,
}

/// The 8-byte buffer the waker's READ op fills. Heap-allocated once, so its address is
/// stable; freed only when no READ into it can be in flight (see `Drop`).
struct WakeBuf(NonNull<u64>);

// SAFETY: the buffer is plain memory owned by one driver; the kernel writes it only while a
// READ op is in flight, and the driver reads it only after that op's CQE, from `&mut self`.
unsafe impl Send for WakeBuf {}
// SAFETY: as above; `&UringDriver` methods never touch the buffer.
unsafe impl Sync for WakeBuf {}

/// Completion driver over one io_uring.
pub struct UringDriver {
    /// Dropped by hand in `Drop`, before `wake_buf` is freed.
    ring: ManuallyDrop<IoUring>,
    wake_fd: Arc<OwnedFd>,
    wake_buf: WakeBuf,
    wake_mode: WakeMode,
    /// The waker op is in the ring (queued or in flight).
    wake_armed: bool,
    inflight: Inflight,
    /// Scratch: ops to re-arm after a reap: those the kernel cancelled behind our back,
    /// and the accepts the driver performs (their POLL_ADD after each readiness).
    rearm: Vec<u64>,
    ext_arg: bool,
    /// Read by the kernel when a TIMEOUT SQE is submitted (no `EXT_ARG`); boxed so its
    /// address stays put even if the driver moves while that SQE is still queued.
    timeout_ts: Box<types::Timespec>,
    counters: DriverCounters,
    pid: u32,
    /// The thread that created the ring: with `COOP_TASKRUN` only it runs the task work
    /// that completes its requests, so a loop that moves to another thread gets a new ring.
    thread: std::thread::ThreadId,
    /// Connections an accept the driver performs took at submit, delivered by the next
    /// `wait` (which then does not block); closed with the driver if none came to take them.
    multi: Vec<Completion>,
    /// The kernel takes multishot accepts (Linux 5.19); else the driver performs them.
    accept_multi: bool,
    /// The kernel takes multishot polls (Linux 5.13); else the driver re-arms them.
    poll_multi: bool,
    /// Zero-timeout waits in a row that made no syscall (see `QUIET_WAITS_MAX`).
    quiet_waits: u32,
}

/// A busy loop (ready callbacks every iteration, so every wait has a zero timeout) enters
/// the kernel at least once per this many waits, even when the ring's `TASKRUN` flag shows
/// no pending work. The core asks for a wait only while something is in flight (a call_soon
/// chain with nothing in flight never reaches the driver). With `COOP_TASKRUN` a completion can wait
/// for the loop thread's next entry, and the flag was seen clear while one did: a send
/// waiting for room learnt that the peer had closed only after hundreds to thousands of
/// iterations (tests/test_io_differential.py found it). One `io_uring_enter` per 16 busy
/// iterations bounds that, at the cost of a syscall every 16 iterations to a busy loop
/// whose waits submit nothing; a wait that submits or may block enters anyway.
const QUIET_WAITS_MAX: u32 = 16;

impl UringDriver {
    /// Creates a small ring (retrying smaller on ENOMEM), probes the opcodes it needs and
    /// arms the waker. Errors read like `io_uring_setup: EPERM (Operation not permitted)`.
    pub fn new() -> io::Result<Self> {
        // A test hook (see the module doc), not a setting.
        let hook = |name| std::env::var_os(name).is_some_and(|v| v == "1");
        Self::with_options(UringOptions {
            no_accept_multi: hook("RSLOOP_TEST_URING_NO_ACCEPT_MULTI"),
            no_poll_multi: hook("RSLOOP_TEST_URING_NO_POLL_MULTI"),
            ..UringOptions::default()
        })
    }

    /// [`new`](Self::new) with test knobs.
    #[doc(hidden)]
    pub fn with_options(options: UringOptions) -> io::Result<Self> {
        let (ring, features) = probe::setup(&probe::RING_SIZES)?;
        let wake_fd = Arc::new(sys::eventfd::eventfd_new()?);
        let wake_mode = if features.read && !options.poll_waker {
            WakeMode::Read
        } else {
            WakeMode::Poll
        };
        Ok(UringDriver {
            multi: Vec::new(),
            accept_multi: features.accept_multi && !options.no_accept_multi,
            poll_multi: features.poll_multi && !options.no_poll_multi,
            quiet_waits: 0,
            ring: ManuallyDrop::new(ring),
            wake_fd,
            wake_buf: WakeBuf(NonNull::from(Box::leak(Box::new(0u64)))),
            wake_mode,
            wake_armed: false,
            inflight: Inflight::default(),
            rearm: Vec::new(),
            ext_arg: features.ext_arg && !options.no_ext_arg,
            timeout_ts: Box::default(),
            counters: DriverCounters::default(),
            pid: std::process::id(),
            thread: std::thread::current().id(),
        })
    }

    /// Queues `op` under `token` in the SQ ring; the kernel sees it at the next `wait`
    /// (or now, if the SQ is full and must be flushed to make room).
    pub fn submit(&mut self, token: Token, op: Op) -> io::Result<()> {
        check_token(token)?;
        let (fd, kind) = match op {
            Op::Poll { fd, interest } => (fd, Kind::Poll(nonempty(interest)?)),
            Op::PollMulti { fd, interest } if self.poll_multi => {
                (fd, Kind::PollMulti(nonempty(interest)?))
            }
            Op::PollMulti { fd, interest } => (fd, Kind::PollEach(nonempty(interest)?)),
            Op::AcceptMulti { fd } if self.accept_multi => (fd, Kind::AcceptMulti),
            Op::AcceptMulti { fd } => return self.submit_accept_poll(token, fd),
            Op::SendMsg { fd, msg } => (fd, Kind::SendMsg(msg)),
        };
        let Some(user_data) = self.inflight.insert(token, fd, kind) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "driver: token already has an operation in flight",
            ));
        };
        let sqe = sqe_for(fd, kind);
        if let Err(e) = self.push(&sqe.user_data(user_data)) {
            self.inflight.complete(user_data);
            return Err(e);
        }
        self.counters.submissions += 1;
        Ok(())
    }

    /// `Op::AcceptMulti` performed by the driver (no multishot accept in this kernel):
    /// what is waiting is accepted now, and a socket that cannot accept (not listening:
    /// `EINVAL`) ends the op at once, as the kernel's multishot accept does; otherwise a
    /// POLL_ADD waits for the next connection (see `reap`).
    fn submit_accept_poll(&mut self, token: Token, fd: RawFd) -> io::Result<()> {
        let Some(user_data) = self.inflight.insert(token, fd, Kind::AcceptPoll) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "driver: token already has an operation in flight",
            ));
        };
        self.counters.submissions += 1;
        if let Some(result) = accept_batch(fd, token, &mut self.multi) {
            self.inflight.complete(user_data);
            self.multi.push(Completion::last(token, result));
            return Ok(());
        }
        if let Err(e) = self.push(&sqe_for(fd, Kind::AcceptPoll).user_data(user_data)) {
            // Connections taken above are the caller's already (`more`); the op is not in
            // flight, as for any refused submit.
            self.inflight.complete(user_data);
            return Err(e);
        }
        Ok(())
    }

    /// Queues an ASYNC_CANCEL for `token`'s op; that op's final completion (`-ECANCELED`, or
    /// its result if it finished first) still comes. Unknown tokens are ignored.
    pub fn cancel(&mut self, token: Token) -> io::Result<()> {
        let Some(target) = self.inflight.cancel_target(token) else {
            return Ok(());
        };
        if let Err(e) = self.push(&ops::cancel(target).user_data(TOKEN_CANCEL)) {
            self.inflight.cancel_unsent(target);
            return Err(e);
        }
        Ok(())
    }

    /// Whether the next `wait` returns at once with what the driver holds (connections an
    /// accept it performs took at submit); see `Driver::holds_completions`.
    pub fn holds_completions(&self) -> bool {
        !self.multi.is_empty()
    }

    /// Submits queued SQEs and waits up to `timeout` for at least one CQE, in one
    /// `io_uring_enter`; then reaps every CQE into `out`. `Some(ZERO)` with nothing queued
    /// makes no syscall at all.
    pub fn wait(&mut self, timeout: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        let start = out.len();
        let mut timeout = timeout.map(|t| t.min(MAX_WAIT));
        if !self.ring.completion().is_empty() || !self.multi.is_empty() {
            timeout = Some(Duration::ZERO);
        }
        out.append(&mut self.multi);
        let (queued, flush) = {
            let sq = self.ring.submission();
            (!sq.is_empty(), sq.cq_overflow() || sq.taskrun())
        };
        let blocking = timeout != Some(Duration::ZERO);
        let overdue = !(blocking || queued || flush) && {
            self.quiet_waits += 1;
            self.quiet_waits >= QUIET_WAITS_MAX
        };
        if blocking || queued || flush || overdue {
            self.quiet_waits = 0;
            // The waker is needed only by a wait that can block; arming it costs nothing
            // when we enter anyway.
            if !self.wake_armed {
                self.arm_waker()?;
            }
            self.enter(timeout)?;
        }
        self.reap(out);
        self.counters.completions += (out.len() - start) as u64;
        Ok(())
    }

    /// Submits the queued SQEs in one `io_uring_enter` without waiting; CQEs stay in the
    /// ring for the next `wait`.
    pub fn submit_now(&mut self) -> io::Result<()> {
        if self.ring.submission().is_empty() {
            return Ok(());
        }
        self.counters.enters += 1;
        match self.ring.submit() {
            Ok(_) => Ok(()),
            Err(e) if tolerated(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A waker for other threads.
    pub fn waker(&self) -> UringWaker {
        UringWaker {
            fd: Arc::clone(&self.wake_fd),
        }
    }

    /// Counters since creation: `submissions` counts SQEs of user ops, `enters` every
    /// `io_uring_enter`, `completions` what `wait` delivered.
    pub fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// Whether this driver was created by another process (we are a forked child).
    pub fn is_inherited(&self) -> bool {
        self.pid != std::process::id()
    }

    /// Whether the calling thread is not the one that created the ring.
    pub fn on_other_thread(&self) -> bool {
        self.thread != std::thread::current().id()
    }

    /// Forgets a driver inherited across `fork()` without touching the parent's ring: no SQE
    /// is pushed and no CQE reaped (the ring memory is shared with the parent). Only the
    /// child's own mappings and fd copies go; the waker buffer (the child's copy, which the
    /// kernel never writes: requests run in the parent's context) is leaked.
    pub fn abandon(self) {
        // `Drop` sees `is_inherited()` and does exactly this.
        drop(self);
    }

    /// SQ ring size the kernel gave us (smaller than asked after ENOMEM retries).
    #[doc(hidden)]
    pub fn ring_entries(&self) -> u32 {
        self.ring.params().sq_entries()
    }

    /// Number of user ops in flight (submitted, final CQE not yet reaped).
    #[doc(hidden)]
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    fn arm_waker(&mut self) -> io::Result<()> {
        let fd = self.wake_fd.as_raw_fd();
        let entry = match self.wake_mode {
            WakeMode::Read => ops::read_u64(fd, self.wake_buf.0.as_ptr()),
            WakeMode::Poll => ops::poll_add(fd, Interest::READABLE),
        };
        self.push(&entry.user_data(TOKEN_WAKER))?;
        self.wake_armed = true;
        Ok(())
    }

    /// Pushes one SQE; a full SQ is first handed to the kernel (one enter) to make room.
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        for _ in 0..2 {
            // SAFETY: every SQE this driver builds points only at memory that outlives the
            // op: POLL_ADD and ASYNC_CANCEL carry no pointer; SENDMSG points at the caller's
            // msghdr, which `Op::SendMsg`'s contract keeps valid until the completion;
            // ACCEPT carries no pointer (the peer address is not asked for); the waker READ targets
            // `wake_buf`, freed only after that READ's final CQE or never (see `Drop`); a
            // TIMEOUT points at `timeout_ts`, boxed in `self` (stable address) and copied by
            // the kernel when the SQE is submitted; `Drop` closes the ring before the box is
            // freed, so a TIMEOUT still queued then is never read.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            self.counters.enters += 1;
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if tolerated(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "io_uring: submission queue full",
        ))
    }

    /// One `io_uring_enter`: submit what is queued and wait for a CQE up to `timeout`.
    fn enter(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let res = match timeout {
            Some(Duration::ZERO) => {
                self.counters.enters += 1;
                self.ring.submit()
            }
            None => {
                self.counters.enters += 1;
                self.ring.submit_and_wait(1)
            }
            Some(t) if self.ext_arg => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.counters.enters += 1;
                self.ring.submitter().submit_with_args(1, &args)
            }
            Some(t) => {
                *self.timeout_ts = types::Timespec::from(t);
                let ts: *const types::Timespec = &*self.timeout_ts;
                self.push(&ops::timeout(ts).user_data(TOKEN_TIMEOUT))?;
                self.counters.enters += 1;
                self.ring.submit_and_wait(1)
            }
        };
        match res {
            Ok(_) => Ok(()),
            Err(e) if tolerated(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Moves every CQE out of the CQ ring; internal ones are handled here, never delivered.
    fn reap(&mut self, out: &mut Vec<Completion>) {
        let mut woken = false;
        for cqe in self.ring.completion() {
            match cqe.user_data() {
                TOKEN_WAKER => {
                    self.wake_armed = false;
                    let res = cqe.result();
                    if self.wake_mode == WakeMode::Read && res < 0 && res != -libc::ECANCELED {
                        // Old kernels answer a non-blocking eventfd READ with -EAGAIN at
                        // once; re-arming it would spin. Poll instead, for good.
                        self.wake_mode = WakeMode::Poll;
                    }
                    woken = self.wake_mode == WakeMode::Poll && res >= 0;
                }
                TOKEN_CANCEL | TOKEN_TIMEOUT => {}
                user_data => {
                    let res = cqe.result();
                    let flags = cqe.flags();
                    if res == -libc::ECANCELED {
                        if let Some((_, false)) = self.inflight.get(user_data) {
                            // Not our cancel: the thread that submitted the op exited and
                            // the kernel dropped its requests. Re-arm it from this thread.
                            self.rearm.push(user_data);
                            continue;
                        }
                    }
                    let Some((entry, cancel_sent)) = self.inflight.get(user_data) else {
                        continue;
                    };
                    let performed = match entry.kind {
                        Kind::AcceptPoll => Some(if res < 0 {
                            // Ours (a cancel) or the socket's (`-EBADF`): the end.
                            Some(res)
                        } else if cancel_sent {
                            // Readable, but cancelled: nothing more is accepted.
                            Some(-libc::ECANCELED)
                        } else {
                            accept_batch(entry.fd, entry.token, out)
                        }),
                        Kind::PollEach(interest) => Some(if res < 0 {
                            Some(res)
                        } else if cancel_sent {
                            // Ready, but cancelled: the cancel's answer is the end.
                            Some(-libc::ECANCELED)
                        } else {
                            out.push(Completion {
                                token: entry.token,
                                result: ops::poll_multi_result(res, interest),
                                more: true,
                            });
                            None
                        }),
                        Kind::AcceptMulti
                            if res == -libc::EINVAL && !cancel_sent && !cqueue::more(flags) =>
                        {
                            // Refused: the socket does not listen, or the kernel does not
                            // take the multishot flag after all. Go on as `AcceptPoll`; its
                            // first `accept4` tells the two apart (EINVAL again: the socket
                            // does not listen, the end).
                            self.inflight.set_kind(user_data, Kind::AcceptPoll);
                            let end = accept_batch(entry.fd, entry.token, out);
                            if end.is_none() {
                                self.accept_multi = false;
                            }
                            Some(end)
                        }
                        _ => None,
                    };
                    if let Some(end) = performed {
                        match end {
                            Some(result) => {
                                self.inflight.complete(user_data);
                                out.push(Completion::last(entry.token, result));
                            }
                            None => self.rearm.push(user_data),
                        }
                        continue;
                    }
                    if entry.kind.is_multishot() {
                        let more = cqueue::more(flags);
                        if !more {
                            self.inflight.complete(user_data);
                        }
                        let result = match entry.kind {
                            Kind::PollMulti(interest) if res >= 0 => {
                                ops::poll_multi_result(res, interest)
                            }
                            _ => res,
                        };
                        out.push(Completion {
                            token: entry.token,
                            result,
                            more,
                        });
                        continue;
                    }
                    if let Kind::Poll(interest) = entry.kind {
                        if res >= 0
                            && res & i32::from(libc::POLLOUT) != 0
                            && !cancel_sent
                            && interest.is_writable()
                            && !sys::sock::writable_now(entry.fd)
                        {
                            // Writable when the kernel completed the poll, full again now
                            // (written to since, while the loop was stopped or by a
                            // callback): a selector asked now would not report it, and a
                            // writer that finds the socket full is not harmless (asyncio's
                            // datagram writer resumes a paused protocol even then). Wait
                            // again under the same token, as the poll driver does. Only
                            // for a completion that said POLLOUT: one for the peer's
                            // half-close (POLLRDHUP alone, reported to every poll on the
                            // socket) would complete again at once, a busy loop; the
                            // stream transport's writer handles those (`write_ready`).
                            self.rearm.push(user_data);
                            continue;
                        }
                    }
                    if let Some(entry) = self.inflight.complete(user_data) {
                        let result = match entry.kind {
                            Kind::Poll(interest) if res >= 0 => ops::poll_result(res, interest),
                            _ => res,
                        };
                        out.push(Completion::last(entry.token, result));
                    }
                }
            }
        }
        for i in 0..self.rearm.len() {
            let user_data = self.rearm[i];
            let Some((entry, _)) = self.inflight.get(user_data) else {
                continue;
            };
            let sqe = sqe_for(entry.fd, entry.kind);
            if self.push(&sqe.user_data(user_data)).is_err() {
                self.inflight.complete(user_data);
                // A poll standing in for PollMulti ends as the kernel's multishot poll
                // ends when it cannot go on: a final readiness, which its owner answers by
                // arming it again; so does a one-shot poll waiting again (a spurious
                // readiness, not a watcher gone silent). Anything else ends cancelled.
                let result = match entry.kind {
                    Kind::PollEach(interest) | Kind::Poll(interest) => i32::from(interest.bits()),
                    _ => -libc::ECANCELED,
                };
                out.push(Completion::last(entry.token, result));
            }
        }
        self.rearm.clear();
        if woken {
            // A polled eventfd stays readable until drained; the next POLL_ADD would
            // complete at once otherwise. A failed drain only costs a spurious wake.
            let _ = sys::eventfd::eventfd_drain(&self.wake_fd);
        }
    }

    /// Ends every op in flight now, as dropping the driver does, and returns the
    /// connections its accepts took meanwhile (fds now the caller's): a loop moving to
    /// another thread hands them to their servers rather than dropping them.
    pub fn retire(&mut self) -> Vec<Completion> {
        self.retire_ops()
    }

    /// Cancels every send and accept still in flight and reaps until their final CQEs
    /// (bounded), so the senders' bytes are not read by the kernel after the driver is gone. Returns the connections accepted
    /// in the meantime.
    fn retire_ops(&mut self) -> Vec<Completion> {
        // Connections taken by a submit that no wait handed out yet.
        let mut accepted: Vec<Completion> =
            self.multi.drain(..).filter(|c| c.result >= 0).collect();
        let targets = self.inflight.retire_user_data();
        if targets.is_empty() {
            return accepted;
        }
        let mut accepts = Vec::new();
        for user_data in targets {
            let Some((entry, _)) = self.inflight.get(user_data) else {
                continue;
            };
            if entry.kind.is_accept() {
                accepts.push(entry.token);
            }
            // Through `cancel`, so the final -ECANCELED reads as ours (not re-armed).
            if self.cancel(entry.token).is_err() {
                return accepted;
            }
        }
        let mut reaped = Vec::new();
        for _ in 0..RETIRE_ROUNDS {
            if self.enter(Some(Duration::from_millis(10))).is_err() {
                break;
            }
            self.reap(&mut reaped);
            accepted.extend(
                reaped
                    .drain(..)
                    .filter(|c| c.result >= 0 && accepts.contains(&c.token)),
            );
            if self.inflight.retire_user_data().is_empty() {
                break;
            }
        }
        accepted
    }

    /// Cancels the waker READ and reaps until its final CQE, so `wake_buf` can be freed.
    /// Returns whether no READ into the buffer can still be in flight.
    fn retire_waker(&mut self) -> bool {
        if !self.wake_armed || self.wake_mode != WakeMode::Read {
            return true;
        }
        if self
            .push(&ops::cancel(TOKEN_WAKER).user_data(TOKEN_CANCEL))
            .is_err()
        {
            return false;
        }
        let mut discard = Vec::new();
        for _ in 0..RETIRE_ROUNDS {
            if self.enter(Some(Duration::from_millis(10))).is_err() {
                return false;
            }
            self.reap(&mut discard);
            if !self.wake_armed {
                return true;
            }
        }
        false
    }
}

impl Drop for UringDriver {
    fn drop(&mut self) {
        if self.is_inherited() {
            // The ring's memory is shared with the parent: touch nothing in it. Dropping the
            // IoUring unmaps the child's mappings and closes the child's fd copy, which leave
            // the parent's ring as it was. The buffer is leaked (see `abandon`).
            // SAFETY: dropped once, never used again.
            unsafe { ManuallyDrop::drop(&mut self.ring) };
            return;
        }
        let buf_free = self.retire_waker();
        for c in self.retire_ops() {
            // No one is left to take these connections.
            sys::fd::close_raw(c.result);
        }
        // Closing the ring fd makes the kernel cancel what is still in flight; user ops carry
        // no buffers, so nothing of ours is written after this.
        // SAFETY: dropped once, never used again.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if buf_free {
            // SAFETY: the pointer came from `Box::leak` in `with_options`, and no READ into
            // it is in flight (its final CQE was reaped, or it was never armed), so nothing
            // else references it.
            drop(unsafe { Box::from_raw(self.wake_buf.0.as_ptr()) });
        }
        // Otherwise the 8 bytes are leaked: the kernel may still complete the READ into it.
    }
}

/// Errors from `io_uring_enter` that only mean "nothing (more) this time": the wait timed
/// out (ETIME), a signal came (EINTR), or the CQ is full / resources are short for a moment
/// (EBUSY, EAGAIN); the next wait retries.
fn tolerated(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
    )
}

/// The SQE for an op as the in-flight table records it.
fn sqe_for(fd: i32, kind: Kind) -> squeue::Entry {
    match kind {
        Kind::Poll(interest) => ops::poll_add(fd, interest),
        Kind::AcceptMulti => ops::accept_multi(fd),
        Kind::AcceptPoll => ops::poll_add(fd, Interest::READABLE),
        Kind::SendMsg(msg) => ops::send_msg(fd, msg as *const libc::msghdr),
        Kind::PollMulti(interest) => ops::poll_multi(fd, interest),
        Kind::PollEach(interest) => ops::poll_each(fd, interest),
    }
}

/// `interest`, refused when empty (a poll for nothing would never complete).
fn nonempty(interest: Interest) -> io::Result<Interest> {
    if interest.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: Poll op with empty interest",
        ));
    }
    Ok(interest)
}

/// Accepts what is waiting on the listening socket `fd` (non-blocking, as asyncio's are),
/// at most `ACCEPT_BATCH` connections, each a `Completion` with `more` in `out` (the
/// new fds non-blocking and close-on-exec, as the kernel's accept makes them). `Some(-errno)`
/// when an error other than "nothing left" (`EAGAIN`, `ECONNABORTED`, `EINTR`, as asyncio
/// reads them) ends the accept: `-EINVAL` for a socket that does not listen; `None` to wait
/// for the next readiness.
fn accept_batch(fd: RawFd, token: Token, out: &mut Vec<Completion>) -> Option<i32> {
    for _ in 0..ACCEPT_BATCH {
        match sys::sock::accept_nowait(fd) {
            Ok(conn) => out.push(Completion {
                token,
                result: conn,
                more: true,
            }),
            Err(e) => {
                // (EWOULDBLOCK is EAGAIN on Linux.)
                return match e.raw_os_error().unwrap_or(libc::EIO) {
                    libc::EAGAIN | libc::ECONNABORTED | libc::EINTR => None,
                    code => Some(-code),
                };
            }
        }
    }
    None
}

fn check_token(token: Token) -> io::Result<()> {
    if token == u64::MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "driver: token u64::MAX is reserved",
        ));
    }
    Ok(())
}

#[allow(dead_code)]
fn _assert_kinds() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<UringDriver>();
    send_sync::<UringWaker>();
}
