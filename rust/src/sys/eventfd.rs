//! eventfd: the counter the io_uring waker writes and the ring reads.
//! Owns: creating, writing and draining one. Not: who waits on it (`driver/uring`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::syscall;

/// A new non-blocking, close-on-exec eventfd with count 0.
pub fn eventfd_new() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
    // SAFETY: eventfd returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to the counter. A full counter (`EAGAIN`) already means "a wake is pending" and
/// counts as success.
pub fn eventfd_signal(fd: &OwnedFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from `one`, which lives across the call.
    match syscall!(write(fd.as_raw_fd(), (&one as *const u64).cast(), 8)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => eventfd_signal(fd),
        Err(e) => Err(e),
    }
}

/// Resets the counter to 0; returns the value it had (0 if nothing was pending).
pub fn eventfd_drain(fd: &OwnedFd) -> io::Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: reads at most 8 bytes into `value`, which lives across the call.
    match syscall!(read(fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8)) {
        Ok(_) => Ok(value),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_and_drain() {
        let fd = eventfd_new().expect("eventfd");
        assert_eq!(eventfd_drain(&fd).expect("drain"), 0);
        eventfd_signal(&fd).expect("signal");
        eventfd_signal(&fd).expect("signal");
        assert_eq!(eventfd_drain(&fd).expect("drain"), 2);
        assert_eq!(eventfd_drain(&fd).expect("drain"), 0);
    }
}
