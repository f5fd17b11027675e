//! Per-fd bookkeeping for the `poll` driver: which ops wait on each fd (one-shot Poll ops,
//! sends the kernel refused with `EAGAIN`, waiting for writability to retry, and multishot
//! accepts, waiting for readability to accept) and what interest mio currently has
//! registered for it.
//! Owns: merging the interests of every pending op on an fd (reader, writer and a send in
//! flight are three tokens, one registration), the token → fd index, which op a readiness
//! event completes and which it retries, and the list of fds whose registration must be
//! brought up to date. Not: calling mio (`poll/mod.rs` applies the changes this table asks
//! for) or the kernel (the caller hands `ready` the sends and accepts as a [`Perform`]).

// Off Unix only Poll ops reach this table (sends and accepts on raw fds are Unix's).
#![cfg_attr(not(unix), allow(dead_code))]

use crate::intmap::IntMap;

use crate::driver::op::{Completion, Interest, Token, HANGUP};
use crate::sys::RawFd;

/// What a pending op does when its fd is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    /// Completes with the ready bits.
    Poll,
    /// Reports the ready bits at each readiness event (`more`) and stays until cancelled:
    /// the fd's registration is left as it is, so mio reports only new readiness.
    PollMulti,
    /// A send waiting for writability: retried with the `msghdr` at this address.
    Send(usize),
    /// A multishot accept: accepts on readability, stays until it ends.
    Accept,
}

/// The kernel work a readiness event makes for the ops that are not plain Poll ops.
pub(super) trait Perform {
    /// Retries a send: `Some(bytes or -errno)`, or `None` if the kernel refused again.
    fn send(&mut self, fd: RawFd, msg: usize) -> Option<i32>;
    /// Accepts the connections waiting on the listening `fd` for the accept `token`,
    /// reporting each; `true` if the accept ended (its final completion is reported).
    fn accept(&mut self, fd: RawFd, token: Token) -> bool;
}

/// One pending op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingOp {
    token: Token,
    interest: Interest,
    kind: OpKind,
}

/// What the driver knows about one fd.
#[derive(Debug, Default)]
struct FdState {
    /// The interest mio has for this fd; `None` when it is not registered.
    registered: Option<Interest>,
    /// Ops waiting on this fd, in submission order (rarely more than two).
    ops: Vec<PendingOp>,
    /// Already listed in `Sources::dirty`.
    dirty: bool,
}

impl FdState {
    fn wanted(&self) -> Interest {
        self.ops
            .iter()
            .fold(Interest::NONE, |acc, op| acc.add(op.interest))
    }
}

/// What the driver must do for a newly submitted op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// The fd is unknown: register it now with this interest (so errors reach `submit`).
    Register(Interest),
    /// The fd is known: its registration is refreshed in the next `wait`.
    Queued,
}

/// A registration change to apply before polling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// Register (`Some(None, i)`) or re-register (`Some(old, i)`) with interest `i`; either
    /// way mio re-reports current readiness, which turns its edge triggering into level
    /// semantics for one-shot ops.
    Arm {
        /// Whether mio has the fd registered (re-register) or not (register).
        registered: bool,
        /// The union of the pending ops' interests.
        interest: Interest,
    },
    /// No op is left: deregister and forget the fd.
    Remove,
}

/// fd → pending ops, with a token index and a dirty list.
#[derive(Debug, Default)]
pub(super) struct Sources {
    fds: IntMap<RawFd, FdState>,
    tokens: IntMap<Token, RawFd>,
    dirty: Vec<RawFd>,
}

impl Sources {
    /// Whether any fd is registered with mio or waiting for a change.
    pub(super) fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Whether `token` names a pending op.
    pub(super) fn contains(&self, token: Token) -> bool {
        self.tokens.contains_key(&token)
    }

    /// Records a Poll op (`multi`: a PollMulti op). The caller must check
    /// [`contains`](Self::contains) first.
    pub(super) fn add(
        &mut self,
        token: Token,
        fd: RawFd,
        interest: Interest,
        multi: bool,
    ) -> Added {
        let kind = if multi {
            OpKind::PollMulti
        } else {
            OpKind::Poll
        };
        self.add_op(
            fd,
            PendingOp {
                token,
                interest,
                kind,
            },
        )
    }

