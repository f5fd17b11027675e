//! Ring creation and capability probe for the io_uring driver.
//! Owns: ring size (retrying smaller on ENOMEM), the opcode probe, the readable reason when
//! io_uring cannot be used. Not: using the ring (`mod.rs`).

use std::io;

use io_uring::{opcode, IoUring, Probe};

use crate::sys;

/// Ring sizes tried in order: rings are charged to locked memory on older kernels and torn
/// down lazily, so a process that makes many loops can run out; a smaller ring still works.
pub(super) const RING_SIZES: [u32; 3] = [256, 64, 16];

/// What the kernel offers beyond the required minimum.
#[derive(Clone, Copy, Debug)]
pub(super) struct Features {
    /// `IORING_FEAT_EXT_ARG` (5.11): `io_uring_enter` takes a timeout.
    pub(super) ext_arg: bool,
    /// `IORING_OP_READ` (5.6): the waker can read its eventfd in the ring.
    pub(super) read: bool,
    /// Multishot accept looks available (see `setup`).
    pub(super) accept_multi: bool,
    /// Multishot poll (`IORING_POLL_ADD_MULTI`, 5.13).
    pub(super) poll_multi: bool,
}

/// Calls `build` with each size in turn while it fails with `ENOMEM`.
pub(super) fn retry_smaller<T>(
    sizes: &[u32],
    mut build: impl FnMut(u32) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = io::Error::from_raw_os_error(libc::ENOMEM);
    for &entries in sizes {
        match build(entries) {
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => last = e,
            other => return other,
        }
    }
    Err(last)
}

/// Creates a ring and checks it can run the driver. Errors read like
/// `io_uring_setup: EPERM (Operation not permitted)` or `io_uring: opcode PollAdd not
/// supported` (see [`sys::os_error`] for getting the errno back).
pub(super) fn setup(sizes: &[u32]) -> io::Result<(IoUring, Features)> {
    // COOP_TASKRUN + TASKRUN_FLAG: completions are not pushed into the loop thread by an
    // interrupt at every packet (measured: a multishot receive then spends a quarter of the
    // thread's time contending for the socket lock at each syscall exit, halving echo
    // throughput); they run when the thread next enters the kernel, and the SQ ring's
    // TASKRUN flag tells `wait` to enter. Only the creating thread runs that work, so a
    // loop run later on another thread gets a new ring (`Driver::needs_replacing`). No
    // SINGLE_ISSUER / DEFER_TASKRUN: asyncio loops are created on one thread and run on
    // another.
    // Kernels before 5.19 refuse the flags (EINVAL): a plain ring then.
    let ring = retry_smaller(sizes, |entries| {
        IoUring::builder()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(entries)
            .or_else(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => IoUring::builder().build(entries),
                _ => Err(e),
            })
    })
    .map_err(|e| with_context("io_uring_setup", e))?;
    let mut probe = Probe::new();
    if let Err(e) = ring.submitter().register_probe(&mut probe) {
        return Err(match e.raw_os_error() {
            Some(libc::EINVAL) => io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring: kernel has no opcode probe (needs Linux 5.6)",
            ),
            _ => with_context("io_uring_register(PROBE)", e),
        });
    }
    let params = ring.params();
    if !params.is_feature_nodrop() {
        return Err(unsupported(
            "io_uring: kernel lacks IORING_FEAT_NODROP (needs Linux 5.5)",
        ));
    }
    let features = Features {
        ext_arg: params.is_feature_ext_arg(),
        read: probe.is_supported(opcode::Read::CODE),
        // Multishot accept (5.19) is a flag of ACCEPT; SOCKET is the opcode that came with
        // it. Without it, or if a kernel refuses the flag anyway (-EINVAL), the driver
        // accepts by POLL_ADD + accept4 itself (`mod.rs`).
        accept_multi: probe.is_supported(opcode::Socket::CODE),
        // Multishot poll (5.13) is a flag of POLL_ADD, with no opcode of its own; resource
        // tags came in the same release. Without it the driver re-arms a one-shot POLL_ADD
        // at each completion (`mod.rs`).
        poll_multi: params.is_feature_resource_tagging(),
    };
    let mut required = vec![
        ("PollAdd", opcode::PollAdd::CODE),
        ("AsyncCancel", opcode::AsyncCancel::CODE),
    ];
    if !features.ext_arg {
        required.push(("Timeout", opcode::Timeout::CODE));
    }
    check_opcodes(&required, |code| probe.is_supported(code))?;
    Ok((ring, features))
}

/// `Err` naming the first opcode in `required` that `supported` rejects.
pub(super) fn check_opcodes(
    required: &[(&str, u8)],
    supported: impl Fn(u8) -> bool,
) -> io::Result<()> {
    match required.iter().find(|(_, code)| !supported(*code)) {
        Some((name, _)) => Err(unsupported(&format!(
            "io_uring: opcode {name} not supported"
        ))),
        None => Ok(()),
    }
}

fn unsupported(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, msg.to_owned())
}

fn with_context(context: &'static str, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => sys::os_error(context, code),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_smaller_on_enomem_only() {
        let mut tried = Vec::new();
        let got = retry_smaller(&RING_SIZES, |n| {
            tried.push(n);
            if n > 16 {
                Err(io::Error::from_raw_os_error(libc::ENOMEM))
            } else {
                Ok(n)
            }
        });
        assert_eq!(got.expect("ring after retries"), 16);
        assert_eq!(tried, vec![256, 64, 16]);

        let mut tried = Vec::new();
        let err = retry_smaller(&RING_SIZES, |n| -> io::Result<u32> {
            tried.push(n);
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .unwrap_err();
        assert_eq!(tried, vec![256], "EPERM is final");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));

        let err = retry_smaller(&RING_SIZES, |_| -> io::Result<u32> {
            Err(io::Error::from_raw_os_error(libc::ENOMEM))
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM));
    }

    #[test]
    fn reasons_read_well() {
        let e = with_context("io_uring_setup", io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(
            e.to_string(),
            "io_uring_setup: EPERM (Operation not permitted)"
        );
        assert_eq!(sys::error_code(&e), Some(libc::EPERM));
        let e = check_opcodes(&[("PollAdd", 6), ("AsyncCancel", 14)], |c| c != 6).unwrap_err();
        assert_eq!(e.to_string(), "io_uring: opcode PollAdd not supported");
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
