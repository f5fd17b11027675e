//! rsloop's native core: a drop-in asyncio event loop on io_uring and mio.
//! This file is wiring only: `mod` lines and the `#[pymodule]` that registers each module.

pub mod core;
pub mod driver;
pub mod errors;
pub mod ffi;
pub mod handles;
pub mod http;
pub mod intmap;
pub mod py;
pub mod sys;
pub mod timers;
pub mod transports;

use pyo3::prelude::*;

/// Opt-in (`--features mimalloc`): Rust-side allocations (queues, write buffers, ops) from
/// mimalloc instead of the system allocator. Off by default; see docs/performance.md.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The private native module, re-exported by the `rsloop` package.
/// `gil_used = true`: on a free-threaded CPython (3.14t) the interpreter re-enables the GIL
/// when it imports this module (with a RuntimeWarning naming it), since nothing here has
/// been argued or tested thread-safe without the GIL (docs/platforms.md).
#[pymodule(gil_used = true)]
fn _rsloop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    py::register(m)
}
