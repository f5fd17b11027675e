//! The loop's queues and the scheduling rules of one iteration that only move entries
//! between them: the ready queue and its batch swap, due timers to the ready queue, the
//! compaction of cancelled timers, the wait's timeout, and the handle freelists' growth
//! and release after a spike.
//! Owns: those rules, as `asyncio.base_events.BaseEventLoop._run_once` states them.
//! Not: running callbacks, the clock, the driver (`core/run.rs`).
//!
//! Generic over the ready callback (`H`: a `Py<Handle>` in the loop) and the timer (`T`: a
//! `Py<TimerHandle>`), as `TimerHeap<T>` and `Watchers<H, F>` are, so that the rules are
//! unit-tested on plain Rust values without an interpreter (the tests below); [`Timer`] is
//! all they ask of a timer, and nothing of a ready callback.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use super::streams::Streams;
use super::watchers::Watchers;
use crate::ffi::python::as_base;
use crate::handles::{Handle, TimerHandle};
use crate::timers::{should_compact, TimerHeap};

/// asyncio's `MAXIMUM_SELECT_TIMEOUT`: never wait longer than a day at once.
pub const MAX_WAIT_SECS: f64 = 24.0 * 3600.0;

/// Finished handles wait on the freelist for reuse without a fixed cap while the loop is
/// busy: a burst of a million callbacks is followed by the next one, which then takes
/// every handle from the freelist instead of from the allocator (whose fresh arenas cost a
/// page fault per 4 KiB, and whose emptied ones go back to the kernel). What a spike left
/// is released once it is over ([`SpikeWatch`]): within about a second, the freelist
/// shrinks to twice the largest batch the loop ran meanwhile, and never below this many...
pub const FREE_HANDLES_BUSY: usize = 65536;
/// ...and to this many once the loop has sat idle for a second, so an idle loop holds at
/// most ~200 KiB of spare handles.
pub const FREE_HANDLES_IDLE: usize = 1024;

/// A loop that has waited this long with nothing to do is idle: its handle freelists are
/// trimmed to their idle size. A longer (or unbounded) wait is cut to this length while
/// the freelists hold more than that ([`watch_for_idle`]), so the trim happens after an
/// idle second, never before a wait that a cross-thread post ends a moment later.
pub const IDLE_SECS: f64 = 1.0;