    /// Records a multishot accept on the listening socket `fd`, run on each readability
    /// until it ends. The caller must check [`contains`](Self::contains) first.
    pub(super) fn add_accept(&mut self, token: Token, fd: RawFd) -> Added {
        let op = PendingOp {
            token,
            interest: Interest::READABLE,
            kind: OpKind::Accept,
        };
        self.add_op(fd, op)
    }

    /// Records a send the kernel refused for now (`EAGAIN`): retried with the header at
    /// `msg` each time `fd` is writable, until it completes. The caller must check
    /// [`contains`](Self::contains) first.
    pub(super) fn add_send(&mut self, token: Token, fd: RawFd, msg: usize) -> Added {
        let op = PendingOp {
            token,
            interest: Interest::WRITABLE,
            kind: OpKind::Send(msg),
        };
        self.add_op(fd, op)
    }

    #[inline(always)]
    fn add_op(&mut self, fd: RawFd, op: PendingOp) -> Added {
        let interest = op.interest;
        self.tokens.insert(op.token, fd);
        let state = self.fds.entry(fd).or_default();
        state.ops.push(op);
        if state.registered.is_none() && !state.dirty {
            return Added::Register(interest);
        }
        Self::mark(&mut self.dirty, fd, state);
        Added::Queued
    }

    /// Undoes an [`add`](Self::add) whose registration failed: forgets `token` and, if it
    /// was the fd's only op, the fd.
    pub(super) fn add_failed(&mut self, token: Token, fd: RawFd) {
        self.tokens.remove(&token);
        if let Some(state) = self.fds.get_mut(&fd) {
            state.ops.retain(|op| op.token != token);
            if state.ops.is_empty() && state.registered.is_none() && !state.dirty {
                self.fds.remove(&fd);
            }
        }
    }

    /// Notes that mio now has `fd` registered with `interest`.
    pub(super) fn set_registered(&mut self, fd: RawFd, interest: Option<Interest>) {
        if let Some(state) = self.fds.get_mut(&fd) {
            state.registered = interest;
        }
    }

    /// Removes the pending op `token` (for cancel) and says what it was; its fd is
    /// refreshed in the next `wait`.
    pub(super) fn remove(&mut self, token: Token) -> Option<OpKind> {
        let fd = self.tokens.remove(&token)?;
        let mut kind = OpKind::Poll;
        if let Some(state) = self.fds.get_mut(&fd) {
            state.ops.retain(|op| {
                if op.token == token {
                    kind = op.kind;
                }
                op.token != token
            });
            Self::mark(&mut self.dirty, fd, state);
        }
        Some(kind)
    }

    /// Takes the fds whose registration must change, with the change each needs. `Remove`d
    /// fds are forgotten here; the caller deregisters them.
    pub(super) fn take_changes(&mut self, changes: &mut Vec<(RawFd, Change)>) {
        for fd in self.dirty.drain(..) {
            let Some(state) = self.fds.get_mut(&fd) else {
                continue;
            };
            state.dirty = false;
            let wanted = state.wanted();
            if wanted.is_empty() {
                if state.registered.is_some() {
                    changes.push((fd, Change::Remove));
                }
                self.fds.remove(&fd);
            } else {
                changes.push((
                    fd,
                    Change::Arm {
                        registered: state.registered.is_some(),
                        interest: wanted,
                    },
                ));
            }
        }
    }

    /// Completes every op on `fd` with `-errno` (its registration could not be refreshed)
    /// and forgets the fd; an accept's final completion goes to `multi`.
    pub(super) fn fail_fd(
        &mut self,
        fd: RawFd,
        errno: i32,
        out: &mut Vec<Completion>,
        multi: &mut Vec<Completion>,
    ) {
        if let Some(state) = self.fds.remove(&fd) {
            for op in state.ops {
                self.tokens.remove(&op.token);
                let last = Completion::last(op.token, -errno);
                if op.kind == OpKind::Accept {
                    multi.push(last);
                } else {
                    out.push(last);
                }
            }
        }
    }

