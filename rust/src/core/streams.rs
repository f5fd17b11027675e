//! Multishot accepts of the servers and the transports' sends (both drivers): which
//! callback gets which completion.
//! Owns: the token → operation table, arming and cancelling at the next flush, deciding
//! what each completion means for its owner. Not: the kernel side (`driver/`), what the
//! transport does with the data (`transports/stream/`), what a server does with a
//! connection (`rsloop/_net.py`).
//!
//! A transport's sends and flushes reach it through plain function pointers (`SentHook`,
//! `FlushHook`) with the transport object, not through Python calls: they run once per
//! write, and most completions are bookkeeping no user can see.
//!
//! Transports receive by readiness on both drivers (docs/decisions/0004-one-io-model.md).
//! A server starts an accept with a callback; each new connection becomes one ready handle
//! calling it with the connection's fd (an `int >= 0`, the callback's to own), queued like
//! a watcher's handle, so ordering against other callbacks is asyncio's; the `-errno` that
//! ended the accept reaches it too. An accept the kernel ends while its server still wants
//! it is re-armed here.
//!
//! The table is generic over what it holds for a callback or a transport (`C`: a
//! `Py<PyAny>` in the loop; it only stores, shares and hands back), so its rules are
//! unit-tested without an interpreter (the tests below).

use crate::intmap::IntMap;

use pyo3::prelude::*;

use super::route::{ACCEPT_BASE, SEND_BASE};
use super::Share;
use crate::driver::{Completion, Token};

/// A transport's flush, called by the core just before the wait, without a Python call.
pub type FlushHook = for<'py> fn(&Bound<'py, PyAny>) -> PyResult<()>;

/// A transport's send completion, called by the core as the completion is reaped: `true`
/// if the transport took it there (bookkeeping only, nothing a user can see run);
/// `false` asks for `owner._on_sent(result)` as a ready handle, for a completion with
/// Python-visible work (flow control, close, errors).
pub type SentHook = for<'py> fn(&Bound<'py, PyAny>, i32) -> bool;

/// A send token is `SEND_BASE`, the slot's reuse count above `SLOT_BITS` and the slot's
/// index below: the index finds the send without hashing, the count tells a stale token
/// (a cancel after its send completed) from the slot's next send.
const SLOT_BITS: u32 = 32;
const SLOT_MASK: Token = (1 << SLOT_BITS) - 1;
/// Reuse counts wrap below `SEND_BASE`'s bit (24 bits), so every send token stays one.
const REUSE_MASK: Token = (SEND_BASE - 1) >> SLOT_BITS;

/// One send in flight, or a free slot.
struct SendSlot<C> {
    /// The token of the send in flight here; stale once `send` is `None`.
    token: Token,
    send: Option<(C, SentHook)>,
}

/// The sends in flight, in slots reused as they complete (a transport has at most one
/// in flight, so there are never more slots than transports that sent at once).
struct Sends<C> {
    slots: Vec<SendSlot<C>>,
    free: Vec<u32>,
    len: usize,
}

