//! The loop core: decides WHEN Python code runs.
//! Owns: the driver slot, run/stop/close state, the queues' cell (the queues and their
//! scheduling rules: `queues.rs`).
//! Not: kernel calls (`driver/`), the Python-facing argument checks (`py/`).
//!
//! Threading: one thread runs the loop; other threads may only post through
//! `call_soon_threadsafe`. Everything the loop thread and a poster can touch at once sits
//! behind a short `Mutex` that is never held while Python code runs or while a Python object
//! is dropped (a drop can run `__del__`, which can call back into the loop).

pub mod backend;
pub mod clock;
pub mod handle;
pub mod queues;
pub mod route;
pub mod run;
pub mod stats;
pub mod streams;
pub mod watchers;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::driver::{Driver, Requested, Waker};
use crate::ffi::gil::GilCell;
use crate::ffi::python::gc_is_tracked;
use crate::handles::{lock, Handle, TimerHandle};
pub use queues::{Queues, FREE_HANDLES_BUSY, FREE_HANDLES_IDLE, MAX_WAIT_SECS};
use stats::Stats;

/// Another reference to the same object: what the core's tables (`watchers.rs`,
/// `streams.rs`) need of what they hold to hand it out, generic so that their rules are
/// unit-tested without an interpreter. A `Py` needs the GIL token for it.
pub trait Share {
    /// What sharing needs: `Python<'_>` for a `Py`, `()` for a plain Rust value.
    type Cx<'a>: Copy;
    /// A new reference to the same object.
    fn share(&self, cx: Self::Cx<'_>) -> Self;
}

impl<T> Share for Py<T> {
    type Cx<'a> = Python<'a>;

    fn share(&self, py: Python<'_>) -> Self {
        self.clone_ref(py)
    }
}

/// Which backend a loop runs on and why.
#[derive(Clone, Debug)]
pub struct BackendInfo {
    /// "uring" or "poll".
    pub name: &'static str,
    /// Why a requested or preferred backend was not used, if it was not.
    pub reason: Option<String>,
}

/// State of one event loop.
pub struct LoopCore {
    /// Ready queue, timers, watchers (guarded by the GIL, see `ffi::gil`).
    pub queues: GilCell<Queues>,
    /// Cancelled timers still in the heap (asyncio's `_timer_cancelled_count`).
    pub cancelled_timers: Arc<AtomicUsize>,
    /// The driver, created on the thread that first runs the loop. Only the loop thread
    /// locks it, including across the GIL-free kernel wait.
    pub driver: Mutex<Option<Driver>>,
    /// A waker for the current driver, for other threads.
    pub waker: Mutex<Option<Waker>>,
    /// Set by the loop just before it blocks in the kernel; a poster that swaps it from
    /// true to false owes the driver a wake-up.
    pub needs_wake: AtomicBool,
    /// asyncio's `_stopping`.
    pub stopping: AtomicBool,
    /// asyncio's `_closed`.
    pub closed: AtomicBool,
    /// `threading.get_ident()` of the running thread, 0 when not running.
    pub thread_id: AtomicU64,
    /// Debug mode.
    pub debug: AtomicBool,
    /// `slow_callback_duration` in seconds, as f64 bits.
    pub slow_callback_bits: AtomicU64,
    /// The backend the caller asked for.
    pub requested: Requested,
    /// The backend in use (or planned) and the fallback reason.
    pub backend: Mutex<BackendInfo>,
    /// Counters.
    pub stats: Stats,
    /// `time.get_clock_info('monotonic').resolution`.
    pub clock_resolution: f64,
    /// Timers follow the loop's Python `time` (patched on the instance or overridden in a
    /// subclass), as asyncio's `_run_once` calls `self.time()`; set by `rsloop.Loop`.
    pub python_time: AtomicBool,
    /// The virtual clock (`rsloop.testing.VirtualClock`) that replaces the monotonic one,
    /// if the loop was made with one; set before the core is shared, never changed.
    pub vclock: Option<Arc<clock::VirtualClock>>,
}

impl LoopCore {
    /// A new, idle loop. The driver itself is created when the loop first runs.
    pub fn new(requested: Requested, backend: BackendInfo) -> Self {
        LoopCore {
            queues: GilCell::new(Queues::default()),
            cancelled_timers: Arc::new(AtomicUsize::new(0)),
            driver: Mutex::new(None),
            waker: Mutex::new(None),
            needs_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            thread_id: AtomicU64::new(0),
            debug: AtomicBool::new(false),
            slow_callback_bits: AtomicU64::new(0.1f64.to_bits()),
            requested,
            backend: Mutex::new(backend),
            stats: Stats::default(),
            clock_resolution: crate::sys::clock::resolution(),
            python_time: AtomicBool::new(false),
            vclock: None,
        }
    }

    /// `loop.time()`.
    #[inline]
    pub fn time(&self) -> f64 {
        match &self.vclock {
            None => crate::sys::clock::monotonic(),
            Some(clock) => clock.now(),
        }
    }

    /// Whether debug mode is on.
    #[inline]
    pub fn debug(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }

