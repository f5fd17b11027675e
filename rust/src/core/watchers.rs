//! fd watchers (`add_reader` / `add_writer`): which handle runs when an fd is ready.
//! Owns: the fd → handles table, the token ↔ watcher map, the arm/cancel work waiting for
//! the next driver flush. Not: the kernel side (`driver/`), running callbacks (`core/run.rs`).
//!
//! Watchers are level-triggered like asyncio's selectors: each readiness is a one-shot
//! `Op::Poll`, re-submitted after its callback was queued. The re-submission reaches the
//! kernel at the next wait, after the callback ran, so a callback that did not drain the fd
//! is called again, and one that did is not.
//!
//! A watcher added with `multi` (a TCP transport's reader, which knows when it drained
//! its socket) keeps one `Op::PollMulti` armed instead, so a readiness costs no re-arm: the
//! kernel reports each new readiness, at most one callback is queued per iteration, and
//! the callback that did not drain the fd says so ([`Watchers::again`]), which queues it
//! in the next iteration as a selector's next report would. Once the kernel reports the
//! fd hung up (`HANGUP`: end of stream, an error), that readiness stays, as a selector
//! keeps reporting it: the callback is queued every iteration until it removes itself.
//!
//! The table is generic over the callback (`H`: a `Py<Handle>` in the loop) and the file
//! object (`F`), as `TimerHeap<T>` is over its items, so its rules are unit-tested without
//! an interpreter (the tests below); [`Callback`] is all it asks of a callback.

use crate::intmap::IntMap;

use pyo3::prelude::*;

use super::Share;
use crate::driver::{Interest, Token, HANGUP};
use crate::handles::Handle;

/// What the table asks of a callback: to be shared (for the ready queue) and whether it
/// was cancelled (its watcher is then dropped, not fired).
pub trait Callback: Share {
    fn is_cancelled(&self) -> bool;
}

impl Callback for Py<Handle> {
    fn is_cancelled(&self) -> bool {
        self.get().is_cancelled()
    }
}

/// Read or write side of an fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// `add_reader`.
    Read,
    /// `add_writer`.
    Write,
}

impl Side {
    /// The readiness this side waits for.
    pub fn interest(self) -> Interest {
        match self {
            Side::Read => Interest::READABLE,
            Side::Write => Interest::WRITABLE,
        }
    }
}

struct Watch<H, F> {
    handle: H,
    /// What the caller passed (an int or an object with `fileno()`): selectors find a
    /// registration by this object even after its `fileno()` turned -1.
    fileobj: F,
    /// The poll in flight for this watcher, if any.
    armed: Option<Token>,
    /// Queued for arming at the next flush.
    pending: bool,
    /// Armed as one `Op::PollMulti` rather than a one-shot `Op::Poll` per readiness.
    multi: bool,
    /// (`multi`) Its callback is queued for the coming batch: more readiness reported
    /// before that batch starts queues nothing more.
    queued: bool,
    /// (`multi`) The fd hung up: it stays ready, so its callback runs every iteration.
    hung_up: bool,
}

/// A removed watcher: its handle and the file object it was registered with.
pub type Removed<H = Py<Handle>, F = Py<PyAny>> = (H, F);

/// Work for the driver, taken at each flush.
#[derive(Default)]
pub struct DriverWork {
    /// (token, fd, side, multi) to submit as `Op::Poll` (`Op::PollMulti` when `multi`).
    pub arm: Vec<(Token, i32, Side, bool)>,
    /// Tokens to cancel.
    pub cancel: Vec<Token>,
}

impl DriverWork {
    /// Whether there is nothing to submit.
    pub fn is_empty(&self) -> bool {
        self.arm.is_empty() && self.cancel.is_empty()
    }

    /// Forgets it all, keeping the vectors' capacity.
    pub fn clear(&mut self) {
        self.arm.clear();
        self.cancel.clear();
    }
}

