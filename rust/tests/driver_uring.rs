//! io_uring-only behaviour: setup failures and their reasons (simulated per thread with a
//! seccomp filter, the way container runtimes refuse io_uring), the ENOMEM retry, fork, drop.
//! When this machine cannot create a ring at all, every test fails, unless
//! `RSLOOP_EXPECT_NO_URING=1` declares a machine without io_uring: then they skip, printing
//! the reason. A refused ring must not pass as a green run.

#![cfg(uring)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use _rsloop::driver::uring::{UringDriver, UringOptions};
use _rsloop::driver::{self, Completion, Driver, DriverKind, Interest, Op, Requested};
use _rsloop::sys;

/// Whether the machine is declared to have no io_uring (`RSLOOP_EXPECT_NO_URING=1`).
fn expect_no_uring() -> bool {
    std::env::var_os("RSLOOP_EXPECT_NO_URING").is_some_and(|v| v == "1")
}

/// A ring, or `None` after printing why this machine has none, when it is declared to have
/// none; otherwise a failure.
fn ring() -> Option<UringDriver> {
    // Not `new`: its test hook (`RSLOOP_TEST_URING_NO_ACCEPT_MULTI`) must not turn the
    // kernel's multishot accept, which these tests check, into the driver's own.
    match UringDriver::with_options(UringOptions::default()) {
        Ok(d) => Some(d),
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with("io_uring"), "unreadable reason: {text}");
            assert!(
                expect_no_uring(),
                "no io_uring ring could be created ({text}); set RSLOOP_EXPECT_NO_URING=1 \
                 only on a machine that has none"
            );
            eprintln!("skipping (RSLOOP_EXPECT_NO_URING=1): {text}");
            None
        }
    }
}

