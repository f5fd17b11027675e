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

use std::cell::{Cell, UnsafeCell};

use pyo3::Python;

/// A value mutated only by GIL holders, one at a time.
pub struct GilCell<T> {
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: all access goes through `with`, which requires the GIL; the GIL hands the value
// from one thread to the next with the necessary happens-before edges, and `busy` stops a
// second access while one is in progress (including after a GIL release inside `f`). The
// value itself moves between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for GilCell<T> {}

/// Clears `busy` even if the closure panics.
struct Release<'a>(&'a Cell<bool>);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.set(false);
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

    /// Runs `f` with exclusive access to the value. `f` must not run Python code (see the
    /// module docs); move Python objects out and drop them after `with` returns.
    ///
    /// # Panics
    /// If the cell is already being accessed, which only a broken rule above can cause.
    #[inline]
    pub fn with<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        assert!(
            !self.busy.replace(true),
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
}

impl<T> GilCell<T> {
    /// A shared look at the value from a `__traverse__` implementation, which CPython only
    /// calls with the GIL held (the `PyVisit` argument proves we are in one). `None` if an
    /// access is in progress, in which case the traversal reports fewer references, which
    /// only makes the collector more conservative.
    pub fn peek_for_gc(&self, _visit: &pyo3::gc::PyVisit<'_>) -> Option<&T> {
        if self.busy.get() {
            return None;
        }
        // SAFETY: the GIL is held for the whole traversal (CPython's GC runs under it and
        // `PyVisit` only exists inside tp_traverse); `busy` is false, so no `&mut` to the
        // value exists, and none can be created before the traversal returns because
        // creating one needs this thread to run code outside the traversal.
        Some(unsafe { &*self.value.get() })
    }
}
