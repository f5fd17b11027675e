//! Python-visible callback objects: `Handle` (call_soon, fd watchers) here and
//! `TimerHandle` (call_later/call_at, `timer.rs`), as in `asyncio.events`.
//! Owns: what one scheduled callback is, running it under its context, cancellation.
//! Not: queues and ordering (`core/`), formatting and error reporting (Python, `rsloop/_format.py`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, ThreadId};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use pyo3::PyTraverseError;

mod timer;

pub use timer::TimerHandle;

/// The bytes of a queued handle object past its pointer: a `TimerHandle`'s basic size,
/// the larger (`tests/test_lifetimes.py` holds both to it), what a prefetch of a handle
/// covers.
pub const HANDLE_BYTES: usize = 80;
/// The collector's header in front of a handle's pointer (`PyGC_Head`, two words).
pub const GC_HEADER_BYTES: usize = 2 * std::mem::size_of::<usize>();

use crate::ffi::alloc::FastNew;
use crate::ffi::gil::FlagCell;
use crate::ffi::python::{
    as_base, gc_track, gc_untrack, is_context, new_context, refcnt, run_in_context,
    sole_and_untracked,
};

/// Locks a mutex whose data stays consistent even if a holder panicked (ours never runs
/// code that can panic while locked), so poisoning is ignored.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A callback's positional arguments. Most callbacks get none or one (a task's wake-up
/// gets its future, a future's done-callback the future): one is kept without a tuple, so
/// scheduling it allocates nothing; the tuple is built only if Python asks for `_args`.
pub enum Args {
    Zero,
    One(Py<PyAny>),
    Many(Py<PyTuple>),
}

impl Args {
    /// The arguments a Python caller packed into a tuple (`*args`).
    pub fn from_tuple(args: Bound<'_, PyTuple>) -> Self {
        if args.is_empty() {
            Args::Zero
        } else {
            Args::Many(args.unbind())
        }
    }

    /// How a handle stores them: a shape and at most one object (the argument, or the
    /// tuple of them), so that a handle spends one word on its arguments, not two.
    fn split(self) -> (Shape, Option<Py<PyAny>>) {
        match self {
            Args::Zero => (Shape::Zero, None),
            Args::One(a) => (Shape::One, Some(a)),
            Args::Many(t) => (Shape::Many, Some(t.into_any())),
        }
    }
}

/// What a handle's `arg` field holds (its value is its two bits in [`Flags`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Shape {
    /// Nothing any more: the handle was cancelled or emptied (asyncio's `_args = None`).
    Gone = 0,
    /// No arguments.
    Zero = 1,
    /// `arg` is the single argument.
    One = 2,
    /// `arg` is the tuple of the arguments.
    Many = 3,
}

impl Shape {
    fn to_bits(self) -> u8 {
        self as u8
    }

    fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => Shape::Gone,
            1 => Shape::Zero,
            2 => Shape::One,
            _ => Shape::Many,
        }
    }
}

/// A handle's flags, kept in the spare bits of its cell's busy byte ([`FlagCell::bits`])
/// rather than in fields: together with the four pointers they would take a word more,
/// and the handle a larger allocation class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Flags(u8);

impl Flags {
    /// The [`Shape`] of `arg`, two bits (the lowest: reading it is one mask).
    const SHAPE: u8 = 3;
    /// `cancel()` was called.
    const CANCELLED: u8 = 1 << 2;
    /// `context` is `None` or a context the loop made for a run: the handle was scheduled
    /// from an empty context (see `HandleState::context`).
    const FRESH_CONTEXT: u8 = 1 << 3;
    /// The loop was in debug mode when the handle was made.
    const DEBUG: u8 = 1 << 4;
    /// A timer's: the entry has left the loop's timer heap (clear, a new timer is in it:
    /// `Handle::new` and `refill` know nothing of timers).
    const OFF_HEAP: u8 = 1 << 5;
    /// A timer's: its deadline was an `int` given to `call_at` that f64 holds exactly.
    const INT_WHEN: u8 = 1 << 6;
    /// Not a timer's: made by `call_soon_threadsafe` where asyncio's handle for it waits
    /// (3.14+): its `cancel()` and `cancelled()` from another thread wait for a run in
    /// progress. It shares `INT_WHEN`'s bit (the cell has seven): no timer is made by
    /// `call_soon_threadsafe`, so the bit means this only on an exact `Handle` (every
    /// reader checks the type: `Handle::is_threadsafe_handle`).
    const THREADSAFE: u8 = 1 << 6;
    /// What `empty` clears: the bits that describe the contents it takes.
    const CONTENTS: u8 = Self::SHAPE | Self::FRESH_CONTEXT | Self::DEBUG;