impl<C> Default for Sends<C> {
    fn default() -> Self {
        Sends {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<C> Sends<C> {
    fn insert(&mut self, entry: (C, SentHook)) -> Token {
        self.len += 1;
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(SendSlot {
                    token: SEND_BASE + (REUSE_MASK << SLOT_BITS) + self.slots.len() as Token,
                    send: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        let reuse = ((slot.token >> SLOT_BITS) + 1) & REUSE_MASK;
        slot.token = SEND_BASE + (reuse << SLOT_BITS) + index as Token;
        slot.send = Some(entry);
        slot.token
    }

    fn slot(&mut self, token: Token) -> Option<&mut SendSlot<C>> {
        let index = usize::try_from(token.wrapping_sub(SEND_BASE) & SLOT_MASK).ok()?;
        self.slots
            .get_mut(index)
            .filter(|s| s.token == token && s.send.is_some())
    }

    fn contains(&mut self, token: Token) -> bool {
        self.slot(token).is_some()
    }

    fn remove(&mut self, token: Token) -> Option<(C, SentHook)> {
        let slot = self.slot(token)?;
        let entry = slot.send.take();
        let index = (token.wrapping_sub(SEND_BASE) & SLOT_MASK) as u32;
        self.free.push(index);
        self.len -= 1;
        entry
    }

    fn values(&self) -> impl Iterator<Item = &C> + '_ {
        self.slots
            .iter()
            .filter_map(|s| s.send.as_ref().map(|(owner, _)| owner))
    }

    fn drain(&mut self) -> impl Iterator<Item = C> + '_ {
        self.free.clear();
        self.len = 0;
        // Every slot becomes free, its reuse count kept.
        let free = &mut self.free;
        self.slots.iter_mut().enumerate().filter_map(move |(i, s)| {
            free.push(i as u32);
            s.send.take().map(|(owner, _)| owner)
        })
    }
}

struct Accept<C> {
    fd: i32,
    callback: C,
    armed: bool,
    /// Stopped while in flight: cancelled, but connections the kernel already accepted
    /// still reach the server (which closes them if it is gone) until the final completion.
    stopped: bool,
}

/// What an accept completion asks of the loop.
pub enum Action<C = Py<PyAny>> {
    /// Nothing (the cancel of a stopped accept).
    None,
    /// Call the callback with the result (a connection's fd or `-errno`).
    Deliver(C),
}

/// The table of multishot accepts, and of the transports' sends.
pub struct Streams<C = Py<PyAny>> {
    by_token: IntMap<Token, Accept<C>>,
    next: Token,
    to_arm: Vec<Token>,
    to_cancel: Vec<Token>,
    /// Sends in flight: token -> the transport and its completion hook.
    sends: Sends<C>,
    /// Sends to submit at the next flush: (token, fd, msghdr address).
    to_send: Vec<(Token, i32, usize)>,
    /// Transports that wrote this iteration, with their flush hooks, run just before the
    /// wait so each sends what it gathered in one `sendmsg`, submitted with the wait.
    dirty: Vec<(C, FlushHook)>,
}

impl<C> Default for Streams<C> {
    fn default() -> Self {
        Streams {
            by_token: IntMap::default(),
            next: 0,
            to_arm: Vec::new(),
            to_cancel: Vec::new(),
            sends: Sends::default(),
            to_send: Vec::new(),
            dirty: Vec::new(),
        }
    }
}

impl<C: Share> Streams<C> {
    /// Accepts registered (armed or waiting to be) and sends in flight.
    pub fn len(&self) -> usize {
        self.by_token.len() + self.sends.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty() && self.sends.len == 0
    }

    /// A transport wrote: run `flush(owner)` before the next wait.
    pub fn mark_dirty(&mut self, owner: C, flush: FlushHook) {
        self.dirty.push((owner, flush));
    }

    /// Moves the flushes of this iteration into `into` (left empty by the caller; the
    /// vectors trade places, as in `take_work`). `false`: no transport wrote, and `into`
    /// is left alone.
    pub fn take_dirty(&mut self, into: &mut Vec<(C, FlushHook)>) -> bool {
        if self.dirty.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.dirty, into);
        true
    }

    /// Queues one send of the header at `msg` on `fd`; `sent(owner, result)` hears the end.
    pub fn send(&mut self, fd: i32, msg: usize, owner: C, sent: SentHook) -> Token {
        let token = self.sends.insert((owner, sent));
        self.to_send.push((token, fd, msg));
        token
    }

    /// Asks for a send in flight to stop early (abort); its completion still comes.
    pub fn cancel_send(&mut self, token: Token) {
        if self.sends.contains(token) {
            self.to_cancel.push(token);
        }
    }

    /// Moves the sends to submit into `into` (left empty by the caller).
    pub fn take_sends(&mut self, into: &mut Vec<(Token, i32, usize)>) {
        std::mem::swap(&mut self.to_send, into);
    }

    /// A send completed: its transport and hook.
    pub fn complete_send(&mut self, token: Token) -> Option<(C, SentHook)> {
        self.sends.remove(token)
    }

    /// Registers an accept on the listening socket `fd`; armed at the next flush.
    pub fn start_accept(&mut self, fd: i32, callback: C) -> Token {
        self.next += 1;
        let token = ACCEPT_BASE + self.next;
        self.by_token.insert(
            token,
            Accept {
                fd,
                callback,
                armed: false,
                stopped: false,
            },
        );
        self.to_arm.push(token);
        token
    }

    /// Stops an accept: cancelled if in flight (its last connections still come, see `Accept`),
    /// else forgotten; returns a callback for the caller to drop outside the cell.
    pub fn stop(&mut self, token: Token) -> Option<C> {
        let r = self.by_token.get_mut(&token)?;
        if r.armed {
            if !r.stopped {
                r.stopped = true;
                self.to_cancel.push(token);
            }
            return None;
        }
        self.by_token.remove(&token).map(|r| r.callback)
    }

    /// Accepts to arm as (token, fd) and tokens to cancel since the last flush, moved
    /// into `arm` and `cancel` (left empty by the caller).
    pub fn take_work(&mut self, arm: &mut Vec<(Token, i32)>, cancel: &mut Vec<Token>) {
        for token in self.to_arm.drain(..) {
            if let Some(r) = self.by_token.get_mut(&token) {
                if !r.armed {
                    r.armed = true;
                    arm.push((token, r.fd));
                }
            }
        }
        std::mem::swap(&mut self.to_cancel, cancel);
    }

    /// Only the cancels (see `LoopCore::submit_cancels`).
    pub fn take_cancels(&mut self) -> Vec<Token> {
        std::mem::take(&mut self.to_cancel)
    }

    /// An arm the driver could not queue now: try again at the next flush.
    pub fn arm_later(&mut self, token: Token) {
        if let Some(r) = self.by_token.get_mut(&token) {
            r.armed = false;
            self.to_arm.push(token);
        }
    }

    /// What `c` means: deliver it, or nothing; re-arms an operation the kernel ended while
    /// its owner still wants it, forgets a stopped one at its final completion. The
    /// second value is a callback to drop outside the cell.
    pub fn complete(&mut self, cx: C::Cx<'_>, c: &Completion) -> (Action<C>, Option<C>) {
        let Some(r) = self.by_token.get_mut(&c.token) else {
            return (Action::None, None);
        };
        // ENOBUFS is the kernel short of memory, which the server hears (asyncio backs
        // off on it); only our own cancel is quiet.
        let quiet = c.result == -libc::ECANCELED;
        // A connection (fd 0 is one too).
        let got = c.result >= 0;
        let action = if got || !quiet {
            Action::Deliver(r.callback.share(cx))
        } else {
            Action::None
        };
        if c.more {
            return (action, None);
        }
        r.armed = false;
        if r.stopped {
            let gone = self.by_token.remove(&c.token).map(|r| r.callback);
            return (action, gone);
        }
        if got || quiet {
            self.to_arm.push(c.token);
        }
        (action, None)
    }

    /// Forgets every accept in flight and queues all for arming (a new driver after fork).
    pub fn rearm_all(&mut self) {
        self.to_cancel.clear();
        self.to_arm.clear();
        self.by_token.retain(|_, r| !r.stopped);
        // Sends in flight belonged to the parent's ring (and the sockets to the parent's
        // connections): the child forgets them.
        self.sends.drain().for_each(drop);
        self.to_send.clear();
        for (token, r) in self.by_token.iter_mut() {
            r.armed = false;
            self.to_arm.push(*token);
        }
    }

    /// Every Python object held (for the collector).
    pub fn objects(&self) -> impl Iterator<Item = &C> + '_ {
        self.by_token
            .values()
            .map(|r| &r.callback)
            .chain(self.sends.values())
            .chain(self.dirty.iter().map(|(owner, _)| owner))
    }

    /// Removes everything (loop close).
    pub fn clear(&mut self) -> Vec<C> {
        self.to_arm.clear();
        self.to_cancel.clear();
        self.to_send.clear();
        let mut out: Vec<C> = self.by_token.drain().map(|(_, r)| r.callback).collect();
        out.extend(self.sends.drain());
        out.extend(self.dirty.drain(..).map(|(owner, _)| owner));
        out
    }
}

#[cfg(test)]
mod tests {
    use pyo3::prelude::*;