    /// Completes the ops on `fd` that `ready` satisfies (each once) and queues the fd for a
    /// refresh, since mio will not report it again on its own (edge triggering). A send
    /// that writability satisfies is retried (`io.send`): `Some(result)` (bytes or
    /// `-errno`) completes it, `None` (the kernel refused again) keeps it waiting. An
    /// accept that readability satisfies accepts (`io.accept`) and stays, unless it ended.
    ///
    /// `failed`: the fd reported an error (a reset). Then a send is not retried in the
    /// same event as a reader's completion: the reader runs first and its `recv` meets the
    /// error, as under asyncio, where the retried send would have taken it and left the
    /// reader only an end of stream. The send stays armed and is retried at the next
    /// `wait` (or cancelled by then, when the reader's error closed the transport).
    ///
    /// `hangup`: the fd is at end of stream or failed, reported to a PollMulti op as
    /// `HANGUP` (a readiness that stays).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ready(
        &mut self,
        fd: RawFd,
        ready: Interest,
        failed: bool,
        hangup: bool,
        out: &mut Vec<Completion>,
        io: &mut impl Perform,
    ) {
        let Some(state) = self.fds.get_mut(&fd) else {
            return;
        };
        // The common case, one plain Poll op (a transport's reader): no order to keep
        // and nothing to retry, so no pass over the ops.
        if let [op] = state.ops.as_slice() {
            if op.kind == OpKind::PollMulti {
                let hit = op.interest.bits() & ready.bits();
                if hit != 0 {
                    out.push(multi_ready(op.token, hit, hangup));
                }
                return;
            }
            if op.kind == OpKind::Poll {
                let hit = op.interest.bits() & ready.bits();
                if hit != 0 {
                    let token = op.token;
                    state.ops.clear();
                    out.push(Completion::last(token, i32::from(hit)));
                    self.tokens.remove(&token);
                    Self::mark(&mut self.dirty, fd, state);
                }
                return;
            }
        }
        let before = out.len();
        let mut touched = false;
        let mut read = false;
        let mut ended: Option<Token> = None;
        // Readers first (accepts among them), then writers (sends among them), each in the
        // order they were armed: asyncio's selector loop queues an fd's reader before its
        // writer, so data that arrived with a reset is read before a write sees the error.
        for readers in [true, false] {
            state.ops.retain(|op| {
                let hit = op.interest.bits() & ready.bits();
                if hit == 0 || op.interest.is_readable() != readers {
                    return true;
                }
                if op.kind == OpKind::PollMulti {
                    read |= readers;
                    out.push(multi_ready(op.token, hit, hangup));
                    return true;
                }
                touched = true;
                let result = match op.kind {
                    OpKind::Poll | OpKind::PollMulti => {
                        read |= readers;
                        i32::from(hit)
                    }
                    OpKind::Send(_) if failed && read => return true,
                    OpKind::Send(msg) => match io.send(fd, msg) {
                        Some(result) => result,
                        None => return true,
                    },
                    OpKind::Accept => {
                        if io.accept(fd, op.token) {
                            ended = Some(op.token);
                            return false;
                        }
                        return true;
                    }
                };
                out.push(Completion::last(op.token, result));
                false
            });
        }
        if touched {
            for c in out[before..].iter().filter(|c| !c.more) {
                self.tokens.remove(&c.token);
            }
            if let Some(token) = ended {
                self.tokens.remove(&token);
            }
            Self::mark(&mut self.dirty, fd, state);
        }
    }

    /// Queues `fd` for a refresh of its registration although no op on it completed (a
    /// readiness the driver dropped as stale: mio does not report it again on its own).
    pub(super) fn rearm(&mut self, fd: RawFd) {
        if let Some(state) = self.fds.get_mut(&fd) {
            Self::mark(&mut self.dirty, fd, state);
        }
    }

    fn mark(dirty: &mut Vec<RawFd>, fd: RawFd, state: &mut FdState) {
        if !state.dirty {
            state.dirty = true;
            dirty.push(fd);
        }
    }
}

