//! Cheap loop counters behind `loop.stats()`.
//! Owns: the counters. Not: when they are bumped (`core/run.rs`).
//!
//! Only the loop thread writes most counters, so a bump is a relaxed load and store (a
//! plain add on x86), not a locked read-modify-write; `threadsafe_calls` is the exception.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::DriverCounters;

/// One counter written by the loop thread only.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`; the loop thread is the only writer (or writers hold the GIL). Compiled
    /// out without the `stats` feature, which is how their cost is measured (see
    /// docs/performance.md).
    #[inline]
    pub fn add(&self, n: u64) {
        if cfg!(feature = "stats") {
            self.0
                .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    }
    /// Raises the value to `n` if it is larger.
    #[inline]
    pub fn max(&self, n: u64) {
        if cfg!(feature = "stats") && n > self.get() {
            self.0.store(n, Ordering::Relaxed);
        }
    }
    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Everything `loop.stats()` reports besides the driver's own counters.
#[derive(Default, Debug)]
pub struct Stats {
    /// `run_once` iterations.
    pub iterations: Counter,
    /// Callbacks run (cancelled ones skipped are not counted).
    pub callbacks: Counter,
    /// Timers moved from the heap to the ready queue.
    pub timers_fired: Counter,
    /// Waits that could block in the kernel (timeout not zero).
    pub blocking_waits: Counter,
    /// Nanoseconds spent in blocking waits.
    pub wait_ns: Counter,
    /// Nanoseconds spent inside `run_forever` in total.
    pub run_ns: Counter,
    /// Callbacks whose run took at least `slow_callback_duration` (measured in debug mode).
    pub slow_callbacks: Counter,
    /// Callbacks that raised.
    pub callback_errors: Counter,
    /// fd watcher callbacks queued by readiness.
    pub io_events: Counter,
    /// `call_soon_threadsafe` calls from other threads (written by them, under the GIL).
    pub threadsafe_calls: Counter,
    /// Iterations that found callbacks posted from other threads.
    pub inject_batches: Counter,
    /// Largest number of cross-thread posts taken in one iteration.
    pub inject_max_batch: Counter,
    /// Cross-thread posts already accounted to a batch.
    pub inject_seen: Counter,
    /// Wake-ups sent to a sleeping driver.
    pub wakeups: AtomicU64,
    /// The driver's own counters, copied after each wait so that any thread can read them
    /// without touching the driver.
    pub driver: DriverStats,
}

/// A copy of [`DriverCounters`] readable from any thread.
#[derive(Default, Debug)]
pub struct DriverStats {
    /// See [`DriverCounters::submissions`].
    pub submissions: AtomicU64,
    /// See [`DriverCounters::enters`].
    pub enters: AtomicU64,
    /// See [`DriverCounters::completions`].
    pub completions: AtomicU64,
}

impl DriverStats {
    /// Stores a fresh copy.
    #[inline]
    pub fn set(&self, c: DriverCounters) {
        self.submissions.store(c.submissions, Ordering::Relaxed);
        self.enters.store(c.enters, Ordering::Relaxed);
        self.completions.store(c.completions, Ordering::Relaxed);
    }
}