/// The table of fd watchers.
pub struct Watchers<H = Py<Handle>, F = Py<PyAny>> {
    by_fd: IntMap<i32, [Option<Watch<H, F>>; 2]>,
    by_token: IntMap<Token, (i32, Side)>,
    work: DriverWork,
    /// fd/side pairs that need an arm at the next flush (tokens assigned then).
    to_arm: Vec<(i32, Side)>,
    /// Watchers whose callback was queued by a completion: re-armed once the batch that
    /// runs the callback has started, so one readiness queues the callback once.
    rearm_after_batch: Vec<(i32, Side)>,
    /// `multi` watchers whose callback is queued for the coming batch (`Watch::queued`).
    queued: Vec<(i32, Side)>,
    /// `multi` watchers whose callback did not drain the fd: queued by the next
    /// [`take_again`](Watchers::take_again).
    again: Vec<(i32, Side)>,
    next_token: Token,
}

impl<H, F> Default for Watchers<H, F> {
    fn default() -> Self {
        Watchers {
            by_fd: IntMap::default(),
            by_token: IntMap::default(),
            work: DriverWork::default(),
            to_arm: Vec::new(),
            rearm_after_batch: Vec::new(),
            queued: Vec::new(),
            again: Vec::new(),
            next_token: 0,
        }
    }
}

fn slot(side: Side) -> usize {
    match side {
        Side::Read => 0,
        Side::Write => 1,
    }
}

impl<H: Callback, F> Watchers<H, F> {
    /// Number of watched (fd, side) pairs.
    pub fn len(&self) -> usize {
        self.by_fd
            .values()
            .map(|s| s.iter().filter(|w| w.is_some()).count())
            .sum()
    }