    /// A new, uncancelled handle's flags.
    fn new(shape: Shape, fresh_context: bool, debug: bool) -> Self {
        let mut bits = shape.to_bits();
        if fresh_context {
            bits |= Self::FRESH_CONTEXT;
        }
        if debug {
            bits |= Self::DEBUG;
        }
        Flags(bits)
    }

    fn cancelled(self) -> bool {
        self.0 & Self::CANCELLED != 0
    }

    fn shape(self) -> Shape {
        Shape::from_bits(self.0)
    }

    fn fresh_context(self) -> bool {
        self.0 & Self::FRESH_CONTEXT != 0
    }

    fn debug(self) -> bool {
        self.0 & Self::DEBUG != 0
    }

    fn off_heap(self) -> bool {
        self.0 & Self::OFF_HEAP != 0
    }

    fn int_when(self) -> bool {
        self.0 & Self::INT_WHEN != 0
    }

    fn threadsafe(self) -> bool {
        self.0 & Self::THREADSAFE != 0
    }

    /// `arg` now holds `shape`.
    fn with_shape(self, shape: Shape) -> Self {
        Flags((self.0 & !Self::SHAPE) | shape.to_bits())
    }

    /// What `cancel()` makes of the flags; `None` if it was already called (a no-op).
    /// The shape stays until the arguments are dropped (debug mode's repr shows them).
    fn cancel(self) -> Option<Self> {
        (!self.cancelled()).then_some(Flags(self.0 | Self::CANCELLED))
    }

    /// A timer's entry left the loop's heap.
    fn unscheduled(self) -> Self {
        Flags(self.0 | Self::OFF_HEAP)
    }

    /// A timer's deadline was an `int`.
    fn with_int_when(self) -> Self {
        Flags(self.0 | Self::INT_WHEN)
    }

    /// After `empty`: no contents (shape gone, no fresh context, no debug), while
    /// `cancelled` and the timer's bits stay as they were.
    fn emptied(self) -> Self {
        Flags(self.0 & !Self::CONTENTS)
    }
}

/// [`Args`] cloned out of a handle for one run.
enum BoundArgs<'py> {
    Zero,
    One(Bound<'py, PyAny>),
    Many(Bound<'py, PyTuple>),
}

impl<'py> BoundArgs<'py> {
    /// `callback(*args)`, without a tuple for zero or one argument.
    #[inline(always)]
    fn call(&self, callback: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            BoundArgs::Zero => callback.call0(),
            BoundArgs::One(a) => callback.call1((a,)),
            BoundArgs::Many(t) => callback.call1(t),
        }
    }

    /// `(callback, *args)`, for a duck-typed context's `run`.
    fn with_callback(&self, callback: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let py = callback.py();
        match self {
            BoundArgs::Zero => PyTuple::new(py, [callback]),
            BoundArgs::One(a) => PyTuple::new(py, [callback, a]),
            BoundArgs::Many(t) => {
                let all: Vec<Bound<'py, PyAny>> =
                    std::iter::once(callback.clone()).chain(t.iter()).collect();
                PyTuple::new(py, all)
            }
        }
    }
}

/// What a handle runs. The callback and arguments are dropped on cancel, as asyncio does.
/// Its flags (the shape of `arg`, whether `context` is fresh, debug mode, cancelled) are
/// in the cell's spare bits ([`Flags`]).
struct HandleState {
    callback: Option<Py<PyAny>>,
    /// The argument or the tuple of them, as the shape flag says ([`Args::split`]).
    arg: Option<Py<PyAny>>,
    /// The context to run in; `None` with the fresh-context flag means "a new empty
    /// context": the snapshot taken at scheduling time was empty, and an empty snapshot
    /// and a new empty context cannot be told apart, except that the latter is made only
    /// when the callback runs (from CPython's context freelist, so no garbage-collector
    /// churn).
    context: Option<Py<PyAny>>,
    /// What only debug mode keeps, boxed so that it costs other handles one word: with
    /// the flags in the cell's busy byte, a handle is 64 bytes (weak-reference slot
    /// included), in pymalloc's 80-byte size class with the collector's header.
    debug_info: Option<Box<DebugInfo>>,
}

