//! Virtual time for tests (`rsloop.testing.VirtualClock`).
//! Owns: the virtual `now`, the autojump threshold, the count of real work in flight, an
//! `advance()` in progress, and the decision of how long an idle iteration waits and where
//! the clock then jumps. Not: firing timers (`core/run.rs`, unchanged: it reads `now`),
//! the Python API (`rsloop/testing.py`).
//!
//! A loop without a clock never reaches this file: `LoopCore::time` reads the monotonic
//! clock and `run_once` asks for a plan only when a clock was given.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The state of one virtual clock, shared by its Python object and its loop. Every field
/// is an atomic: the loop thread reads and jumps it, any thread holding the GIL may end a
/// piece of real work.
#[derive(Debug)]
pub struct VirtualClock {
    /// `loop.time()`, as f64 bits.
    now: AtomicU64,
    /// Seconds of real time an idle loop waits for I/O before it jumps; NaN: never jump.
    autojump: AtomicU64,
    /// Automatic jumps made so far (`clock.jumps`; steps of `advance()` are not jumps).
    jumps: AtomicU64,
    /// Real work in flight (executor jobs, DNS lookups, watched child processes): while it
    /// is non-zero the clock never moves on its own.
    pending: AtomicUsize,
    /// The end of the `advance()` in progress, as f64 bits; NaN when there is none.
    advance_to: AtomicU64,
}

/// What an idle iteration does: how long it waits in the kernel and, if nothing arrives
/// meanwhile, where the clock goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Real seconds to wait (`None`: until I/O or a cross-thread post arrives).
    pub timeout: Option<f64>,
    /// The clock's new value if the wait brings nothing.
    pub jump_to: Option<f64>,
    /// The jump is an autojump (counted in `jumps`), not a step of `advance()`.
    pub counted: bool,
    /// The jump ends the `advance()` in progress.
    pub finishes_advance: bool,
}

impl Plan {
    const NOW: Plan = Plan {
        timeout: Some(0.0),
        jump_to: None,
        counted: false,
        finishes_advance: false,
    };
}

impl VirtualClock {
    /// A clock reading `start`, jumping after `autojump` idle real seconds (`None`: never).
    pub fn new(start: f64, autojump: Option<f64>) -> Self {
        VirtualClock {
            now: AtomicU64::new(start.to_bits()),
            autojump: AtomicU64::new(autojump.unwrap_or(f64::NAN).to_bits()),
            jumps: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            advance_to: AtomicU64::new(f64::NAN.to_bits()),
        }
    }

    /// The virtual time.
    #[inline]
    pub fn now(&self) -> f64 {
        f64::from_bits(self.now.load(Ordering::Relaxed))
    }

    /// The autojump threshold (`None`: never jumps).
    pub fn autojump(&self) -> Option<f64> {
        let t = f64::from_bits(self.autojump.load(Ordering::Relaxed));
        (!t.is_nan()).then_some(t)
    }

    /// Changes the autojump threshold.
    pub fn set_autojump(&self, autojump: Option<f64>) {
        self.autojump
            .store(autojump.unwrap_or(f64::NAN).to_bits(), Ordering::Relaxed);
    }

    /// Automatic jumps so far.
    pub fn jumps(&self) -> u64 {
        self.jumps.load(Ordering::Relaxed)
    }

