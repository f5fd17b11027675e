//! Socket calls for the transports and the `sock_*` methods: receive, send, vectored
//! send, half-close (streams) and `recvfrom`/`send`/`sendto` (datagrams).
//! Owns: the `recv`/`send`/`sendmsg`/`shutdown`/`recvfrom`/`sendto` calls on fds the caller
//! names. Not: owning those fds (the Python socket object does), deciding what a result means.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

use super::sockaddr::SockAddr;
use super::syscall;

/// Most slices passed to one `sendmsg` (Linux's `UIO_MAXIOV`; POSIX guarantees 16, every
/// platform we build for takes 1024).
pub const MAX_IOV: usize = 1024;

/// macOS has no `MSG_NOSIGNAL` (nor does the "portable" build, which runs its code): there a
/// send to a closed peer raises `SIGPIPE`, which CPython ignores from startup, so the call
/// fails with `EPIPE` as it does here. A program that restores `SIGPIPE`'s default action
/// dies there, as it would under asyncio's own loop, whose sends pass no flag either.
#[cfg(all(
    any(target_os = "linux", target_os = "android", target_os = "freebsd"),
    not(feature = "portable")
))]
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(any(
    not(any(target_os = "linux", target_os = "android", target_os = "freebsd")),
    feature = "portable"
))]
const SEND_FLAGS: libc::c_int = 0;

/// `recv(fd, buf)`: the number of bytes read, 0 at end of stream.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid writable region of `buf.len()` bytes for the whole call.
    let n = syscall!(recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0))?;
    Ok(n as usize)
}

/// `recv` into raw memory the caller vouches for (a Python buffer held for the call).
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes until this returns.
pub unsafe fn recv_raw(fd: RawFd, ptr: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller guarantees `ptr..ptr+len` is writable for the call.
    let n = syscall!(recv(fd, ptr.cast(), len, 0))?;
    Ok(n as usize)
}

/// `recv(fd, ptr, len, MSG_DONTWAIT)`: never blocks, even on a blocking socket (the
/// `sock_*` methods run it with the GIL held).
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes until this returns.
pub unsafe fn recv_nowait_raw(fd: RawFd, ptr: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller guarantees `ptr..ptr+len` is writable for the call.
    let n = syscall!(recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT))?;
    Ok(n as usize)
}

/// `send(fd, buf, MSG_DONTWAIT)`: the number of bytes the kernel took; never blocks and
/// never raises `SIGPIPE` where the platform has `MSG_NOSIGNAL`.
pub fn send_nowait(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid readable region of `buf.len()` bytes for the whole call.
    let n = syscall!(send(
        fd,
        buf.as_ptr().cast(),
        buf.len(),
        SEND_FLAGS | libc::MSG_DONTWAIT
    ))?;
    Ok(n as usize)
}

/// One `sendmsg` of up to [`MAX_IOV`] slices: the number of bytes the kernel took.
/// Never raises `SIGPIPE` where the platform has `MSG_NOSIGNAL` (Python ignores it anyway).
pub fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let count = bufs.len().min(MAX_IOV);
    // SAFETY: zeroed `msghdr` is a valid empty header (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `struct iovec` on Unix (documented by std).
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = count as _;
    // SAFETY: `msg` points at `count` valid iovecs borrowed from `bufs` for the call; the
    // kernel only reads them.
    let n = syscall!(sendmsg(fd, &msg, SEND_FLAGS))?;
    Ok(n as usize)
}

/// One `sendmsg` of a header built beforehand (`SendHeader::point_at`), with
/// `MSG_DONTWAIT`: the `poll` driver's `Op::SendMsg`. Never blocks, even on a blocking
/// socket, and never raises `SIGPIPE` where the platform has `MSG_NOSIGNAL`.
///
/// # Safety
/// `msg` must point at a valid `msghdr` whose iovecs point at readable bytes, all alive
/// and unchanged until this returns.
pub unsafe fn send_header_nowait(fd: RawFd, msg: *const libc::msghdr) -> io::Result<usize> {
    // SAFETY: the caller guarantees the header, its iovecs and the bytes for the call; the
    // kernel only reads them.
    let n = syscall!(sendmsg(fd, msg, SEND_FLAGS | libc::MSG_DONTWAIT))?;
    Ok(n as usize)
}

