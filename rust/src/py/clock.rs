//! `rsloop._rsloop.ClockState`: the native half of `rsloop.testing.VirtualClock`, shared
//! with the loop made with it (see `core/clock.rs`).

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::core::clock::{Plan, VirtualClock};

/// The state of a virtual clock; `rsloop.testing.VirtualClock` wraps it.
#[pyclass(frozen, module = "rsloop._rsloop", name = "ClockState")]
pub struct ClockState {
    pub(crate) inner: Arc<VirtualClock>,
}

impl ClockState {
    /// The shared state behind `clock` (an `rsloop.testing.VirtualClock`).
    pub(crate) fn of(clock: &Bound<'_, PyAny>) -> PyResult<Arc<VirtualClock>> {
        let state = clock
            .getattr(pyo3::intern!(clock.py(), "_state"))
            .ok()
            .and_then(|s| s.cast_into::<ClockState>().ok());
        match state {
            Some(s) => Ok(Arc::clone(&s.get().inner)),
            None => Err(PyTypeError::new_err(format!(
                "clock must be an rsloop.testing.VirtualClock, not {}",
                clock.get_type().name()?
            ))),
        }
    }
}

/// A threshold must be a finite number of seconds, zero or more (or `None`).
fn check_autojump(autojump: Option<f64>) -> PyResult<Option<f64>> {
    match autojump {
        Some(t) if !(t.is_finite() && t >= 0.0) => Err(PyValueError::new_err(format!(
            "autojump must be None or a finite number of seconds >= 0, got {t}"
        ))),
        other => Ok(other),
    }
}

#[pymethods]
impl ClockState {
    #[new]
    #[pyo3(signature = (start, autojump))]
    fn new(start: f64, autojump: Option<f64>) -> PyResult<Self> {
        if !start.is_finite() {
            return Err(PyValueError::new_err(format!(
                "start must be a finite number of seconds, got {start}"
            )));
        }
        Ok(ClockState {
            inner: Arc::new(VirtualClock::new(start, check_autojump(autojump)?)),
        })
    }

    #[getter]
    fn now(&self) -> f64 {
        self.inner.now()
    }

    #[getter]
    fn jumps(&self) -> u64 {
        self.inner.jumps()
    }

    #[getter]
    fn pending(&self) -> usize {
        self.inner.pending()
    }

    #[getter]
    fn advancing(&self) -> bool {
        self.inner.advancing()
    }

    #[getter]
    fn get_autojump(&self) -> Option<f64> {
        self.inner.autojump()
    }

    fn set_autojump(&self, autojump: Option<f64>) -> PyResult<()> {
        self.inner.set_autojump(check_autojump(autojump)?);
        Ok(())
    }

    /// For the stdlib-based loop (`rsloop.testing`): counts real work in flight
    /// (`delta` > 0) or ended; that loop wakes itself.
    fn _work(&self, delta: i32) {
        if delta > 0 {
            self.inner.work_started();
        } else {
            self.inner.work_ended();
        }
    }

    /// For the stdlib-based loop: the plan of an idle iteration whose next timer is due
    /// at `next_deadline`, as `(timeout, jump_to, counted, finishes_advance)`.
    fn _plan(&self, next_deadline: Option<f64>) -> (Option<f64>, Option<f64>, bool, bool) {
        let p = self.inner.plan(next_deadline, false);
        (p.timeout, p.jump_to, p.counted, p.finishes_advance)
    }

    /// For the stdlib-based loop: carries out a plan after a wait that brought nothing;
    /// returns whether an `advance()` ended.
    fn _jump(&self, jump_to: Option<f64>, counted: bool, finishes_advance: bool) -> bool {
        self.inner.jump(&Plan {
            timeout: None,
            jump_to,
            counted,
            finishes_advance,
        })
    }

    /// Abandons the `advance()` in progress (its task was cancelled).
    fn stop_advance(&self) {
        self.inner.stop_advance();
    }

    /// Starts `advance()`: the loop steps the clock through every deadline up to
    /// `target`, then calls the loop's `_virtual_advance_done`.
    fn start_advance(&self, target: f64) -> PyResult<()> {
        if target.is_nan() {
            return Err(PyValueError::new_err("cannot advance to NaN"));
        }
        self.inner.start_advance(target);
        Ok(())
    }
}