#[derive(Default)]
struct DebugInfo {
    /// `traceback.extract_stack()` at creation.
    source_traceback: Option<Py<PyAny>>,
    /// `repr(self)` kept at cancel time, as asyncio keeps `_repr`.
    repr_cache: Option<Box<str>>,
}

impl HandleState {
    /// The arguments for one run, `arg` being of `shape`; `None` once cancelled or emptied.
    #[inline(always)]
    fn bound_args<'py>(&self, py: Python<'py>, shape: Shape) -> Option<BoundArgs<'py>> {
        Some(match (shape, &self.arg) {
            (Shape::Zero, _) => BoundArgs::Zero,
            (Shape::One, Some(a)) => BoundArgs::One(a.bind(py).clone()),
            (Shape::Many, Some(t)) => match t.bind(py).cast::<PyTuple>() {
                Ok(t) => BoundArgs::Many(t.clone()),
                Err(_) => BoundArgs::One(t.bind(py).clone()),
            },
            _ => return None,
        })
    }

    fn source_traceback(&self) -> Option<&Py<PyAny>> {
        self.debug_info.as_ref()?.source_traceback.as_ref()
    }

    fn repr_cache(&self) -> Option<String> {
        self.debug_info
            .as_ref()?
            .repr_cache
            .as_deref()
            .map(str::to_owned)
    }
}

fn debug_info(source_traceback: Option<Py<PyAny>>) -> Option<Box<DebugInfo>> {
    source_traceback.map(|tb| {
        Box::new(DebugInfo {
            source_traceback: Some(tb),
            repr_cache: None,
        })
    })
}

/// The Python objects a handle let go of; dropped by the caller outside any cell.
pub struct Released {
    state: HandleState,
    /// The handle's fresh-context flag: `state.context` is one the loop made.
    fresh_context: bool,
}

impl Released {
    /// Drops the objects as `Bound`s: a plain decref each (a `Py`'s drop first asks a
    /// thread-local whether the GIL is held).
    pub fn drop_attached(self, py: Python<'_>) {
        let st = self.state;
        drop(st.callback.map(|o| o.into_bound(py)));
        drop(st.arg.map(|o| o.into_bound(py)));
        drop(st.context.map(|o| o.into_bound(py)));
        if let Some(info) = st.debug_info {
            drop(info.source_traceback.map(|o| o.into_bound(py)));
        }
    }

    /// The context the loop made for the run of a handle scheduled from an empty context,
    /// if it had one (see `HandleState::context`).
    pub fn take_made_context(&mut self) -> Option<Py<PyAny>> {
        if self.fresh_context {
            self.state.context.take()
        } else {
            None
        }
    }
}

/// A callback scheduled with `call_soon`, or an fd watcher's callback.
///
/// All mutable state sits in one GIL-guarded cell so that a finished handle nobody else
/// references can be recycled for the next `call_soon` (see `core::Queues::free`).
///
/// Layout: four pointers and the cell's busy byte (holding the [`Flags`] too), then the
/// weak-reference list: 64 bytes with the object header, 80 with the collector's.
#[pyclass(frozen, subclass, weakref, module = "rsloop._rsloop", name = "Handle")]
pub struct Handle {
    state: FlagCell<HandleState>,
}

/// How new handles are made, once [`Handle::probe_fast_new`] has looked: `Some` when the
/// class's layout allows making them by hand.
static FAST_NEW: OnceLock<Option<FastNew<Handle>>> = OnceLock::new();

/// Whether `call_soon_threadsafe`'s handles wait as asyncio's `events._ThreadSafeHandle`
/// does (3.14+, probed by `rsloop._loop`): there `cancel()` and `cancelled()` take a lock
/// that the run holds, so called from another thread they return only once a callback
/// already started has finished, and after `cancel()` returns the callback is not
/// running. (Under the GIL, the run's own check of `cancelled` and the call are one step.)
static THREADSAFE_WAITS: AtomicBool = AtomicBool::new(false);

/// The `call_soon_threadsafe` handles whose callbacks run now, with the thread running
/// each (a handle's address while it runs). Only handles marked `THREADSAFE` enter it.
static RUNNING_THREADSAFE: Mutex<Vec<(usize, ThreadId)>> = Mutex::new(Vec::new());
/// Signalled whenever a handle leaves [`RUNNING_THREADSAFE`].
static THREADSAFE_RUN_ENDED: Condvar = Condvar::new();

