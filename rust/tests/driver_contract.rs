//! The driver contract (`driver/mod.rs`), checked on every driver this platform can build:
//! `poll` always; `uring` (plus its old-kernel fallbacks) on Linux, where a ring that cannot
//! be created fails the tests unless `RSLOOP_EXPECT_NO_URING=1` declares a machine without one.
//!
//! `Op::SendMsg` is checked on every driver too: `poll` emulates it inside itself (one
//! `sendmsg` at once, retried on writability), with io_uring's contract. So is
//! `Op::AcceptMulti`: the kernel's multishot accept on `uring`; performed by the driver
//! (readiness, then `accept4`) on `poll` and on the ring with the old-kernel paths.
//!
//! `Op::PollMulti` too: the kernel's multishot POLL_ADD on `uring`, re-armed one-shot polls
//! on the ring with the old-kernel paths, the kept edge-triggered registration on `poll`.
//!
//! Closed fds, per backend: `poll` refuses a closed fd in `submit` (`EBADF`); `uring`
//! accepts it and completes the op with `-EBADF` in the next `wait`. Either way: no hang.

#![cfg(unix)]

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use _rsloop::driver::{self, Completion, Driver, Interest, Op, Requested};

const R: Interest = Interest::READABLE;
const W: Interest = Interest::WRITABLE;
const QUIET: Duration = Duration::from_millis(50);
const PATIENCE: Duration = Duration::from_secs(5);

/// Every driver to test, by name.
fn drivers() -> Vec<(&'static str, Driver)> {
    #[allow(unused_mut)] // only Linux adds io_uring drivers
    let mut all = vec![(
        "poll",
        driver::select(Requested::Poll).expect("poll driver").0,
    )];
    #[cfg(uring)]
    {
        use _rsloop::driver::uring::{UringDriver, UringOptions};
        match UringDriver::new() {
            Ok(d) => {
                all.push(("uring", Driver::Uring(d)));
                let old = UringOptions {
                    no_ext_arg: true,
                    poll_waker: true,
                    no_accept_multi: true,
                    no_poll_multi: true,
                };
                all.push((
                    "uring(old-kernel paths)",
                    Driver::Uring(UringDriver::with_options(old).expect("second ring")),
                ));
            }
            // A refused ring fails the contract, unless the machine is declared to have
            // no io_uring.
            Err(e) => {
                let declared = std::env::var_os("RSLOOP_EXPECT_NO_URING").is_some_and(|v| v == "1");
                assert!(
                    declared,
                    "no io_uring ring ({e}); RSLOOP_EXPECT_NO_URING=1 if none"
                );
                eprintln!("skipping uring (RSLOOP_EXPECT_NO_URING=1): {e}");
            }
        }
    }
    all
}

/// Runs `check` on every driver, naming the driver in a failure.
fn each(check: impl Fn(&str, &mut Driver)) {
    for (name, mut d) in drivers() {
        check(name, &mut d);
    }
}

fn poll(fd: RawFd, interest: Interest) -> Op {
    Op::Poll { fd, interest }
}

/// Waits until `n` completions arrived (or `PATIENCE` passed), then once more briefly to
/// catch extras.
fn collect(d: &mut Driver, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while out.len() < n && Instant::now() < deadline {
        d.wait(Some(Duration::from_millis(100)), &mut out).unwrap();
    }
    d.wait(Some(Duration::from_millis(10)), &mut out).unwrap();
    out
}

