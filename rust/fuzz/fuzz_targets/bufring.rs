//! The provided-buffer ring (`rust/src/driver/uring/bufring.rs`, included as is), driven
//! the way the kernel and the loop drive it, against a model of which buffers are where.
//!
//! Each input is a sequence of steps. The simulated kernel consumes an entry from the ring
//! (from its head up to the tail the ring last published, exactly as a multishot receive
//! does), writes a chunk into that buffer and names it in a CQE's flags; the loop reads the
//! chunk back through `bytes` (with the length the CQE reported) and hands the buffer back
//! with `recycle`, now or later, in any order. Hostile reads (`bytes` with any buffer id
//! and any length) must stay inside the buffers.
//!
//! What must hold after every step: the published tail is the ring's count of entries
//! pushed; the entries between the kernel's head and that tail are exactly the buffers the
//! model says are free, each once, each with its own address and the full length; a chunk
//! reads back as the kernel wrote it; the ring never holds more entries than it has slots.
#![no_main]

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/driver/uring/bufring.rs"]
mod bufring;

use bufring::{BufRing, BUF_SIZE, ENTRIES};

/// `IORING_CQE_F_BUFFER`, and the shift of the buffer id in a CQE's flags.
const CQE_F_BUFFER: u32 = 1;
const CQE_BUFFER_SHIFT: u32 = 16;

struct Kernel {
    /// The kernel's head: entries before it were consumed.
    head: u16,
}

impl Kernel {
    fn ring(bufs: &BufRing) -> *mut BufRingEntry {
        bufs.ring_addr() as *mut BufRingEntry
    }

    fn published_tail(bufs: &BufRing) -> u16 {
        // SAFETY: the ring base is the first entry of a live, page-aligned ring of ENTRIES
        // entries; the tail is the 16-bit field the kernel reads with an acquire load.
        unsafe { AtomicU16::from_ptr(BufRingEntry::tail(Self::ring(bufs)).cast_mut()) }
            .load(Ordering::Acquire)
    }

    fn entry(bufs: &BufRing, pos: u16) -> (u64, u32, u16) {
        let index = usize::from(pos & (ENTRIES - 1));
        // SAFETY: `index < ENTRIES`, inside the ring allocation, which lives as `bufs`.
        let e = unsafe { &*Self::ring(bufs).add(index) };
        (e.addr(), e.len(), e.bid())
    }

    /// One received chunk of `n` bytes (clamped to the buffer's length) whose first and
    /// last bytes are `fill` (the ends are what a wrong address or length would get
    /// wrong; writing them all made each input cost milliseconds): the CQE's flags and the
    /// length, or `None` (`-ENOBUFS`) when the ring is empty.
    fn receive(&mut self, bufs: &BufRing, n: usize, fill: u8) -> Option<(u32, usize)> {
        if Self::published_tail(bufs) == self.head {
            return None;
        }
        let (addr, len, bid) = Self::entry(bufs, self.head);
        self.head = self.head.wrapping_add(1);
        let n = n.min(len as usize);
        // SAFETY: the model checked (after the last step) that this entry's address is
        // buffer `bid`'s and its length BUF_SIZE, inside the data allocation; no one reads
        // the buffer until the CQE below names it.
        unsafe {
            if n > 0 {
                *(addr as *mut u8) = fill;
                *(addr as *mut u8).add(n - 1) = fill;
            }
        }
        Some(((u32::from(bid) << CQE_BUFFER_SHIFT) | CQE_F_BUFFER, n))
    }
}

