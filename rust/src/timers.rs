//! Timer heap: orders pending call_later/call_at entries by deadline.
//! Owns: ordering, the lazy-cancellation count, compaction. Not: running callbacks
//! (`core/run.rs`), the clock (`core/clock.rs`).
//!
//! The heap is the same binary heap, with the same sift steps, as Python's `heapq`, comparing
//! deadlines with `<` only, as `asyncio.TimerHandle.__lt__` does. Timers with equal deadlines
//! therefore leave the heap in exactly the order stdlib asyncio would fire them, which is not
//! always insertion order.

/// [`TimerHeap::pop_due`] pops this many due entries one by one before it considers the
/// bulk path, and looks again each time the count doubles.
pub const BULK_AFTER: usize = 1024;

/// asyncio's `_MIN_SCHEDULED_TIMER_HANDLES`: below this many timers, never compact.
pub const MIN_SCHEDULED_FOR_COMPACTION: usize = 100;
/// asyncio's `_MIN_CANCELLED_TIMER_HANDLES_FRACTION`: compact above this cancelled share.
pub const MIN_CANCELLED_FRACTION: f64 = 0.5;

/// A min-heap of `(deadline, item)` pairs with heapq's exact algorithm.
#[derive(Debug)]
pub struct TimerHeap<T> {
    heap: Vec<(f64, T)>,
}

impl<T> Default for TimerHeap<T> {
    fn default() -> Self {
        TimerHeap { heap: Vec::new() }
    }
}

impl<T> TimerHeap<T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries, cancelled ones included.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether there is no entry at all.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest entry, if any.
    pub fn peek(&self) -> Option<(f64, &T)> {
        self.heap.first().map(|(w, t)| (*w, t))
    }

    /// `heapq.heappush`.
    pub fn push(&mut self, when: f64, item: T) {
        self.heap.push((when, item));
        let last = self.heap.len() - 1;
        self.sift_down(0, last);
    }

    /// `heapq.heappop`.
    pub fn pop(&mut self) -> Option<(f64, T)> {
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last);
        }
        let first = std::mem::replace(&mut self.heap[0], last);
        self.sift_up(0);
        Some(first)
    }

    /// Pops every entry due before `end_time` (`when < end_time`, or a NaN deadline, which
    /// asyncio's `when >= end_time` test also counts as due), in deadline order, handing
    /// each to `fire`; returns how many.
    ///
    /// Entries leave one `heappop` at a time, as in asyncio. A pop walks log2(n) levels,
    /// and at a million timers the lower ones are out of the cache (about 250 ns a pop).
    /// So once [`BULK_AFTER`] entries have left this way, and again each time that count
    /// doubles, the heap's deadlines are counted in one sequential pass if that costs at
    /// most 32 reads per pop already made; if an eighth of the heap or more is due, the
    /// due entries are taken out in place, sorted by deadline and handed over, and the rest
    /// is heapified. Deadlines still come out in order; only equal deadlines in such a bulk
    /// leave in the sort's order rather than heapq's (asyncio leaves their order
    /// undefined).
    pub fn pop_due(&mut self, end_time: f64, mut fire: impl FnMut(T)) -> usize {
        let mut popped = 0;
        let mut next_check = BULK_AFTER;
        loop {
            match self.heap.first() {
                #[allow(clippy::neg_cmp_op_on_partial_ord)]
                Some(&(when, _)) if !(when >= end_time) => {}
                _ => return popped,
            }
            if popped == next_check {
                next_check = next_check.saturating_mul(2);
                let len = self.heap.len();
                if popped.saturating_mul(32) >= len
                    && self.count_due(end_time).saturating_mul(8) >= len
                {
                    return popped + self.take_due_in_bulk(end_time, fire);
                }
            }
            let Some((_, item)) = self.pop() else {
                return popped;
            };
            fire(item);
            popped += 1;
        }
    }

    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn count_due(&self, end_time: f64) -> usize {
        self.heap
            .iter()
            .filter(|(when, _)| !(*when >= end_time))
            .count()
    }

    // The bulk half of `pop_due`: partition in place (due entries first), sort those,
    // hand them over, heapify what is left.
    fn take_due_in_bulk(&mut self, end_time: f64, mut fire: impl FnMut(T)) -> usize {
        let mut due = 0;
        for j in 0..self.heap.len() {
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(self.heap[j].0 >= end_time) {
                self.heap.swap(due, j);
                due += 1;
            }
        }
        // NaN deadlines (call_at(nan)) sort last here; heapq places them arbitrarily.
        self.heap[..due].sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        for (_, item) in self.heap.drain(..due) {
            fire(item);
        }
        let n = self.heap.len();
        for i in (0..n / 2).rev() {
            self.sift_up(i);
        }
        due
    }

    /// Keeps the entries for which `keep` is true, in their current order, then re-heapifies
    /// like `heapq.heapify` (asyncio's compaction of cancelled timers). Returns the removed
    /// items so the caller can drop them where that is safe.
    pub fn retain_and_heapify(&mut self, mut keep: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        let old = std::mem::take(&mut self.heap);
        self.heap.reserve(old.len());
        for (when, item) in old {
            if keep(&item) {
                self.heap.push((when, item));
            } else {
                removed.push(item);
            }
        }
        let n = self.heap.len();
        for i in (0..n / 2).rev() {
            self.sift_up(i);
        }
        removed
    }

    /// Removes every entry.
    pub fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.heap)
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Iterates over the items in heap (not deadline) order.
    pub fn items(&self) -> impl Iterator<Item = &T> {
        self.heap.iter().map(|(_, t)| t)
    }

    // heapq._siftdown: move the item at `pos` up towards `start` while it is smaller
    // than its parent. Like heapq, parents move down into a hole and the item is written
    // once at the end.
    fn sift_down(&mut self, start: usize, mut pos: usize) {
        let when = self.heap[pos].0;
        while pos > start {
            let parent = (pos - 1) >> 1;
            if when < self.heap[parent].0 {
                self.heap.swap(pos, parent);
                pos = parent;
            } else {
                break;
            }
        }
    }

    // heapq._siftup: move the smaller child up until a leaf is reached, then sift the
    // original item down from there. The "not left < right" choice of the right child on
    // ties is what makes equal deadlines come out in heapq's order.
    fn sift_up(&mut self, mut pos: usize) {
        let end = self.heap.len();
        let start = pos;
        let mut child = 2 * pos + 1;
        while child < end {
            let right = child + 1;
            // heapq: `not heap[child] < heap[right]`; NaN deadlines make this differ from
            // `>=`, and matching heapq exactly is the point.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let take_right = right < end && !(self.heap[child].0 < self.heap[right].0);
            if take_right {
                child = right;
            }
            self.heap.swap(pos, child);
            pos = child;
            child = 2 * pos + 1;
        }
        self.sift_down(start, pos);
    }
}

