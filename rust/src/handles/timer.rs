//! `TimerHandle`: a `Handle` with a deadline (`call_later`, `call_at`), as in `asyncio.events`.
//! Owns: the deadline, the heap membership flags it shares with its `Handle` part, the
//! cancelled-in-heap count. Not: the heap itself (`timers.rs`, `core/queues.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::PyFloat;

use super::{Flags, Handle};
use crate::ffi::python::as_base;

/// A callback scheduled for a deadline (`call_later`, `call_at`).
///
/// Whether the entry is in the loop's heap and whether its deadline was an `int` are two
/// of the `Handle` part's [`Flags`]: two fields more would make the timer 88 bytes where
/// it is 80 (96 with the collector's header, a pymalloc size class, where 88 is in 112).
#[pyclass(frozen, extends = Handle, module = "rsloop._rsloop", name = "TimerHandle")]
pub struct TimerHandle {
    /// The deadline as f64 bits (mutable only while the handle sits on the freelist).
    when: AtomicU64,
    /// The loop's count of cancelled entries still in the heap (asyncio's
    /// `_timer_cancelled_count`), shared so `cancel()` needs no loop reference.
    pub(super) cancelled_in_heap: Arc<AtomicUsize>,
}

impl TimerHandle {
    /// A timer part for a handle that is about to be pushed onto the heap.
    pub fn new(when: f64, cancelled_in_heap: Arc<AtomicUsize>) -> Self {
        TimerHandle {
            when: AtomicU64::new(when.to_bits()),
            cancelled_in_heap,
        }
    }

    /// The deadline.
    #[inline]
    pub fn deadline(&self) -> f64 {
        f64::from_bits(self.when.load(Ordering::Relaxed))
    }

    /// Gives a recycled timer (emptied, off the heap, unreferenced) a new deadline; the
    /// caller refills its `Handle` part (which marks it in the heap again, with a float
    /// deadline) and pushes it onto the heap.
    pub fn rearm(&self, when: f64) {
        self.when.store(when.to_bits(), Ordering::Relaxed);
    }

    /// Marks the deadline as one `call_at` got as an `int` (`when` converted exactly).
    pub fn set_int_deadline(timer: &Bound<'_, TimerHandle>) {
        let base = timer.as_super().get();
        base.update_flags(timer.py(), Flags::with_int_when);
    }

    /// The deadline as Python sees it: the `int` `call_at` was given, else a float.
    fn when_object(slf: &Bound<'_, TimerHandle>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let when = slf.get().deadline();
        if slf.as_super().get().flags().int_when() {
            // Exact: the flag is set only for an i64 that f64 holds.
            Ok((when as i64).into_pyobject(py)?.into_any().unbind())
        } else {
            Ok(PyFloat::new(py, when).into_any().unbind())
        }
    }

    /// Called by the loop when the entry leaves the heap.
    #[inline]
    pub fn unschedule(timer: &Py<TimerHandle>, py: Python<'_>) {
        let base = as_base(timer).get();
        base.update_flags(py, Flags::unscheduled);
    }
}

#[pymethods]
impl TimerHandle {
    fn when(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        TimerHandle::when_object(slf)
    }

    #[getter]
    fn _when(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        TimerHandle::when_object(slf)
    }

    #[getter]
    fn _scheduled(slf: &Bound<'_, Self>) -> bool {
        !slf.as_super().get().flags().off_heap()
    }

    fn cancel(slf: &Bound<'_, Self>) -> PyResult<()> {
        Handle::cancel_inner(slf.as_super()).map(|_| ())
    }

    /// `hash(self.when())`, like asyncio.TimerHandle.__hash__ (an int and the float equal
    /// to it hash alike).
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        PyFloat::new(py, self.deadline()).hash()
    }

    fn __richcmp__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let Ok(other) = other.cast::<TimerHandle>() else {
            return Ok(py.NotImplemented());
        };
        let (a, b) = (slf.get(), other.get());
        let (ha, hb) = (slf.as_super().get(), other.as_super().get());
        let same = || -> PyResult<bool> {
            if a.deadline() != b.deadline() || ha.is_cancelled() != hb.is_cancelled() {
                return Ok(false);
            }
            // Clone out of the locks first: comparing arguments runs Python code.
            let (x, y) = (ha._callback(py), hb._callback(py));
            let (xa, ya) = (ha._args(py)?, hb._args(py)?);
            match (x, y, xa, ya) {
                (Some(x), Some(y), Some(xa), Some(ya)) => {
                    Ok(x.bind(py).eq(y.bind(py))? && xa.bind(py).eq(ya.bind(py))?)
                }
                (None, None, _, _) => Ok(true),
                _ => Ok(false),
            }
        };
        let result = match op {
            CompareOp::Lt => a.deadline() < b.deadline(),
            CompareOp::Le => a.deadline() < b.deadline() || same()?,
            CompareOp::Gt => a.deadline() > b.deadline(),
            CompareOp::Ge => a.deadline() > b.deadline() || same()?,
            CompareOp::Eq => same()?,
            CompareOp::Ne => !same()?,
        };
        Ok(result.into_pyobject(py)?.to_owned().into_any().unbind())
    }
}