/// What the queues ask of a timer.
pub trait Timer {
    /// What leaving the heap needs: `Python<'_>` for a `Py`, `()` for a plain Rust value.
    type Cx<'a>: Copy;
    /// The ready queue's entry a due timer becomes.
    type Ready;
    /// Whether `cancel()` was called.
    fn is_cancelled(&self) -> bool;
    /// The timer leaves the heap unrun (it was cancelled): it no longer counts as
    /// scheduled.
    fn discard(&self, cx: Self::Cx<'_>);
    /// The timer is due: it leaves the heap for the ready queue.
    fn into_ready(self, cx: Self::Cx<'_>) -> Self::Ready;
}

impl Timer for Py<TimerHandle> {
    type Cx<'a> = Python<'a>;
    type Ready = Py<Handle>;

    #[inline]
    fn is_cancelled(&self) -> bool {
        as_base(self).get().is_cancelled()
    }

    #[inline]
    fn discard(&self, py: Python<'_>) {
        TimerHandle::unschedule(self, py);
        Handle::leave_queue(self.bind(py).as_super());
    }

    #[inline]
    fn into_ready(self, py: Python<'_>) -> Py<Handle> {
        // Still the loop's alone: it stays untracked by the collector in the ready queue.
        TimerHandle::unschedule(&self, py);
        self.into_bound(py).into_super().unbind()
    }
}

/// Handles that ran and that nobody else referenced, emptied, for the next scheduling call
/// to reuse: a freelist, like CPython's for its own small objects. Grows without a cap;
/// [`Freelist::trim`] releases.
pub struct Freelist<H>(Vec<H>);

impl<H> Default for Freelist<H> {
    fn default() -> Self {
        Freelist(Vec::new())
    }
}

impl<H> Freelist<H> {
    /// A spare handle, the one put back last.
    #[inline]
    pub fn pop(&mut self) -> Option<H> {
        self.0.pop()
    }

    /// The handle [`Freelist::pop`] returns after `k` more pops, if there are that many.
    #[inline]
    pub fn ahead(&self, k: usize) -> Option<&H> {
        self.0.len().checked_sub(k + 1).and_then(|i| self.0.get(i))
    }

    /// Puts back a finished, emptied handle.
    #[inline]
    pub fn push(&mut self, handle: H) {
        self.0.push(handle);
    }

    /// Spare handles.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no spare handle.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps at most `keep` spare handles and returns the rest, for the caller to release
    /// outside the queues' cell (a release can run the collector).
    pub fn trim(&mut self, keep: usize) -> Vec<H> {
        if self.0.len() > keep {
            self.0.split_off(keep)
        } else {
            Vec::new()
        }
    }

    /// Takes every spare handle (loop close).
    pub fn drain(&mut self) -> std::vec::Drain<'_, H> {
        self.0.drain(..)
    }
}

/// The queues, under one cell: the loop takes it a few times per iteration, a scheduling
/// call once.
pub struct Queues<H = Py<Handle>, T = Py<TimerHandle>> {
    /// Callbacks ready to run, in order. Also the cross-thread inbox: `call_soon_threadsafe`
    /// appends here exactly as asyncio appends to `_ready`, and the loop takes the whole
    /// queue in one swap per iteration ([`Queues::take_batch`]).
    pub ready: VecDeque<H>,
    /// Scheduled timers.
    pub timers: TimerHeap<T>,
    /// fd watchers.
    pub watchers: Watchers<H>,
    /// Multishot accepts of servers and ring sends of stream transports (io_uring).
    pub streams: Streams,
    /// Finished callbacks, for `call_soon` to reuse: saves an allocation and a
    /// garbage-collector count per callback.
    pub free: Freelist<H>,
    /// The same for timers (their deadline is re-set on reuse).
    pub free_timers: Freelist<T>,
}

impl<H, T> Default for Queues<H, T> {
    fn default() -> Self {
        Queues {
            ready: VecDeque::new(),
            timers: TimerHeap::default(),
            watchers: Watchers::default(),
            streams: Streams::default(),
            free: Freelist::default(),
            free_timers: Freelist::default(),
        }
    }
}

impl<H, T> Queues<H, T> {
    /// Takes the whole ready queue into `batch` (which the last run emptied), leaving it
    /// empty: the iteration runs exactly these, and callbacks queued meanwhile wait for
    /// the next one (mirrors `_run_once`'s `ntodo = len(self._ready)`). The two deques
    /// trade places, so neither allocates once grown.
    #[inline]
    pub fn take_batch(&mut self, batch: &mut VecDeque<H>) {
        debug_assert!(batch.is_empty());
        std::mem::swap(batch, &mut self.ready);
    }

    /// Puts what a batch left unrun back in front of anything queued since, in order (a
    /// `KeyboardInterrupt` stopped the batch: the next run resumes where asyncio's
    /// deque would).
    pub fn put_back(&mut self, batch: &mut VecDeque<H>) {
        while let Some(rest) = batch.pop_back() {
            self.ready.push_front(rest);
        }
    }

    /// The larger freelist's length.
    #[inline]
    pub fn spare(&self) -> usize {
        self.free.len().max(self.free_timers.len())
    }

    /// Keeps at most `keep` spare handles on each freelist; returns the rest to release
    /// outside the cell.
    pub fn trim_freelists(&mut self, keep: usize) -> (Vec<H>, Vec<T>) {
        (self.free.trim(keep), self.free_timers.trim(keep))
    }
}

impl<T: Timer> Queues<T::Ready, T> {
    /// Mirrors `_run_once`'s first block: with more than 100 timers of which over half
    /// are cancelled, rebuilds the heap without the cancelled ones (same order, then
    /// heapify) and zeroes the count; else pops the cancelled ones off the top, one count
    /// each. `cancelled` is asyncio's `_timer_cancelled_count`, which `cancel()` raises;
    /// each removed timer is discarded and handed to `removed` (to drop outside the cell).
    #[inline]
    pub fn drop_cancelled_timers(
        &mut self,
        cx: T::Cx<'_>,
        cancelled: &AtomicUsize,
        removed: impl FnMut(T),
    ) {
        let count = cancelled.load(Ordering::Relaxed);
        if count != 0 {
            self.drop_cancelled_slow(cx, cancelled, count, removed);
        }
    }

