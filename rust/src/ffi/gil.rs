//! `GilCell`: interior mutability guarded by the GIL instead of a lock.
//!
//! PyO3 requires `#[pyclass]` data to be `Sync`. The loop's queues are touched by whoever
//! holds the GIL (the loop thread, or a thread calling `call_soon_threadsafe`), so the GIL
//! already serialises every access; a `Mutex` on top costs two atomic operations per access
//! on the hottest path. `GilCell` trades them for a plain `busy` flag.
//!
//! Soundness rests on two rules:
//! - every access needs a `Python<'_>` token, i.e. the caller holds the GIL, and GIL
//!   acquire/release order those accesses across threads (free-threaded builds are refused
//!   at compile time in `ffi/python.rs`);
//! - the closure passed to [`GilCell::with`] must not run Python code (no calls, no drop of a
//!   Python object whose refcount could reach zero): Python code could re-enter the cell or
//!   release the GIL. Breaking this rule is caught by the `busy` flag, which turns the would-be
//!   aliasing into a panic (a loop bug) rather than undefined behaviour.
//!
//! [`FlagCell`] is a `GilCell` whose busy flag is one bit of a byte and whose other seven
//! bits are the owner's ([`FlagCell::bits`]): a value with a few flags of its own keeps
//! them there rather than in a word of their own (a `Handle` is one word smaller for it).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::Python;

/// Where a cell keeps its busy flag.
pub trait Busy {
    /// Sets the flag; returns whether it was already set.
    fn enter(&self) -> bool;
    /// Clears the flag.
    fn leave(&self);
    /// Whether the flag is set.
    fn is_set(&self) -> bool;
}

impl Busy for Cell<bool> {
    #[inline]
    fn enter(&self) -> bool {
        self.replace(true)
    }

    #[inline]
    fn leave(&self) {
        self.set(false);
    }

    #[inline]
    fn is_set(&self) -> bool {
        self.get()
    }
}

/// The bit of a [`FlagCell`]'s byte that says an access is in progress; the owner's bits
/// are the seven below it (unshifted, so reading them is one mask).
const BUSY: u8 = 0x80;
/// The owner's bits of a [`FlagCell`]'s byte.
const OWNER: u8 = !BUSY;

/// A [`FlagCell`]'s byte: `BUSY`, and the owner's seven bits (`OWNER`). Atomic
/// so that the owner's bits can be read without the GIL (a `frozen` pyclass's fields are
/// reachable from any thread); written only by GIL holders, whom the GIL orders, so a
/// plain load and store (no locked read-modify-write) never lose an update.
pub struct FlagByte(AtomicU8);

impl Busy for FlagByte {
    #[inline]
    fn enter(&self) -> bool {
        let held = self.0.load(Ordering::Relaxed);
        // A plain store: only GIL holders write (see the type).
        self.0.store(held | BUSY, Ordering::Relaxed);
        held & BUSY != 0
    }

    #[inline]
    fn leave(&self) {
        // Re-read: the access may have changed the owner's bits.
        let held = self.0.load(Ordering::Relaxed);
        self.0.store(held & !BUSY, Ordering::Relaxed);
    }

    #[inline]
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed) & BUSY != 0
    }
}

/// A value mutated only by GIL holders, one at a time.
pub struct GilCell<T, B: Busy = Cell<bool>> {
    busy: B,
    value: UnsafeCell<T>,
}

/// A [`GilCell`] with seven bits of flags beside its busy flag, readable without the GIL.
pub type FlagCell<T> = GilCell<T, FlagByte>;

// SAFETY: all access goes through `with`, which requires the GIL; the GIL hands the value
// from one thread to the next with the necessary happens-before edges, and `busy` stops a
// second access while one is in progress (including after a GIL release inside `f`). The
// value itself moves between threads, hence `T: Send`. `busy` is only written under the
// GIL too (`FlagCell`'s owner bits are atomic, so their GIL-free reads race with nothing).
unsafe impl<T: Send, B: Busy> Sync for GilCell<T, B> {}

/// Clears `busy` even if the closure panics.
struct Release<'a, B: Busy>(&'a B);

impl<B: Busy> Drop for Release<'_, B> {
    #[inline]
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl<T> GilCell<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        GilCell {
            busy: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }
}

impl<T> FlagCell<T> {
    /// Wraps `value`, with the owner's bits set to `bits` (the low seven; see
    /// [`FlagCell::bits`]).
    pub const fn with_bits(value: T, bits: u8) -> Self {
        GilCell {
            busy: FlagByte(AtomicU8::new(bits & OWNER)),
            value: UnsafeCell::new(value),
        }
    }

    /// The owner's seven bits (the high bit of the answer is always 0). Needs no GIL.
    #[inline]
    pub fn bits(&self) -> u8 {
        self.busy.0.load(Ordering::Relaxed) & OWNER
    }

