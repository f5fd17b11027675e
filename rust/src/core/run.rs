//! run_forever / run_once: the only place callbacks are invoked.
//! Owns: one iteration, step by step as `asyncio.base_events.BaseEventLoop._run_once`.
//! Not: the Python-side set-up of `run_forever` (running-loop registration, asyncgen hooks),
//! which stays in `rsloop/_loop.py` because it runs once per loop run.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::intern;
use pyo3::prelude::*;

use super::clock::{Plan, VirtualClock};
use super::queues::{is_due, wait_timeout, watch_for_idle, SpikeWatch, IDLE_SECS};
use super::route::Route;
use super::streams::FlushHook;
use super::watchers::DriverWork;
use super::{LoopCore, Queues, FREE_HANDLES_IDLE};
use crate::driver::{Completion, Op, Token};
use crate::errors::os_error;
use crate::ffi::python::{context_is_empty, has_weakrefs, refcnt};
use crate::handles::{
    lock, Args, Handle, RunOutcome, RunningThreadsafe, TimerHandle, HANDLE_BYTES,
};
use crate::sys::prefetch::prefetch_span;

/// How many handles ahead of the one running [`LoopCore::run_ready`] prefetches.
const RUN_PREFETCH_AHEAD: usize = 4;

/// Scratch space reused across iterations of one `run_forever`.
#[derive(Default)]
pub struct Scratch {
    /// The wait's completions, of every operation, in the order the driver reaped them.
    completions: Vec<Completion>,
    /// The routes that run outside the tables (accepts' calls, sends' hooks), with their
    /// results, in the completions' order.
    answers: Vec<(Route, i32)>,
    /// Where this iteration's I/O starts in the ready queue: accepted connections are
    /// queued there, ahead of the watchers' handles, as before any other I/O.
    io_start: usize,
    batch: VecDeque<Py<Handle>>,
    to_drop: Vec<Py<PyAny>>,
    /// This iteration's driver work, moved out of the tables and drained by the flush;
    /// the vectors trade places with the tables' own, so a steady loop allocates none.
    work: DriverWork,
    multi_arm: Vec<(Token, i32)>,
    multi_cancel: Vec<Token>,
    sends: Vec<(Token, i32, usize)>,
    dirty: Vec<(Py<PyAny>, FlushHook)>,
    /// An empty context left by a finished callback that nobody else references: the next
    /// callback scheduled from an empty context runs in it (see `LoopCore::recycle`).
    spare_context: Option<Py<PyAny>>,
    /// Whether a spike left too many spare handles, and since when.
    spike: SpikeWatch,
}

impl LoopCore {
    /// Queues a ready handle calling `callback(arg)` (a completion's answer for its owner).
    pub(super) fn queue_call(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        arg: Py<PyAny>,
        debug: bool,
    ) -> PyResult<()> {
        let handle = self.handle(py, callback, Args::One(arg), None, None, debug)?;
        self.push_ready(py, handle);
        Ok(())
    }

    /// A handle with these contents: a recycled one from the freelist when there is one
    /// (every handle the loop runs goes back there, so every maker must take from it).
    /// The collector does not track it, ready for a queue (`Handle::enter_queue`): a new
    /// one is made so, a recycled one is untracked here (a watcher's handle, tracked
    /// while its watcher held it, can reach the freelist after its last run).
    #[inline(always)]
    pub fn handle(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        tb: Option<Py<PyAny>>,
        debug: bool,
    ) -> PyResult<Py<Handle>> {
        match self.queues.with(py, |q| q.free.pop()) {
            Some(h) => {
                Handle::enter_queue(h.bind(py));
                h.get().refill(py, callback, args, context, tb, debug);
                Ok(h)
            }
            None => Handle::into_object(py, Handle::new(callback, args, context, tb, debug)),
        }
    }