fn quiet(name: &str, d: &mut Driver) {
    let mut out = Vec::new();
    d.wait(Some(QUIET), &mut out).unwrap();
    assert!(out.is_empty(), "{name}: unexpected completions {out:?}");
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// A socket pair whose first end has an fd number of at least `min`, far above the ones
/// tests running in parallel get (the lowest free ones): once closed, that number stays
/// free, where a closed low number can be taken at once by another thread's `pair()`.
/// Each test passes its own `min`, so two such tests never share a number either.
fn pair_with_high_fd(min: RawFd) -> (UnixStream, UnixStream) {
    let (a, b) = pair();
    // SAFETY: duplicates an fd we own; the result is checked and owned by the OwnedFd below.
    let high = unsafe { libc::fcntl(a.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    assert!(
        high >= min,
        "F_DUPFD_CLOEXEC: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `high` is a fresh descriptor nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(high) };
    (UnixStream::from(owned), b)
}

fn c(token: u64, result: i32) -> Completion {
    Completion::last(token, result)
}

fn poll_multi(fd: RawFd, interest: Interest) -> Op {
    Op::PollMulti { fd, interest }
}

/// At least one completion came, and every one reports `token` ready for `bits`, with more
/// to come. (A driver that re-arms a one-shot poll may report readiness that stayed once
/// more: the contract allows it.)
fn assert_multi_ready(name: &str, got: &[Completion], token: u64, bits: i32) {
    assert!(!got.is_empty(), "{name}: no completion");
    let want = Completion {
        token,
        result: bits,
        more: true,
    };
    assert!(got.iter().all(|g| *g == want), "{name}: {got:?}");
}

#[test]
fn readable_only_after_write() {
    each(|name, d| {
        let (a, mut b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        quiet(name, d);
        b.write_all(b"x").unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}");
    });
}

#[test]
fn pipe_readable_after_write() {
    each(|name, d| {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        d.submit(1, poll(fds[0], R)).unwrap();
        quiet(name, d);
        // SAFETY: writes one byte from a live buffer to the pipe we own.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}");
        // Closing the write end: the reader sees EOF (hang-up) as readable.
        d.submit(2, poll(fds[0], R)).unwrap();
        // SAFETY: closes fds we own, once.
        unsafe { libc::close(fds[1]) };
        assert_eq!(collect(d, 1), vec![c(2, 1)], "{name}");
        // SAFETY: as above.
        unsafe { libc::close(fds[0]) };
    });
}

#[test]
fn writable_immediately() {
    each(|name, d| {
        let (a, _b) = pair();
        d.submit(7, poll(a.as_raw_fd(), W)).unwrap();
        assert_eq!(collect(d, 1), vec![c(7, 2)], "{name}");
    });
}

#[test]
fn one_shot_then_level_on_resubmit() {
    each(|name, d| {
        let (a, mut b) = pair();
        b.write_all(b"data").unwrap();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}");
        // One-shot: nothing more without a new submit, though still readable.
        quiet(name, d);
        // Level: the unread data makes a new submit complete again.
        d.submit(2, poll(a.as_raw_fd(), R)).unwrap();
        assert_eq!(collect(d, 1), vec![c(2, 1)], "{name}");
        d.submit(3, poll(a.as_raw_fd(), R)).unwrap();
        assert_eq!(collect(d, 1), vec![c(3, 1)], "{name}");
        // Once drained, a new submit waits again.
        let mut buf = [0u8; 16];
        assert_eq!((&a).read(&mut buf).unwrap(), 4);
        d.submit(4, poll(a.as_raw_fd(), R)).unwrap();
        quiet(name, d);
        d.cancel(4).unwrap();
        assert_eq!(collect(d, 1), vec![c(4, -libc::ECANCELED)], "{name}");
    });
}

#[test]
fn cancel_yields_exactly_one_final_completion() {
    each(|name, d| {
        let (a, mut b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
        d.cancel(1).unwrap();
        d.cancel(1).unwrap(); // a second cancel adds nothing
        assert_eq!(collect(d, 1), vec![c(1, -libc::ECANCELED)], "{name}");
        b.write_all(b"x").unwrap();
        quiet(name, d);
        // Cancelling unknown or finished tokens is harmless.
        d.cancel(1).unwrap();
        d.cancel(12345).unwrap();
        quiet(name, d);
    });
}

#[test]
fn cancel_before_any_wait() {
    each(|name, d| {
        let (a, _b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.cancel(1).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, -libc::ECANCELED)], "{name}");
    });
}

#[test]
fn cancel_racing_readiness_completes_once() {
    each(|name, d| {
        let (a, _b) = pair();
        d.submit(1, poll(a.as_raw_fd(), W)).unwrap();
        d.cancel(1).unwrap();
        let got = collect(d, 1);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert!(
            got[0] == c(1, 2) || got[0] == c(1, -libc::ECANCELED),
            "{name}: {got:?}"
        );
    });
}

#[test]
fn pending_cancel_makes_wait_return_without_blocking() {
    each(|name, d| {
        let (a, _b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
        d.cancel(1).unwrap();
        let t = Instant::now();
        let mut out = Vec::new();
        d.wait(Some(Duration::from_secs(10)), &mut out).unwrap();
        assert_eq!(out, vec![c(1, -libc::ECANCELED)], "{name}");
        assert!(t.elapsed() < Duration::from_secs(5), "{name}: blocked");
    });
}

#[test]
fn timeout_is_respected() {
    each(|name, d| {
        let (a, _b) = pair();
        for with_op in [false, true] {
            if with_op {
                d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
            }
            let t = Instant::now();
            let mut out = Vec::new();
            d.wait(Some(Duration::from_millis(50)), &mut out).unwrap();
            let took = t.elapsed();
            assert!(out.is_empty(), "{name}: {out:?}");
            assert!(
                took >= Duration::from_millis(45),
                "{name}: woke after {took:?}"
            );
            assert!(took < Duration::from_secs(3), "{name}: slept {took:?}");
        }
    });
}

#[test]
fn waker_interrupts_blocking_wait() {
    each(|name, d| {
        let waker = d.waker();
        let t = Instant::now();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            waker.wake().unwrap();
        });
        let mut out = Vec::new();
        d.wait(None, &mut out).unwrap();
        th.join().unwrap();
        assert!(
            out.is_empty(),
            "{name}: a wake is not a completion: {out:?}"
        );
        assert!(t.elapsed() < PATIENCE, "{name}");
        // Again: the waker re-arms; wakes before the wait are not lost, and many coalesce.
        for _ in 0..3 {
            d.waker().wake().unwrap();
        }
        let t = Instant::now();
        d.wait(None, &mut out).unwrap();
        assert!(t.elapsed() < PATIENCE, "{name}");
        // Drained: the next wait sleeps for its timeout.
        let mut rounds = 0;
        loop {
            let t = Instant::now();
            d.wait(Some(QUIET), &mut out).unwrap();
            if t.elapsed() >= Duration::from_millis(45) {
                break;
            }
            rounds += 1;
            assert!(rounds < 3, "{name}: waker keeps firing");
        }
        assert!(out.is_empty(), "{name}");
    });
}

#[test]
fn waker_works_from_many_threads() {
    each(|name, d| {
        let waker = d.waker();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let w = waker.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        w.wake().unwrap();
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let t = Instant::now();
        d.wait(None, &mut Vec::new()).unwrap();
        assert!(t.elapsed() < PATIENCE, "{name}");
    });
}

#[test]
fn reader_and_writer_on_one_fd() {
    each(|name, d| {
        let (a, mut b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.submit(2, poll(a.as_raw_fd(), W)).unwrap();
        assert_eq!(collect(d, 1), vec![c(2, 2)], "{name}: writer first");
        b.write_all(b"x").unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}: then reader");
        // Both ready at once: both complete, each with its own bit.
        d.submit(3, poll(a.as_raw_fd(), R)).unwrap();
        d.submit(4, poll(a.as_raw_fd(), W)).unwrap();
        let mut got = collect(d, 2);
        got.sort_by_key(|c| c.token);
        assert_eq!(got, vec![c(3, 1), c(4, 2)], "{name}");
        // One op asking for both.
        d.submit(5, poll(a.as_raw_fd(), R.add(W))).unwrap();
        assert_eq!(collect(d, 1), vec![c(5, 3)], "{name}");
    });
}

#[test]
fn hangup_wakes_reader_and_writer() {
    each(|name, d| {
        let (a, b) = pair();
        let mut buf = vec![0u8; 1 << 16];
        // Fill a's send buffer so the writer really waits.
        while (&a).write(&buf).is_ok() {}
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.submit(2, poll(a.as_raw_fd(), W)).unwrap();
        quiet(name, d);
        drop(b);
        let mut got = collect(d, 2);
        got.sort_by_key(|c| c.token);
        assert_eq!(got, vec![c(1, 1), c(2, 2)], "{name}");
        // The peer closed with our data unread: EOF or ECONNRESET, never EAGAIN.
        match (&a).read(&mut buf) {
            Ok(n) => assert_eq!(n, 0, "{name}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{name}"),
        }
    });
}

#[test]
fn closed_fd_errors_or_completes_with_ebadf() {
    each(|name, d| {
        let (a, _b) = pair_with_high_fd(900);
        let fd = a.as_raw_fd();
        drop(a);
        for (token, fd) in [(1, fd), (2, -1)] {
            match d.submit(token, poll(fd, R)) {
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{name}: {e}"),
                Ok(()) => assert_eq!(collect(d, 1), vec![c(token, -libc::EBADF)], "{name}"),
            }
        }
        // The driver still works afterwards.
        let (a, _b) = pair();
        d.submit(3, poll(a.as_raw_fd(), W)).unwrap();
        assert_eq!(collect(d, 1), vec![c(3, 2)], "{name}");
    });
}

#[test]
fn fd_closed_while_known_to_driver_never_hangs() {
    each(|name, d| {
        let (a, _b) = pair_with_high_fd(950);
        let fd = a.as_raw_fd();
        d.submit(1, poll(fd, W)).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 2)], "{name}");
        drop(a);
        match d.submit(2, poll(fd, R)) {
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{name}: {e}"),
            Ok(()) => {
                let got = collect(d, 1);
                assert_eq!(got.len(), 1, "{name}: {got:?}");
                assert!(got[0].result < 0, "{name}: {got:?}");
            }
        }
    });
}

