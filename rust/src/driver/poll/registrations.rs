//! How the `poll` driver names an fd to mio, per platform: the only place in the driver
//! where Unix and Windows register differently.
//! Owns: the `mio::event::Source` of each registered fd. Not: which interest an fd needs or
//! when (`sources.rs`), what a registration error means for the ops (`poll/mod.rs`).
//!
//! On Unix an fd is its own source (`SourceFd`, made per call, nothing kept). On Windows
//! mio's IOCP selector keeps a socket's poll state inside the registered object, so one
//! [`WatchedSocket`](crate::sys::windows::WatchedSocket) per fd lives here from register
//! to deregister, and dropping it hands the socket back to its owner unclosed.
//!
//! Either way mio's readiness is edge-like and `reregister` re-reports what holds now:
//! epoll re-evaluates the fd; on Windows the AFD poll is submitted again at the next wait
//! and completes at once if the condition still holds. The driver's one-shot Poll ops rely
//! on it (`sources.rs` re-arms an fd after each event while an op waits on it).

use std::io;

use crate::driver::op::Interest;
use crate::sys::RawFd;

/// The mio sources of the registered fds.
#[derive(Default)]
pub(super) struct Registrations {
    #[cfg(windows)]
    sockets: crate::intmap::IntMap<RawFd, crate::sys::windows::WatchedSocket>,
}

impl Registrations {
    /// Registers `fd` with `interest` (the fd's number is its token).
    #[inline]
    pub(super) fn register(
        &mut self,
        registry: &mio::Registry,
        fd: RawFd,
        interest: Interest,
    ) -> io::Result<()> {
        #[cfg(unix)]
        return registry.register(
            &mut mio::unix::SourceFd(&fd),
            token(fd),
            mio_interest(interest),
        );
        #[cfg(windows)]
        {
            let mut socket = crate::sys::windows::WatchedSocket::new(fd)?;
            mio::event::Source::register(&mut socket, registry, token(fd), mio_interest(interest))?;
            // A number registered before and not deregistered (the driver deregisters an
            // fd before forgetting it) would be replaced here, its registration dropped.
            self.sockets.insert(fd, socket);
            Ok(())
        }
        #[cfg(not(any(unix, windows)))]
        {
            let _ = (registry, fd, interest);
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// Re-registers `fd` with `interest`, which re-reports its current readiness (on
    /// Windows: registers it afresh).
    #[inline]
    pub(super) fn reregister(
        &mut self,
        registry: &mio::Registry,
        fd: RawFd,
        interest: Interest,
    ) -> io::Result<()> {
        #[cfg(unix)]
        return registry.reregister(
            &mut mio::unix::SourceFd(&fd),
            token(fd),
            mio_interest(interest),
        );
        // A fresh registration each time: mio's state for a socket closed since it was
        // registered is dead (marked for deletion at the local close; its `reregister`
        // does nothing), and Windows gives the number to the next socket at once, so a
        // new socket watched under an old number (removed and added in one iteration)
        // would never be polled. What epoll's ENOENT tells the driver on Unix
        // (`apply_changes`), Windows does not say: so it is not asked.
        #[cfg(windows)]
        {
            if let Some(mut old) = self.sockets.remove(&fd) {
                let _ = mio::event::Source::deregister(&mut old, registry);
            }
            self.register(registry, fd, interest)
        }
        #[cfg(not(any(unix, windows)))]
        {
            let _ = (registry, fd, interest);
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    /// Deregisters `fd`; an fd the poller no longer has (closed) is no error worth
    /// reporting, so none is.
    pub(super) fn deregister(&mut self, registry: &mio::Registry, fd: RawFd) {
        #[cfg(unix)]
        let _ = registry.deregister(&mut mio::unix::SourceFd(&fd));
        #[cfg(windows)]
        if let Some(mut socket) = self.sockets.remove(&fd) {
            let _ = mio::event::Source::deregister(&mut socket, registry);
        }
        #[cfg(not(any(unix, windows)))]
        let _ = (registry, fd);
    }
}

/// Whether a write readiness mio reports for `fd` no longer holds (Windows: an AFD poll's
/// completion waited in the port while the socket filled again; see
/// `sys::windows::writable_now`). epoll and kqueue report what holds when the loop waits.
#[inline]
pub(super) fn write_went_stale(fd: RawFd) -> bool {
    #[cfg(windows)]
    return !crate::sys::windows::writable_now(fd);
    #[cfg(not(windows))]
    {
        let _ = fd;
        false
    }
}

/// An fd's mio token: its own number (the waker's token, `usize::MAX`, is no fd's).
pub(super) fn token(fd: RawFd) -> mio::Token {
    mio::Token(fd as usize)
}

fn mio_interest(interest: Interest) -> mio::Interest {
    match (interest.is_readable(), interest.is_writable()) {
        (true, true) => mio::Interest::READABLE | mio::Interest::WRITABLE,
        (false, true) => mio::Interest::WRITABLE,
        _ => mio::Interest::READABLE,
    }
}
