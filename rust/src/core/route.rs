//! Where a completion goes: one route for every operation the loop submits.
//! Owns: the token space (which table a token belongs to) and the one answer a completion
//! gets ([`Route`]). Not: each table's rules (`watchers.rs`, `streams.rs`), running what is
//! queued (`run.rs`), the kernel side (`driver/`).
//!
//! A watcher's readiness, a server's accepted connection and a transport's send all come
//! back the same way: the driver reaps a [`Completion`], [`Queues::route`] finds its table
//! by token, the table decides what the completion means for its owner, and the answer is
//! a [`Route`]: nothing, the owner's handle to queue, the owner's callback to queue with
//! the result, or the owner's hook to settle it at once. Whatever a user can see runs as a
//! ready handle, so callbacks keep asyncio's order; a hook only keeps books and asks for a
//! handle (`_on_sent(result)`) when there is more.
//!
//! Tokens carry their table in their range: watchers count up from 1, accepts from
//! [`ACCEPT_BASE`], sends from [`SEND_BASE`]; no table hands out a token outside its own.

use pyo3::prelude::*;

use super::queues::Queues;
use super::streams::{Action, SentHook};
use crate::driver::{Completion, Token};
use crate::handles::Handle;

/// Accept tokens live above the watchers' (which count up from 1)...
pub const ACCEPT_BASE: Token = 1 << 52;
/// ...and send tokens above those.
pub const SEND_BASE: Token = 1 << 56;

/// Which table a token belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An fd watcher's poll, one-shot or multishot (`watchers.rs`).
    Watch,
    /// A server's multishot accept (`streams.rs`).
    Accept,
    /// A transport's send (`streams.rs`).
    Send,
}

impl Kind {
    /// The table of `token`.
    #[inline]
    pub fn of(token: Token) -> Kind {
        if token >= SEND_BASE {
            Kind::Send
        } else if token >= ACCEPT_BASE {
            Kind::Accept
        } else {
            Kind::Watch
        }
    }
}

/// What a completion asks of the loop.
pub enum Route<H = Py<Handle>, C = Py<PyAny>> {
    /// Nothing (a stale token, a cancel, a watcher's error).
    Nothing,
    /// Queue this handle (a watcher's callback).
    Run(H),
    /// Queue a call of this callback with the completion's result (a server's accept).
    Call(C),
    /// Call the owner's hook with the result now, outside the tables (a transport's send);
    /// `false` from it queues a call of `owner._on_sent(result)`.
    Settle(C, SentHook),
}

impl<T> Queues<Py<Handle>, T> {
    /// The answer for `c`. Objects the tables let go of (a cancelled watcher, a stopped
    /// server's callback) go to `to_drop`, to be dropped outside the cell. A connection
    /// whose server is gone is closed here: no one else would.
    // Inlined into the loop's one caller per iteration: a call per completion measured
    // 30 instructions of frame set-up (callgrind, socket_echo).
    #[inline(always)]
    pub fn route(&mut self, py: Python<'_>, c: &Completion, to_drop: &mut Vec<Py<PyAny>>) -> Route {
        match Kind::of(c.token) {
            Kind::Watch => {
                let (run, removed) = self.watchers.complete(py, c.token, c.result, c.more);
                if let Some((h, fileobj)) = removed {
                    to_drop.push(h.into_any());
                    to_drop.push(fileobj);
                }
                run.map_or(Route::Nothing, Route::Run)
            }
            Kind::Accept => {
                let (action, gone) = self.streams.complete(py, c);
                to_drop.extend(gone);
                match action {
                    Action::Deliver(callback) => Route::Call(callback),
                    Action::None => {
                        if c.result >= 0 {
                            crate::sys::close_raw(c.result);
                        }
                        Route::Nothing
                    }
                }
            }
            Kind::Send => match self.streams.complete_send(c.token) {
                Some((owner, hook)) => Route::Settle(owner, hook),
                None => Route::Nothing,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, ACCEPT_BASE, SEND_BASE};

    #[test]
    fn each_token_belongs_to_one_table() {
        assert_eq!(Kind::of(1), Kind::Watch);
        assert_eq!(Kind::of(ACCEPT_BASE - 1), Kind::Watch);
        assert_eq!(Kind::of(ACCEPT_BASE + 1), Kind::Accept);
        assert_eq!(Kind::of(SEND_BASE - 1), Kind::Accept);
        assert_eq!(Kind::of(SEND_BASE + 1), Kind::Send);
        assert_eq!(Kind::of(u64::MAX - 1), Kind::Send);
    }
}
