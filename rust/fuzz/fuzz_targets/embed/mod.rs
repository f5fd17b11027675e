//! An interpreter inside the fuzz target, for the native surfaces that only exist with
//! one (fastcall methods, the datagram transport, the StreamReader): the extension's own
//! code, built into this binary with ASan and coverage like the rest, registered as
//! `rsloop._rsloop` the way its `#[pymodule]` does, under the `rsloop` package from this
//! checkout. Python-side harnesses live in `rust/fuzz/harness/`.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyModule};

/// The harness module's `run` function, imported once (an interpreter per process).
/// `setup` runs first, once (a target's own native helpers for its harness).
pub fn harness(name: &'static str, setup: fn(Python<'_>)) -> &'static Py<PyAny> {
    static RUN: OnceLock<(&'static str, Py<PyAny>)> = OnceLock::new();
    let (loaded, run) = RUN.get_or_init(|| (name, load(name, setup)));
    assert_eq!(*loaded, name, "one harness per process");
    run
}

fn load(name: &str, setup: fn(Python<'_>)) -> Py<PyAny> {
    Python::initialize();
    Python::attach(|py| {
        let fuzz = concat!(env!("CARGO_MANIFEST_DIR"));
        let root = format!("{fuzz}/../..");
        let sys = py.import("sys").expect("sys");
        let path = sys.getattr("path").expect("sys.path");
        path.call_method1("insert", (0, format!("{fuzz}/harness")))
            .expect("path");
        path.call_method1("insert", (0, root)).expect("path");
        // What `#[pymodule] fn _rsloop` does, under the name the package imports.
        let m = PyModule::new(py, "rsloop._rsloop").expect("module");
        m.add("__version__", "fuzz").expect("version");
        _rsloop::py::register(&m).expect("register the native module");
        sys.getattr("modules")
            .and_then(|mods| mods.set_item("rsloop._rsloop", &m))
            .expect("sys.modules");
        let rsloop = py
            .import("rsloop")
            .expect("import rsloop from this checkout");
        let native = rsloop
            .getattr("_backend")
            .and_then(|b| b.getattr("NATIVE_ERROR"))
            .expect("rsloop._backend.NATIVE_ERROR");
        assert!(
            native.is_none(),
            "rsloop did not take the native module: {native}"
        );
        setup(py);
        py.import(name)
            .and_then(|h| h.getattr("run"))
            .unwrap_or_else(|e| panic!("harness {name}: {e}"))
            .unbind()
    })
}

/// Runs the harness on one input; a Python exception fails the input, with its traceback.
#[allow(dead_code)] // each target uses one of the two
pub fn run(name: &'static str, data: &[u8]) {
    run_with(name, data, |_| {});
}

/// [`run`], with `setup` run once before the harness is imported.
pub fn run_with(name: &'static str, data: &[u8], setup: fn(Python<'_>)) {
    let run = harness(name, setup);
    Python::attach(|py| {
        if let Err(e) = run.call1(py, (PyBytes::new(py, data),)) {
            e.print(py);
            panic!("harness {name} failed: {e}");
        }
    });
}
