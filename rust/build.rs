//! Build script: cfg aliases only.
//! `uring` = Linux with the "uring" feature and without "portable", plus PyO3's interpreter
//! cfgs; nothing else.

fn main() {
    // Py_GIL_DISABLED and friends, as PyO3 sees the target interpreter.
    pyo3_build_config::use_pyo3_cfgs();
    println!("cargo::rustc-check-cfg=cfg(uring)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let feature = |name: &str| std::env::var_os(format!("CARGO_FEATURE_{name}")).is_some();
    // "portable" compiles what macOS runs, which has no io_uring.
    if linux && feature("URING") && !feature("PORTABLE") {
        println!("cargo::rustc-cfg=uring");
    }
}
