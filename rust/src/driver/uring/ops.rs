//! SQE builders for the io_uring driver, one fn per operation, with the kernel each needs.
//! Owns: `Op` → SQE, CQE result → `Completion::result`. Not: pushing or reaping (`mod.rs`).

use io_uring::{opcode, squeue, types};

use crate::driver::op::{Interest, HANGUP};
use crate::sys::RawFd;

const POLLIN: u32 = libc::POLLIN as u32;
const POLLOUT: u32 = libc::POLLOUT as u32;
const POLL_FAILED: u32 = (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) as u32;
const POLLRDHUP: u32 = libc::POLLRDHUP as u32;

/// One-shot readiness poll. Needs Linux 5.1 (`IORING_OP_POLL_ADD`).
pub(super) fn poll_add(fd: RawFd, interest: Interest) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), poll_mask(interest)).build()
}

/// Multishot readiness poll: a CQE with `MORE` at each wakeup that finds the fd ready;
/// a reader also hears of the peer's hang-up (`POLLRDHUP`). Needs Linux 5.13
/// (`IORING_POLL_ADD_MULTI`).
pub(super) fn poll_multi(fd: RawFd, interest: Interest) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), multi_mask(interest))
        .multi(true)
        .build()
}

/// The one-shot poll that stands in for [`poll_multi`] on kernels before 5.13, re-armed
/// at each completion.
pub(super) fn poll_each(fd: RawFd, interest: Interest) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), multi_mask(interest)).build()
}

fn multi_mask(interest: Interest) -> u32 {
    let mut mask = poll_mask(interest);
    if interest.is_readable() {
        mask |= POLLRDHUP;
    }
    mask
}

/// [`poll_result`] for `Op::PollMulti`, with `HANGUP` when the fd hung up or failed.
pub(super) fn poll_multi_result(mask: i32, requested: Interest) -> i32 {
    let hangup = (mask as u32) & (POLL_FAILED | POLLRDHUP) != 0;
    poll_result(mask, requested) | if hangup { HANGUP } else { 0 }
}

fn poll_mask(interest: Interest) -> u32 {
    let mut mask = 0;
    if interest.is_readable() {
        mask |= POLLIN;
    }
    if interest.is_writable() {
        mask |= POLLOUT;
    }
    mask
}

/// The `Interest` bits a POLL_ADD result mask means for an op that asked for `requested`:
/// error and hang-up report every requested bit, as `selectors` does.
pub(super) fn poll_result(mask: i32, requested: Interest) -> i32 {
    let mask = mask as u32;
    if mask & POLL_FAILED != 0 {
        return i32::from(requested.bits());
    }
    let mut ready = Interest::NONE;
    if mask & POLLIN != 0 {
        ready = ready.add(Interest::READABLE);
    }
    if mask & POLLOUT != 0 {
        ready = ready.add(Interest::WRITABLE);
    }
    i32::from(ready.bits() & requested.bits())
}

/// Multishot accept; each connection's fd is opened non-blocking and close-on-exec, as the
/// loop's sockets are. Needs Linux 5.19 (`IORING_ACCEPT_MULTISHOT`).
pub(super) fn accept_multi(fd: RawFd) -> squeue::Entry {
    opcode::AcceptMulti::new(types::Fd(fd))
        .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        .build()
}

/// One `sendmsg` of the caller's header (no `SIGPIPE`: the loop reports `EPIPE`).
/// Needs Linux 5.3 (`IORING_OP_SENDMSG`).
pub(super) fn send_msg(fd: RawFd, msg: *const libc::msghdr) -> squeue::Entry {
    opcode::SendMsg::new(types::Fd(fd), msg)
        .flags(libc::MSG_NOSIGNAL as u32)
        .build()
}

/// Cancels the op whose SQE carried `user_data`. Needs Linux 5.5 (`IORING_OP_ASYNC_CANCEL`).
pub(super) fn cancel(user_data: u64) -> squeue::Entry {
    opcode::AsyncCancel::new(user_data).build()
}

/// Reads the waker eventfd's 8-byte counter into `buf`. Needs Linux 5.6 (`IORING_OP_READ`);
/// it waits in the kernel (internal poll) only where eventfd supports non-blocking reads
/// (Linux 5.12), earlier kernels answer `-EAGAIN` and the driver falls back to [`poll_add`].
///
/// The caller keeps `buf` valid and untouched until this op's final CQE.
pub(super) fn read_u64(fd: RawFd, buf: *mut u64) -> squeue::Entry {
    opcode::Read::new(types::Fd(fd), buf.cast(), 8).build()
}

/// Completes after `ts` or after one other completion, whichever comes first (so a timeout
/// left over from an early wake removes itself). Needs Linux 5.4 (`IORING_OP_TIMEOUT`).
///
/// The caller keeps `ts` valid until the SQE has been submitted (the kernel copies it then).
pub(super) fn timeout(ts: *const types::Timespec) -> squeue::Entry {
    opcode::Timeout::new(ts).count(1).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_masks() {
        let r = Interest::READABLE;
        let w = Interest::WRITABLE;
        assert_eq!(poll_result(libc::POLLIN as i32, r), 1);
        assert_eq!(poll_result(libc::POLLOUT as i32, w), 2);
        assert_eq!(poll_result((libc::POLLIN | libc::POLLOUT) as i32, r), 1);
        assert_eq!(poll_result(libc::POLLHUP as i32, w), 2);
        assert_eq!(poll_result(libc::POLLERR as i32, r.add(w)), 3);
        assert_eq!(poll_result(libc::POLLNVAL as i32, r), 1);
        assert_eq!(poll_multi_result(libc::POLLIN as i32, r), 1);
        let closed = (libc::POLLIN | libc::POLLRDHUP) as i32;
        assert_eq!(poll_multi_result(closed, r), 1 | HANGUP);
        assert_eq!(poll_multi_result(libc::POLLERR as i32, r), 1 | HANGUP);
    }
}