    /// Appends a ready handle (`call_soon`), one [`LoopCore::handle`] made: the collector
    /// does not track it, as a queued handle must not be (`Handle::enter_queue`).
    #[inline]
    pub fn push_ready(&self, py: Python<'_>, handle: Py<Handle>) {
        debug_assert!(!gc_is_tracked(handle.bind(py).as_any()));
        self.queues.with(py, |q| q.ready.push_back(handle));
    }

    /// Appends a ready handle (from [`LoopCore::handle`], as for `push_ready`) from any
    /// thread and wakes the driver if it sleeps.
    pub fn push_ready_threadsafe(&self, py: Python<'_>, handle: Py<Handle>) {
        debug_assert!(!gc_is_tracked(handle.bind(py).as_any()));
        self.queues.with(py, |q| q.ready.push_back(handle));
        // Every poster holds the GIL, so a plain add cannot lose a count.
        self.stats.threadsafe_calls.add(1);
        self.wake();
    }

    /// Wakes a driver blocked in the kernel, if it is. Callers hold the GIL, as the loop
    /// does when it announces a sleep and re-checks the queue, so the GIL orders the two:
    /// a relaxed look filters out the common "not sleeping" case without a locked
    /// instruction; the swap makes sure only one poster writes the eventfd.
    pub fn wake(&self) {
        if self.needs_wake.load(Ordering::Relaxed) && self.needs_wake.swap(false, Ordering::SeqCst)
        {
            self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = lock(&self.waker).as_ref() {
                // A failed wake (eventfd full) means one is already pending.
                let _ = w.wake();
            }
        }
    }

    /// Shows the collector every Python object the loop's queues hold: a queued handle
    /// the collector does not track is shown by what it holds (`Handle::traverse_queued`);
    /// the freelists hold emptied handles, which hold nothing.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        let Some(q) = self.queues.peek_for_gc(visit) else {
            return Ok(());
        };
        for h in &q.ready {
            Handle::traverse_queued(h, visit)?;
        }
        for t in q.timers.items() {
            Handle::traverse_queued_timer(t, visit)?;
        }
        for o in q.watchers.objects().chain(q.streams.objects()) {
            visit.call(o)?;
        }
        Ok(())
    }

    /// Sends the watcher cancels queued since the last flush to the kernel now, so no
    /// in-flight poll keeps an fd's file alive once Python closes it (a listening socket
    /// closed by `Server.close()` must refuse connections at once, as with a selector).
    pub fn submit_cancels(&self, py: Python<'_>) -> std::io::Result<()> {
        // Another thread (breaking the one-thread rule) may be waiting in the driver with
        // the GIL released: never block on it while holding the GIL; the cancels then go
        // out with the next flush, as they always did.
        let Ok(mut slot) = self.driver.try_lock() else {
            return Ok(());
        };
        let Some(driver) = slot.as_mut() else {
            return Ok(());
        };
        let cancels = self.queues.with(py, |q| {
            let mut c = q.watchers.take_cancels();
            c.extend(q.streams.take_cancels());
            c
        });
        if cancels.is_empty() {
            return Ok(());
        }
        for token in cancels {
            // A cancel that cannot be queued only means the poll completes normally later;
            // its token is already forgotten.
            let _ = driver.cancel(token);
        }
        driver.submit_now()
    }

    /// Starts a multishot accept on the listening socket `fd` whose connections (fds) go
    /// to `callback` (every driver performs `Op::AcceptMulti`); returns its token.
    pub fn accept_start(&self, py: Python<'_>, fd: i32, callback: Py<PyAny>) -> u64 {
        self.queues
            .with(py, |q| q.streams.start_accept(fd, callback))
    }

    /// Stops an accept started by `accept_start` (connections the kernel had already
    /// accepted still reach the callback).
    pub fn accept_stop(&self, py: Python<'_>, token: u64) {
        let cb = self.queues.with(py, |q| q.streams.stop(token));
        drop(cb);
    }

    /// Pushes a timer onto the heap.
    pub fn push_timer(&self, py: Python<'_>, when: f64, timer: Py<TimerHandle>) {
        Handle::enter_queue(timer.bind(py).as_super());
        self.queues.with(py, |q| q.timers.push(when, timer));
    }

    /// Empties every queue and drops the driver (loop close). Returns the Python objects
    /// removed so the caller drops them with no lock held; a handle someone else still
    /// holds is tracked by the collector again (`Handle::leave_queue`).
    pub fn clear(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let out: Vec<Py<PyAny>> = self.queues.with(py, |q| {
            let mut out: Vec<Py<PyAny>> = Vec::new();
            out.extend(std::mem::take(&mut q.ready).into_iter().map(Py::into_any));
            let timers = q.timers.drain();
            for t in &timers {
                TimerHandle::unschedule(t, py);
            }
            out.extend(timers.into_iter().map(Py::into_any));
            out.extend(q.watchers.clear());
            out.extend(q.streams.clear());
            out.extend(q.free.drain().map(Py::into_any));
            out.extend(q.free_timers.drain().map(Py::into_any));
            out
        });
        for obj in &out {
            if let Ok(h) = obj.bind(py).cast::<Handle>() {
                Handle::leave_queue(h);
            }
        }
        self.cancelled_timers.store(0, Ordering::Relaxed);
        *lock(&self.waker) = None;
        if let Some(d) = lock(&self.driver).take() {
            if d.is_inherited() {
                d.abandon();
            }
        }
        out
    }
}