/// Checks the ring against the model: the entries the kernel may still consume are the
/// free buffers, each once, with its own address and the full length.
fn check(bufs: &BufRing, kernel: &Kernel, pushed: u16, held: &BTreeSet<u16>) {
    let tail = Kernel::published_tail(bufs);
    assert_eq!(tail, pushed, "published tail");
    let available = tail.wrapping_sub(kernel.head);
    assert!(
        available <= ENTRIES,
        "{available} entries in a ring of {ENTRIES}"
    );
    let mut seen = BTreeSet::new();
    for k in 0..available {
        let (addr, len, bid) = Kernel::entry(bufs, kernel.head.wrapping_add(k));
        assert!(bid < ENTRIES, "bid {bid}");
        assert!(seen.insert(bid), "buffer {bid} twice in the ring");
        assert!(
            !held.contains(&bid),
            "buffer {bid} in the ring while the loop holds it"
        );
        assert_eq!(
            addr,
            bufs.bytes(bid, 0).as_ptr() as u64,
            "buffer {bid}'s address"
        );
        assert_eq!(len as usize, BUF_SIZE, "buffer {bid}'s length");
    }
    assert_eq!(
        seen.len() + held.len(),
        usize::from(ENTRIES),
        "a buffer went missing"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut bufs) = BufRing::new() else {
        return;
    };
    let base = bufs.bytes(0, 0).as_ptr() as usize;
    let mut kernel = Kernel { head: 0 };
    let mut pushed = ENTRIES; // `new` fills the ring
                              // Chunks the loop has been told about and not yet handed back: (bid, len, fill).
    let mut held_chunks: VecDeque<(u16, usize, u8)> = VecDeque::new();
    let mut held = BTreeSet::new();
    check(&bufs, &kernel, pushed, &held);

    for step in data.chunks(4) {
        let [op, a, b, c] = [0, 1, 2, 3].map(|i| step.get(i).copied().unwrap_or(0));
        match op % 4 {
            // The kernel receives a chunk; the loop gets the CQE.
            0 | 1 => {
                let n = match a % 4 {
                    0 => 0,
                    1 => usize::from(b),
                    2 => BUF_SIZE - usize::from(b),
                    _ => BUF_SIZE + usize::from(b), // more than a buffer: clamped
                };
                match kernel.receive(&bufs, n, c) {
                    None => assert_eq!(
                        held.len(),
                        usize::from(ENTRIES),
                        "ENOBUFS with free buffers"
                    ),
                    Some((flags, n)) => {
                        // The driver's own decoding of the CQE.
                        let bid = io_uring::cqueue::buffer_select(flags).expect("a buffer flag");
                        assert!(held.insert(bid), "the kernel handed out buffer {bid} twice");
                        held_chunks.push_back((bid, n, c));
                    }
                }
            }
            // The loop copies a chunk out and recycles its buffer (oldest, newest or any).
            2 => {
                if held_chunks.is_empty() {
                    continue;
                }
                let i = usize::from(a) % held_chunks.len();
                let (bid, n, fill) = held_chunks.remove(i).expect("index in range");
                let got = bufs.bytes(bid, n);
                assert_eq!(got.len(), n);
                if n > 0 {
                    assert_eq!(
                        (got[0], got[n - 1]),
                        (fill, fill),
                        "buffer {bid}'s chunk changed"
                    );
                }
                // A buffer id as a CQE could name it: the ring takes it modulo ENTRIES.
                bufs.recycle(bid + ENTRIES * u16::from(b % 2));
                pushed = pushed.wrapping_add(1);
                held.remove(&bid);
            }
            // A hostile read: any buffer id, any length, stays in its buffer.
            _ => {
                let bid = u16::from_le_bytes([a, b]);
                let len = usize::from(c) << (usize::from(a) % 16);
                let got = bufs.bytes(bid, len);
                let start = got.as_ptr() as usize - base;
                assert_eq!(start % BUF_SIZE, 0);
                assert!(start / BUF_SIZE < usize::from(ENTRIES));
                assert_eq!(got.len(), len.min(BUF_SIZE));
                if let Some(last) = got.last() {
                    std::hint::black_box(last);
                }
            }
        }
        check(&bufs, &kernel, pushed, &held);
    }
});
