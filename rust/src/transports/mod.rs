//! Transports: the per-packet halves of asyncio transports, in Rust.
//! Owns: read/write paths, write queues, flow control. Not: choosing a backend, the
//! per-connection glue (`rsloop/_transports.py`, `rsloop/_net.py`).

#[cfg(unix)]
pub mod addrs;
#[cfg(unix)]
pub(crate) mod common;
#[cfg(unix)]
pub mod datagram;
#[cfg(unix)]
pub mod sockaddr;
#[cfg(unix)]
pub mod stream;