    use super::{Action, Streams};
    use crate::core::route::{Kind, ACCEPT_BASE, SEND_BASE};
    use crate::core::Share;
    use crate::driver::Completion;

    /// A callback or transport without Python.
    #[derive(Debug, PartialEq)]
    struct Obj(&'static str);

    impl Share for Obj {
        type Cx<'a> = ();

        fn share(&self, _: ()) -> Self {
            Obj(self.0)
        }
    }

    // Hooks the table only stores and hands back; never called here.
    fn flush(_: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(())
    }

    fn sent(_: &Bound<'_, PyAny>, _: i32) -> bool {
        true
    }

    fn done(token: u64, result: i32, more: bool) -> Completion {
        Completion {
            token,
            result,
            more,
        }
    }

    fn arms(s: &mut Streams<Obj>) -> Vec<(u64, i32)> {
        let (mut arm, mut cancel) = (Vec::new(), Vec::new());
        s.take_work(&mut arm, &mut cancel);
        arm
    }

    fn delivered(a: Action<Obj>) -> Option<&'static str> {
        match a {
            Action::Deliver(o) => Some(o.0),
            Action::None => None,
        }
    }

    #[test]
    fn tokens_fall_in_their_ranges() {
        let mut s: Streams<Obj> = Streams::default();
        let accept = s.start_accept(4, Obj("accept"));
        let send = s.send(5, 0x1000, Obj("owner"), sent);
        assert!(Kind::of(accept) == Kind::Accept && (ACCEPT_BASE..SEND_BASE).contains(&accept));
        assert!(Kind::of(send) == Kind::Send && send >= SEND_BASE);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn an_accept_delivers_connections_and_is_rearmed_when_the_kernel_ends_it() {
        let mut s: Streams<Obj> = Streams::default();
        let t = s.start_accept(3, Obj("cb"));
        assert_eq!(arms(&mut s), vec![(t, 3)]);
        assert!(arms(&mut s).is_empty(), "armed once");
        let (a, gone) = s.complete((), &done(t, 7, true));
        assert_eq!((delivered(a), gone), (Some("cb"), None));
        // The kernel ended it with a connection (no MORE): delivered and re-armed.
        let (a, gone) = s.complete((), &done(t, 8, false));
        assert_eq!((delivered(a), gone), (Some("cb"), None));
        assert_eq!(arms(&mut s), vec![(t, 3)]);
        // A cancel that was not ours (the submitting thread exited): quiet, re-armed.
        let (a, _) = s.complete((), &done(t, -libc::ECANCELED, false));
        assert_eq!(delivered(a), None);
        assert_eq!(arms(&mut s), vec![(t, 3)]);
        // An error ends it; the server hears it.
        let (a, _) = s.complete((), &done(t, -libc::EINVAL, false));
        assert_eq!(delivered(a), Some("cb"));
        assert!(arms(&mut s).is_empty(), "an error ends the accept");
    }

    #[test]
    fn stopping_an_armed_accept_cancels_it_and_keeps_its_connections() {
        let mut s: Streams<Obj> = Streams::default();
        let t = s.start_accept(3, Obj("cb"));
        arms(&mut s);
        assert!(
            s.stop(t).is_none(),
            "in flight: kept until its final completion"
        );
        assert_eq!(s.take_cancels(), vec![t]);
        assert!(s.stop(t).is_none());
        assert!(s.take_cancels().is_empty(), "cancelled once");
        let (a, gone) = s.complete((), &done(t, 10, true));
        assert_eq!((delivered(a), gone), (Some("cb"), None));
        let (a, gone) = s.complete((), &done(t, -libc::ECANCELED, false));
        assert_eq!((delivered(a), gone), (None, Some(Obj("cb"))));
        assert!(s.is_empty());
        // Not armed yet: removed at once.
        let u = s.start_accept(4, Obj("idle"));
        assert_eq!(s.stop(u), Some(Obj("idle")));
        assert!(arms(&mut s).is_empty());
    }

    #[test]
    fn an_accept_delivers_fd_zero_and_its_enobufs() {
        let mut s: Streams<Obj> = Streams::default();
        let t = s.start_accept(9, Obj("server"));
        arms(&mut s);
        let (a, _) = s.complete((), &done(t, 0, true));
        assert_eq!(delivered(a), Some("server"));
        let (a, _) = s.complete((), &done(t, -libc::ENOBUFS, false));
        assert_eq!(delivered(a), Some("server"), "the server hears it");
    }

    #[test]
    fn sends_and_flushes_are_handed_back_once() {
        let mut s: Streams<Obj> = Streams::default();
        let t = s.send(5, 0x2000, Obj("tr"), sent);
        let mut out = Vec::new();
        s.take_sends(&mut out);
        assert_eq!(out, vec![(t, 5, 0x2000)]);
        s.cancel_send(t);
        assert_eq!(s.take_cancels(), vec![t]);
        assert_eq!(s.complete_send(t).map(|(o, _)| o), Some(Obj("tr")));
        assert!(s.complete_send(t).is_none());
        s.cancel_send(t);
        assert!(s.take_cancels().is_empty(), "nothing in flight to cancel");

        s.mark_dirty(Obj("a"), flush);
        s.mark_dirty(Obj("b"), flush);
        let mut dirty = Vec::new();
        assert!(s.take_dirty(&mut dirty));
        assert_eq!(
            dirty.iter().map(|(o, _)| o.0).collect::<Vec<_>>(),
            ["a", "b"]
        );
        dirty.clear();
        assert!(!s.take_dirty(&mut dirty));
    }

    #[test]
    fn a_send_slot_is_reused_under_a_new_token() {
        let mut s: Streams<Obj> = Streams::default();
        let a = s.send(5, 0x1000, Obj("a"), sent);
        let b = s.send(6, 0x2000, Obj("b"), sent);
        assert_ne!(a, b);
        assert_eq!(s.complete_send(a).map(|(o, _)| o), Some(Obj("a")));
        // The freed slot takes the next send, under another token: the stale one finds
        // nothing, neither to cancel nor to complete.
        let c = s.send(7, 0x3000, Obj("c"), sent);
        assert!(Kind::of(c) == Kind::Send && c != a && c != b);
        s.cancel_send(a);
        assert!(s.take_cancels().is_empty(), "a stale token cancels nothing");
        assert!(s.complete_send(a).is_none());
        assert_eq!(s.len(), 2);
        assert_eq!(s.complete_send(c).map(|(o, _)| o), Some(Obj("c")));
        assert_eq!(s.complete_send(b).map(|(o, _)| o), Some(Obj("b")));
        assert!(s.is_empty());
        // Many sends through one slot keep their tokens apart and in the send range.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let t = s.send(5, 0, Obj("x"), sent);
            assert!(Kind::of(t) == Kind::Send && t < u64::MAX && seen.insert(t));
            assert!(s.complete_send(t).is_some());
        }
        assert_eq!(s.sends.slots.len(), 2, "slots are reused, not grown");
    }

    #[test]
    fn rearm_all_forgets_sends_and_stopped_accepts() {
        let mut s: Streams<Obj> = Streams::default();
        let live = s.start_accept(3, Obj("live"));
        let stopped = s.start_accept(4, Obj("stopped"));
        s.send(5, 0, Obj("tr"), sent);
        arms(&mut s);
        s.stop(stopped);
        s.rearm_all();
        assert_eq!(arms(&mut s), vec![(live, 3)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.clear(), vec![Obj("live")]);
    }
}
