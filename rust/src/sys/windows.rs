//! Windows sockets as the `poll` driver watches them: a socket the caller (Python's
//! `socket` object) owns, lent to mio's IOCP selector and never closed here.
//! Owns: turning an fd number (a `SOCKET`) into a `mio::event::Source` and handing it back
//! untouched; whether a number names a socket. Not: which sockets are watched or when
//! they are re-armed (`driver/poll/`).
//!
//! mio's selector on Windows watches its own socket types only (there is no `SourceFd`):
//! it keeps each socket's AFD poll state inside the registered object. A
//! [`WatchedSocket`] is a `mio::net::TcpStream` wrapped around the raw `SOCKET` (mio polls
//! any socket the same way, TCP or not; no I/O ever goes through the wrapper), kept
//! out of `Drop` so that `closesocket` never runs on a socket Python owns: dropping it
//! deregisters from mio and hands the number back with `into_raw_socket`.

use std::io;
use std::mem::ManuallyDrop;
use std::os::windows::io::{FromRawSocket, IntoRawSocket, RawSocket};

use mio::event::Source;
use mio::{Interest, Registry, Token};

use super::RawFd;

/// A socket lent to mio for readiness, never closed by this process's Rust side.
pub struct WatchedSocket {
    inner: ManuallyDrop<mio::net::TcpStream>,
}

impl WatchedSocket {
    /// Lends the socket `fd` (a non-negative `SOCKET` number) to mio; the caller keeps
    /// owning it and must not close it before this is dropped, as with a `SourceFd`.
    pub fn new(fd: RawFd) -> io::Result<WatchedSocket> {
        let raw = raw_socket(fd)?;
        // SAFETY: `from_raw_socket` asks for an owned, open socket because the object
        // closes it on drop; this one is never dropped as a socket: `inner` is
        // `ManuallyDrop` and `Drop` below takes the number back with `into_raw_socket`,
        // which closes nothing. No I/O is made through it; mio only reads the number (to
        // ask for the base socket and poll it through AFD). A number that is not an open
        // socket makes those calls fail (`WSAENOTSOCK`, an invalid handle), nothing worse.
        let stream = unsafe { mio::net::TcpStream::from_raw_socket(raw) };
        Ok(WatchedSocket {
            inner: ManuallyDrop::new(stream),
        })
    }
}

impl Drop for WatchedSocket {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken exactly once, here, and never used again.
        let stream = unsafe { ManuallyDrop::take(&mut self.inner) };
        // mio's registration state is dropped with the wrapper (its pending AFD poll is
        // cancelled); the socket itself stays open, Python's to close.
        let _number = stream.into_raw_socket();
    }
}

impl Source for WatchedSocket {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.inner.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.inner.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.inner.deregister(registry)
    }
}

/// Whether `fd` can be watched: an open socket (`select()`, asyncio's selector on Windows,
/// takes nothing else), else Winsock's answer (`WSAENOTSOCK`, 10038, for any other
/// number); `EBADF` for a negative one.
pub fn fd_check_pollable(fd: RawFd) -> io::Result<()> {
    use windows_sys::Win32::Networking::WinSock::{
        getsockopt, WSAGetLastError, SOL_SOCKET, SO_TYPE,
    };

    let raw = raw_socket(fd)?;
    let mut kind: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: `kind` is a writable i32 and `len` says so; getsockopt writes at most `len`
    // bytes there and updates `len`. `SO_TYPE` only reads the socket (`SO_ERROR` would
    // clear a pending connect error). Any number is a valid argument: one that is no
    // socket fails with WSAENOTSOCK.
    let res = unsafe {
        getsockopt(
            raw as usize,
            SOL_SOCKET,
            SO_TYPE,
            (&mut kind as *mut i32).cast::<u8>(),
            &mut len,
        )
    };
    if res != 0 {
        // SAFETY: no arguments; reads this thread's last Winsock error.
        return Err(io::Error::from_raw_os_error(unsafe { WSAGetLastError() }));
    }
    Ok(())
}

/// Whether the socket `fd` is writable now (`WSAPoll`, no wait), or failed, which a
/// writer must see too. An AFD poll completes when the socket becomes writable and its
/// completion waits in the port until the loop next waits; by then the socket may be full
/// again (written to while the loop was stopped), which a selector asked at that moment
/// would not report. A `WSAPoll` error answers `true`: the writer runs and meets it.
pub fn writable_now(fd: RawFd) -> bool {
    use windows_sys::Win32::Networking::WinSock::{WSAPoll, POLLWRNORM, WSAPOLLFD};

    let Ok(raw) = raw_socket(fd) else {
        return true;
    };
    let mut entry = WSAPOLLFD {
        fd: raw as usize,
        events: POLLWRNORM,
        revents: 0,
    };
    // SAFETY: `entry` is one valid, writable WSAPOLLFD and the count says one; timeout 0
    // returns at once. Any number is a valid `fd` field (an invalid one is reported in
    // `revents` as POLLNVAL, or the call fails).
    let n = unsafe { WSAPoll(&mut entry, 1, 0) };
    n != 0
}

fn raw_socket(fd: RawFd) -> io::Result<RawSocket> {
    RawSocket::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}
