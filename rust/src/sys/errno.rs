//! errno text: `EPERM`, "Operation not permitted", and an error type that names both.
//! Owns: turning a code into words users can read. Not: choosing the code (callers).

use std::fmt;
use std::io;

/// The system's message for `code`, as C `strerror` (and Python `os.strerror`) print it.
pub fn strerror(code: i32) -> String {
    let text = io::Error::from_raw_os_error(code).to_string();
    // std formats "<message> (os error <code>)"; keep only the message.
    let suffix = format!(" (os error {code})");
    match text.strip_suffix(&suffix) {
        Some(msg) => msg.to_owned(),
        None => text,
    }
}

/// The symbolic name of `code` (`"EPERM"`), or `"E?"` for a code not in the table.
pub fn errno_name(code: i32) -> &'static str {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("E?", |(_, name)| name)
}

/// The errno carried by `err`: its `raw_os_error()`, or the code inside an [`OsError`].
pub fn error_code(err: &io::Error) -> Option<i32> {
    err.raw_os_error().or_else(|| {
        err.get_ref()
            .and_then(|inner| inner.downcast_ref::<OsError>())
            .map(|e| e.code)
    })
}

/// An errno with the call that failed; displays as `io_uring_setup: EPERM (Operation not
/// permitted)`. Wrapped in an [`io::Error`] by [`os_error`]; [`error_code`] gets the code back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsError {
    /// What failed (a syscall name, or `"io_uring"`).
    pub context: &'static str,
    /// The errno.
    pub code: i32,
}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.context,
            errno_name(self.code),
            strerror(self.code)
        )
    }
}

impl std::error::Error for OsError {}

/// An [`io::Error`] whose `Display` is `"<context>: ENAME (message)"` and whose kind matches
/// `code`. `raw_os_error()` is `None` on it (std keeps the code only without a message); use
/// [`error_code`] to read the code.
pub fn os_error(context: &'static str, code: i32) -> io::Error {
    let kind = io::Error::from_raw_os_error(code).kind();
    io::Error::new(kind, OsError { context, code })
}

#[cfg(unix)]
const NAMES: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::ESRCH, "ESRCH"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::E2BIG, "E2BIG"),
    (libc::ENOEXEC, "ENOEXEC"),
    (libc::EBADF, "EBADF"),
    (libc::ECHILD, "ECHILD"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::EXDEV, "EXDEV"),
    (libc::ENODEV, "ENODEV"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENFILE, "ENFILE"),
    (libc::EMFILE, "EMFILE"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::EFBIG, "EFBIG"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ESPIPE, "ESPIPE"),
    (libc::EROFS, "EROFS"),
    (libc::EMLINK, "EMLINK"),
    (libc::EPIPE, "EPIPE"),
    (libc::EDOM, "EDOM"),
    (libc::ERANGE, "ERANGE"),
    (libc::EDEADLK, "EDEADLK"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::ENOLCK, "ENOLCK"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENOTEMPTY, "ENOTEMPTY"),
    (libc::ELOOP, "ELOOP"),
    (libc::ENOTSOCK, "ENOTSOCK"),
    (libc::EDESTADDRREQ, "EDESTADDRREQ"),
    (libc::EMSGSIZE, "EMSGSIZE"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::ENOPROTOOPT, "ENOPROTOOPT"),
    (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::ENOTSUP, "ENOTSUP"),
    (libc::EAFNOSUPPORT, "EAFNOSUPPORT"),
    (libc::EADDRINUSE, "EADDRINUSE"),
    (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
    (libc::ENETDOWN, "ENETDOWN"),
    (libc::ENETUNREACH, "ENETUNREACH"),
    (libc::ECONNABORTED, "ECONNABORTED"),
    (libc::ECONNRESET, "ECONNRESET"),
    (libc::ENOBUFS, "ENOBUFS"),
    (libc::EISCONN, "EISCONN"),
    (libc::ENOTCONN, "ENOTCONN"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::EHOSTUNREACH, "EHOSTUNREACH"),
    (libc::EALREADY, "EALREADY"),
    (libc::EINPROGRESS, "EINPROGRESS"),
    (libc::ECANCELED, "ECANCELED"),
    #[cfg(any(target_os = "linux", target_os = "android"))]
    (libc::ETIME, "ETIME"),
    #[cfg(any(target_os = "linux", target_os = "android"))]
    (libc::EBADFD, "EBADFD"),
];

// Windows has no errno from the OS APIs this crate calls; the C runtime's table is enough
// for the codes the portable driver reports.
#[cfg(not(unix))]
const NAMES: &[(i32, &str)] = &[];

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn names_and_messages() {
        assert_eq!(errno_name(libc::EPERM), "EPERM");
        assert_eq!(errno_name(libc::EAGAIN), "EAGAIN");
        assert_eq!(errno_name(-12345), "E?");
        assert_eq!(strerror(libc::EPERM), "Operation not permitted");
        let e = os_error("io_uring_setup", libc::EPERM);
        assert_eq!(
            e.to_string(),
            "io_uring_setup: EPERM (Operation not permitted)"
        );
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(error_code(&e), Some(libc::EPERM));
        assert_eq!(
            error_code(&io::Error::from_raw_os_error(libc::EBADF)),
            Some(libc::EBADF)
        );
    }
}