    /// Pieces of real work in flight.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// One more piece of real work in flight.
    pub fn work_started(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// One piece of real work ended (never below zero). The caller wakes the loop.
    pub fn work_ended(&self) {
        let _ = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Starts an `advance()` to `target` (an earlier target than `now` is `now`).
    pub fn start_advance(&self, target: f64) {
        let target = target.max(self.now());
        self.advance_to.store(target.to_bits(), Ordering::Relaxed);
    }

    /// Ends the `advance()` in progress where the clock is now.
    pub fn stop_advance(&self) {
        self.advance_to.store(f64::NAN.to_bits(), Ordering::Relaxed);
    }

    /// Whether an `advance()` is in progress.
    pub fn advancing(&self) -> bool {
        !f64::from_bits(self.advance_to.load(Ordering::Relaxed)).is_nan()
    }

    /// The iteration's plan when nothing is ready. `next_deadline` is the earliest timer's;
    /// `submitting` says the driver gets new work this iteration (its results may not be
    /// visible after a zero wait, so the clock waits for the next look).
    pub fn plan(&self, next_deadline: Option<f64>, submitting: bool) -> Plan {
        let now = self.now();
        // `call_at(inf)` never falls due: the clock never jumps to infinity.
        let next_deadline = next_deadline.filter(|w| *w != f64::INFINITY);
        // A timer already due (a NaN deadline counts as due, as in asyncio) fires now.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if next_deadline.is_some_and(|w| !(w > now)) {
            return Plan::NOW;
        }
        if self.pending() > 0 {
            // Real work ends with a cross-thread post or an fd event: wait for it.
            return Plan {
                timeout: None,
                ..Plan::NOW
            };
        }
        if submitting {
            return Plan::NOW;
        }
        let target = f64::from_bits(self.advance_to.load(Ordering::Relaxed));
        if !target.is_nan() {
            return match next_deadline {
                Some(w) if w <= target => Plan {
                    jump_to: Some(w),
                    ..Plan::NOW
                },
                _ => Plan {
                    jump_to: Some(target),
                    finishes_advance: true,
                    ..Plan::NOW
                },
            };
        }
        match (self.autojump(), next_deadline) {
            (Some(t), Some(w)) => Plan {
                timeout: Some(t),
                jump_to: Some(w),
                counted: true,
                finishes_advance: false,
            },
            _ => Plan {
                timeout: None,
                ..Plan::NOW
            },
        }
    }

    /// Carries out a plan's jump after a wait that brought nothing. Returns whether an
    /// `advance()` ended.
    pub fn jump(&self, plan: &Plan) -> bool {
        let Some(to) = plan.jump_to else {
            return false;
        };
        if to > self.now() {
            self.now.store(to.to_bits(), Ordering::Relaxed);
        }
        if plan.counted {
            self.jumps.fetch_add(1, Ordering::Relaxed);
        }
        if plan.finishes_advance {
            self.advance_to.store(f64::NAN.to_bits(), Ordering::Relaxed);
        }
        plan.finishes_advance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autojump_goes_to_the_next_deadline() {
        let c = VirtualClock::new(10.0, Some(0.0));
        let p = c.plan(Some(15.0), false);
        assert_eq!(p.timeout, Some(0.0));
        assert_eq!(p.jump_to, Some(15.0));
        assert!(!c.jump(&p));
        assert_eq!(c.now(), 15.0);
        assert_eq!(c.jumps(), 1);
    }

    #[test]
    fn never_jumps_with_work_in_flight_or_without_autojump() {
        let c = VirtualClock::new(0.0, Some(0.5));
        c.work_started();
        assert_eq!(c.plan(Some(3.0), false).jump_to, None);
        assert_eq!(c.plan(Some(3.0), false).timeout, None);
        c.work_ended();
        c.work_ended(); // an extra end does not wrap around
        assert_eq!(c.pending(), 0);
        assert_eq!(c.plan(Some(3.0), false).timeout, Some(0.5));
        assert_eq!(c.plan(Some(3.0), true).jump_to, None);
        c.set_autojump(None);
        assert_eq!(c.plan(Some(3.0), false).jump_to, None);
    }

    #[test]
    fn advance_steps_through_deadlines_then_ends_at_its_target() {
        let c = VirtualClock::new(0.0, None);
        c.start_advance(5.0);
        let p = c.plan(Some(2.0), false);
        assert!(!c.jump(&p));
        assert_eq!((c.now(), c.jumps()), (2.0, 0));
        let p = c.plan(Some(7.0), false);
        assert!(c.jump(&p));
        assert_eq!(c.now(), 5.0);
        assert!(!c.advancing());
    }

    #[test]
    fn due_and_nan_deadlines_fire_without_a_jump() {
        let c = VirtualClock::new(1.0, Some(0.0));
        assert_eq!(c.plan(Some(1.0), false), Plan::NOW);
        assert_eq!(c.plan(Some(f64::NAN), false), Plan::NOW);
        assert_eq!(c.plan(Some(f64::INFINITY), false).jump_to, None);
    }
}
