//! glibc's malloc thresholds (`mallopt`).
//! Owns: the one call that sets them. Not: whether to (`rsloop/_malloc.py` decides, once per
//! process, from the environment).
//!
//! A server that echoes 100 KiB messages makes and frees a few hundred KiB of `bytes` per
//! round trip. With glibc's defaults the top of the heap is given back to the kernel as soon
//! as more than a few hundred KiB of it are free, and faulted in again at the next message:
//! a quarter of such a server's CPU time went to page faults (docs/performance.md).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The mmap threshold `set_thresholds` set in this process (0: none).
static HEAP_BELOW: AtomicUsize = AtomicUsize::new(0);

/// Whether a block of `size` bytes comes from a heap that keeps what is freed
/// (`set_thresholds` succeeded with a higher mmap threshold): allocating it then costs no
/// `mmap` and no page faults, so a big receive may go straight into a new `bytes` of that
/// size instead of through a scratch buffer.
pub fn heap_serves(size: usize) -> bool {
    size < HEAP_BELOW.load(Ordering::Relaxed)
}

/// Sets `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD`: blocks below `mmap_threshold` come from
/// the heap, and the heap keeps up to `trim_threshold` free bytes at its top. Returns
/// whether glibc took both (it refuses an mmap threshold above 32 MiB).
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "portable")))]
pub fn set_thresholds(mmap_threshold: usize, trim_threshold: usize) -> bool {
    let (Ok(mmap), Ok(trim)) = (
        libc::c_int::try_from(mmap_threshold),
        libc::c_int::try_from(trim_threshold),
    ) else {
        return false;
    };
    // SAFETY: `mallopt` takes any value for these parameters and answers 0 for one it
    // refuses; it touches only the allocator's own settings.
    let mmap_ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) } == 1;
    // SAFETY: as above.
    let trim_ok = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, trim) } == 1;
    if mmap_ok && trim_ok {
        HEAP_BELOW.store(mmap_threshold, Ordering::Relaxed);
    }
    mmap_ok && trim_ok
}

/// Not glibc (or the "portable" build, which runs what macOS runs): nothing to set.
#[cfg(any(
    not(all(target_os = "linux", target_env = "gnu")),
    feature = "portable"
))]
pub fn set_thresholds(_mmap_threshold: usize, _trim_threshold: usize) -> bool {
    false
}