    /// Polls submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.by_token.len()
    }

    /// Whether nothing is watched.
    pub fn is_empty(&self) -> bool {
        self.by_fd.is_empty()
    }

    /// Installs `handle` for `fd`/`side` (`multi`: armed as one `Op::PollMulti`, for a
    /// callback that calls [`again`](Self::again) when it did not drain the fd). When a
    /// watcher was there already, its handle is replaced and returned with the now unused
    /// `fileobj` (the registration keeps its first file object, as a selector key does):
    /// the caller cancels the old handle, as asyncio does, and drops both outside the cell.
    pub fn add(
        &mut self,
        fd: i32,
        side: Side,
        handle: H,
        fileobj: F,
        multi: bool,
    ) -> Option<Removed<H, F>> {
        let entry = self.by_fd.entry(fd).or_default();
        match &mut entry[slot(side)] {
            Some(w) => {
                if w.multi != multi {
                    // The new callback is armed its own way, under a new token.
                    w.multi = multi;
                    w.queued = false;
                    w.hung_up = false;
                    if let Some(token) = w.armed.take() {
                        self.by_token.remove(&token);
                        self.work.cancel.push(token);
                    }
                    if !w.pending {
                        w.pending = true;
                        self.to_arm.push((fd, side));
                    }
                } else if multi && w.queued {
                    // The old callback, queued for a readiness the poll will not report
                    // again, is cancelled with its replacement: the new one runs instead
                    // (a selector would report the fd to it).
                    w.queued = false;
                    self.again.push((fd, side));
                }
                Some((std::mem::replace(&mut w.handle, handle), fileobj))
            }
            empty => {
                *empty = Some(Watch {
                    handle,
                    fileobj,
                    armed: None,
                    pending: true,
                    multi,
                    queued: false,
                    hung_up: false,
                });
                self.to_arm.push((fd, side));
                None
            }
        }
    }

    /// Removes the watcher; returns its handle (for the caller to cancel) and its file
    /// object (to drop outside locks) if there was one.
    pub fn remove(&mut self, fd: i32, side: Side) -> Option<Removed<H, F>> {
        let entry = self.by_fd.get_mut(&fd)?;
        let watch = entry[slot(side)].take()?;
        if entry.iter().all(Option::is_none) {
            self.by_fd.remove(&fd);
        }
        if let Some(token) = watch.armed {
            self.by_token.remove(&token);
            self.work.cancel.push(token);
        }
        Some((watch.handle, watch.fileobj))
    }

    /// The fd of the first watcher whose file object passes `test`.
    pub fn fd_where(&self, test: impl Fn(&F) -> bool) -> Option<i32> {
        self.by_fd
            .iter()
            .find_map(|(fd, e)| e.iter().flatten().any(|w| test(&w.fileobj)).then_some(*fd))
    }

    /// The handle watching `fd`/`side`, if any.
    pub fn get(&self, cx: H::Cx<'_>, fd: i32, side: Side) -> Option<H> {
        self.by_fd
            .get(&fd)
            .and_then(|e| e[slot(side)].as_ref())
            .map(|w| w.handle.share(cx))
    }

    /// Moves the driver work accumulated since the last flush into `into`, which the
    /// caller emptied, assigning fresh tokens. The two sets of vectors trade places, so
    /// neither side allocates once they have grown to the loop's usual size.
    pub fn take_work(&mut self, into: &mut DriverWork) {
        debug_assert!(into.is_empty());
        let Self {
            by_fd,
            by_token,
            work,
            to_arm,
            next_token,
            ..
        } = self;
        for (fd, side) in to_arm.drain(..) {
            let Some(w) = by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) else {
                continue;
            };
            if !w.pending || w.armed.is_some() {
                continue;
            }
            w.pending = false;
            *next_token += 1;
            let token = *next_token;
            w.armed = Some(token);
            by_token.insert(token, (fd, side));
            work.arm.push((token, fd, side, w.multi));
        }
        std::mem::swap(work, into);
    }

    /// Takes only the cancels waiting for the next flush (see `LoopCore::submit_cancels`).
    pub fn take_cancels(&mut self) -> Vec<Token> {
        std::mem::take(&mut self.work.cancel)
    }

    /// Puts back an arm the driver could not take now (its queue was full): the watcher is
    /// armed again at the next flush under a new token.
    pub fn arm_later(&mut self, token: Token) {
        if let Some((fd, side)) = self.by_token.remove(&token) {
            if let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) {
                w.armed = None;
                w.pending = true;
                self.to_arm.push((fd, side));
            }
        }
    }

    /// Marks an arm that the driver refused (the fd is bad): the watcher stays installed,
    /// silent, as a closed fd stays silently registered in a selector.
    pub fn arm_failed(&mut self, token: Token) {
        if let Some((fd, side)) = self.by_token.remove(&token) {
            if let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) {
                w.armed = None;
            }
        }
    }

    /// Handles a poll completion (`more`: a `PollMulti` that stays armed). Returns the
    /// handle to queue when the fd is ready and the watcher is live and not queued yet; a
    /// cancelled watcher is removed instead (asyncio's `_process_events`). The second value
    /// is a cancelled watcher removed by this call (to drop outside locks).
    pub fn complete(
        &mut self,
        cx: H::Cx<'_>,
        token: Token,
        result: i32,
        more: bool,
    ) -> (Option<H>, Option<Removed<H, F>>) {
        let found = if more {
            self.by_token.get(&token).copied()
        } else {
            self.by_token.remove(&token)
        };
        let Some((fd, side)) = found else {
            return (None, None); // removed or replaced meanwhile
        };
        let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) else {
            return (None, None);
        };
        if !more {
            w.armed = None;
        }
        if result < 0 {
            // EBADF and friends: the fd went away under the watcher; stay silent.
            return (None, None);
        }
        if w.handle.is_cancelled() {
            return (None, self.remove(fd, side));
        }
        if !more {
            // A one-shot poll, or a multishot one the kernel ended: armed again once the
            // callback ran.
            w.pending = true;
            self.rearm_after_batch.push((fd, side));
        }
        if w.multi {
            w.hung_up |= result & HANGUP != 0;
            if w.queued {
                return (None, None);
            }
            w.queued = true;
            self.queued.push((fd, side));
        }
        (Some(w.handle.share(cx)), None)
    }

    /// The callback of the `multi` watcher on `fd`/`side` did not drain the fd: queue it
    /// in the next iteration (at [`take_again`](Self::take_again)), as a level-triggered
    /// selector would report the fd again. Ignored for any other watcher.
    pub fn again(&mut self, fd: i32, side: Side) {
        let live = self
            .by_fd
            .get(&fd)
            .and_then(|e| e[slot(side)].as_ref())
            .is_some_and(|w| w.multi);
        if live {
            self.again.push((fd, side));
        }
    }

    /// Whether a callback waits for [`take_again`](Self::take_again) (the next wait must
    /// not sleep).
    pub fn has_again(&self) -> bool {
        !self.again.is_empty()
    }

    /// Queues (into `ready`) the callbacks that asked to run [`again`](Self::again), after
    /// this iteration's completions, each once; returns how many.
    pub fn take_again(&mut self, cx: H::Cx<'_>, ready: &mut impl Extend<H>) -> usize {
        let mut queued = 0;
        for (fd, side) in self.again.drain(..) {
            let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) else {
                continue;
            };
            if !w.multi || w.queued || w.handle.is_cancelled() {
                continue;
            }
            w.queued = true;
            self.queued.push((fd, side));
            ready.extend(Some(w.handle.share(cx)));
            queued += 1;
        }
        queued
    }

    /// The batch that runs the queued watcher callbacks has started: their re-arms go to
    /// the next flush, which happens after the callbacks ran, and readiness reported from
    /// now on queues a `multi` watcher's callback again.
    pub fn batch_started(&mut self) {
        if !self.rearm_after_batch.is_empty() {
            self.to_arm.append(&mut self.rearm_after_batch);
        }
        for (fd, side) in self.queued.drain(..) {
            if let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) {
                w.queued = false;
                if w.hung_up {
                    self.again.push((fd, side));
                }
            }
        }
    }

    /// Forgets every poll in flight and queues every watcher for arming: used when the
    /// driver is replaced (a forked child), whose new driver knows none of the old tokens.
    pub fn rearm_all(&mut self) {
        self.by_token.clear();
        self.rearm_after_batch.clear();
        self.work.clear();
        for (fd, entry) in self.by_fd.iter_mut() {
            for (i, w) in entry.iter_mut().enumerate() {
                if let Some(w) = w {
                    w.armed = None;
                    w.pending = true;
                    let side = if i == 0 { Side::Read } else { Side::Write };
                    self.to_arm.push((*fd, side));
                }
            }
        }
    }

    /// Every watcher's callback and file object.
    pub fn entries(&self) -> impl Iterator<Item = (&H, &F)> + '_ {
        self.by_fd
            .values()
            .flat_map(|e| e.iter().flatten())
            .map(|w| (&w.handle, &w.fileobj))
    }

    /// Removes everything (loop close); returns the watchers' callbacks and file objects.
    pub fn drain_all(&mut self) -> Vec<Removed<H, F>> {
        self.by_token.clear();
        self.rearm_after_batch.clear();
        self.queued.clear();
        self.again.clear();
        self.to_arm.clear();
        self.work.clear();
        self.by_fd
            .drain()
            .flat_map(|(_, e)| e.into_iter().flatten())
            .map(|w| (w.handle, w.fileobj))
            .collect()
    }
}

