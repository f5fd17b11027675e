//! In-flight user operations of the io_uring driver, keyed by the SQE `user_data`.
//! Owns: token ↔ user_data, what each op asked for (to shape its result), whether a cancel
//! was already sent. Not: SQEs or the ring (`mod.rs`).
//!
//! `user_data` is `generation << 32 | slot`, below 2^63, so it never meets the driver's
//! internal tokens (at the top of `u64`) whatever tokens the caller picks, and a stale cancel
//! aimed at a slot that was freed and reused finds nothing (the generation moved on).

use crate::intmap::IntMap;

use crate::driver::op::{Interest, Token};
use crate::sys::RawFd;

/// The largest `user_data` this table hands out; internal tokens are above it.
pub(super) const MAX_USER_DATA: u64 = (1 << 63) - 1;

const GENERATION_MASK: u32 = (1 << 31) - 1;

/// Which operation an entry is, with what its SQE and result need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Readiness: what it waits for (error conditions report all of it).
    Poll(Interest),
    /// Multishot accept, the kernel's (`IORING_ACCEPT_MULTISHOT`).
    AcceptMulti,
    /// Multishot accept performed by the driver: a POLL_ADD for readability of the
    /// listening socket, then `accept4` until it has nothing left, re-armed each time.
    AcceptPoll,
    /// One `sendmsg` of the `msghdr` at this address.
    SendMsg(usize),
    /// Multishot readiness, the kernel's (`IORING_POLL_ADD_MULTI`).
    PollMulti(Interest),
    /// Multishot readiness performed by the driver: a one-shot POLL_ADD re-armed at each
    /// completion (kernels before 5.13).
    PollEach(Interest),
}

impl Kind {
    /// Yields several CQEs (only the last without `MORE`).
    pub(super) fn is_multishot(self) -> bool {
        matches!(self, Kind::AcceptMulti | Kind::PollMulti(_))
    }

    /// An accept, either way it is performed.
    pub(super) fn is_accept(self) -> bool {
        matches!(self, Kind::AcceptMulti | Kind::AcceptPoll)
    }

    /// Reads caller memory while in flight (must be retired before that memory goes).
    pub(super) fn uses_buffers(self) -> bool {
        matches!(self, Kind::SendMsg(_))
    }
}

/// What the driver remembers about one submitted op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// The caller's token.
    pub(super) token: Token,
    /// The fd the op works on.
    pub(super) fd: RawFd,
    /// What it is.
    pub(super) kind: Kind,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    entry: Option<Entry>,
    cancel_sent: bool,
}

/// Slab of in-flight ops with a token index.
#[derive(Debug, Default)]
pub(super) struct Inflight {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_token: IntMap<Token, u64>,
}

impl Inflight {
    /// Number of ops in flight.
    pub(super) fn len(&self) -> usize {
        self.by_token.len()
    }

    /// The `user_data` of every op in flight that must end before the driver goes: those
    /// that use memory (sends from the caller's bytes)
    /// and accepts (whose fds would otherwise leak).
    pub(super) fn retire_user_data(&self) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.entry
                    .is_some_and(|e| e.kind.uses_buffers() || e.kind.is_accept())
            })
            .map(|(i, s)| (u64::from(s.generation) << 32) | i as u64)
            .collect()
    }

    /// Records an op; `None` if `token` already has one in flight.
    pub(super) fn insert(&mut self, token: Token, fd: RawFd, kind: Kind) -> Option<u64> {
        if self.by_token.contains_key(&token) {
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::default());
                u32::try_from(self.slots.len() - 1).ok()?
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(Entry { token, fd, kind });
        slot.cancel_sent = false;
        let user_data = (u64::from(slot.generation) << 32) | u64::from(index);
        self.by_token.insert(token, user_data);
        Some(user_data)
    }

    /// The `user_data` to cancel for `token`, once: `None` if the token is not in flight or
    /// a cancel was already sent for it.
    pub(super) fn cancel_target(&mut self, token: Token) -> Option<u64> {
        let user_data = *self.by_token.get(&token)?;
        let slot = self.slot_mut(user_data)?;
        if slot.cancel_sent {
            return None;
        }
        slot.cancel_sent = true;
        Some(user_data)
    }

    /// The op behind `user_data` and whether a cancel was sent for it, without taking it.
    pub(super) fn get(&mut self, user_data: u64) -> Option<(Entry, bool)> {
        let slot = self.slot_mut(user_data)?;
        Some((slot.entry?, slot.cancel_sent))
    }

    /// Changes how the op behind `user_data` is performed (an accept the kernel refused
    /// as multishot goes on as [`Kind::AcceptPoll`]).
    pub(super) fn set_kind(&mut self, user_data: u64, kind: Kind) {
        if let Some(entry) = self.slot_mut(user_data).and_then(|s| s.entry.as_mut()) {
            entry.kind = kind;
        }
    }

    /// Forgets that a cancel was sent (its SQE could not be queued).
    pub(super) fn cancel_unsent(&mut self, user_data: u64) {
        if let Some(slot) = self.slot_mut(user_data) {
            slot.cancel_sent = false;
        }
    }

    /// Takes the op for a final CQE (or a failed push); `None` for unknown `user_data`.
    pub(super) fn complete(&mut self, user_data: u64) -> Option<Entry> {
        let index = (user_data & u64::from(u32::MAX)) as u32;
        let slot = self.slot_mut(user_data)?;
        let entry = slot.entry.take()?;
        slot.generation = (slot.generation + 1) & GENERATION_MASK;
        self.free.push(index);
        self.by_token.remove(&entry.token);
        Some(entry)
    }

    fn slot_mut(&mut self, user_data: u64) -> Option<&mut Slot> {
        if user_data > MAX_USER_DATA {
            return None;
        }
        let index = (user_data & u64::from(u32::MAX)) as usize;
        let generation = (user_data >> 32) as u32;
        self.slots
            .get_mut(index)
            .filter(|s| s.generation == generation && s.entry.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_complete_reuse() {
        let mut t = Inflight::default();
        let a = t
            .insert(10, 3, Kind::Poll(Interest::READABLE))
            .expect("slot");
        assert!(
            t.insert(10, 3, Kind::Poll(Interest::READABLE)).is_none(),
            "duplicate token"
        );
        assert_eq!(t.get(a).map(|(e, sent)| (e.fd, sent)), Some((3, false)));
        assert_eq!(t.cancel_target(10), Some(a));
        assert_eq!(t.get(a).map(|(_, sent)| sent), Some(true));
        assert_eq!(t.cancel_target(10), None, "cancel sent once");
        assert_eq!(t.complete(a).map(|e| e.token), Some(10));
        assert_eq!(t.complete(a), None);
        let b = t.insert(11, 3, Kind::AcceptMulti).expect("slot");
        assert_ne!(a, b, "reused slot has a new generation");
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff);
        assert_eq!(t.complete(a), None, "stale user_data");
        assert_eq!(t.len(), 1);
        assert_eq!(t.retire_user_data(), vec![b], "an accept is retired");
        t.set_kind(b, Kind::AcceptPoll);
        assert_eq!(t.get(b).map(|(e, _)| e.kind), Some(Kind::AcceptPoll));
        assert_eq!(t.retire_user_data(), vec![b], "so is a performed one");
        assert!(b <= MAX_USER_DATA);
    }
}