    /// Runs iterations until `stop()`; mirrors `run_forever`'s inner `while True` loop.
    pub fn run_forever(&self, py: Python<'_>, loop_obj: &Bound<'_, PyAny>) -> PyResult<()> {
        self.ensure_driver(py)?;
        let started = Instant::now();
        let mut scratch = Scratch::default();
        let result = loop {
            if let Err(e) = self.run_once(py, loop_obj, &mut scratch) {
                break Err(e);
            }
            if self.stopping.load(Ordering::Relaxed) {
                break Ok(());
            }
        };
        self.stopping.store(false, Ordering::Relaxed);
        self.stats.run_ns.add(started.elapsed().as_nanos() as u64);
        drop(scratch);
        result
    }

    /// One iteration of the loop.
    pub fn run_once(
        &self,
        py: Python<'_>,
        loop_obj: &Bound<'_, PyAny>,
        scratch: &mut Scratch,
    ) -> PyResult<()> {
        self.stats.iterations.add(1);
        // A Python `time` is asked first, before any work leaves the tables: if it raises,
        // the error leaves run_forever as asyncio's would, with nothing lost.
        let python_now = self.python_time(loop_obj)?;
        self.flush_transports(py, &mut scratch.dirty);
        // The clock is read outside the cell: on some platforms it calls into Python.
        let (now_due, next_deadline, polls_in_flight) = self.queues.with(py, |q| {
            self.drop_cancelled_timers(py, q, scratch);
            let now_due = !q.ready.is_empty()
                || q.watchers.has_again()
                || self.stopping.load(Ordering::Relaxed);
            let next = q.timers.peek().map(|(when, _)| when);
            q.watchers.take_work(&mut scratch.work);
            q.streams
                .take_work(&mut scratch.multi_arm, &mut scratch.multi_cancel);
            q.streams.take_sends(&mut scratch.sends);
            (now_due, next, q.watchers.in_flight() + q.streams.len())
        });
        // Zero if anything is ready or we are stopping, else until the next timer.
        let mut timeout = wait_timeout(now_due, next_deadline, || {
            python_now.unwrap_or_else(|| self.time())
        });
        // Virtual time: an idle iteration waits and jumps as the clock says.
        let jump = match &self.vclock {
            Some(clock) if !now_due => virtual_plan(clock, next_deadline, scratch, &mut timeout),
            _ => None,
        };
        // Nothing to submit, nothing that could complete and no reason to sleep: the
        // driver has nothing to say this iteration (a call_soon chain never touches it).
        let driver_idle = timeout == Some(0.0)
            && scratch.work.is_empty()
            && scratch.multi_arm.is_empty()
            && scratch.multi_cancel.is_empty()
            && scratch.sends.is_empty()
            && polls_in_flight == 0;
        let idle_watch = watch_for_idle(timeout) && jump.is_none() && self.freelists_above_idle(py);
        if idle_watch {
            timeout = Some(IDLE_SECS);
        }
        let wait_started = idle_watch.then(Instant::now);
        let waited = if driver_idle {
            false
        } else {
            self.poll_driver(py, &mut timeout, scratch)?
        };
        if wait_started.is_some_and(|t0| t0.elapsed().as_secs_f64() >= IDLE_SECS) {
            // The loop sat idle for a second: keep only a small reserve.
            self.trim_freelists(py, FREE_HANDLES_IDLE);
        }
        if let Some(jump) = jump {
            self.virtual_jump(py, loop_obj, &jump, scratch)?;
        }
        let first_deadline = self.queues.with(py, |q| {
            if !scratch.completions.is_empty() {
                self.route_completions(py, q, scratch);
            }
            if q.watchers.has_again() {
                let again = q.watchers.take_again(py, &mut q.ready);
                self.stats.io_events.add(again as u64);
            }
            q.timers.peek().map(|(when, _)| when)
        });
        if !scratch.answers.is_empty() {
            self.answer(py, &mut scratch.answers, Some(scratch.io_start))?;
        }
        if let Some(first) = first_deadline {
            let now = match self.python_time(loop_obj) {
                Ok(t) => t.unwrap_or_else(|| self.time()),
                Err(e) => {
                    scratch.to_drop.clear();
                    return Err(e);
                }
            };
            // asyncio 3.15: `now + max(resolution, math.ulp(now))`, so that a timer due at a
            // large `now` (a patched `time()`) is due; the same on every version.
            let end_time = now + self.clock_resolution.max(ulp(now));
            if is_due(first, end_time) {
                let fired = self.queues.with(py, |q| q.fire_timers(py, end_time));
                self.stats.timers_fired.add(fired);
            }
        }
        if waited {
            // A signal (Ctrl-C) interrupts a blocking wait: let its Python handler run now,
            // after this wait's completions and timers are safely queued (a handler that
            // raises must not lose them: they are one-shot, unlike a selector's readiness).
            if let Err(e) = py.check_signals() {
                scratch.to_drop.clear();
                return Err(e);
            }
        }
        self.queues.with(py, |q| {
            q.take_batch(&mut scratch.batch);
            q.watchers.batch_started();
        });
        scratch.to_drop.clear();
        let batch = scratch.batch.len();
        self.run_ready(py, loop_obj, scratch)?;
        self.trim_after_spike(py, scratch, batch);
        Ok(())
    }