/// asyncio's rule for when to rebuild the heap without its cancelled entries.
pub fn should_compact(scheduled: usize, cancelled: usize) -> bool {
    scheduled > MIN_SCHEDULED_FOR_COMPACTION
        && (cancelled as f64) / (scheduled as f64) > MIN_CANCELLED_FRACTION
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_order(h: &mut TimerHeap<u32>) -> Vec<u32> {
        std::iter::from_fn(|| h.pop().map(|(_, t)| t)).collect()
    }

    #[test]
    fn pops_in_deadline_order() {
        let mut h = TimerHeap::new();
        for (i, w) in [5.0, 1.0, 3.0, 2.0, 4.0].into_iter().enumerate() {
            h.push(w, i as u32);
        }
        assert_eq!(drain_order(&mut h), vec![1, 3, 2, 4, 0]);
        assert!(h.is_empty());
    }

    #[test]
    fn equal_deadlines_follow_heapq_not_fifo() {
        // Reference order from Python's heapq on objects whose __lt__ compares the
        // deadline alone (as TimerHandle's does): five pushes at 1.0 pop as [0, 2, 4, 1, 3].
        let mut h = TimerHeap::new();
        for i in 0..5u32 {
            h.push(1.0, i);
        }
        assert_eq!(drain_order(&mut h), vec![0, 2, 4, 1, 3]);
    }

    #[test]
    fn retain_removes_and_keeps_heap_valid() {
        let mut h = TimerHeap::new();
        for i in 0..200u32 {
            h.push(f64::from(i % 17), i);
        }
        let removed = h.retain_and_heapify(|i| i % 3 != 0);
        assert_eq!(removed.len(), 67);
        let mut last = f64::NEG_INFINITY;
        while let Some((w, i)) = h.pop() {
            assert!(w >= last);
            assert_ne!(i % 3, 0);
            last = w;
        }
    }

    // A small deterministic generator (xorshift), so the tests need no crate.
    fn deadlines(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    fn pop_due_all(h: &mut TimerHeap<u32>, end_time: f64) -> Vec<u32> {
        let mut out = Vec::new();
        let n = h.pop_due(end_time, |t| out.push(t));
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn pop_due_matches_one_pop_at_a_time_below_the_bulk_size() {
        // Few due entries: exactly heapq's order, equal deadlines included.
        let whens: Vec<f64> = (0..600).map(|i| f64::from(i % 7)).collect();
        let mut a = TimerHeap::new();
        let mut b = TimerHeap::new();
        for (i, w) in whens.iter().enumerate() {
            a.push(*w, i as u32);
            b.push(*w, i as u32);
        }
        let got = pop_due_all(&mut a, 4.0);
        let want: Vec<u32> = std::iter::from_fn(|| match b.peek() {
            Some((w, _)) if w < 4.0 => b.pop().map(|(_, t)| t),
            _ => None,
        })
        .collect();
        assert_eq!(got, want);
        assert_eq!(a.len(), b.len());
        assert_eq!(drain_order(&mut a), drain_order(&mut b));
    }

    #[test]
    fn pop_due_in_bulk_keeps_deadline_order_and_a_valid_heap() {
        for (n, end_time) in [(100_000, 0.9), (100_000, 0.1), (5_000, 2.0), (20_000, 0.5)] {
            let whens = deadlines(n, 7 + n as u64);
            let mut h = TimerHeap::new();
            for (i, w) in whens.iter().enumerate() {
                h.push(*w, i as u32);
            }
            let fired = pop_due_all(&mut h, end_time);
            let due = whens.iter().filter(|w| **w < end_time).count();
            assert_eq!(fired.len(), due);
            // Deadline order, every due entry exactly once.
            assert!(fired
                .windows(2)
                .all(|p| whens[p[0] as usize] <= whens[p[1] as usize]));
            let mut seen = fired.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), due);
            // What is left pops in order and is exactly the rest.
            let rest = drain_order(&mut h);
            assert_eq!(rest.len(), n - due);
            assert!(rest.iter().all(|i| whens[*i as usize] >= end_time));
            assert!(rest
                .windows(2)
                .all(|p| whens[p[0] as usize] <= whens[p[1] as usize]));
        }
    }

    #[test]
    fn pop_due_takes_many_equal_deadlines_in_bulk() {
        // 5,000 timers due at the same instant: the bulk path (their order among themselves
        // is the sort's, not heapq's, which asyncio leaves undefined); all of them, once.
        let mut a = TimerHeap::new();
        let mut b = TimerHeap::new();
        for i in 0..5000u32 {
            a.push(1.0, i);
            b.push(1.0, i);
        }
        let got = pop_due_all(&mut a, 2.0);
        let heapq = drain_order(&mut b);
        assert_ne!(got, heapq, "the bulk path was not taken");
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..5000).collect::<Vec<u32>>());
        assert!(a.is_empty());
    }

    #[test]
    fn pop_due_in_bulk_counts_nan_deadlines_as_due() {
        // Enough due entries for the bulk path, which takes every NaN deadline (heapq,
        // whose comparisons with NaN are all false, may leave one buried).
        let mut h = TimerHeap::new();
        for i in 0..3000u32 {
            h.push(
                if i % 1000 == 0 {
                    f64::NAN
                } else {
                    f64::from(i)
                },
                i,
            );
        }
        let fired = pop_due_all(&mut h, 2500.5);
        assert!(fired.len() > BULK_AFTER);
        for i in [0, 1000, 2000] {
            assert!(fired.contains(&i));
        }
        assert!(h.items().all(|i| i % 1000 != 0));
    }

    #[test]
    fn compaction_rule_matches_asyncio() {
        assert!(!should_compact(100, 99));
        assert!(!should_compact(101, 50));
        assert!(should_compact(101, 51));
    }
}
