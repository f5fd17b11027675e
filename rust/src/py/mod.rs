//! The PyO3 face of the loop: thin, validating, delegating.

mod clock;
pub mod convert;
pub(crate) mod futures;
mod http;
mod http_cycle;
pub mod loop_;
mod scheduling;
#[cfg(unix)]
mod sock;
pub mod streams;

use pyo3::prelude::*;

/// Adds the Python-visible classes to the module, and hands the layers below the two ways
/// up they need: from a loop object to its core (the transports are made with the loop),
/// and a stream transport's chunks straight into the fast stream reader.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // What this build compiled, for the Python package (rsloop/_backend.py): here, so that
    // an interpreter embedding the crate (the fuzz targets) gets the same module.
    m.add("BUILD_URING", cfg!(uring))?;
    // The code paths macOS/BSD run, in place of Linux-only ones (the "portable" feature on
    // Linux; always true elsewhere).
    m.add(
        "BUILD_PORTABLE",
        cfg!(any(not(target_os = "linux"), feature = "portable")),
    )?;
    // Whether the native loop runs everything built on fds (sockets, transports, pipes,
    // signals and children): on Unix. On Windows the package makes those methods raise
    // NotImplementedError (rsloop/_loop.py).
    m.add("BUILD_FDS", cfg!(unix))?;
    // Whether the `poll` driver watches fds for add_reader/add_writer: on Unix any fd
    // epoll or kqueue takes; on Windows sockets, through mio's IOCP selector (AFD polls),
    // as asyncio's selector loop there (select()) takes sockets only.
    m.add("BUILD_FD_WATCHERS", cfg!(any(unix, windows)))?;
    crate::core::handle::set_core_of(loop_::Loop::core_of);
    crate::ffi::python::probe_current_context(m.py());
    crate::ffi::python::probe_thread_ident();
    // Whether call_soon sees an empty context without copying it (tests pin where).
    m.add(
        "CONTEXT_PEEK",
        crate::ffi::python::current_context_is_empty(m.py()).is_some(),
    )?;
    #[cfg(unix)]
    crate::transports::stream::set_feed_hook(streams::feed_from_protocol);
    m.add_class::<loop_::Loop>()?;
    m.add_class::<clock::ClockState>()?;
    scheduling::install_all(m.py())?;
    m.add_class::<crate::handles::Handle>()?;
    m.add_class::<crate::handles::TimerHandle>()?;
    // Whether new handles skip PyO3's generic initializer (tests pin where).
    m.add(
        "FAST_HANDLE_NEW",
        crate::handles::Handle::probe_fast_new(m.py())?,
    )?;
    #[cfg(unix)]
    m.add_class::<crate::transports::stream::StreamCore>()?;
    #[cfg(unix)]
    m.add_function(wrap_pyfunction!(
        crate::transports::stream::set_asyncio_behaviour,
        m
    )?)?;
    #[cfg(unix)]
    m.add_class::<crate::transports::datagram::DatagramCore>()?;
    m.add_class::<streams::StreamOp>()?;
    crate::ffi::iternext::install::<streams::StreamOpNext>(m.py());
    m.add_class::<streams::StreamReaderCore>()?;
    http::register(m)?;
    m.add_function(wrap_pyfunction!(set_malloc_thresholds, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::handles::set_threadsafe_handles_wait,
        m
    )?)?;
    Ok(())
}

/// glibc's `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` (`sys::malloc`); `False` where the C
/// library is not glibc or refused a value.
#[pyfunction]
fn set_malloc_thresholds(mmap_threshold: usize, trim_threshold: usize) -> bool {
    crate::sys::malloc::set_thresholds(mmap_threshold, trim_threshold)
}