// The loop's table: Python handles and file objects.
impl Watchers {
    /// The fd a watcher was registered for with exactly this object (selectors'
    /// exhaustive `_fileobj_lookup` fallback, for objects whose `fileno()` is now -1).
    pub fn fd_of_object(&self, obj: &Bound<'_, PyAny>) -> Option<i32> {
        self.fd_where(|f| f.is(obj))
    }

    /// Every Python object the table holds (for the collector's traversal).
    pub fn objects(&self) -> impl Iterator<Item = &Py<PyAny>> + '_ {
        self.entries().flat_map(|(h, f)| [h.as_any(), f])
    }

    /// Removes everything (loop close); returns the objects to drop outside locks.
    pub fn clear(&mut self) -> Vec<Py<PyAny>> {
        self.drain_all()
            .into_iter()
            .flat_map(|(h, f)| [h.into_any(), f])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::{Callback, DriverWork, Side, Watchers};
    use crate::core::Share;

    /// A callback without Python: a name and a shared cancelled flag.
    #[derive(Debug)]
    struct Cb(&'static str, Rc<Cell<bool>>);

    impl Share for Cb {
        type Cx<'a> = ();

        fn share(&self, _: ()) -> Self {
            Cb(self.0, Rc::clone(&self.1))
        }
    }

    impl Callback for Cb {
        fn is_cancelled(&self) -> bool {
            self.1.get()
        }
    }

    fn cb(name: &'static str) -> Cb {
        Cb(name, Rc::new(Cell::new(false)))
    }

    /// The arms the next flush submits, as (token, fd, side).
    fn flush(w: &mut Watchers<Cb, u32>) -> DriverWork {
        let mut work = DriverWork::default();
        w.take_work(&mut work);
        work
    }

    #[test]
    fn a_watcher_is_armed_once_and_fires_once_per_readiness() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        assert!(w.add(5, Side::Read, cb("r"), 50, false).is_none());
        let work = flush(&mut w);
        assert_eq!(work.arm.len(), 1);
        let (token, fd, side, multi) = work.arm[0];
        assert!(!multi);
        assert_eq!((fd, side), (5, Side::Read));
        assert!(flush(&mut w).is_empty(), "armed already: nothing to submit");
        assert_eq!(w.in_flight(), 1);

        let (run, removed) = w.complete((), token, 1, false);
        assert_eq!(run.map(|c| c.0), Some("r"));
        assert!(removed.is_none());
        // Re-armed only once the batch running the callback has started.
        assert!(flush(&mut w).is_empty());
        w.batch_started();
        let again = flush(&mut w);
        assert_eq!(again.arm.len(), 1);
        assert_ne!(again.arm[0].0, token, "a fresh token for each arm");
        // A late completion of the old token is ignored.
        assert!(w.complete((), token, 1, false).0.is_none());
    }

    #[test]
    fn adding_again_replaces_the_handle_and_keeps_the_first_file_object() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(3, Side::Write, cb("first"), 30, false);
        let (old, unused) = w
            .add(3, Side::Write, cb("second"), 31, false)
            .expect("replaced");
        assert_eq!((old.0, unused), ("first", 31));
        assert_eq!(w.len(), 1);
        assert_eq!(w.get((), 3, Side::Write).map(|c| c.0), Some("second"));
        assert_eq!(w.fd_where(|f| *f == 30), Some(3));
        assert_eq!(w.fd_where(|f| *f == 31), None);
    }

    #[test]
    fn removing_an_armed_watcher_cancels_its_poll() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(4, Side::Read, cb("r"), 40, false);
        w.add(4, Side::Write, cb("w"), 41, false);
        let tokens: Vec<_> = flush(&mut w).arm.iter().map(|a| a.0).collect();
        let (h, f) = w.remove(4, Side::Read).expect("was there");
        assert_eq!((h.0, f), ("r", 40));
        assert_eq!(w.take_cancels(), vec![tokens[0]]);
        assert!(w.remove(4, Side::Read).is_none());
        assert!(!w.is_empty(), "the writer is still there");
        assert!(
            w.complete((), tokens[0], 1, false).0.is_none(),
            "removed meanwhile"
        );
        w.remove(4, Side::Write);
        assert!(w.is_empty());
    }

    #[test]
    fn a_cancelled_callback_is_removed_by_its_completion_and_errors_stay_silent() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        let c = cb("c");
        let flag = Rc::clone(&c.1);
        w.add(7, Side::Read, c, 70, false);
        w.add(8, Side::Read, cb("bad"), 80, false);
        let arms = flush(&mut w).arm;
        let token_of = |fd| arms.iter().find(|a| a.1 == fd).map(|a| a.0).expect("armed");
        flag.set(true);
        let (run, removed) = w.complete((), token_of(7), 1, false);
        assert!(run.is_none());
        assert_eq!(removed.map(|(h, f)| (h.0, f)), Some(("c", 70)));
        // EBADF: the watcher stays, silent and unarmed.
        let (run, removed) = w.complete((), token_of(8), -9, false);
        assert!(run.is_none() && removed.is_none());
        assert_eq!(w.len(), 1);
        assert!(flush(&mut w).is_empty());
    }

    #[test]
    fn arm_later_and_rearm_all_submit_again_under_new_tokens() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(1, Side::Read, cb("a"), 10, false);
        w.add(2, Side::Write, cb("b"), 20, false);
        let first = flush(&mut w).arm;
        w.arm_later(first[0].0);
        let retry = flush(&mut w).arm;
        assert_eq!(retry.len(), 1);
        assert_eq!(retry[0].1, first[0].1);
        w.rearm_all();
        let all = flush(&mut w).arm;
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|a| a.0 > retry[0].0));
        assert_eq!(w.drain_all().len(), 2);
        assert!(w.is_empty() && w.in_flight() == 0);
    }

    #[test]
    fn a_multi_watcher_is_armed_once_and_queued_once_per_batch() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(5, Side::Read, cb("r"), 50, true);
        let work = flush(&mut w);
        let (token, _, _, multi) = work.arm[0];
        assert!(multi, "armed as one PollMulti");
        let mut ready = Vec::new();

        let (run, _) = w.complete((), token, 1, true);
        ready.extend(run);
        // Two reports before the batch starts queue the callback once.
        assert!(w.complete((), token, 1, true).0.is_none());
        assert_eq!(ready.len(), 1);
        w.batch_started();
        assert!(flush(&mut w).is_empty(), "still armed: nothing to submit");
        assert_eq!(w.in_flight(), 1);
        // New readiness after the batch started queues it again.
        assert_eq!(w.complete((), token, 1, true).0.map(|c| c.0), Some("r"));
    }

    #[test]
    fn a_multi_watcher_that_did_not_drain_runs_again_once() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(5, Side::Read, cb("r"), 50, true);
        w.add(6, Side::Read, cb("plain"), 60, false);
        let arms = flush(&mut w).arm;
        let token = arms[0].0;
        let mut ready: Vec<Cb> = Vec::new();
        ready.extend(w.complete((), token, 1, true).0);
        w.batch_started();
        // The callback ran and did not drain the fd; the plain watcher's `again` is ignored.
        w.again(5, Side::Read);
        w.again(6, Side::Read);
        assert!(w.has_again());
        // The kernel also reported the fd before the next iteration routed its completions.
        ready.extend(w.complete((), token, 1, true).0);
        assert_eq!(
            w.take_again((), &mut ready),
            0,
            "queued by the completion already"
        );
        assert!(!w.has_again());
        assert_eq!(ready.len(), 2);
        w.batch_started();
        w.again(5, Side::Read);
        assert_eq!(w.take_again((), &mut ready), 1);
        assert_eq!(ready.last().map(|c| c.0), Some("r"));
        // A removed watcher's request is dropped.
        w.batch_started();
        w.again(5, Side::Read);
        w.remove(5, Side::Read);
        assert_eq!(w.take_again((), &mut ready), 0);
        assert_eq!(w.take_cancels(), vec![token], "its PollMulti is cancelled");
    }

    #[test]
    fn a_multi_poll_the_kernel_ended_is_armed_again_and_a_mode_change_rearms() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(5, Side::Read, cb("r"), 50, true);
        let token = flush(&mut w).arm[0].0;
        // Final completion with readiness: queued, and armed again after the batch.
        assert!(w.complete((), token, 1, false).0.is_some());
        assert_eq!(w.in_flight(), 0);
        w.batch_started();
        let again = flush(&mut w).arm;
        assert_eq!(again.len(), 1);
        assert!(again[0].3, "still multi");
        // Replaced by a plain watcher: the PollMulti is cancelled, a one-shot Poll armed.
        w.add(5, Side::Read, cb("plain"), 51, false);
        let work = flush(&mut w);
        assert_eq!(work.cancel, vec![again[0].0]);
        assert_eq!(work.arm.len(), 1);
        assert!(!work.arm[0].3);
    }

    #[test]
    fn a_multi_watcher_whose_fd_hung_up_runs_every_iteration_until_removed() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(5, Side::Read, cb("r"), 50, true);
        let token = flush(&mut w).arm[0].0;
        let mut ready: Vec<Cb> = Vec::new();
        ready.extend(w.complete((), token, 1, true).0);
        // The hang-up comes while the callback is still queued: nothing more is queued,
        // but it is remembered.
        assert!(w.complete((), token, 1 | super::HANGUP, true).0.is_none());
        for _ in 0..3 {
            w.batch_started();
            assert!(w.has_again(), "end of stream stays ready");
            assert_eq!(w.take_again((), &mut ready), 1);
        }
        w.batch_started();
        w.remove(5, Side::Read);
        assert_eq!(w.take_again((), &mut ready), 0);
        assert_eq!(ready.len(), 4);
    }

    #[test]
    fn a_multi_watcher_replaced_while_queued_runs_its_new_callback() {
        let mut w: Watchers<Cb, u32> = Watchers::default();
        w.add(5, Side::Read, cb("old"), 50, true);
        let token = flush(&mut w).arm[0].0;
        let mut ready: Vec<Cb> = Vec::new();
        ready.extend(w.complete((), token, 1, true).0);
        let (old, _) = w.add(5, Side::Read, cb("new"), 51, true).expect("replaced");
        assert_eq!(old.0, "old");
        assert!(flush(&mut w).is_empty(), "the same poll stays armed");
        assert_eq!(w.take_again((), &mut ready), 1);
        assert_eq!(ready.last().map(|c| c.0), Some("new"));
    }
}