/// Sets [`THREADSAFE_WAITS`] (called once, by `rsloop._loop`).
#[pyfunction]
pub fn set_threadsafe_handles_wait(wait: bool) {
    THREADSAFE_WAITS.store(wait, Ordering::Relaxed);
}

/// Holds a `THREADSAFE` handle in [`RUNNING_THREADSAFE`] while its callback runs and its
/// error, if any, is reported (asyncio's handle holds its lock through both).
pub struct RunningThreadsafe(usize);

impl RunningThreadsafe {
    /// Registers `handle` if it is a `call_soon_threadsafe` handle that waits.
    #[inline]
    pub fn enter_if_threadsafe(handle: &Bound<'_, Handle>) -> Option<Self> {
        Handle::is_threadsafe_handle(handle).then(|| Self::enter(handle.get()))
    }

    fn enter(handle: &Handle) -> Self {
        let key = std::ptr::from_ref(handle) as usize;
        lock(&RUNNING_THREADSAFE).push((key, thread::current().id()));
        RunningThreadsafe(key)
    }
}

impl Drop for RunningThreadsafe {
    fn drop(&mut self) {
        let mut running = lock(&RUNNING_THREADSAFE);
        if let Some(i) = running.iter().position(|&(k, _)| k == self.0) {
            running.swap_remove(i);
        }
        drop(running);
        THREADSAFE_RUN_ENDED.notify_all();
    }
}

/// How a handle is run and what it tells the caller.
pub enum RunOutcome {
    /// Ran (or was cancelled meanwhile and skipped).
    Done,
    /// The callback raised; the caller reports or propagates it.
    Raised(PyErr),
}

impl Handle {
    /// A new, uncancelled handle.
    #[inline(always)]
    pub fn new(
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        source_traceback: Option<Py<PyAny>>,
        debug: bool,
    ) -> Self {
        let (shape, arg) = args.split();
        let flags = Flags::new(shape, context.is_none(), debug);
        Handle {
            state: FlagCell::with_bits(
                HandleState {
                    callback: Some(callback),
                    arg,
                    context,
                    debug_info: debug_info(source_traceback),
                },
                flags.0,
            ),
        }
    }

    /// Learns, once, whether a handle can be made without PyO3's generic initializer
    /// ([`FastNew`]), from one PyO3 makes here; returns whether it can.
    pub fn probe_fast_new(py: Python<'_>) -> PyResult<bool> {
        if let Some(fast) = FAST_NEW.get() {
            return Ok(fast.is_some());
        }
        let sample = Py::new(py, Handle::new(py.None(), Args::Zero, None, None, false))?;
        let fast = FastNew::probe(sample.bind(py));
        drop(sample.into_bound(py));
        Ok(FAST_NEW.get_or_init(|| fast).is_some())
    }

    /// `handle` as a new Python object (a fresh one: the freelist had none), not tracked
    /// by the collector, ready for a queue as a recycled one is.
    #[inline(always)]
    pub fn into_object(py: Python<'_>, handle: Handle) -> PyResult<Py<Handle>> {
        match FAST_NEW.get() {
            Some(Some(fast)) => fast.make(py, handle),
            _ => {
                let made = Py::new(py, handle)?;
                Handle::enter_queue(made.bind(py));
                Ok(made)
            }
        }
    }

    #[inline]
    fn flags(&self) -> Flags {
        Flags(self.state.bits())
    }

    /// Replaces the flags by `f` of them (callable inside `state.with`, not
    /// `state.with_flags`).
    #[inline]
    fn update_flags(&self, py: Python<'_>, f: impl FnOnce(Flags) -> Flags) {
        self.state.update_bits(py, |bits| f(Flags(bits)).0);
    }

    /// Gives a finished, unreferenced handle new contents (the freelist's reuse). Returns
    /// nothing to drop: a recycled handle was emptied by [`Handle::empty`].
    pub fn refill(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        source_traceback: Option<Py<PyAny>>,
        debug: bool,
    ) {
        let (shape, arg) = args.split();
        let flags = Flags::new(shape, context.is_none(), debug);
        self.state.with_flags(py, |st, bits| {
            st.callback = Some(callback);
            st.arg = arg;
            st.context = context;
            st.debug_info = debug_info(source_traceback);
            // Every bit: uncancelled, and a recycled timer is in the heap (it is pushed
            // next) with a float deadline.
            *bits = flags.0;
        });
    }

