//! File-descriptor checks, flags, and closing an fd handed over by the kernel.
//! Owns: `fcntl`/`fstat`/`epoll_ctl`/`close` calls on fds the caller names. Not: owning those
//! fds.

use std::io;
use std::os::fd::RawFd;

use super::syscall;

/// Whether `fd` can be watched for readiness: `EBADF` if it is not an open descriptor,
/// `EPERM` if its file cannot be polled (a regular file, a directory, `/dev/null`: what
/// `epoll_ctl` answers, and so asyncio's selector; io_uring would report such a file
/// always ready instead, so the loop checks first and both backends agree).
///
/// On Linux the answer is epoll's own: the fd is added to a probe epoll made for the
/// question and closed after (three syscalls, for a call made once per watched fd; no fd is
/// kept between calls). Elsewhere (and in the "portable" build), and if no epoll can be
/// made, the file's type decides.
pub fn fd_check_pollable(fd: RawFd) -> io::Result<()> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    // SAFETY: epoll_create1 takes only flags; the fd it returns is ours and closed below.
    if let Ok(probe) = syscall!(epoll_create1(libc::EPOLL_CLOEXEC)) {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        let added = if probe == fd {
            // The probe got the number: `fd` was not open.
            Err(io::Error::from_raw_os_error(libc::EBADF))
        } else {
            // SAFETY: `probe` is the epoll fd made above; `event` is a valid epoll_event
            // for the call; any int is a valid fd argument (EBADF if it is not open).
            syscall!(epoll_ctl(probe, libc::EPOLL_CTL_ADD, fd, &mut event)).map(|_| ())
        };
        close_raw(probe);
        return added;
    }
    check_file_type(fd)
}

fn check_file_type(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD takes no pointer argument; any int is a valid fd argument (an unknown
    // one yields EBADF).
    syscall!(fcntl(fd, libc::F_GETFD))?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable `struct stat` that fstat fills on success; we read it only
    // after a successful return.
    syscall!(fstat(fd, st.as_mut_ptr()))?;
    // SAFETY: fstat returned 0, so it initialised `st`.
    let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
    if mode == libc::S_IFREG || mode == libc::S_IFDIR {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: RawFd, nonblocking: bool) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
    let new = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if new != flags {
        // SAFETY: F_SETFL takes an int flag argument.
        syscall!(fcntl(fd, libc::F_SETFL, new))?;
    }
    Ok(())
}

/// Whether `O_NONBLOCK` is set on `fd`.
pub fn is_nonblocking(fd: RawFd) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Closes `fd`, an fd the caller owns and nothing else refers to (one an accept made that
/// no one will take). Errors are ignored: the fd is gone either way (`close(2)`).
pub fn close_raw(fd: RawFd) {
    // SAFETY: the caller owns `fd` and drops its only reference here; close takes no
    // pointer argument.
    unsafe {
        libc::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn pollable_checks() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        assert!(fd_check_pollable(a.as_raw_fd()).is_ok());
        let file = std::fs::File::open("/proc/self/status")
            .or_else(|_| std::fs::File::open(file!()))
            .expect("a regular file to open");
        // /proc files are regular files too.
        let err = fd_check_pollable(file.as_raw_fd()).expect_err("regular file");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        let dir = std::fs::File::open(".").expect("cwd");
        let err = fd_check_pollable(dir.as_raw_fd()).expect_err("directory");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        // A number no fd has (a closed one could be reused at once by a test running in
        // parallel on another thread).
        let err = fd_check_pollable(i32::MAX).expect_err("no such fd");
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        assert_eq!(
            fd_check_pollable(-1).expect_err("negative").raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
