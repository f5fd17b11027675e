//! Build script: cfg aliases only.
//! `uring` = Linux with the "uring" feature, plus PyO3's interpreter cfgs; nothing else.

fn main() {
    // Py_GIL_DISABLED and friends, as PyO3 sees the target interpreter.
    pyo3_build_config::use_pyo3_cfgs();
    println!("cargo::rustc-check-cfg=cfg(uring)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && std::env::var_os("CARGO_FEATURE_URING").is_some() {
        println!("cargo::rustc-cfg=uring");
    }
}
