//! Timer heap: orders pending call_later/call_at entries by deadline.
//! Owns: ordering, the lazy-cancellation count, compaction. Not: running callbacks
//! (`core/run.rs`), the clock (`core/clock.rs`).
//!
//! The heap is the same binary heap, with the same sift steps, as Python's `heapq`, comparing
//! deadlines with `<` only, as `asyncio.TimerHandle.__lt__` does. Timers with equal deadlines
//! therefore leave the heap in exactly the order stdlib asyncio would fire them, which is not
//! always insertion order.

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

    #[test]
    fn compaction_rule_matches_asyncio() {
        assert!(!should_compact(100, 99));
        assert!(!should_compact(101, 50));
        assert!(should_compact(101, 51));
    }
}
