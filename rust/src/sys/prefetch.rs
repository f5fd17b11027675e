//! A hint to the CPU to start loading a cache line before it is needed.
//! Owns: the one instruction per architecture. Not: deciding what to prefetch (callers).
//!
//! A burst of a million timers touches its handles (96 MB) in deadline order, which is
//! random in memory: each touch is a cache and TLB miss that the next callback's Python
//! work keeps the CPU from overlapping with anything. Asking for a handle a few entries
//! ahead turns those misses into loads already under way.

/// Starts loading the cache line holding `addr` into every cache level. Never faults and
/// changes nothing a program can observe but timing, whatever `addr` is (a dangling or
/// null address is fine); a no-op where there is no such instruction here.
#[inline(always)]
pub fn prefetch_read<T>(addr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` only hints the cache: it reads no memory architecturally, cannot
    // fault on any address, and SSE (which defines it) is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr.cast::<i8>());
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` is a hint: it cannot fault on any address, writes no register or
    // memory, and the asm touches neither the stack nor the flags.
    unsafe {
        std::arch::asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) addr,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// The cache line size this assumes (every x86_64 and most aarch64 cores).
const LINE: usize = 64;

/// [`prefetch_read`] of every cache line holding a byte of `addr - before .. addr + after`:
/// an object whose header sits `before` bytes ahead of its pointer and which ends `after`
/// bytes past it. Addresses are only computed (wrapping), never dereferenced. With
/// constant sizes the steps are unrolled and take no branch (where the object starts in
/// its line, random from one object to the next, would make a branch a coin toss): one
/// prefetch every line's length from the start, and one of the last byte.
#[inline(always)]
pub fn prefetch_span<T>(addr: *const T, before: usize, after: usize) {
    let start = addr.cast::<u8>().wrapping_sub(before);
    let len = before + after;
    let mut offset = 0;
    while offset < len {
        prefetch_read(start.wrapping_add(offset));
        offset += LINE;
    }
    prefetch_read(start.wrapping_add(len.saturating_sub(1)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefetch_never_reads_what_it_names() {
        // Null, unmapped, the top of the address space (the span wraps), a freed block: a
        // hint, never a load, so none of these faults.
        prefetch_span(std::ptr::null::<u8>(), 16, 80);
        prefetch_span(usize::MAX as *const u8, 0, 80);
        prefetch_span(64 as *const u64, 4096, 4096);
        let gone = {
            let block = Box::new([0u8; 96]);
            block.as_ptr()
        };
        prefetch_read(gone);
        prefetch_span(gone, 16, 80);
    }
}