/// Runs `f` on a new thread whose syscall `nr` fails with `errno` whenever its first argument
/// is at least `min_arg0`. Seccomp filters bind to the installing thread only, so the rest of
/// the test process is unaffected.
fn with_syscall_failing<T: Send + 'static>(
    nr: libc::c_long,
    min_arg0: u32,
    errno: i32,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
        const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
        const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
        let stmt = |code, k| libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let jump = |code, k, jt, jf| libc::sock_filter { code, jt, jf, k };
        let mut filter = [
            stmt(LD_W_ABS, 0),            // seccomp_data.nr
            jump(JEQ_K, nr as u32, 0, 3), // not ours → allow
            stmt(LD_W_ABS, 16),           // low half of args[0] (little-endian)
            jump(JGE_K, min_arg0, 0, 1),  // below the bar → allow
            stmt(RET_K, libc::SECCOMP_RET_ERRNO | errno as u32),
            stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        ];
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_mut_ptr(),
        };
        // SAFETY: plain prctl flags; NO_NEW_PRIVS lets an unprivileged thread add a filter.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
            0
        );
        // SAFETY: `prog` points at a valid BPF program that outlives the call (the kernel
        // copies it).
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        assert_eq!(rc, 0, "seccomp: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

fn collect(d: &mut UringDriver, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < n && Instant::now() < deadline {
        d.wait(Some(Duration::from_millis(100)), &mut out).unwrap();
    }
    out
}

#[test]
fn seccomp_eperm_reads_well_and_auto_falls_back() {
    if ring().is_none() {
        return;
    }
    let (text, code, kind, auto) =
        with_syscall_failing(libc::SYS_io_uring_setup, 0, libc::EPERM, || {
            let e = UringDriver::new().err().expect("setup must fail");
            let (d, reason) = driver::select(Requested::Auto).unwrap();
            let forced = driver::select(Requested::Uring)
                .err()
                .map(|e| e.to_string());
            (
                e.to_string(),
                sys::error_code(&e),
                e.kind(),
                (d.kind(), reason, forced),
            )
        });
    assert_eq!(text, "io_uring_setup: EPERM (Operation not permitted)");
    assert_eq!(code, Some(libc::EPERM));
    assert_eq!(kind, std::io::ErrorKind::PermissionDenied);
    assert_eq!(auto.0, DriverKind::Poll);
    assert_eq!(auto.1.as_deref(), Some(text.as_str()));
    assert_eq!(auto.2.as_deref(), Some(text.as_str()));
}

#[test]
fn enosys_reads_well() {
    if ring().is_none() {
        return;
    }
    let text = with_syscall_failing(libc::SYS_io_uring_setup, 0, libc::ENOSYS, || {
        UringDriver::new().err().map(|e| e.to_string())
    });
    assert_eq!(
        text.as_deref(),
        Some("io_uring_setup: ENOSYS (Function not implemented)")
    );
}

#[test]
fn enomem_retries_with_a_smaller_ring() {
    let Some(d) = ring() else { return };
    assert_eq!(d.ring_entries(), 256);
    // Rings above 16 entries "run out of locked memory".
    let entries = with_syscall_failing(libc::SYS_io_uring_setup, 17, libc::ENOMEM, || {
        let mut d = UringDriver::new().expect("the 16-entry ring fits");
        let (a, _b) = pair();
        d.submit(
            1,
            Op::Poll {
                fd: a.as_raw_fd(),
                interest: Interest::WRITABLE,
            },
        )
        .unwrap();
        assert_eq!(collect(&mut d, 1), vec![Completion::last(1, 2)]);
        d.ring_entries()
    });
    assert_eq!(entries, 16);
    // Even 16 fails: the last ENOMEM is the reason.
    let text = with_syscall_failing(libc::SYS_io_uring_setup, 0, libc::ENOMEM, || {
        UringDriver::new().err().map(|e| e.to_string())
    });
    assert_eq!(
        text.as_deref(),
        Some("io_uring_setup: ENOMEM (Cannot allocate memory)")
    );
}

#[test]
fn missing_probe_reads_well() {
    if ring().is_none() {
        return;
    }
    // Kernels before 5.6 answer IORING_REGISTER_PROBE (opcode 8) with EINVAL.
    let text = with_syscall_failing(libc::SYS_io_uring_register, 0, libc::EINVAL, || {
        UringDriver::new().err().map(|e| e.to_string())
    });
    assert_eq!(
        text.as_deref(),
        Some("io_uring: kernel has no opcode probe (needs Linux 5.6)")
    );
}

#[test]
fn fork_child_abandons_then_builds_its_own_ring() {
    let Some(mut d) = ring() else { return };
    let (a, mut b) = pair();
    d.submit(
        1,
        Op::Poll {
            fd: a.as_raw_fd(),
            interest: Interest::READABLE,
        },
    )
    .unwrap();
    d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
    assert_eq!(d.in_flight(), 1);
    let (c, mut e) = pair();
    // SAFETY: the child touches only the driver and the sockets, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut code = 0;
        if !d.is_inherited() {
            code |= 1;
        }
        d.abandon();
        // What a loop does in the child: a fresh ring that works.
        match UringDriver::new() {
            Ok(mut mine) => {
                let op = Op::Poll {
                    fd: c.as_raw_fd(),
                    interest: Interest::READABLE,
                };
                if mine.submit(9, op).is_err() {
                    code |= 2;
                }
                if e.write_all(b"x").is_err() {
                    code |= 4;
                }
                if collect(&mut mine, 1) != vec![Completion::last(9, 1)] {
                    code |= 8;
                }
            }
            Err(_) => code |= 16,
        }
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child died: {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "child failures (bit set)");
    // The parent's in-flight op survived the child's abandon and exit.
    let mut out = Vec::new();
    d.wait(Some(Duration::from_millis(50)), &mut out).unwrap();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(d.in_flight(), 1);
    b.write_all(b"x").unwrap();
    let mut got = collect(&mut d, 1);
    got.retain(|c| c.token == 1);
    assert_eq!(got, vec![Completion::last(1, 1)]);
    // The parent's waker still works.
    let w = d.waker();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        w.wake().unwrap();
    });
    let t = Instant::now();
    d.wait(None, &mut Vec::new()).unwrap();
    th.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    let _ = (&mut e, &c);
}

