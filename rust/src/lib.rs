//! rsloop's native core: a drop-in asyncio event loop on io_uring and mio.
//! This file is wiring only: `mod` lines and the `#[pymodule]` that registers each module.

pub mod driver;
pub mod sys;