    /// Takes every Python object out of the handle (before it goes on the freelist).
    pub fn empty(&self, py: Python<'_>) -> Released {
        self.state.with_flags(py, |st, bits| {
            let flags = Flags(*bits);
            *bits = flags.emptied().0;
            let fresh_context = flags.fresh_context();
            Released {
                state: HandleState {
                    callback: st.callback.take(),
                    arg: st.arg.take(),
                    context: st.context.take(),
                    debug_info: st.debug_info.take(),
                },
                fresh_context,
            }
        })
    }

    /// The loop takes `handle` into one of its queues (the ready queue, the timer heap, a
    /// freelist). While the loop owns it the collector does not track it: a million
    /// pending callbacks would otherwise be walked by every collection they survive, and
    /// each one's survival would bring the next full collection nearer. The loop's
    /// `__traverse__` shows the collector what such a handle holds while the loop is its
    /// only owner ([`Handle::traverse_queued`]); [`Handle::leave_queue`] tracks it again
    /// when it leaves and someone else still holds it, so a cycle through a handle the
    /// user keeps is collected as in asyncio.
    #[inline]
    pub fn enter_queue(handle: &Bound<'_, Handle>) {
        gc_untrack(handle.as_any());
    }

    /// `handle` leaves the loop's queues (it ran, was cancelled, or the loop closed).
    #[inline]
    pub fn leave_queue(handle: &Bound<'_, Handle>) {
        if refcnt(handle.as_any()) > 1 {
            gc_track(handle.as_any());
        }
    }

    /// What the loop's `__traverse__` shows of a queued handle: the handle itself if the
    /// collector tracks it, what it holds if the loop's reference is the only one (the
    /// handle is reachable exactly when the loop is), and nothing otherwise (the holder
    /// keeps what it holds alive: never wrong, only conservative).
    pub fn traverse_queued(
        handle: &Py<Handle>,
        visit: &PyVisit<'_>,
    ) -> Result<(), PyTraverseError> {
        if sole_and_untracked(handle, visit) {
            handle.get().traverse_contents(visit)
        } else {
            visit.call(handle)
        }
    }

    /// [`Handle::traverse_queued`] for a timer.
    pub fn traverse_queued_timer(
        timer: &Py<TimerHandle>,
        visit: &PyVisit<'_>,
    ) -> Result<(), PyTraverseError> {
        Handle::traverse_queued(as_base(timer), visit)
    }

    fn traverse_contents(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(st) = self.state.peek_for_gc(visit) {
            visit.call(&st.callback)?;
            visit.call(&st.arg)?;
            visit.call(&st.context)?;
            visit.call(st.source_traceback())?;
        }
        Ok(())
    }

