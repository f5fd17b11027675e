//! Small `unsafe` islands over the OS (libc): the lowest layer, imported by every other and
//! importing none of them (the CPython C-API wrappers are `ffi/`, one step up beside it).
//! Owns: raw syscalls, socket addresses as the kernel sees them, errno text, the clock,
//! glibc's malloc tunables, [`RawFd`], and on Windows the sockets lent to mio's selector
//! (`windows.rs`). Not: deciding what to do with a result (callers),
//! anything that touches a Python object (`ffi/`).
//!
//! SAFETY discipline: every `unsafe` block carries a `// SAFETY:` line that says why each
//! pointer it hands the kernel or libc is valid and large enough for the call, and for how
//! long (a buffer a call fills stays borrowed until it returns); an fd is only a number
//! here, so a call on a closed one fails with `EBADF` and is never undefined behaviour.
//! Failing calls become `io::Error` through [`syscall!`] or `last_os_error`, never a panic.

/// A file descriptor number (`std::os::fd::RawFd` on Unix; a plain `i32` elsewhere, where
/// the `poll` driver refuses fds).
#[cfg(unix)]
pub use std::os::fd::RawFd;
/// A file descriptor number (`std::os::fd::RawFd` on Unix; on Windows a `SOCKET`'s number
/// as an `i32`, as Python's `fileno()` gives it and the fd watcher table keys it).
#[cfg(not(unix))]
pub type RawFd = i32;

// The io_uring driver's waker: not compiled in the "portable" build (Cargo.toml).
#[cfg(all(target_os = "linux", not(feature = "portable")))]
pub mod eventfd;
#[cfg(unix)]
pub mod fd;
#[cfg(unix)]
pub mod sock;
#[cfg(unix)]
pub mod sockaddr;
// Sockets lent to mio's IOCP selector (the `poll` driver's fd watchers on Windows).
#[cfg(windows)]
pub mod windows;

pub use errno::{errno_name, error_code, os_error, strerror, OsError};
#[cfg(unix)]
pub use fd::{close_raw, fd_check_pollable};
#[cfg(windows)]
pub use windows::fd_check_pollable;

mod errno;

/// Calls a libc function and turns its `-1` return into [`std::io::Error::last_os_error`].
///
/// The expansion is an `unsafe` call: the caller writes the `// SAFETY:` line that says why
/// the arguments are valid for that function.
#[cfg(unix)]
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        #[allow(unused_unsafe)]
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

#[cfg(unix)]
#[allow(unused_imports)]
pub(crate) use syscall;

/// Neither Unix nor Windows: no fd to check, the portable driver refuses fds itself.
#[cfg(not(any(unix, windows)))]
pub fn fd_check_pollable(_fd: RawFd) -> std::io::Result<()> {
    Ok(())
}

/// Off Unix no operation hands out fds (accepts are the `uring` driver's).
#[cfg(not(unix))]
pub fn close_raw(_fd: RawFd) {}

pub mod clock;
pub mod malloc;
pub mod prefetch;