#[test]
fn zero_wait_with_nothing_queued_makes_no_syscall() {
    each(|name, d| {
        // Let the driver settle (the uring waker is armed on the first blocking wait).
        d.wait(Some(Duration::from_millis(1)), &mut Vec::new())
            .unwrap();
        let before = d.counters().enters;
        for _ in 0..10 {
            d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
        }
        assert_eq!(d.counters().enters, before, "{name}");
        // With something queued, the zero wait submits it (one enter).
        let (a, _b) = pair();
        d.submit(1, poll(a.as_raw_fd(), W)).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 2)], "{name}");
    });
}

#[test]
fn counters_count() {
    each(|name, d| {
        let (a, _b) = pair();
        let start = d.counters();
        d.submit(1, poll(a.as_raw_fd(), W)).unwrap();
        d.submit(2, poll(a.as_raw_fd(), R)).unwrap();
        assert_eq!(collect(d, 1).len(), 1);
        d.cancel(2).unwrap();
        assert_eq!(collect(d, 1).len(), 1);
        let now = d.counters();
        assert!(now.submissions > start.submissions, "{name}: {now:?}");
        assert!(now.enters > start.enters, "{name}: {now:?}");
        assert_eq!(now.completions - start.completions, 2, "{name}: {now:?}");
    });
}