    /// Replaces the owner's bits by `f` of them, leaving the access in progress, if any
    /// (this may be called from inside [`GilCell::with`], not [`FlagCell::with_flags`]).
    #[inline]
    pub fn update_bits(&self, _py: Python<'_>, f: impl FnOnce(u8) -> u8) {
        // The GIL orders every writer (see `FlagByte`), so load-then-store loses nothing.
        let held = self.busy.0.load(Ordering::Relaxed);
        let bits = f(held & OWNER) & OWNER;
        self.busy.0.store((held & BUSY) | bits, Ordering::Relaxed);
    }
}

/// Ends a [`FlagCell::with_flags`] access: clears `BUSY` and stores the owner's bits as the
/// access left them, even if it panicked.
struct ReleaseWith<'a> {
    byte: &'a AtomicU8,
    bits: u8,
}

impl Drop for ReleaseWith<'_> {
    #[inline]
    fn drop(&mut self) {
        self.byte.store(self.bits & OWNER, Ordering::Relaxed);
    }
}

impl<T> FlagCell<T> {
    /// [`GilCell::with`], with the owner's bits given to `f` to read and change: one load
    /// and two stores of the byte for the whole access. `f` must not call
    /// [`FlagCell::update_bits`] (the bits `f` leaves overwrite it).
    #[inline]
    pub fn with_flags<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T, &mut u8) -> R) -> R {
        let byte = &self.busy.0;
        let held = byte.load(Ordering::Relaxed);
        assert!(
            held & BUSY == 0,
            "rsloop: re-entrant access to loop state (a bug in rsloop)"
        );
        // A plain store: only GIL holders write (see `FlagByte`).
        byte.store(held | BUSY, Ordering::Relaxed);
        let mut release = ReleaseWith {
            byte,
            bits: held & OWNER,
        };
        // SAFETY: as in `GilCell::with`: the GIL is held and `BUSY` was clear, so no other
        // reference to the value exists; this one dies before `release` clears `BUSY`.
        f(unsafe { &mut *self.value.get() }, &mut release.bits)
    }
}

impl<T, B: Busy> GilCell<T, B> {
    /// Runs `f` with exclusive access to the value. `f` must not run Python code (see the
    /// module docs); move Python objects out and drop them after `with` returns.
    ///
    /// # Panics
    /// If the cell is already being accessed, which only a broken rule above can cause.
    #[inline]
    pub fn with<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        assert!(
            !self.busy.enter(),
            "rsloop: re-entrant access to loop state (a bug in rsloop)"
        );
        let _release = Release(&self.busy);
        // SAFETY: we hold the GIL (`_py`) and `busy` was false, so no other reference to the
        // value exists: not on another thread (they need the GIL and would see `busy`), not
        // on this one (a nested call would see `busy`). The reference dies before `_release`.
        f(unsafe { &mut *self.value.get() })
    }

    /// Consumes the cell (no GIL needed: ownership proves exclusivity).
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// A shared look at the value from a `__traverse__` implementation, which CPython only
    /// calls with the GIL held (the `PyVisit` argument proves we are in one). `None` if an
    /// access is in progress, in which case the traversal reports fewer references, which
    /// only makes the collector more conservative.
    pub fn peek_for_gc(&self, _visit: &pyo3::gc::PyVisit<'_>) -> Option<&T> {
        if self.busy.is_set() {
            return None;
        }
        // SAFETY: the GIL is held for the whole traversal (CPython's GC runs under it and
        // `PyVisit` only exists inside tp_traverse); `busy` is false, so no `&mut` to the
        // value exists, and none can be created before the traversal returns because
        // creating one needs this thread to run code outside the traversal.
        Some(unsafe { &*self.value.get() })
    }
}

#[cfg(test)]
mod tests {
    use super::{Busy, FlagCell, GilCell};

    #[test]
    fn a_flag_cell_keeps_its_owner_bits_beside_the_busy_flag() {
        for bits in 0u8..=0xff {
            let cell = FlagCell::with_bits((), bits);
            // Seven bits for the owner: the eighth is the busy flag's place.
            assert_eq!(cell.bits(), bits & 0x7f);
            assert!(!cell.busy.is_set());
            assert!(!cell.busy.enter(), "a new cell is not busy");
            assert!(cell.busy.is_set());
            assert_eq!(cell.bits(), bits & 0x7f, "entering keeps the owner's bits");
            assert!(cell.busy.enter(), "a second entry sees the first");
            cell.busy.leave();
            assert!(!cell.busy.is_set());
            assert_eq!(cell.bits(), bits & 0x7f, "leaving keeps the owner's bits");
        }
    }

    #[test]
    fn a_plain_cell_flags_a_second_entry() {
        let cell = GilCell::new(0u32);
        assert!(!cell.busy.enter());
        assert!(cell.busy.enter());
        cell.busy.leave();
        assert!(!cell.busy.is_set());
        assert_eq!(cell.into_inner(), 0);
    }
}
