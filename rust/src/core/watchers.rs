//! fd watchers (`add_reader` / `add_writer`): which handle runs when an fd is ready.
//! Owns: the fd → handles table, the token ↔ watcher map, the arm/cancel work waiting for
//! the next driver flush. Not: the kernel side (`driver/`), running callbacks (`core/run.rs`).
//!
//! Watchers are level-triggered like asyncio's selectors: each readiness is a one-shot
//! `Op::Poll`, re-submitted after its callback was queued. The re-submission reaches the
//! kernel at the next wait, after the callback ran, so a callback that did not drain the fd
//! is called again, and one that did is not.

use crate::intmap::IntMap;

use pyo3::prelude::*;

use crate::driver::{Interest, Token};
use crate::handles::Handle;

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

struct Watch {
    handle: Py<Handle>,
    /// What the caller passed (an int or an object with `fileno()`): selectors find a
    /// registration by this object even after its `fileno()` turned -1.
    fileobj: Py<PyAny>,
    /// The poll in flight for this watcher, if any.
    armed: Option<Token>,
    /// Queued for arming at the next flush.
    pending: bool,
}

/// A removed watcher: its handle and the file object it was registered with.
pub type Removed = (Py<Handle>, Py<PyAny>);

/// Work for the driver, taken at each flush.
#[derive(Default)]
pub struct DriverWork {
    /// (token, fd, side) to submit as `Op::Poll`.
    pub arm: Vec<(Token, i32, Side)>,
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
#[derive(Default)]
pub struct Watchers {
    by_fd: IntMap<i32, [Option<Watch>; 2]>,
    by_token: IntMap<Token, (i32, Side)>,
    work: DriverWork,
    /// fd/side pairs that need an arm at the next flush (tokens assigned then).
    to_arm: Vec<(i32, Side)>,
    /// Watchers whose callback was queued by a completion: re-armed once the batch that
    /// runs the callback has started, so one readiness queues the callback once.
    rearm_after_batch: Vec<(i32, Side)>,
    next_token: Token,
}

fn slot(side: Side) -> usize {
    match side {
        Side::Read => 0,
        Side::Write => 1,
    }
}

impl Watchers {
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

    /// Installs `handle` for `fd`/`side`. When a watcher was there already, its handle is
    /// replaced and returned with the now unused `fileobj` (the registration keeps its first
    /// file object, as a selector key does): the caller cancels the old handle, as asyncio
    /// does, and drops both outside the cell.
    pub fn add(
        &mut self,
        fd: i32,
        side: Side,
        handle: Py<Handle>,
        fileobj: Py<PyAny>,
    ) -> Option<Removed> {
        let entry = self.by_fd.entry(fd).or_default();
        match &mut entry[slot(side)] {
            Some(w) => Some((std::mem::replace(&mut w.handle, handle), fileobj)),
            empty => {
                *empty = Some(Watch {
                    handle,
                    fileobj,
                    armed: None,
                    pending: true,
                });
                self.to_arm.push((fd, side));
                None
            }
        }
    }

    /// Removes the watcher; returns its handle (for the caller to cancel) and its file
    /// object (to drop outside locks) if there was one.
    pub fn remove(&mut self, fd: i32, side: Side) -> Option<Removed> {
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

    /// The fd a watcher was registered for with exactly this object (selectors'
    /// exhaustive `_fileobj_lookup` fallback, for objects whose `fileno()` is now -1).
    pub fn fd_of_object(&self, obj: &Bound<'_, PyAny>) -> Option<i32> {
        self.by_fd
            .iter()
            .find_map(|(fd, e)| e.iter().flatten().any(|w| w.fileobj.is(obj)).then_some(*fd))
    }

    /// The handle watching `fd`/`side`, if any.
    pub fn get(&self, py: Python<'_>, fd: i32, side: Side) -> Option<Py<Handle>> {
        self.by_fd
            .get(&fd)
            .and_then(|e| e[slot(side)].as_ref())
            .map(|w| w.handle.clone_ref(py))
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
            work.arm.push((token, fd, side));
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

    /// Handles a poll completion. Returns the handle to queue when the fd is ready and the
    /// watcher is live; a cancelled watcher is removed instead (asyncio's `_process_events`).
    /// The second value is a cancelled watcher removed by this call (to drop outside locks).
    pub fn complete(
        &mut self,
        py: Python<'_>,
        token: Token,
        result: i32,
    ) -> (Option<Py<Handle>>, Option<Removed>) {
        let Some((fd, side)) = self.by_token.remove(&token) else {
            return (None, None); // removed or replaced meanwhile
        };
        let Some(w) = self.by_fd.get_mut(&fd).and_then(|e| e[slot(side)].as_mut()) else {
            return (None, None);
        };
        w.armed = None;
        if result < 0 {
            // EBADF and friends: the fd went away under the watcher; stay silent.
            return (None, None);
        }
        if w.handle.get().is_cancelled() {
            return (None, self.remove(fd, side));
        }
        w.pending = true;
        self.rearm_after_batch.push((fd, side));
        (Some(w.handle.clone_ref(py)), None)
    }

    /// The batch that runs the queued watcher callbacks has started: their re-arms go to
    /// the next flush, which happens after the callbacks ran.
    pub fn batch_started(&mut self) {
        if !self.rearm_after_batch.is_empty() {
            self.to_arm.append(&mut self.rearm_after_batch);
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

    /// Every Python object the table holds (for the collector's traversal).
    pub fn objects(&self) -> impl Iterator<Item = &Py<PyAny>> + '_ {
        self.by_fd
            .values()
            .flat_map(|e| e.iter().flatten())
            .flat_map(|w| [w.handle.as_any(), &w.fileobj])
    }

    /// Removes everything (loop close); returns the objects to drop outside locks.
    pub fn clear(&mut self) -> Vec<Py<PyAny>> {
        self.by_token.clear();
        self.rearm_after_batch.clear();
        self.to_arm.clear();
        self.work.clear();
        self.by_fd
            .drain()
            .flat_map(|(_, e)| e.into_iter().flatten())
            .flat_map(|w| [w.handle.into_any(), w.fileobj])
            .collect()
    }
}