    // A burst left more spare handles than the loop keeps while busy: release them once
    // it is over (`SpikeWatch`). One freelist length check per iteration otherwise.
    #[inline]
    fn trim_after_spike(&self, py: Python<'_>, scratch: &mut Scratch, batch: usize) {
        let spare = self.queues.with(py, |q| q.spare());
        if let Some(keep) = scratch.spike.after_batch(spare, batch, Instant::now) {
            self.trim_freelists(py, keep);
        }
    }

    // The wait of an idle iteration under virtual time is over: if it brought nothing
    // (no I/O, no cross-thread post), the clock jumps as planned, and an `advance()` that
    // reached its end hears so from a ready callback.
    fn virtual_jump(
        &self,
        py: Python<'_>,
        loop_obj: &Bound<'_, PyAny>,
        (plan, plan_made): &(Plan, Instant),
        scratch: &Scratch,
    ) -> PyResult<()> {
        let Some(clock) = &self.vclock else {
            return Ok(());
        };
        // A wait cut short by a wake-up that brought nothing is not the whole threshold:
        // the next iteration waits again.
        let threshold = plan.timeout.unwrap_or(0.0);
        let waited_enough = threshold <= 0.0 || plan_made.elapsed().as_secs_f64() >= threshold;
        let quiet = waited_enough
            && scratch.completions.is_empty()
            && self.queues.with(py, |q| q.ready.is_empty());
        if quiet && clock.jump(plan) {
            let done = loop_obj.getattr(intern!(py, "_virtual_advance_done"))?;
            self.queue_call(py, done.unbind(), py.None(), self.debug())?;
        }
        Ok(())
    }

    /// `loop.time()` when Python replaced it (see `LoopCore::python_time`), else `None`:
    /// the native clock, read without a call.
    #[inline]
    fn python_time(&self, loop_obj: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        if !self.python_time.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let now = loop_obj.call_method0(intern!(loop_obj.py(), "time"))?;
        now.extract::<f64>().map(Some)
    }

    // mirrors _run_once's first block (`Queues::drop_cancelled_timers`); the removed
    // timers are dropped outside the cell.
    #[inline]
    fn drop_cancelled_timers(&self, py: Python<'_>, q: &mut Queues, scratch: &mut Scratch) {
        let to_drop = &mut scratch.to_drop;
        q.drop_cancelled_timers(py, &self.cancelled_timers, |t| to_drop.push(t.into_any()));
    }