#[test]
fn bad_submissions_are_refused() {
    each(|name, d| {
        let (a, _b) = pair();
        let fd = a.as_raw_fd();
        assert!(d.submit(1, poll(fd, Interest::NONE)).is_err(), "{name}");
        assert!(d.submit(u64::MAX, poll(fd, R)).is_err(), "{name}");
        d.submit(1, poll(fd, R)).unwrap();
        let e = d.submit(1, poll(fd, W)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{name}");
        d.cancel(1).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, -libc::ECANCELED)], "{name}");
    });
}

#[test]
fn many_ops_overflow_the_queues() {
    // More ops than the SQ (256) and the CQ (512) hold: all still complete, once each.
    each(|name, d| {
        let (a, _b) = pair();
        let n = 1500;
        for t in 0..n {
            d.submit(t, poll(a.as_raw_fd(), W)).unwrap();
        }
        let got = collect(d, n as usize);
        assert_eq!(got.len(), n as usize, "{name}");
        let mut tokens: Vec<u64> = got.iter().map(|c| c.token).collect();
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), n as usize, "{name}");
        assert!(got.iter().all(|c| c.result == 2), "{name}");
    });
}

#[test]
fn many_fds() {
    each(|name, d| {
        let pairs: Vec<_> = (0..64).map(|_| pair()).collect();
        for (i, (a, _)) in pairs.iter().enumerate() {
            d.submit(i as u64, poll(a.as_raw_fd(), R)).unwrap();
        }
        quiet(name, d);
        for (_, b) in pairs.iter().step_by(2) {
            (&*b).write_all(b"x").unwrap();
        }
        let mut got = collect(d, 32);
        got.sort_by_key(|c| c.token);
        let want: Vec<_> = (0..64).step_by(2).map(|t| c(t, 1)).collect();
        assert_eq!(got, want, "{name}");
        for t in (1..64).step_by(2) {
            d.cancel(t).unwrap();
        }
        assert_eq!(collect(d, 32).len(), 32, "{name}");
    });
}

