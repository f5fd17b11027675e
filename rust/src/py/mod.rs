//! The PyO3 face of the loop: thin, validating, delegating.

pub mod convert;
pub mod loop_;
mod scheduling;
#[cfg(unix)]
mod sock;
#[cfg(unix)]
pub mod streams;
mod support;

use pyo3::prelude::*;

/// Adds the Python-visible classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loop_::Loop>()?;
    scheduling::install_all(m.py())?;
    m.add_class::<crate::handles::Handle>()?;
    m.add_class::<crate::handles::TimerHandle>()?;
    #[cfg(unix)]
    m.add_class::<crate::transports::stream::StreamCore>()?;
    #[cfg(unix)]
    m.add_class::<crate::transports::datagram::DatagramCore>()?;
    #[cfg(unix)]
    m.add_class::<streams::StreamOp>()?;
    #[cfg(unix)]
    crate::ffi::iternext::install::<streams::StreamOpNext>(m.py());
    #[cfg(unix)]
    m.add_class::<streams::StreamReaderCore>()?;
    m.add_function(wrap_pyfunction!(set_malloc_thresholds, m)?)?;
    Ok(())
}

/// glibc's `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` (`sys::malloc`); `False` where the C
/// library is not glibc or refused a value.
#[pyfunction]
fn set_malloc_thresholds(mmap_threshold: usize, trim_threshold: usize) -> bool {
    crate::sys::malloc::set_thresholds(mmap_threshold, trim_threshold)
}