#[test]
fn child_dropping_without_abandon_is_also_safe() {
    let Some(mut d) = ring() else { return };
    let (a, mut b) = pair();
    d.submit(
        1,
        Op::Poll {
            fd: a.as_raw_fd(),
            interest: Interest::READABLE,
        },
    )
    .unwrap();
    d.wait(Some(Duration::ZERO), &mut Vec::new()).unwrap();
    // SAFETY: the child drops the driver and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        drop(d);
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    b.write_all(b"x").unwrap();
    assert_eq!(collect(&mut d, 1), vec![Completion::last(1, 1)]);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn many_rings_created_and_dropped_with_ops_in_flight() {
    // A test suite makes a loop per test: rings must go promptly, with their fds.
    if ring().is_none() {
        return;
    }
    let (a, _b) = pair();
    let before = open_fds();
    let t = Instant::now();
    for i in 0..200 {
        let mut d = Driver::Uring(UringDriver::new().expect("ring"));
        d.submit(
            i,
            Op::Poll {
                fd: a.as_raw_fd(),
                interest: Interest::READABLE,
            },
        )
        .unwrap();
        d.wait(Some(Duration::from_millis(1)), &mut Vec::new())
            .unwrap();
        drop(d);
    }
    assert!(t.elapsed() < Duration::from_secs(20), "slow teardown");
    let after = open_fds();
    // Other tests in this binary open fds concurrently; a leak would be 400 (ring + eventfd).
    assert!(after < before + 50, "fds leaked: {before} → {after}");
}

#[test]
fn setup_reason_names_the_errno_via_select() {
    // `select(Uring)` passes the driver's error through unchanged.
    match driver::select(Requested::Uring) {
        Ok((d, reason)) => {
            assert_eq!(d.kind(), DriverKind::Uring);
            assert!(reason.is_none());
        }
        Err(e) => {
            assert!(e.to_string().starts_with("io_uring"), "{e}");
            assert!(expect_no_uring(), "select(Uring) failed: {e}");
        }
    }
}

/// Waits until `d` has reaped at least one multishot completion (bounded).
fn multi_once(d: &mut UringDriver, out: &mut Vec<Completion>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let before = out.len();
    while out.len() == before && Instant::now() < deadline {
        d.wait(Some(Duration::from_millis(50)), out).expect("wait");
    }
}

/// Reaps multishot completions until `n` have come (bounded).
fn multi_within(d: &mut UringDriver, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        multi_once(d, &mut out);
    }
    out
}

#[test]
fn multishot_accept_delivers_nonblocking_connections_then_cancels() {
    let Some(mut d) = ring() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    d.submit(
        5,
        Op::AcceptMulti {
            fd: listener.as_raw_fd(),
        },
    )
    .expect("submit");
    let mut clients: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    let out = multi_within(&mut d, 3);
    assert_eq!(out.len(), 3, "{out:?}");
    for (c, client) in out.iter().zip(clients.iter_mut()) {
        assert_eq!((c.token, c.more), (5, true), "{c:?}");
        let fd = c.result;
        assert!(fd >= 0, "{c:?}");
        assert!(
            sys::fd::is_nonblocking(fd).expect("fcntl"),
            "accepted fd blocks"
        );
        client.write_all(b"hi").expect("write");
    }
    // Each fd is one of the clients' peers: every one got its client's bytes.
    for c in &out {
        let mut buf = [0u8; 8];
        let deadline = Instant::now() + Duration::from_secs(5);
        let n = loop {
            match sys::sock::recv(c.result, &mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no bytes");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("recv: {e}"),
            }
        };
        assert_eq!(&buf[..n], b"hi");
        sys::fd::close_raw(c.result);
    }
    d.cancel(5).expect("cancel");
    let out = multi_within(&mut d, 1);
    let last = out.last().expect("final completion");
    assert_eq!((last.result, last.more), (-libc::ECANCELED, false));
    assert_eq!(d.in_flight(), 0);
}

#[test]
fn multishot_accept_on_a_socket_that_does_not_listen_answers_einval() {
    let Some(mut d) = ring() else { return };
    let (_a, b) = pair();
    d.submit(6, Op::AcceptMulti { fd: b.as_raw_fd() })
        .expect("submit");
    let out = multi_within(&mut d, 1);
    assert_eq!(
        out.iter().map(|c| (c.result, c.more)).collect::<Vec<_>>(),
        vec![(-libc::EINVAL, false)]
    );
}

#[test]
fn dropping_the_driver_closes_connections_its_accept_took() {
    let Some(mut d) = ring() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    d.submit(
        8,
        Op::AcceptMulti {
            fd: listener.as_raw_fd(),
        },
    )
    .expect("submit");
    d.submit_now().expect("submit now");
    let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    // The kernel accepts into the completion queue; no one reaps before the drop.
    std::thread::sleep(Duration::from_millis(50));
    drop(d);
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 1];
    assert_eq!(
        client.read(&mut buf).expect("EOF, not a timeout"),
        0,
        "the accepted end was closed"
    );
}

