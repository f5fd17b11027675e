//! The monotonic clock behind `loop.time()`: the same clock as Python's `time.monotonic()`.

/// Seconds on `CLOCK_MONOTONIC`, which is what `time.monotonic()` reads on Linux and the BSDs.
#[cfg(all(unix, not(target_vendor = "apple"), not(feature = "portable")))]
pub fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on these
    // platforms, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Elsewhere `time.monotonic()` uses a platform clock (mach_absolute_time,
/// QueryPerformanceCounter) that Rust does not expose with the same epoch: ask Python (as
/// the "portable" build does on Linux too, to run this path).
#[cfg(any(not(all(unix, not(target_vendor = "apple"))), feature = "portable"))]
pub fn monotonic() -> f64 {
    use pyo3::prelude::*;
    Python::attach(|py| {
        py.import("time")
            .and_then(|t| t.call_method0("monotonic"))
            .and_then(|v| v.extract::<f64>())
            .unwrap_or(0.0)
    })
}

/// asyncio's `_clock_resolution` (`time.get_clock_info('monotonic').resolution`).
#[cfg(all(unix, not(target_vendor = "apple"), not(feature = "portable")))]
pub fn resolution() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as above, `ts` is valid and writable.
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// See the unix version; elsewhere ask Python once per loop.
#[cfg(any(not(all(unix, not(target_vendor = "apple"))), feature = "portable"))]
pub fn resolution() -> f64 {
    use pyo3::prelude::*;
    Python::attach(|py| {
        py.import("time")
            .and_then(|t| t.call_method1("get_clock_info", ("monotonic",)))
            .and_then(|i| i.getattr("resolution"))
            .and_then(|v| v.extract::<f64>())
            .unwrap_or(1e-9)
    })
}
