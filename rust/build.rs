//! Build script: cfg aliases only.
//! `uring` = Linux with the "uring" feature; nothing else happens here.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(uring)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && std::env::var_os("CARGO_FEATURE_URING").is_some() {
        println!("cargo::rustc-cfg=uring");
    }
}
