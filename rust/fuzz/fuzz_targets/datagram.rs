//! Datagram batches (`rust/src/transports/datagram.rs`: `recvfrom` batches, `sendto` and
//! its queue, address handling, EMSGSIZE and the write-buffer count) against asyncio's
//! selector loop doing the same program on its own socket pair, in an interpreter
//! embedded in this target (`embed`); the program and the oracle are
//! `rust/fuzz/harness/datagram.py`. Any difference, exception or crash fails the input.
#![no_main]

mod embed;

libfuzzer_sys::fuzz_target!(|data: &[u8]| embed::run("datagram", data));