    // Hands watcher work to the driver and waits (GIL released only if we may block).
    // Returns whether the wait could block (then signals are checked by the caller).
    fn poll_driver(
        &self,
        py: Python<'_>,
        timeout: &mut Option<f64>,
        scratch: &mut Scratch,
    ) -> PyResult<bool> {
        let mut slot = lock(&self.driver);
        let Some(driver) = slot.as_mut() else {
            scratch.work.clear();
            scratch.multi_arm.clear();
            scratch.multi_cancel.clear();
            scratch.sends.clear();
            return Ok(false);
        };
        for (token, fd, msg) in scratch.sends.drain(..) {
            if let Err(e) = driver.submit(token, Op::SendMsg { fd, msg }) {
                // The transport hears the error as the send's result.
                let code = crate::sys::error_code(&e).unwrap_or(libc::EIO);
                scratch.completions.push(Completion::last(token, -code));
            }
        }
        for token in scratch.multi_cancel.drain(..) {
            let _ = driver.cancel(token);
        }
        for (token, fd) in scratch.multi_arm.drain(..) {
            if let Err(e) = driver.submit(token, Op::AcceptMulti { fd }) {
                let transient = queue_full(&e);
                if transient {
                    self.queues.with(py, |q| q.streams.arm_later(token));
                } else {
                    let code = crate::sys::error_code(&e).unwrap_or(libc::EINVAL);
                    scratch.completions.push(Completion::last(token, -code));
                }
            }
        }
        for token in scratch.work.cancel.drain(..) {
            // A cancel the driver could not queue only means the poll completes normally
            // later; its token is already forgotten, so that completion is ignored.
            let _ = driver.cancel(token);
        }
        for (token, fd, side, multi) in scratch.work.arm.drain(..) {
            let interest = side.interest();
            let op = if multi {
                Op::PollMulti { fd, interest }
            } else {
                Op::Poll { fd, interest }
            };
            if let Err(e) = driver.submit(token, op) {
                // A full queue is temporary: try again next iteration. Anything else (a bad
                // fd) leaves the watcher installed and silent, as a selector would.
                let transient = queue_full(&e);
                self.queues.with(py, |q| {
                    if transient {
                        q.watchers.arm_later(token)
                    } else {
                        q.watchers.arm_failed(token)
                    }
                });
            }
        }

        // A completion the driver already holds (a send performed at submit) makes the
        // wait return at once: no sleep to announce, no GIL to release.
        if driver.holds_completions() {
            *timeout = Some(0.0);
        }
        let blocking = *timeout != Some(0.0);
        if blocking {
            // Announce the sleep, then look once more: a post that raced us is either seen
            // here or sees `needs_wake` and wakes the driver.
            self.needs_wake.store(true, Ordering::SeqCst);
            if !self.queues.with(py, |q| q.ready.is_empty()) {
                self.needs_wake.store(false, Ordering::SeqCst);
                *timeout = Some(0.0);
            }
        }
        let wait = timeout.map(Duration::from_secs_f64);
        let completions = &mut scratch.completions;
        let result = if *timeout != Some(0.0) {
            self.stats.blocking_waits.add(1);
            let t0 = Instant::now();
            let r = py.detach(|| driver.wait(wait, completions));
            self.stats.wait_ns.add(t0.elapsed().as_nanos() as u64);
            self.needs_wake.store(false, Ordering::SeqCst);
            r
        } else {
            driver.wait(wait, completions)
        };
        self.stats.driver.set(driver.counters());
        drop(slot);
        result.map_err(|e| os_error(&e))?;
        Ok(blocking)
    }

    // Transports that wrote during the last batch build their one vectored send each; the
    // sends go out with this iteration's wait.
    fn flush_transports(&self, py: Python<'_>, dirty: &mut Vec<(Py<PyAny>, FlushHook)>) {
        if !self.queues.with(py, |q| q.streams.take_dirty(dirty)) {
            return;
        }
        for (owner, flush) in dirty.drain(..) {
            let owner = owner.into_bound(py);
            if let Err(e) = flush(&owner) {
                e.write_unraisable(py, Some(&owner));
            }
        }
    }