/// A PollMulti op's completion for the ready bits `hit`, with `HANGUP` when the fd hung up.
fn multi_ready(token: Token, hit: u8, hangup: bool) -> Completion {
    Completion {
        token,
        result: i32::from(hit) | if hangup { HANGUP } else { 0 },
        more: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Interest = Interest::READABLE;
    const W: Interest = Interest::WRITABLE;

    /// Records what a readiness event asked of the kernel; answers as told.
    #[derive(Default)]
    struct Fake {
        sends: Vec<(RawFd, usize)>,
        send_result: Option<i32>,
        accepts: Vec<(RawFd, Token)>,
        accept_ends: bool,
    }

    impl Perform for Fake {
        fn send(&mut self, fd: RawFd, msg: usize) -> Option<i32> {
            self.sends.push((fd, msg));
            self.send_result
        }
        fn accept(&mut self, fd: RawFd, token: Token) -> bool {
            self.accepts.push((fd, token));
            self.accept_ends
        }
    }

    #[test]
    fn merges_reader_and_writer() {
        let mut s = Sources::default();
        assert_eq!(s.add(1, 5, R, false), Added::Register(R));
        s.set_registered(5, Some(R));
        assert_eq!(s.add(2, 5, W, false), Added::Queued);
        let mut ch = Vec::new();
        s.take_changes(&mut ch);
        assert_eq!(
            ch,
            vec![(
                5,
                Change::Arm {
                    registered: true,
                    interest: R.add(W)
                }
            )]
        );
        s.set_registered(5, Some(R.add(W)));

        let mut out = Vec::new();
        s.ready(5, W, false, false, &mut out, &mut Fake::default());
        assert_eq!(out, vec![Completion::last(2, 2)]);
        assert!(!s.contains(2) && s.contains(1));
        ch.clear();
        s.take_changes(&mut ch);
        assert_eq!(
            ch,
            vec![(
                5,
                Change::Arm {
                    registered: true,
                    interest: R
                }
            )]
        );
    }

    #[test]
    fn last_op_gone_removes_fd() {
        let mut s = Sources::default();
        s.add(1, 7, R, false);
        s.set_registered(7, Some(R));
        assert_eq!(s.remove(1), Some(OpKind::Poll));
        assert_eq!(s.remove(1), None);
        let mut ch = Vec::new();
        s.take_changes(&mut ch);
        assert_eq!(ch, vec![(7, Change::Remove)]);
        assert!(s.is_empty());
    }

    #[test]
    fn failed_registration_forgets_op() {
        let mut s = Sources::default();
        assert_eq!(s.add(1, 9, R, false), Added::Register(R));
        s.add_failed(1, 9);
        assert!(s.is_empty() && !s.contains(1));
    }

    #[test]
    fn fail_fd_completes_all_ops() {
        let mut s = Sources::default();
        s.add(1, 3, R, false);
        s.set_registered(3, Some(R));
        s.add(2, 3, W, false);
        s.add_accept(4, 3);
        let (mut out, mut multi) = (Vec::new(), Vec::new());
        s.fail_fd(3, 9, &mut out, &mut multi);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|c| c.result == -9));
        let last = Completion {
            token: 4,
            result: -9,
            more: false,
        };
        assert_eq!(multi, vec![last]);
        assert!(s.is_empty());
    }

    #[test]
    fn a_refused_send_is_retried_on_writability_beside_a_reader() {
        let mut s = Sources::default();
        assert_eq!(s.add(1, 5, R, false), Added::Register(R));
        s.set_registered(5, Some(R));
        assert_eq!(s.add_send(2, 5, 0x1000), Added::Queued);
        let mut ch = Vec::new();
        s.take_changes(&mut ch);
        let both = Change::Arm {
            registered: true,
            interest: R.add(W),
        };
        assert_eq!(ch, vec![(5, both)]);
        s.set_registered(5, Some(R.add(W)));

        // Writable, but the kernel refuses again: the send waits on, the fd is re-armed.
        let mut io = Fake::default();
        let mut out = Vec::new();
        s.ready(5, W, false, false, &mut out, &mut io);
        assert!(out.is_empty() && s.contains(2) && s.contains(1));
        ch.clear();
        s.take_changes(&mut ch);
        assert_eq!(ch, vec![(5, both)]);

        // Readable and writable: the reader completes first, then the send with its bytes.
        io.send_result = Some(300);
        s.ready(5, R.add(W), false, false, &mut out, &mut io);
        assert_eq!(io.sends, vec![(5, 0x1000), (5, 0x1000)]);
        assert_eq!(out, vec![Completion::last(1, 1), Completion::last(2, 300)]);
        assert!(s.is_empty() || (!s.contains(1) && !s.contains(2)));
        ch.clear();
        s.take_changes(&mut ch);
        assert_eq!(ch, vec![(5, Change::Remove)]);
    }

    #[test]
    fn a_waiting_send_is_cancelled_or_failed_like_any_op() {
        let mut s = Sources::default();
        assert_eq!(s.add_send(4, 6, 0x2000), Added::Register(W));
        s.set_registered(6, Some(W));
        // Readable alone does not retry a send.
        let mut out = Vec::new();
        let mut io = Fake::default();
        s.ready(6, R, false, false, &mut out, &mut io);
        assert!(out.is_empty() && s.contains(4) && io.sends.is_empty());
        assert_eq!(s.remove(4), Some(OpKind::Send(0x2000)));
        assert!(!s.contains(4));
        s.add_send(5, 6, 0x2000);
        s.fail_fd(6, 9, &mut out, &mut Vec::new());
        assert_eq!(out, vec![Completion::last(5, -9)]);
    }

    #[test]
    fn an_accept_stays_armed_until_it_ends() {
        let mut s = Sources::default();
        assert_eq!(s.add_accept(7, 3), Added::Register(R));
        s.set_registered(3, Some(R));
        let mut io = Fake::default();
        let mut out = Vec::new();
        // Writable alone does not accept.
        s.ready(3, W, false, false, &mut out, &mut io);
        assert!(io.accepts.is_empty());
        // Readable: accepts, stays, and the fd is re-armed for the next connections.
        s.ready(3, R, false, false, &mut out, &mut io);
        s.ready(3, R, false, false, &mut out, &mut io);
        assert_eq!(io.accepts, vec![(3, 7), (3, 7)]);
        assert!(out.is_empty() && s.contains(7));
        let mut ch = Vec::new();
        s.take_changes(&mut ch);
        let armed = Change::Arm {
            registered: true,
            interest: R,
        };
        assert_eq!(ch, vec![(3, armed)]);
        // An accept that ends (an error) leaves the table.
        io.accept_ends = true;
        s.ready(3, R, false, false, &mut out, &mut io);
        assert!(!s.contains(7) && out.is_empty());
        ch.clear();
        s.take_changes(&mut ch);
        assert_eq!(ch, vec![(3, Change::Remove)]);
        // Cancelled: removed, and the caller learns it was an accept.
        s.add_accept(8, 3);
        assert_eq!(s.remove(8), Some(OpKind::Accept));
    }

    #[test]
    fn after_a_reset_the_reader_goes_before_a_waiting_send() {
        let mut s = Sources::default();
        s.add(1, 5, R, false);
        s.set_registered(5, Some(R));
        s.add_send(2, 5, 0x1000);
        let mut io = Fake {
            send_result: Some(-libc::ECONNRESET),
            ..Fake::default()
        };
        let mut out = Vec::new();
        // A reset with a reader armed: only the reader completes; the send is not tried.
        s.ready(5, R.add(W), true, false, &mut out, &mut io);
        assert_eq!(out, vec![Completion::last(1, 1)]);
        assert!(io.sends.is_empty() && s.contains(2));
        let mut ch = Vec::new();
        s.take_changes(&mut ch);
        assert_eq!(
            ch,
            vec![(
                5,
                Change::Arm {
                    registered: true,
                    interest: W
                }
            )]
        );
        // The next report, with no reader armed: the send is tried and takes the error.
        out.clear();
        s.ready(5, R.add(W), true, false, &mut out, &mut io);
        assert_eq!(io.sends, vec![(5, 0x1000)]);
        assert_eq!(out, vec![Completion::last(2, -libc::ECONNRESET)]);
    }
}