/// Accepts one connection on the listening socket `fd`, without blocking: the new fd,
/// non-blocking and close-on-exec (as io_uring's accept makes it), owned by the caller.
/// The peer's address is not asked for (`getpeername`). The `poll` driver's
/// `Op::AcceptMulti`.
pub fn accept_nowait(fd: RawFd) -> io::Result<RawFd> {
    // The "portable" build runs macOS's path, as for `SEND_FLAGS`.
    #[cfg(all(
        any(target_os = "linux", target_os = "android", target_os = "freebsd"),
        not(feature = "portable")
    ))]
    {
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: null address and length pointers ask for no peer address.
        syscall!(accept4(
            fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags
        ))
    }
    #[cfg(any(
        not(any(target_os = "linux", target_os = "android", target_os = "freebsd")),
        feature = "portable"
    ))]
    {
        // SAFETY: null address and length pointers ask for no peer address.
        let conn = syscall!(accept(fd, std::ptr::null_mut(), std::ptr::null_mut()))?;
        let set = super::fd::set_nonblocking(conn, true)
            // SAFETY: F_SETFD takes an int flag argument.
            .and_then(|()| syscall!(fcntl(conn, libc::F_SETFD, libc::FD_CLOEXEC)).map(drop));
        if let Err(e) = set {
            super::fd::close_raw(conn);
            return Err(e);
        }
        Ok(conn)
    }
}

/// Whether `fd` is a TCP socket (`AF_INET`/`AF_INET6` stream): there a receive that got
/// less than it asked for drained the socket (urgent data aside). A Unix stream socket
/// stops a receive short at a message that carried file descriptors, or between writers
/// when credentials are passed, with bytes still queued. `false` on any error.
pub fn is_tcp(fd: RawFd) -> bool {
    // SAFETY: `sockaddr_storage` is plain data, for which all-zero bytes are a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` is writable for `len` bytes and the kernel writes at most `len`.
    let named = syscall!(getsockname(
        fd,
        std::ptr::addr_of_mut!(storage).cast(),
        &mut len
    ))
    .is_ok();
    let mut kind: libc::c_int = 0;
    let mut kind_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `kind` is writable for `kind_len` bytes.
    let typed = syscall!(getsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TYPE,
        std::ptr::addr_of_mut!(kind).cast(),
        &mut kind_len
    ))
    .is_ok();
    let family = libc::c_int::from(storage.ss_family);
    named
        && typed
        && kind == libc::SOCK_STREAM
        && (family == libc::AF_INET || family == libc::AF_INET6)
}