    // Every completion takes one route (`route.rs`). A watcher's handle joins the ready
    // queue here, inside the cell; what needs Python outside it (a callback's handle to
    // make, a send's hook) waits in `answers` for `answer`, in the completions' order.
    fn route_completions(&self, py: Python<'_>, q: &mut Queues, scratch: &mut Scratch) {
        scratch.io_start = q.ready.len();
        let mut queued = 0;
        for c in scratch.completions.drain(..) {
            match q.route(py, &c, &mut scratch.to_drop) {
                Route::Nothing => {}
                Route::Run(h) => {
                    q.ready.push_back(h);
                    queued += 1;
                }
                other => scratch.answers.push((other, c.result)),
            }
        }
        self.stats.io_events.add(queued);
    }

    // The routes that need Python. An accepted connection becomes a ready handle calling
    // its server's callback with the fd (or the `-errno` that ended the accept), queued at
    // `io_start` when given: ahead of the watchers' handles, so a server hears of a
    // connection before its client's connect completes (the order asyncio's selector loop
    // gives, in fewer steps). A send's hook settles its completion at once; one with work a
    // user can see becomes a ready handle calling the transport's `_on_sent(result)`,
    // after the watchers' handles: asyncio queues an fd's reader before its writer, so a
    // reset surfaces as the read error (ConnectionResetError), not as a send's EPIPE.
    pub(super) fn answer(
        &self,
        py: Python<'_>,
        answers: &mut Vec<(Route, i32)>,
        mut io_start: Option<usize>,
    ) -> PyResult<()> {
        let debug = self.debug();
        // Taken from the end, so the first answer goes last in (a `Drain` costs more).
        answers.reverse();
        while let Some((route, result)) = answers.pop() {
            let done = match route {
                Route::Nothing | Route::Run(_) => Ok(()),
                Route::Call(callback) => {
                    self.stats.io_events.add(1);
                    self.call_with_result(py, callback, result, debug, io_start.as_mut())
                }
                Route::Settle(owner, settle) => {
                    let owner = owner.into_bound(py);
                    if settle(&owner, result) {
                        Ok(())
                    } else {
                        owner.getattr(intern!(py, "_on_sent")).and_then(|cb| {
                            self.call_with_result(py, cb.unbind(), result, debug, None)
                        })
                    }
                }
            };
            if let Err(e) = done {
                close_untaken(answers.drain(..));
                return Err(e);
            }
        }
        Ok(())
    }

    // Queues a ready handle calling `callback(result)`: at the back of the ready queue, or
    // at `*at` (then moved past it, so the next one keeps the completions' order).
    fn call_with_result(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        result: i32,
        debug: bool,
        at: Option<&mut usize>,
    ) -> PyResult<()> {
        let arg = result.into_pyobject(py)?.into_any().unbind();
        let Some(at) = at else {
            return self.queue_call(py, callback, arg, debug);
        };
        let handle = self.handle(py, callback, Args::One(arg), None, None, debug)?;
        Handle::enter_queue(handle.bind(py));
        self.queues.with(py, |q| {
            let i = (*at).min(q.ready.len());
            q.ready.insert(i, handle);
            *at = i + 1;
        });
        Ok(())
    }

