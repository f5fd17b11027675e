//! The provided-buffer ring multishot receives draw from.
//! Owns: the ring memory shared with the kernel, the buffers, handing buffers back.
//! Not: registering the ring (`mod.rs`, which has the submitter), what the data means.
//!
//! The kernel picks a buffer for each received chunk and names it in the CQE; the driver's
//! caller copies the bytes out and gives the buffer back at once ([`BufRing::recycle`]),
//! so a few buffers serve any number of connections. An empty ring ends a multishot
//! receive with `-ENOBUFS`; the caller re-arms it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;

/// Buffers in the ring (a power of two).
pub(super) const ENTRIES: u16 = 32;
/// Bytes per buffer (asyncio reads up to 256 KiB at once; a larger message arrives in
/// several chunks): 32 x 64 KiB = 2 MiB of address space, touched only as used.
pub(super) const BUF_SIZE: usize = 64 * 1024;
/// The buffer group id receives name.
pub(super) const GROUP: u16 = 0;

const PAGE: usize = 4096;

/// Ring + buffers; freed on drop (the owner makes sure the kernel is done with them).
pub(super) struct BufRing {
    ring: NonNull<BufRingEntry>,
    ring_layout: Layout,
    data: NonNull<u8>,
    data_layout: Layout,
    /// Our copy of the tail the kernel reads.
    tail: u16,
}

// SAFETY: the memory is owned by this value; the kernel touches it only through the ring it
// is registered with, which belongs to the same driver, used from one thread at a time.
unsafe impl Send for BufRing {}
// SAFETY: `&BufRing` only reads buffer bytes the kernel finished writing (named by a CQE).
unsafe impl Sync for BufRing {}

impl BufRing {
    /// Allocates the ring and the buffers and fills the ring with every buffer.
    pub(super) fn new() -> io::Result<Self> {
        let ring_layout = Layout::from_size_align(
            usize::from(ENTRIES) * std::mem::size_of::<BufRingEntry>(),
            PAGE,
        )
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let data_layout = Layout::from_size_align(usize::from(ENTRIES) * BUF_SIZE, PAGE)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: both layouts have a non-zero size.
        let ring = NonNull::new(unsafe { alloc_zeroed(ring_layout) }.cast::<BufRingEntry>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: as above.
        let Some(data) = NonNull::new(unsafe { alloc_zeroed(data_layout) }) else {
            // SAFETY: allocated just above with this layout.
            unsafe { dealloc(ring.as_ptr().cast(), ring_layout) };
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        };
        let mut me = BufRing {
            ring,
            ring_layout,
            data,
            data_layout,
            tail: 0,
        };
        for bid in 0..ENTRIES {
            me.push(bid);
        }
        me.publish();
        Ok(me)
    }

    /// The ring's address, for `register_buf_ring`.
    pub(super) fn ring_addr(&self) -> u64 {
        self.ring.as_ptr() as u64
    }

    /// The first `len` bytes of buffer `bid`, as the kernel left them.
    pub(super) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let bid = usize::from(bid % ENTRIES);
        let len = len.min(BUF_SIZE);
        // SAFETY: `bid * BUF_SIZE + len` stays inside the data allocation; the kernel wrote
        // these bytes before posting the CQE that named `bid`, and does not touch the buffer
        // again until it is recycled, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(bid * BUF_SIZE), len) }
    }

    /// Gives buffer `bid` back to the kernel.
    pub(super) fn recycle(&mut self, bid: u16) {
        self.push(bid % ENTRIES);
        self.publish();
    }

    fn push(&mut self, bid: u16) {
        let index = usize::from(self.tail & (ENTRIES - 1));
        // SAFETY: `index < ENTRIES`, inside the ring allocation; the kernel only reads entries
        // between its head and our published tail, and this one is past the tail.
        let entry = unsafe { &mut *self.ring.as_ptr().add(index) };
        // SAFETY: `bid < ENTRIES`, so the address is inside the data allocation.
        let addr = unsafe { self.data.as_ptr().add(usize::from(bid) * BUF_SIZE) };
        entry.set_addr(addr as u64);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the ring base is the first entry, page-aligned and initialised; `tail`
        // points at the 16-bit tail field inside it, which the kernel reads concurrently,
        // hence the atomic release store (entries written before are visible first).
        unsafe {
            let tail = BufRingEntry::tail(self.ring.as_ptr()).cast_mut();
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts; the owner drops us only once the
        // kernel can no longer write into the buffers or read the ring.
        unsafe {
            dealloc(self.ring.as_ptr().cast(), self.ring_layout);
            dealloc(self.data.as_ptr(), self.data_layout);
        }
    }
}
