//! Small `unsafe` islands over libc. Every `unsafe` block in the crate outside the drivers
//! lives here, each with a `// SAFETY:` line.
//! Owns: raw syscalls and errno text. Not: deciding what to do with a result (callers).

#[cfg(unix)]
pub mod buffer;
// The io_uring driver's waker: not compiled in the "portable" build (Cargo.toml).
#[cfg(all(target_os = "linux", not(feature = "portable")))]
pub mod eventfd;
#[cfg(unix)]
pub mod fd;
#[cfg(unix)]
pub mod sock;
#[cfg(unix)]
pub mod sockaddr;

pub use errno::{errno_name, error_code, os_error, strerror, OsError};
#[cfg(unix)]
pub use fd::{close_raw, fd_check_pollable};

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

/// Off Unix there is no fd to check: the portable driver refuses fds itself.
#[cfg(not(unix))]
pub fn fd_check_pollable(_fd: crate::driver::op::RawFd) -> std::io::Result<()> {
    Ok(())
}

/// Off Unix no operation hands out fds (accepts are the `uring` driver's).
#[cfg(not(unix))]
pub fn close_raw(_fd: crate::driver::op::RawFd) {}

pub mod clock;
pub mod fastcall;
pub mod gil;
pub mod iternext;
pub mod malloc;
pub mod python;