/// Whether a receive on `fd` would return now (bytes, the end of the stream or an error)
/// rather than `EAGAIN`: one byte peeked, never blocking, nothing consumed.
pub fn readable_now(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `byte` is writable for the one byte asked for.
    let r = syscall!(recv(
        fd,
        std::ptr::addr_of_mut!(byte).cast(),
        1,
        libc::MSG_PEEK | libc::MSG_DONTWAIT
    ));
    !matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Whether `poll` reports `fd` writable now (or failed or hung up, which a send then
/// reports), as a selector would: never blocks. A TCP socket is writable once a third of
/// its send buffer is free, while a send takes bytes as soon as any of it is.
pub fn writable_now(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid `pollfd`, the count passed; timeout 0 never blocks.
    let r = syscall!(poll(std::ptr::addr_of_mut!(pfd), 1, 0));
    matches!(r, Ok(n) if n > 0)
        && pfd.revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

/// `shutdown(fd, SHUT_WR)`: half-close, the peer reads end of stream.
pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: no pointer arguments.
    syscall!(shutdown(fd, libc::SHUT_WR))?;
    Ok(())
}

/// Whether `fd` is a TCP socket in state `TCP_CLOSE` (reset, timed out, never connected);
/// `false` for any other socket, on any error, and off Linux (and in the "portable" build).
pub fn tcp_closed(fd: RawFd) -> bool {
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    {
        const TCP_CLOSE: u8 = 7;
        // `struct tcp_info` starts with `tcpi_state`; the kernel copies only the prefix asked for.
        let mut info = [0u8; 8];
        let mut len = info.len() as libc::socklen_t;
        // SAFETY: `info` is writable for `len` bytes and the kernel writes at most `len`.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        r == 0 && len >= 1 && info[0] == TCP_CLOSE
    }
    #[cfg(any(not(target_os = "linux"), feature = "portable"))]
    {
        let _ = fd;
        false
    }
}

/// `recvfrom(fd, buf)`: one datagram (truncated to `buf`) and its sender's address.
pub fn recv_from(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, SockAddr)> {
    let mut addr = SockAddr::empty();
    let (name, len) = addr.raw_mut();
    // SAFETY: `buf` is writable for `buf.len()` bytes; `name` points at `addr`'s storage,
    // whose size `*len` holds on entry, and both live until the call returns.
    let n = syscall!(recvfrom(
        fd,
        buf.as_mut_ptr().cast(),
        buf.len(),
        0,
        name,
        len
    ))?;
    Ok((n as usize, addr))
}

/// `send(fd, data)` on a connected datagram socket: the bytes the kernel took.
pub fn send(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is readable for `data.len()` bytes for the call.
    let n = syscall!(send(fd, data.as_ptr().cast(), data.len(), SEND_FLAGS))?;
    Ok(n as usize)
}

/// `sendto(fd, data, addr)`: the bytes the kernel took.
pub fn send_to(fd: RawFd, data: &[u8], addr: &SockAddr) -> io::Result<usize> {
    let (name, len) = addr.raw();
    // SAFETY: `data` is readable for `data.len()` bytes and `name` for `len` bytes (the
    // address's initialised storage) for the call.
    let n = syscall!(sendto(
        fd,
        data.as_ptr().cast(),
        data.len(),
        SEND_FLAGS,
        name,
        len
    ))?;
    Ok(n as usize)
}

/// A `msghdr` with its iovec array, for a `sendmsg` the kernel performs later (io_uring).
/// Boxed by its owner so its address is stable while a send is in flight.
pub struct SendHeader {
    msg: libc::msghdr,
    iov: Vec<libc::iovec>,
}

// SAFETY: the raw pointers inside only ever point at this value's own `iov` and at bytes
// the owner keeps alive; the value is moved between threads only under the GIL (inside a
// `GilCell`), never used concurrently.
unsafe impl Send for SendHeader {}

impl Default for SendHeader {
    fn default() -> Self {
        SendHeader {
            // SAFETY: an all-zero `msghdr` is a valid empty header.
            msg: unsafe { std::mem::zeroed() },
            iov: Vec::new(),
        }
    }
}

impl SendHeader {
    /// Points the header at `slices` (at most [`MAX_IOV`]) and returns its address for
    /// `Op::SendMsg`. The caller keeps `self` and the bytes unchanged until the send
    /// completes.
    pub fn point_at<'a>(&mut self, slices: impl IntoIterator<Item = &'a [u8]>) -> usize {
        self.iov.clear();
        self.iov
            .extend(slices.into_iter().take(MAX_IOV).map(|s| libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            }));
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.iov.len() as _;
        &self.msg as *const libc::msghdr as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn vectored_send_then_recv_keeps_order() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let n = send_vectored(a.as_raw_fd(), &[IoSlice::new(b"ab"), IoSlice::new(b"cde")])
            .expect("send");
        assert_eq!(n, 5);
        let mut buf = [0u8; 16];
        let got = recv(b.as_raw_fd(), &mut buf).expect("recv");
        assert_eq!(&buf[..got], b"abcde");
        assert_eq!(send_nowait(a.as_raw_fd(), b"fg").expect("send"), 2);
        // SAFETY: `buf` is a live, writable array for the call.
        let got = unsafe { recv_nowait_raw(b.as_raw_fd(), buf.as_mut_ptr(), 1) }.expect("recv");
        assert_eq!((got, buf[0]), (1, b'f'));
        shutdown_write(a.as_raw_fd()).expect("shutdown");
        assert_eq!(recv(b.as_raw_fd(), &mut buf).expect("rest"), 1);
        assert_eq!(recv(b.as_raw_fd(), &mut buf).expect("eof"), 0);
    }

    // Linux's loopback TCP: how much room poll wants is the kernel's own rule.
    #[cfg(target_os = "linux")]
    #[test]
    fn writable_now_is_polls_word_not_whether_a_send_would_take_bytes() {
        use std::net::{TcpListener, TcpStream};
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        a.set_nonblocking(true).expect("nonblocking");
        let fd = a.as_raw_fd();
        assert!(writable_now(fd), "a fresh socket");
        // The peer reads nothing: fill until the kernel refuses, let the bytes settle into
        // the peer's receive buffer, and find a send that still takes some while poll
        // says the socket is not writable (room, but less than a third of the buffer).
        let chunk = [7u8; 65536];
        let mut room_below_poll = false;
        for _ in 0..200 {
            while send_nowait(fd, &chunk).is_ok() {}
            std::thread::sleep(std::time::Duration::from_millis(2));
            if !writable_now(fd) && send_nowait(fd, &chunk[..1]).is_ok() {
                room_below_poll = true;
                break;
            }
        }
        assert!(!writable_now(fd), "a full socket");
        // A reset makes it writable (the send reports the error), as selectors say.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `linger` is a valid `struct linger`, its size passed.
        let r = syscall!(setsockopt(
            b.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t
        ));
        r.expect("SO_LINGER");
        drop(b);
        for _ in 0..500 {
            if writable_now(fd) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(writable_now(fd), "after the peer's reset");
        assert!(send_nowait(fd, &chunk[..1]).is_err());
        assert!(room_below_poll, "no send took bytes while poll said full");
    }

    #[test]
    fn datagrams_carry_their_sender() {
        use super::super::sockaddr::AddrView;
        use std::net::UdpSocket;
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = |s: &UdpSocket| s.local_addr().expect("addr").port();
        let to = SockAddr::inet([127, 0, 0, 1], port(&b));
        assert_eq!(send_to(a.as_raw_fd(), b"hi", &to).expect("sendto"), 2);
        let mut buf = [0u8; 16];
        let (n, from) = recv_from(b.as_raw_fd(), &mut buf).expect("recvfrom");
        assert_eq!(&buf[..n], b"hi");
        assert!(matches!(from.view(), AddrView::Inet([127, 0, 0, 1], p) if p == port(&a)));
        b.connect(("127.0.0.1", port(&a))).expect("connect");
        assert_eq!(send(b.as_raw_fd(), b"").expect("send"), 0);
        assert_eq!(recv_from(a.as_raw_fd(), &mut buf).expect("empty").0, 0);
    }

    #[test]
    fn nowait_calls_do_not_block_a_blocking_socket() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let mut buf = [0u8; 4];
        // SAFETY: `buf` is a live, writable array for the call.
        let err = unsafe { recv_nowait_raw(b.as_raw_fd(), buf.as_mut_ptr(), buf.len()) }
            .expect_err("nothing to read");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let chunk = [0u8; 65536];
        let mut total = 0;
        let err = loop {
            match send_nowait(a.as_raw_fd(), &chunk) {
                Ok(n) => total += n,
                Err(e) => break e,
            }
        };
        assert!(total > 0);
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(b);
        let err = send_nowait(a.as_raw_fd(), b"x").expect_err("peer gone");
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
    }
}