#[test]
fn driver_can_move_between_threads() {
    // asyncio loops are created on one thread and run on another.
    for (name, mut d) in drivers() {
        let (a, mut b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        let waker = d.waker();
        let th = std::thread::spawn(move || {
            let got = collect(&mut d, 1);
            d.wait(None, &mut Vec::new()).unwrap(); // returns on the wake below
            got
        });
        std::thread::sleep(Duration::from_millis(20));
        b.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        waker.wake().unwrap();
        assert_eq!(th.join().unwrap(), vec![c(1, 1)], "{name}");
    }
}

#[test]
fn fork_child_abandons_without_breaking_parent() {
    for (name, mut d) in drivers() {
        let (a, mut b) = pair();
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
        assert!(!d.is_inherited());
        // SAFETY: the child only checks the driver, abandons it and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = if d.is_inherited() { 0 } else { 1 };
            d.abandon();
            // SAFETY: ends the child without running the parent's atexit/test harness.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child we just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{name}: child crashed: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "{name}: child saw no fork");
        b.write_all(b"x").unwrap();
        assert_eq!(collect(&mut d, 1), vec![c(1, 1)], "{name}: parent broken");
        d.waker().wake().unwrap();
        d.wait(None, &mut Vec::new()).unwrap();
    }
}

#[test]
fn ops_survive_the_exit_of_the_thread_that_submitted_them() {
    // The kernel cancels an exiting thread's io_uring requests; the driver must hide that.
    for (name, d) in drivers() {
        let (a, mut b) = pair();
        let fd = a.as_raw_fd();
        let mut d = std::thread::spawn(move || {
            let mut d = d;
            d.submit(1, poll(fd, R)).unwrap();
            d.wait(Some(Duration::from_millis(5)), &mut Vec::new())
                .unwrap();
            d
        })
        .join()
        .unwrap();
        quiet(name, &mut d);
        b.write_all(b"x").unwrap();
        assert_eq!(collect(&mut d, 1), vec![c(1, 1)], "{name}");
        // The waker (armed by the dead thread too) still works.
        let w = d.waker();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w.wake().unwrap();
        });
        let t = Instant::now();
        d.wait(None, &mut Vec::new()).unwrap();
        th.join().unwrap();
        assert!(t.elapsed() < PATIENCE, "{name}");
        d.cancel(1).unwrap();
        quiet(name, &mut d);
    }
}

// ----- Op::SendMsg: one sendmsg, one completion (bytes or -errno), on both drivers -----

/// A `msghdr` over owned bytes, alive (and unmoved: boxed) until the send completes, as
/// `Op::SendMsg`'s contract asks.
struct Msg {
    hdr: Box<libc::msghdr>,
    _iov: Vec<libc::iovec>,
    _parts: Vec<Vec<u8>>,
}

impl Msg {
    fn new(parts: Vec<Vec<u8>>) -> Msg {
        let mut iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: an all-zero `msghdr` is a valid empty header.
        let mut hdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        hdr.msg_iov = iov.as_mut_ptr();
        hdr.msg_iovlen = iov.len() as _;
        Msg {
            hdr,
            _iov: iov,
            _parts: parts,
        }
    }

    fn op(&self, fd: RawFd) -> Op {
        Op::SendMsg {
            fd,
            msg: &*self.hdr as *const libc::msghdr as usize,
        }
    }
}

/// Writes into `a` until its send buffer is full.
fn fill(a: &UnixStream) {
    let chunk = vec![0u8; 1 << 16];
    while (&*a).write(&chunk).is_ok() {}
}

/// Reads everything `b` has now (it is non-blocking); returns the byte count.
fn drain(b: &UnixStream) -> usize {
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    while let Ok(n) = (&*b).read(&mut buf) {
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

#[test]
fn send_msg_completes_with_the_bytes_sent_in_order() {
    each(|name, d| {
        let (a, mut b) = pair();
        let msg = Msg::new(vec![
            b"hello ".to_vec(),
            b"gathered ".to_vec(),
            b"world".to_vec(),
        ]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 20)], "{name}");
        let mut got = [0u8; 32];
        let n = b.read(&mut got).unwrap();
        assert_eq!(&got[..n], b"hello gathered world", "{name}");
        // The same token can be used again once its completion came.
        let again = Msg::new(vec![b"!".to_vec()]);
        d.submit(1, again.op(a.as_raw_fd())).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}");
    });
}