#[test]
fn an_accept_the_driver_performs_rearms_and_ends_at_its_cancel() {
    // The path of kernels without multishot accept (before 5.19): POLL_ADD + accept4.
    if ring().is_none() {
        return;
    }
    let options = UringOptions {
        no_accept_multi: true,
        ..UringOptions::default()
    };
    let mut d = UringDriver::with_options(options).expect("ring");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    d.submit(
        5,
        Op::AcceptMulti {
            fd: listener.as_raw_fd(),
        },
    )
    .expect("submit");
    assert_eq!(d.in_flight(), 1, "waits for readiness");
    // Each connection after the first readiness is taken by a re-armed POLL_ADD.
    let _clients: Vec<TcpStream> = (0..3)
        .map(|i| {
            let client = TcpStream::connect(addr).expect("connect");
            let got = multi_within(&mut d, 1);
            assert_eq!(got.len(), 1, "client {i}: {got:?}");
            assert!(
                got[0].token == 5 && got[0].more && got[0].result >= 0,
                "{got:?}"
            );
            sys::fd::close_raw(got[0].result);
            client
        })
        .collect();
    d.cancel(5).expect("cancel");
    let out = multi_within(&mut d, 1);
    assert_eq!(
        out.iter().map(|c| (c.result, c.more)).collect::<Vec<_>>(),
        vec![(-libc::ECANCELED, false)]
    );
    assert_eq!(d.in_flight(), 0);
    // After the cancel the driver accepts nothing: a new client waits in the backlog.
    let _late = TcpStream::connect(addr).expect("connect");
    let mut done = Vec::new();
    d.wait(Some(Duration::from_millis(50)), &mut done)
        .expect("wait");
    assert!(done.is_empty(), "{done:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(e) = listener.accept() {
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert!(Instant::now() < deadline, "the late client was taken");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A non-blocking TCP socket bound to a free loopback port, not listening yet.
fn bound_not_listening() -> (std::os::fd::OwnedFd, std::net::SocketAddr) {
    use std::os::fd::FromRawFd;
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: no pointer argument; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, kind, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero bytes are a valid `sockaddr_in`.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` is a live `sockaddr_in` of `len` bytes, read (bind) and written
    // (getsockname) by the kernel during the calls only.
    let ok = unsafe {
        libc::bind(fd, (&raw const addr).cast(), len) == 0
            && libc::getsockname(fd, (&raw mut addr).cast(), &mut len) == 0
    };
    assert!(ok, "bind: {}", std::io::Error::last_os_error());
    let port = u16::from_be(addr.sin_port);
    (sock, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

#[test]
fn a_multishot_accept_refused_with_einval_goes_on_as_the_drivers_own() {
    // What a kernel that refuses the multishot flag on a listening socket looks like: the
    // ACCEPT's -EINVAL is reaped when the socket listens. The driver then accepts by
    // POLL_ADD + accept4 rather than ending the op.
    let Some(mut d) = ring() else { return };
    let (sock, addr) = bound_not_listening();
    d.submit(
        7,
        Op::AcceptMulti {
            fd: sock.as_raw_fd(),
        },
    )
    .expect("submit");
    d.submit_now().expect("submit now");
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: no pointer argument; the fd is ours.
    assert_eq!(unsafe { libc::listen(sock.as_raw_fd(), 16) }, 0);
    let mut done = Vec::new();
    d.wait(Some(Duration::ZERO), &mut done).expect("wait");
    assert!(done.is_empty(), "{done:?}");
    assert_eq!(d.in_flight(), 1, "the accept goes on");
    let _client = TcpStream::connect(addr).expect("connect");
    let got = multi_within(&mut d, 1);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].token == 7 && got[0].more && got[0].result >= 0,
        "{got:?}"
    );
    sys::fd::close_raw(got[0].result);
    d.cancel(7).expect("cancel");
    let out = multi_within(&mut d, 1);
    assert_eq!(
        out.iter().map(|c| (c.result, c.more)).collect::<Vec<_>>(),
        vec![(-libc::ECANCELED, false)]
    );
    assert_eq!(d.in_flight(), 0);
}