    /// Whether `cancel()` was called.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.flags().cancelled()
    }

    /// Runs the callback under its context, like `asyncio.Handle._run` minus the reporting.
    /// A handle scheduled from an empty context runs in `spare` if given (an empty context
    /// nothing else references, left by an earlier run), else in a new one.
    pub fn run(&self, py: Python<'_>, spare: &mut Option<Py<PyAny>>) -> RunOutcome {
        // Bound, not Py, clones: dropping a Bound is a plain decref (a Py's drop first
        // asks a thread-local whether the GIL is held).
        let cloned = self.state.with_flags(py, |st, bits| {
            match (&st.callback, st.bound_args(py, Flags(*bits).shape())) {
                (Some(cb), Some(args)) => {
                    // A handle from an empty context takes the spare one in place (a move:
                    // no Python code runs); without a spare, one is made below, outside.
                    if st.context.is_none() {
                        st.context = spare.take();
                    }
                    Some((
                        cb.bind(py).clone(),
                        args,
                        st.context.as_ref().map(|c| c.bind(py).clone()),
                    ))
                }
                _ => None,
            }
        });
        let Some((callback, args, context)) = cloned else {
            return RunOutcome::Done;
        };
        let context = match context {
            Some(c) => c,
            // No spare: a new one, kept (asyncio's handle keeps the context its callback
            // changed, and 3.12+ runs a custom exception handler in it: `get_context()`
            // after the run).
            None => match new_context(py) {
                Ok(c) => {
                    let c = c.into_bound(py);
                    // `new_context` can run the collector, and a finalizer could have
                    // asked this handle for its context (`get_context()` makes one):
                    // the one the handle holds then wins.
                    let held = self.state.with(py, |st| {
                        st.context
                            .get_or_insert_with(|| c.clone().unbind())
                            .bind(py)
                            .clone()
                    });
                    drop(c);
                    held
                }
                Err(e) => return RunOutcome::Raised(e),
            },
        };
        let result = if is_context(&context) {
            run_in_context(&context, || args.call(&callback))
        } else {
            // asyncio only calls `context.run(callback, *args)`: honour duck-typed contexts.
            args.with_callback(&callback)
                .and_then(|all| context.call_method1(pyo3::intern!(py, "run"), all))
        };
        match result {
            Ok(_) => RunOutcome::Done,
            Err(e) => RunOutcome::Raised(e),
        }
    }

    /// Marks a handle made by `call_soon_threadsafe` as such, where its `cancel()` waits
    /// for a run in progress (see [`THREADSAFE_WAITS`]).
    pub fn mark_threadsafe(&self, py: Python<'_>) {
        if THREADSAFE_WAITS.load(Ordering::Relaxed) {
            self.update_flags(py, |f| Flags(f.0 | Flags::THREADSAFE));
        }
    }

    /// Whether `slf` is a `call_soon_threadsafe` handle whose `cancel()` waits: the
    /// `THREADSAFE` bit on an exact `Handle` (on a timer the bit is `INT_WHEN`).
    #[inline]
    pub fn is_threadsafe_handle(slf: &Bound<'_, Handle>) -> bool {
        slf.get().flags().threadsafe() && slf.is_exact_instance_of::<Handle>()
    }

    /// Returns once no other thread runs this handle's callback (at once for any other
    /// handle), the GIL released while it waits.
    fn wait_for_a_run_elsewhere(slf: &Bound<'_, Handle>) {
        if !Handle::is_threadsafe_handle(slf) {
            return;
        }
        let key = std::ptr::from_ref(slf.get()) as usize;
        let me = thread::current().id();
        let busy =
            |running: &Vec<(usize, ThreadId)>| running.iter().any(|&(k, t)| k == key && t != me);
        if !busy(&lock(&RUNNING_THREADSAFE)) {
            return;
        }
        // The loop thread takes the lock with the GIL held, never waits for the GIL
        // while holding it: waiting here without the GIL cannot deadlock with it.
        slf.py().detach(|| {
            let mut running = lock(&RUNNING_THREADSAFE);
            while busy(&running) {
                running = THREADSAFE_RUN_ENDED
                    .wait(running)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        });
    }

    /// Marks the handle cancelled and releases the callback (outside the cell, since
    /// dropping it can run arbitrary Python code).
    pub fn cancel_inner(slf: &Bound<'_, Handle>) -> PyResult<bool> {
        let this = slf.get();
        let py = slf.py();
        let flags = this.flags();
        let Some(cancelled) = flags.cancel() else {
            return Ok(false);
        };
        // No Python code runs between the test and the set, so under the GIL the two act
        // as one swap: a second cancel() returns above.
        this.update_flags(py, |_| cancelled);
        // asyncio's TimerHandle.cancel: a cancelled timer still in the heap is counted
        // (before anything below can fail), whichever class's cancel() was called.
        if let Ok(timer) = slf.cast::<TimerHandle>() {
            if !flags.off_heap() {
                timer
                    .get()
                    .cancelled_in_heap
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if flags.debug() {
            let text = slf.repr()?.to_string();
            this.state.with(py, |st| {
                st.debug_info.get_or_insert_with(Box::default).repr_cache =
                    Some(text.into_boxed_str());
            });
        }
        this.update_flags(py, |f| f.with_shape(Shape::Gone));
        let released = this
            .state
            .with(py, |st| (st.callback.take(), st.arg.take()));
        drop(released);
        Ok(true)
    }

    // The context object, made (once) if the handle was scheduled from an empty context.
    fn context_object(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let fresh = self.flags().fresh_context();
        let needs_one = fresh && self.state.with(py, |st| st.context.is_none());
        if needs_one {
            let made = new_context(py)?;
            let unused = self.state.with(py, |st| {
                if st.context.is_none() {
                    st.context = Some(made);
                    None
                } else {
                    Some(made)
                }
            });
            drop(unused);
        }
        Ok(self.clone_field(py, |st| &st.context))
    }

    fn clone_field<T>(
        &self,
        py: Python<'_>,
        field: impl FnOnce(&HandleState) -> &Option<Py<T>>,
    ) -> Option<Py<T>> {
        self.state
            .with(py, |st| field(st).as_ref().map(|o| o.clone_ref(py)))
    }
}

/// A handle's stored tuple of arguments (`Shape::Many`) as the tuple it is.
fn as_tuple(py: Python<'_>, obj: Py<PyAny>) -> PyResult<Py<PyTuple>> {
    Ok(obj.into_bound(py).cast_into::<PyTuple>()?.unbind())
}

static FORMAT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `rsloop._format.handle_repr`, imported once.
fn python_repr(slf: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = slf.py();
    let f = FORMAT.get_or_try_init(py, || {
        py.import("rsloop._format")?
            .getattr("handle_repr")
            .map(Bound::unbind)
    })?;
    f.bind(py).call1((slf,))?.extract()
}

#[pymethods]
impl Handle {
    // The collector must see what a handle holds: `self.h = loop.call_later(t, self.m)`
    // is a cycle through the handle.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.traverse_contents(&visit)
    }

    fn __clear__(&self) {
        let released = Python::attach(|py| self.empty(py));
        drop(released);
    }

    /// Cancels the callback; a no-op if it already ran or was cancelled.
    fn cancel(slf: &Bound<'_, Self>) -> PyResult<()> {
        Handle::wait_for_a_run_elsewhere(slf);
        Handle::cancel_inner(slf).map(|_| ())
    }

    fn cancelled(slf: &Bound<'_, Self>) -> bool {
        Handle::wait_for_a_run_elsewhere(slf);
        slf.get().is_cancelled()
    }

    fn get_context(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.context_object(py)
    }

    #[getter]
    fn _callback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.clone_field(py, |st| &st.callback)
    }

    #[getter]
    fn _args(&self, py: Python<'_>) -> PyResult<Option<Py<PyTuple>>> {
        let shape = self.flags().shape();
        let seen = self.state.with(py, |st| match (shape, &st.arg) {
            (Shape::Zero, _) => Some(Err(None)),
            (Shape::One, Some(a)) => Some(Err(Some(a.clone_ref(py)))),
            (Shape::Many, Some(t)) => Some(Ok(t.clone_ref(py))),
            _ => None,
        });
        let single = match seen {
            None => return Ok(None),
            Some(Ok(tuple)) => return as_tuple(py, tuple).map(Some),
            Some(Err(None)) => return Ok(Some(PyTuple::empty(py).unbind())),
            Some(Err(Some(single))) => single.into_bound(py),
        };
        // Packed outside the cell (an allocation can run the collector, and with it
        // Python code), then kept, so that `h._args is h._args` as in asyncio. If that
        // code read `_args` (and stored its own tuple) or cancelled the handle meanwhile,
        // what the handle holds now is the answer.
        let tuple = PyTuple::new(py, [&single])?.into_any();
        let shape = self.flags().shape();
        let (answer, replaced) = self.state.with(py, |st| match (shape, &st.arg) {
            (Shape::One, Some(a)) if a.is(&single) => {
                self.update_flags(py, |f| f.with_shape(Shape::Many));
                (
                    Some(tuple.clone().unbind()),
                    st.arg.replace(tuple.clone().unbind()),
                )
            }
            (Shape::Many, Some(t)) => (Some(t.clone_ref(py)), None),
            (Shape::Gone, _) => (None, None),
            _ => (Some(tuple.clone().unbind()), None),
        });
        drop(replaced.map(|o| o.into_bound(py)));
        answer.map(|t| as_tuple(py, t)).transpose()
    }

    /// Whether the loop was in debug mode when this handle was made (3.13+ formats the
    /// arguments only then).
    #[getter]
    fn _debug(&self) -> bool {
        self.flags().debug()
    }

    #[getter]
    fn _cancelled(&self) -> bool {
        self.is_cancelled()
    }

    #[getter]
    fn _context(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.context_object(py)
    }

    #[getter]
    fn _source_traceback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state
            .with(py, |st| st.source_traceback().map(|o| o.clone_ref(py)))
    }

    #[getter]
    fn _repr(&self, py: Python<'_>) -> Option<String> {
        self.state.with(py, |st| st.repr_cache())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        if let Some(text) = slf.get().state.with(slf.py(), |st| st.repr_cache()) {
            return Ok(text);
        }
        python_repr(slf.as_any())
    }
}

#[cfg(test)]
mod tests;