#[test]
fn held_completions_come_with_the_next_wait_without_blocking() {
    each(|name, d| {
        let (a, mut b) = pair();
        assert!(!d.holds_completions(), "{name}: nothing submitted yet");
        let msg = Msg::new(vec![b"ready".to_vec()]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        // Nothing ever arrives on `a`: only the cancel ends this one.
        d.submit(2, poll(a.as_raw_fd(), R)).unwrap();
        d.cancel(2).unwrap();
        let mut out = Vec::new();
        // `poll` performed the send (the socket had room) and the cancel itself.
        assert!(name != "poll" || d.holds_completions(), "{name}");
        if d.holds_completions() {
            // A driver that says it holds completions delivers them at once, even to a
            // wait that would otherwise block for as long as it is allowed to.
            let started = Instant::now();
            d.wait(Some(PATIENCE), &mut out).unwrap();
            assert!(started.elapsed() < PATIENCE / 2, "{name}: the wait blocked");
            assert!(!out.is_empty(), "{name}: held completions not delivered");
        }
        // Either way, one completion per op, the same on every driver.
        let deadline = Instant::now() + PATIENCE;
        while out.len() < 2 && Instant::now() < deadline {
            d.wait(Some(Duration::from_millis(100)), &mut out).unwrap();
        }
        out.sort_by_key(|c| c.token);
        assert_eq!(out, vec![c(1, 5), c(2, -libc::ECANCELED)], "{name}");
        assert!(!d.holds_completions(), "{name}: all delivered");
        let mut got = [0u8; 8];
        assert_eq!(b.read(&mut got).unwrap(), 5, "{name}");
        quiet(name, d);
    });
}

#[test]
fn send_msg_waits_for_room_then_completes_once_partially() {
    each(|name, d| {
        let (a, b) = pair();
        fill(&a);
        let big = 1 << 20;
        let msg = Msg::new(vec![vec![7u8; big]]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        // The kernel refused (EAGAIN): no completion until there is room.
        quiet(name, d);
        let mut drained = drain(&b);
        let got = collect(d, 1);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        let sent = got[0].result;
        assert!(got[0].token == 1 && sent > 0, "{name}: {got:?}");
        // One sendmsg: what fit, never the whole megabyte through a small socket buffer.
        assert!((sent as usize) < big, "{name}: {sent}");
        quiet(name, d);
        // Exactly those bytes arrived, and nothing else is sent later.
        std::thread::sleep(Duration::from_millis(20));
        drained += drain(&b);
        let mut rest = Vec::new();
        d.wait(Some(Duration::ZERO), &mut rest).unwrap();
        drained += drain(&b);
        assert!(rest.is_empty(), "{name}: {rest:?}");
        assert!(drained >= sent as usize, "{name}: {drained} < {sent}");
        drop(msg);
    });
}

#[test]
fn send_msg_waiting_for_room_is_cancelled_with_ecanceled() {
    each(|name, d| {
        let (a, b) = pair();
        fill(&a);
        let msg = Msg::new(vec![vec![9u8; 4096]]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        quiet(name, d);
        d.cancel(1).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, -libc::ECANCELED)], "{name}");
        // Cancelled before the kernel took anything: none of its bytes ever arrive.
        let mut buf = vec![0u8; 1 << 16];
        let mut nines = 0;
        let deadline = Instant::now() + Duration::from_millis(100);
        while Instant::now() < deadline {
            match (&b).read(&mut buf) {
                Ok(n) => nines += buf[..n].iter().filter(|&&x| x == 9).count(),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        assert_eq!(nines, 0, "{name}");
        quiet(name, d);
        drop(msg);
    });
}

#[test]
fn send_msg_to_a_closed_peer_fails_with_epipe() {
    each(|name, d| {
        let (a, b) = pair();
        drop(b);
        let msg = Msg::new(vec![b"late".to_vec()]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        let got = collect(d, 1);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        let r = got[0].result;
        assert!(
            r == -libc::EPIPE || r == -libc::ECONNRESET,
            "{name}: {got:?}"
        );
    });
}

#[test]
fn send_msg_waiting_for_room_fails_when_the_peer_closes() {
    each(|name, d| {
        let (a, b) = pair();
        fill(&a);
        let msg = Msg::new(vec![vec![1u8; 4096]]);
        d.submit(1, msg.op(a.as_raw_fd())).unwrap();
        quiet(name, d);
        drop(b);
        let got = collect(d, 1);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        let r = got[0].result;
        assert!(
            r == -libc::EPIPE || r == -libc::ECONNRESET,
            "{name}: {got:?}"
        );
    });
}

#[test]
fn send_msg_beside_a_reader_and_a_writer_on_the_same_fd() {
    each(|name, d| {
        let (a, mut b) = pair();
        fill(&a);
        let msg = Msg::new(vec![vec![5u8; 4096]]);
        d.submit(1, poll(a.as_raw_fd(), R)).unwrap();
        d.submit(2, msg.op(a.as_raw_fd())).unwrap();
        d.submit(3, poll(a.as_raw_fd(), W)).unwrap();
        quiet(name, d);
        // Data for the reader: only the reader completes; the send and writer wait on.
        b.write_all(b"x").unwrap();
        assert_eq!(collect(d, 1), vec![c(1, 1)], "{name}");
        quiet(name, d);
        // Room: the writer and the send complete, once each.
        drain(&b);
        let mut got = collect(d, 2);
        got.sort_by_key(|c| c.token);
        assert_eq!(got.len(), 2, "{name}: {got:?}");
        assert_eq!(got[1], c(3, 2), "{name}");
        assert_eq!(got[0].token, 2, "{name}: {got:?}");
        assert!(got[0].result > 0, "{name}: {got:?}");
        // The reader is re-armed beside nothing else and still sees the unread byte.
        d.submit(4, poll(a.as_raw_fd(), R)).unwrap();
        assert_eq!(collect(d, 1), vec![c(4, 1)], "{name}");
        quiet(name, d);
    });
}

#[test]
fn send_msg_to_a_bad_fd_completes_or_fails_with_ebadf() {
    each(|name, d| {
        let msg = Msg::new(vec![b"x".to_vec()]);
        match d.submit(1, msg.op(-1)) {
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{name}: {e}"),
            Ok(()) => assert_eq!(collect(d, 1), vec![c(1, -libc::EBADF)], "{name}"),
        }
    });
}

// ----- Op::AcceptMulti: a completion per connection, one final, on both drivers -----

/// Waits (bounded) until `n` completions came.
fn multi_within(d: &mut Driver, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while out.len() < n && Instant::now() < deadline {
        d.wait(Some(Duration::from_millis(50)), &mut out).unwrap();
    }
    out
}

fn accept_multi(fd: RawFd) -> Op {
    Op::AcceptMulti { fd }
}

#[test]
fn accept_multi_delivers_connections_then_cancels() {
    use std::net::{TcpListener, TcpStream};
    each(|name, d| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        // One connection waits before the accept starts, two come after.
        let mut clients = vec![TcpStream::connect(addr).unwrap()];
        d.submit(5, accept_multi(listener.as_raw_fd())).unwrap();
        clients.extend((0..2).map(|_| TcpStream::connect(addr).unwrap()));
        let got = multi_within(d, 3);
        assert_eq!(got.len(), 3, "{name}: {got:?}");
        for c in &got {
            assert!(c.token == 5 && c.more && c.result >= 0, "{name}: {c:?}");
            // SAFETY: F_GETFL/F_GETFD take no pointer argument; the fd is ours.
            let (fl, fdfl) = unsafe {
                (
                    libc::fcntl(c.result, libc::F_GETFL),
                    libc::fcntl(c.result, libc::F_GETFD),
                )
            };
            assert!(fl & libc::O_NONBLOCK != 0, "{name}: blocking fd");
            assert!(fdfl & libc::FD_CLOEXEC != 0, "{name}: inheritable fd");
        }
        // Each fd is a client's peer: bytes written by every client arrive on one of them.
        for client in &mut clients {
            client.write_all(b"hi").unwrap();
        }
        let mut total = 0;
        for c in &got {
            // SAFETY: the accepted fd is the caller's, owned from here on.
            let mut s = UnixStreamLike(unsafe { OwnedFd::from_raw_fd(c.result) });
            total += s.read_within(PATIENCE);
        }
        assert_eq!(total, 6, "{name}");
        d.cancel(5).unwrap();
        let last = multi_within(d, 1);
        assert_eq!(
            last.iter().map(|c| (c.result, c.more)).collect::<Vec<_>>(),
            vec![(-libc::ECANCELED, false)],
            "{name}"
        );
        // Cancelled: a new client is not accepted.
        let _late = TcpStream::connect(addr).unwrap();
        let mut done = Vec::new();
        d.wait(Some(QUIET), &mut done).unwrap();
        assert!(done.is_empty(), "{name}: {done:?}");
        d.cancel(5).unwrap();
        quiet(name, d);
    });
}

#[test]
fn accept_multi_on_a_socket_that_does_not_listen_ends_with_einval() {
    each(|name, d| {
        let (_a, b) = pair();
        d.submit(6, accept_multi(b.as_raw_fd())).unwrap();
        let got = multi_within(d, 1);
        assert_eq!(
            got.iter()
                .map(|c| (c.token, c.result, c.more))
                .collect::<Vec<_>>(),
            vec![(6, -libc::EINVAL, false)],
            "{name}"
        );
    });
}

#[test]
fn accept_multi_takes_more_connections_than_one_batch() {
    use std::net::{TcpListener, TcpStream};
    // The drivers that accept by readiness take 100 per readiness: the rest come after.
    const N: usize = 120;
    each(|name, d| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let _clients: Vec<TcpStream> = (0..N).map(|_| TcpStream::connect(addr).unwrap()).collect();
        d.submit(9, accept_multi(listener.as_raw_fd())).unwrap();
        let got = multi_within(d, N);
        assert_eq!(got.len(), N, "{name}");
        let mut fds: Vec<i32> = got
            .iter()
            .map(|c| {
                assert!(c.token == 9 && c.more && c.result >= 0, "{name}: {c:?}");
                c.result
            })
            .collect();
        fds.sort_unstable();
        fds.dedup();
        assert_eq!(fds.len(), N, "{name}: an fd twice");
        for fd in fds {
            // SAFETY: the accepted fd is ours and closed once.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        d.cancel(9).unwrap();
        let last = multi_within(d, 1);
        assert_eq!(
            last.iter().map(|c| (c.result, c.more)).collect::<Vec<_>>(),
            vec![(-libc::ECANCELED, false)],
            "{name}"
        );
    });
}

#[test]
fn dropping_a_driver_closes_connections_no_one_took() {
    use std::net::{TcpListener, TcpStream};
    each(|name, d| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        d.submit(8, accept_multi(listener.as_raw_fd())).unwrap();
        d.submit_now().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // Accepted by the driver and never handed out by a `wait`: dropping the driver
        // closes it (a connection a `wait` returned is the caller's).
        let mut spare = driver::select(Requested::Poll).unwrap().0;
        std::mem::swap(d, &mut spare);
        drop(spare);
        client.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap(), 0, "{name}: not closed");
    });
}

