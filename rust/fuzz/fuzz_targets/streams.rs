//! The native StreamReader's buffer logic (`rust/src/py/streams/`: `readuntil`,
//! `readexactly`, `readline`, `read`, limits, separators split across feeds, waits that
//! later feeds complete) against asyncio's own StreamReader, operation by operation, in an
//! interpreter embedded in this target (`embed`); the program and the oracle are
//! `rust/fuzz/harness/streams.py`. Any difference, exception or crash fails the input.
#![no_main]

mod embed;

libfuzzer_sys::fuzz_target!(|data: &[u8]| embed::run("streams", data));