    // mirrors _run_once's last block: run exactly what was ready at this point.
    fn run_ready(
        &self,
        py: Python<'_>,
        loop_obj: &Bound<'_, PyAny>,
        scratch: &mut Scratch,
    ) -> PyResult<()> {
        self.count_inject_batch();
        let debug = self.debug();
        let mut ran = 0;
        while let Some(handle) = scratch.batch.pop_front() {
            // A burst of timers runs in deadline order, at random places in memory: start
            // loading a handle a few callbacks before its turn (`sys::prefetch`).
            if let Some(next) = scratch.batch.get(RUN_PREFETCH_AHEAD) {
                prefetch_span(next.as_ptr(), 0, HANDLE_BYTES);
            }
            let h = handle.get();
            if h.is_cancelled() {
                Handle::leave_queue(handle.bind(py));
                continue;
            }
            ran += 1;
            let t0 = if debug { Some(self.time()) } else { None };
            let running = RunningThreadsafe::enter_if_threadsafe(handle.bind(py));
            let outcome = h.run(py, &mut scratch.spare_context);
            let outcome_is_ok = matches!(outcome, RunOutcome::Done);
            let mut fatal = None;
            if let RunOutcome::Raised(err) = outcome {
                self.stats.callback_errors.add(1);
                fatal = self.report_callback_error(py, loop_obj, &handle, err).err();
            }
            if let (Some(t0), None) = (t0, &fatal) {
                let dt = self.time() - t0;
                if dt >= f64::from_bits(self.slow_callback_bits.load(Ordering::Relaxed)) {
                    self.stats.slow_callbacks.add(1);
                    fatal = loop_obj
                        .call_method1(intern!(py, "_warn_slow_callback"), (&handle, dt))
                        .err();
                }
            }
            drop(running);
            if let Some(fatal) = fatal {
                // KeyboardInterrupt / SystemExit (or a failing warning): leave the rest of the
                // batch queued in front of anything added since, as asyncio's deque would.
                Handle::leave_queue(handle.bind(py));
                self.queues.with(py, |q| q.put_back(&mut scratch.batch));
                self.stats.callbacks.add(ran);
                return Err(fatal);
            }
            if outcome_is_ok {
                self.recycle(py, handle, &mut scratch.spare_context);
            } else {
                Handle::leave_queue(handle.bind(py));
            }
        }
        self.stats.callbacks.add(ran);
        Ok(())
    }

    // Puts a finished handle on its freelist if nothing but the batch referenced it (the
    // caller dropped what call_soon/call_later returned), no weak reference can see it,
    // and it is one of our exact classes. The empty context the loop made for its run is
    // kept in `spare` for the next such run if it is still empty and nothing else
    // references it (no `Token` of a `ContextVar.set`, no `get_context()` result kept):
    // then no callback can tell it from a new one, and CPython's context allocation and
    // free are saved.
    fn recycle(&self, py: Python<'_>, handle: Py<Handle>, spare: &mut Option<Py<PyAny>>) {
        let (mut released, is_timer) = {
            let bound = handle.bind(py);
            // A weak reference could still see the handle: it must never turn into
            // another callback under it.
            let is_timer = if refcnt(bound.as_any()) != 1 || has_weakrefs(bound.as_any()) {
                None
            } else if bound.is_exact_instance_of::<Handle>() {
                Some(false)
            } else if bound.is_exact_instance_of::<TimerHandle>() {
                Some(true)
            } else {
                None
            };
            let Some(is_timer) = is_timer else {
                Handle::leave_queue(bound);
                return;
            };
            (bound.get().empty(py), is_timer)
        };
        if spare.is_none() {
            if let Some(ctx) = released.take_made_context() {
                let bound = ctx.bind(py);
                if refcnt(bound) == 1 && context_is_empty(bound) {
                    *spare = Some(ctx);
                }
            }
        }
        released.drop_attached(py);
        if is_timer {
            let Ok(timer) = handle.into_bound(py).cast_into::<TimerHandle>() else {
                return;
            };
            let timer = timer.unbind();
            self.queues.with(py, |q| q.free_timers.push(timer));
        } else {
            self.queues.with(py, |q| q.free.push(handle));
        }
    }

    // Whether either freelist holds more than an idle loop keeps.
    fn freelists_above_idle(&self, py: Python<'_>) -> bool {
        self.queues.with(py, |q| {
            q.free.len() > FREE_HANDLES_IDLE || q.free_timers.len() > FREE_HANDLES_IDLE
        })
    }