/// An accepted fd read as a stream, bounded in time.
struct UnixStreamLike(OwnedFd);

impl UnixStreamLike {
    fn read_within(&mut self, patience: Duration) -> usize {
        let deadline = Instant::now() + patience;
        let mut buf = [0u8; 16];
        loop {
            // SAFETY: reads into a live local buffer from an fd we own.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                return n as usize;
            }
            assert!(Instant::now() < deadline, "no bytes");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn poll_multi_reports_each_new_readiness_until_cancelled() {
    each(|name, d| {
        let (a, mut b) = pair();
        d.submit(1, poll_multi(a.as_raw_fd(), R)).unwrap();
        quiet(name, d);
        for round in 0..3 {
            b.write_all(b"x").unwrap();
            assert_multi_ready(&format!("{name}, round {round}"), &collect(d, 1), 1, 1);
            drain(&a);
            quiet(name, d);
        }
        d.cancel(1).unwrap();
        assert_eq!(collect(d, 1), vec![c(1, -libc::ECANCELED)], "{name}");
        b.write_all(b"y").unwrap();
        quiet(name, d);
    });
}

#[test]
fn poll_multi_armed_on_a_ready_fd_reports_it_at_once() {
    each(|name, d| {
        let (a, mut b) = pair();
        b.write_all(b"early").unwrap();
        d.submit(7, poll_multi(a.as_raw_fd(), R)).unwrap();
        assert_multi_ready(name, &collect(d, 1), 7, 1);
        // A poll for writability on the same fd beside it: each completes on its own.
        d.submit(8, poll(a.as_raw_fd(), W)).unwrap();
        let got = collect(d, 1);
        assert!(got.contains(&c(8, 2)), "{name}: {got:?}");
        drain(&a);
        d.cancel(7).unwrap();
        let end = collect(d, 1);
        assert!(end.contains(&c(7, -libc::ECANCELED)), "{name}: {end:?}");
    });
}

#[test]
fn poll_multi_with_empty_interest_is_refused() {
    each(|name, d| {
        let (a, _b) = pair();
        let err = d.submit(1, poll_multi(a.as_raw_fd(), Interest::NONE));
        assert!(err.is_err(), "{name}");
    });
}