    fn drop_cancelled_slow(
        &mut self,
        cx: T::Cx<'_>,
        cancelled: &AtomicUsize,
        count: usize,
        mut removed: impl FnMut(T),
    ) {
        let timers = &mut self.timers;
        if should_compact(timers.len(), count) {
            let gone = timers.retain_and_heapify(|t| !t.is_cancelled());
            cancelled.store(0, Ordering::Relaxed);
            for t in gone {
                t.discard(cx);
                removed(t);
            }
            return;
        }
        while let Some((_, head)) = timers.peek() {
            if !head.is_cancelled() {
                break;
            }
            if let Some((_, t)) = timers.pop() {
                let left = cancelled.load(Ordering::Relaxed);
                cancelled.store(left.saturating_sub(1), Ordering::Relaxed);
                t.discard(cx);
                removed(t);
            }
        }
    }

    /// Mirrors `_run_once`'s "Handle 'later' callbacks that are ready": moves every timer
    /// due before `end_time` (asyncio's `self.time() + self._clock_resolution`) to the
    /// ready queue, in deadline order: heapq's for equal deadlines, except among the many
    /// due at once that [`TimerHeap::pop_due`] takes in one sorted pass. A NaN deadline is
    /// due, as `when >= end_time` is false for it in asyncio. Returns how many moved.
    pub fn fire_timers(&mut self, cx: T::Cx<'_>, end_time: f64) -> u64 {
        let Queues { timers, ready, .. } = self;
        timers.pop_due(end_time, |t| ready.push_back(t.into_ready(cx))) as u64
    }
}

/// Whether a timer whose deadline is `first` is due before `end_time`: not
/// `first < end_time`, so a NaN deadline (`call_at(nan)`) is due, as in asyncio.
#[inline]
pub fn is_due(first: f64, end_time: f64) -> bool {
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    let due = !(first >= end_time);
    due
}

/// The wait's timeout, as `_run_once` computes it: 0 if a callback is ready or `stop()` was
/// called (`now_due`), else until the earliest deadline, clamped to
/// [0, `MAX_WAIT_SECS`]; `None` (block) with no timer. `now` is read only when needed.
#[inline]
pub fn wait_timeout(
    now_due: bool,
    next_deadline: Option<f64>,
    now: impl FnOnce() -> f64,
) -> Option<f64> {
    if now_due {
        return Some(0.0);
    }
    // A NaN deadline counts as due, the way `when >= end_time` is false for it when
    // timers fire.
    next_deadline.map(|when| {
        let secs = when - now();
        if secs.is_nan() {
            0.0
        } else {
            secs.clamp(0.0, MAX_WAIT_SECS)
        }
    })
}

/// Whether a wait of `timeout` may be idle long enough to trim the freelists to their idle
/// size (then, while they hold more than that, it is cut to `IDLE_SECS`).
#[inline]
pub fn watch_for_idle(timeout: Option<f64>) -> bool {
    timeout.is_none_or(|t| t > IDLE_SECS)
}

/// Notices a spike in the freelists and says when to release what it left: once a second
/// has passed with more than `FREE_HANDLES_BUSY` spare handles, keep twice the largest
/// batch run since (the next burst of that size takes all its handles from the freelist),
/// at least `FREE_HANDLES_BUSY`.
#[derive(Default)]
pub struct SpikeWatch {
    /// Since when the freelists have held too many, and the largest batch run since.
    since: Option<(Instant, usize)>,
}

impl SpikeWatch {
    /// After a batch of `batch` handles ran, with `spare` handles on the larger freelist:
    /// how many each freelist keeps, if it is time to trim. `now` is read only during a
    /// spike.
    #[inline]
    pub fn after_batch(
        &mut self,
        spare: usize,
        batch: usize,
        now: impl FnOnce() -> Instant,
    ) -> Option<usize> {
        if spare <= FREE_HANDLES_BUSY {
            self.since = None;
            return None;
        }
        // The batch that left the spare handles does not count: only what ran since.
        let Some((since, peak)) = self.since.as_mut() else {
            self.since = Some((now(), 0));
            return None;
        };
        *peak = (*peak).max(batch);
        if now().duration_since(*since) < Duration::from_secs(1) {
            return None;
        }
        let keep = FREE_HANDLES_BUSY.max(2 * *peak);
        self.since = None;
        Some(keep)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::VecDeque;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use super::*;

    /// A timer without Python: a name, a shared cancelled flag and whether it left the
    /// heap unrun.
    #[derive(Debug)]
    struct Tm {
        name: u32,
        cancelled: Rc<Cell<bool>>,
        discarded: Rc<Cell<bool>>,
    }

    impl Timer for Tm {
        type Cx<'a> = ();
        type Ready = u32;

        fn is_cancelled(&self) -> bool {
            self.cancelled.get()
        }

        fn discard(&self, _: ()) {
            assert!(!self.discarded.replace(true), "discarded twice");
        }

        fn into_ready(self, _: ()) -> u32 {
            assert!(!self.discarded.get());
            self.name
        }
    }

    type Q = Queues<u32, Tm>;

    /// Pushes a timer named `name` at `when`; returns its cancel flag.
    fn push(q: &mut Q, when: f64, name: u32) -> (Rc<Cell<bool>>, Rc<Cell<bool>>) {
        let cancelled = Rc::new(Cell::new(false));
        let discarded = Rc::new(Cell::new(false));
        let t = Tm {
            name,
            cancelled: Rc::clone(&cancelled),
            discarded: Rc::clone(&discarded),
        };
        q.timers.push(when, t);
        (cancelled, discarded)
    }

    /// Cancels as `TimerHandle.cancel()` does: flag and loop count.
    fn cancel(flag: &Rc<Cell<bool>>, count: &AtomicUsize) {
        flag.set(true);
        count.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn the_batch_is_what_was_ready_at_its_start() {
        let mut q = Q::default();
        q.ready.extend([1, 2, 3]);
        let mut batch = VecDeque::new();
        q.take_batch(&mut batch);
        assert!(q.ready.is_empty());
        // Callbacks queued while the batch runs wait for the next iteration.
        assert_eq!(batch.pop_front(), Some(1));
        q.ready.push_back(4);
        assert_eq!(batch.drain(..).collect::<Vec<_>>(), vec![2, 3]);
        q.take_batch(&mut batch);
        assert_eq!(batch, [4]);
    }

    #[test]
    fn an_interrupted_batch_goes_back_in_front_in_order() {
        let mut q = Q::default();
        q.ready.extend([1, 2, 3, 4]);
        let mut batch = VecDeque::new();
        q.take_batch(&mut batch);
        assert_eq!(batch.pop_front(), Some(1)); // raised KeyboardInterrupt
        q.ready.extend([10, 11]); // queued by callback 1 before it raised
        q.put_back(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(q.ready, [2, 3, 4, 10, 11]);
    }

    #[test]
    fn due_timers_move_in_deadline_then_heapq_order() {
        let mut q = Q::default();
        for (i, w) in [3.0, 1.0, 2.0, 9.0].into_iter().enumerate() {
            push(&mut q, w, i as u32);
        }
        // end_time = now + resolution; a deadline equal to it is not due (`when >= end`).
        assert_eq!(q.fire_timers((), 3.0), 2);
        assert_eq!(q.ready, [1, 2]);
        assert_eq!(q.fire_timers((), 3.0 + 1e-9), 1);
        assert_eq!(q.ready, [1, 2, 0]);
        assert_eq!(q.timers.len(), 1);

        // Equal deadlines leave in heapq's order (reference: Python's heapq on objects
        // comparing the deadline alone), not in insertion order.
        let mut q = Q::default();
        for i in 0..5 {
            push(&mut q, 1.0, i);
        }
        assert_eq!(q.fire_timers((), 1.5), 5);
        assert_eq!(q.ready, [0, 2, 4, 1, 3]);
    }

    #[test]
    fn a_nan_deadline_is_due_at_once() {
        assert!(is_due(f64::NAN, 0.0));
        assert!(is_due(0.5, 1.0));
        assert!(!is_due(1.0, 1.0));
        let mut q = Q::default();
        push(&mut q, f64::NAN, 7);
        assert_eq!(q.fire_timers((), -1.0), 1);
        assert_eq!(q.ready, [7]);
    }

    #[test]
    fn cancelled_timers_on_top_are_popped_one_count_each() {
        let mut q = Q::default();
        let count = AtomicUsize::new(0);
        let (a, a_gone) = push(&mut q, 1.0, 0);
        let (b, b_gone) = push(&mut q, 5.0, 1);
        let (_, c_gone) = push(&mut q, 2.0, 2);
        cancel(&a, &count);
        cancel(&b, &count);
        let mut removed = Vec::new();
        q.drop_cancelled_timers((), &count, |t| removed.push(t.name));
        // Only the top is popped: the cancelled timer at 5.0 waits under a live one.
        assert_eq!(removed, vec![0]);
        assert!(a_gone.get() && !b_gone.get() && !c_gone.get());
        assert_eq!(count.load(Ordering::Relaxed), 1);
        assert_eq!(q.timers.len(), 2);
        assert_eq!(q.timers.peek().map(|(w, _)| w), Some(2.0));
    }

    #[test]
    fn nothing_cancelled_touches_nothing() {
        let mut q = Q::default();
        let count = AtomicUsize::new(0);
        let (a, _) = push(&mut q, 1.0, 0);
        // A cancelled flag the count does not know of yet (asyncio looks at the count).
        a.set(true);
        q.drop_cancelled_timers((), &count, |_| panic!("nothing to remove"));
        assert_eq!(q.timers.len(), 1);
    }

    #[test]
    fn compaction_follows_asyncios_thresholds() {
        // 101 timers, 51 cancelled (over half of more than 100): the heap is rebuilt.
        let mut q = Q::default();
        let count = AtomicUsize::new(0);
        let flags: Vec<_> = (0..101).map(|i| push(&mut q, f64::from(i), i)).collect();
        for (c, _) in flags.iter().skip(50) {
            cancel(c, &count);
        }
        let mut removed = Vec::new();
        q.drop_cancelled_timers((), &count, |t| removed.push(t.name));
        removed.sort_unstable();
        assert_eq!(removed, (50..101).collect::<Vec<_>>());
        assert!(flags.iter().skip(50).all(|(_, gone)| gone.get()));
        assert_eq!(count.load(Ordering::Relaxed), 0);
        assert_eq!(q.fire_timers((), f64::INFINITY), 50);
        assert_eq!(q.ready, (0..50).collect::<VecDeque<_>>());

        // 101 timers, 50 cancelled (not over half): only the top is popped, and here the
        // top is live, so nothing moves.
        let mut q = Q::default();
        let count = AtomicUsize::new(0);
        let flags: Vec<_> = (0..101).map(|i| push(&mut q, f64::from(i), i)).collect();
        for (c, _) in flags.iter().skip(51) {
            cancel(c, &count);
        }
        q.drop_cancelled_timers((), &count, |_| panic!("below the threshold"));
        assert_eq!(q.timers.len(), 101);
        assert_eq!(count.load(Ordering::Relaxed), 50);

        // 100 timers all cancelled (not more than 100): popped off the top one by one.
        let mut q = Q::default();
        let count = AtomicUsize::new(0);
        let flags: Vec<_> = (0..100).map(|i| push(&mut q, f64::from(i), i)).collect();
        for (c, _) in &flags {
            cancel(c, &count);
        }
        let mut removed = Vec::new();
        q.drop_cancelled_timers((), &count, |t| removed.push(t.name));
        assert_eq!(removed, (0..100).collect::<Vec<_>>(), "in deadline order");
        assert_eq!(count.load(Ordering::Relaxed), 0);
        assert!(q.timers.is_empty());
    }

    #[test]
    fn the_wait_follows_run_once() {
        let never = || -> f64 { panic!("the clock is not read") };
        // Something ready, or stopping: no wait, whatever the timers say.
        assert_eq!(wait_timeout(true, Some(100.0), never), Some(0.0));
        assert_eq!(wait_timeout(true, None, never), Some(0.0));
        // No timer: block.
        assert_eq!(wait_timeout(false, None, never), None);
        // Until the earliest deadline...
        assert_eq!(wait_timeout(false, Some(12.5), || 10.0), Some(2.5));
        // ...never negative...
        assert_eq!(wait_timeout(false, Some(9.0), || 10.0), Some(0.0));
        // ...at most a day (MAXIMUM_SELECT_TIMEOUT)...
        assert_eq!(wait_timeout(false, Some(1e9), || 10.0), Some(24.0 * 3600.0));
        assert_eq!(
            wait_timeout(false, Some(f64::INFINITY), || 0.0),
            Some(MAX_WAIT_SECS)
        );
        // ...and none for a NaN deadline, which is due.
        assert_eq!(wait_timeout(false, Some(f64::NAN), || 10.0), Some(0.0));
    }

    #[test]
    fn only_a_long_or_unbounded_wait_watches_for_idleness() {
        assert!(watch_for_idle(None));
        assert!(watch_for_idle(Some(1.5)));
        assert!(!watch_for_idle(Some(IDLE_SECS)));
        assert!(!watch_for_idle(Some(0.0)));
    }

    #[test]
    fn freelists_grow_without_a_cap_and_trim_keeps_the_first() {
        let mut q = Q::default();
        for i in 0..(FREE_HANDLES_BUSY as u32 + 10) {
            q.free.push(i);
        }
        assert_eq!(q.spare(), FREE_HANDLES_BUSY + 10);
        let (gone, gone_timers) = q.trim_freelists(FREE_HANDLES_IDLE);
        assert_eq!(q.free.len(), FREE_HANDLES_IDLE);
        assert!(gone_timers.is_empty());
        assert_eq!(gone.len(), FREE_HANDLES_BUSY + 10 - FREE_HANDLES_IDLE);
        // The most recently returned handle is handed out first; the kept ones are the
        // oldest.
        assert_eq!(q.free.pop(), Some(FREE_HANDLES_IDLE as u32 - 1));
        let (gone, _) = q.trim_freelists(FREE_HANDLES_IDLE);
        assert!(gone.is_empty(), "below the cap: nothing released");
        assert_eq!(q.free.drain().count(), FREE_HANDLES_IDLE - 1);
        assert!(q.free.is_empty());
    }

    #[test]
    fn ahead_names_the_handle_a_later_pop_returns() {
        let mut q = Q::default();
        for i in 0..5 {
            q.free.push(i);
        }
        assert_eq!(q.free.ahead(0), Some(&4));
        assert_eq!(q.free.ahead(2), Some(&2));
        assert_eq!(q.free.ahead(4), Some(&0));
        assert_eq!(q.free.ahead(5), None);
        let want = q.free.ahead(2).copied();
        q.free.pop();
        q.free.pop();
        assert_eq!(q.free.pop(), want);
        assert_eq!(Freelist::<u32>::default().ahead(0), None);
    }

    #[test]
    fn a_spike_is_released_a_second_later_down_to_twice_the_peak_batch() {
        let t0 = Instant::now();
        let at = |ms: u64| move || t0 + Duration::from_millis(ms);
        let never = || -> Instant { panic!("the clock is not read") };
        let mut w = SpikeWatch::default();
        // Below the busy reserve: nothing to watch, no clock read.
        assert_eq!(w.after_batch(FREE_HANDLES_BUSY, 1_000_000, never), None);
        // The spike's own batch starts the watch and does not count.
        let spare = 1_000_000;
        assert_eq!(w.after_batch(spare, 1_000_000, at(0)), None);
        assert_eq!(w.after_batch(spare, 50_000, at(500)), None);
        assert_eq!(w.after_batch(spare, 10, at(999)), None);
        // A second later: twice the largest batch since.
        assert_eq!(w.after_batch(spare, 10, at(1000)), Some(100_000));
        // Trimmed: watching starts over.
        assert_eq!(w.after_batch(spare, 10, at(1001)), None);
        assert_eq!(w.after_batch(spare, 10, at(2001)), Some(FREE_HANDLES_BUSY));
        // Falling below the reserve ends a watch.
        assert_eq!(w.after_batch(spare, 10, at(3000)), None);
        assert_eq!(w.after_batch(10, 10, never), None);
        assert_eq!(w.after_batch(spare, 10, at(3500)), None);
        assert_eq!(w.after_batch(spare, 10, at(4000)), None);
        assert_eq!(w.after_batch(spare, 10, at(4500)), Some(FREE_HANDLES_BUSY));
    }
}