    // Keeps at most `keep` spare handles on each freelist and releases the rest (outside
    // the cell: a release can run the collector).
    fn trim_freelists(&self, py: Python<'_>, keep: usize) {
        let excess = self.queues.with(py, |q| q.trim_freelists(keep));
        drop(excess);
    }

    fn count_inject_batch(&self) {
        let posted = self.stats.threadsafe_calls.get();
        let seen = self.stats.inject_seen.get();
        if posted != seen {
            self.stats.inject_seen.add(posted - seen);
            self.stats.inject_batches.add(1);
            self.stats.inject_max_batch.max(posted - seen);
        }
    }

    // Handle._run's except clauses: SystemExit and KeyboardInterrupt propagate, anything
    // else goes to the loop's exception handler.
    fn report_callback_error(
        &self,
        py: Python<'_>,
        loop_obj: &Bound<'_, PyAny>,
        handle: &Py<Handle>,
        err: PyErr,
    ) -> PyResult<()> {
        if err.is_instance_of::<PyKeyboardInterrupt>(py) || err.is_instance_of::<PySystemExit>(py) {
            return Err(err);
        }
        let exc = err.into_value(py);
        match loop_obj.call_method1(intern!(py, "_report_callback_error"), (handle, exc)) {
            Ok(_) => Ok(()),
            Err(e)
                if e.is_instance_of::<PyKeyboardInterrupt>(py)
                    || e.is_instance_of::<PySystemExit>(py) =>
            {
                Err(e)
            }
            Err(e) => {
                e.write_unraisable(py, Some(loop_obj));
                Ok(())
            }
        }
    }
}

// The plan of an idle iteration under virtual time: sets the wait, and returns the jump
// to make after it (with when it was planned) if there is one. Out of line: a loop
// without a clock never calls it.
#[cold]
#[inline(never)]
fn virtual_plan(
    clock: &VirtualClock,
    next_deadline: Option<f64>,
    scratch: &Scratch,
    timeout: &mut Option<f64>,
) -> Option<(Plan, Instant)> {
    let submitting = !(scratch.work.is_empty()
        && scratch.multi_arm.is_empty()
        && scratch.multi_cancel.is_empty()
        && scratch.sends.is_empty());
    let plan = clock.plan(next_deadline, submitting);
    *timeout = plan.timeout;
    plan.jump_to.map(|_| (plan, Instant::now()))
}

/// A submission the driver could not take now (its queue is full): try again next flush.
// An error leaves run_forever, as asyncio's would: the answers after it are dropped, and
// a connection no one will take is closed.
#[cold]
fn close_untaken(rest: impl Iterator<Item = (Route, i32)>) {
    for (route, result) in rest {
        if matches!(route, Route::Call(_)) && result >= 0 {
            crate::sys::close_raw(result);
        }
    }
}

fn queue_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::ResourceBusy
    )
}

/// `math.ulp(x)` for a finite, non-negative `x`: the gap to the next larger float.
fn ulp(x: f64) -> f64 {
    let x = x.abs();
    if !x.is_finite() {
        return f64::NAN;
    }
    f64::from_bits(x.to_bits() + 1) - x
}

#[cfg(test)]
mod ulp_tests {
    use super::ulp;

    #[test]
    fn ulp_is_pythons_math_ulp() {
        // math.ulp(1.0), math.ulp(1e9), math.ulp(0.0) in CPython.
        assert_eq!(ulp(1.0), f64::EPSILON);
        assert_eq!(ulp(1e9), 1.1920928955078125e-07);
        assert_eq!(ulp(0.0), 5e-324);
        // A timer due at a large `now` is due once the ulp is added.
        assert!(1e12 < 1e12 + 1e-9_f64.max(ulp(1e12)));
    }
}
