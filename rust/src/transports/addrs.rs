//! The datagram transport's address cache: the Python objects of the last few peers.
//! Owns: remembering which Python object stands for which kernel address, so a repeat
//! sender's address is not rebuilt (`str` + `int` + `tuple`) for every datagram and a
//! reply to it (`sendto(data, addr)` with the object just received) is not parsed again.
//! Not: building or parsing those objects (`transports/sockaddr.rs`).
//!
//! Python makes a new tuple per `recvfrom`; handing out an equal, immutable one again is
//! indistinguishable except by identity. Only objects this module was given by the
//! receive path (made by `transports/sockaddr.rs`) or that parsed natively (exact `tuple`/`str`/
//! `bytes` of `str` and `int`) are kept, so every cached object is immutable.

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::sys::sockaddr::SockAddr;

/// Peers remembered: more than the clients of a typical request/response server's burst.
const RX_SLOTS: usize = 16;

/// Recent peers' addresses, both ways.
#[derive(Default)]
pub struct AddrCache {
    /// Received addresses and their Python objects, replaced round-robin.
    rx: Vec<(SockAddr, Py<PyAny>)>,
    next: usize,
    /// The last address object given to `sendto` and its kernel form (kept apart from
    /// `rx`: `('::1', 5)` and `('::1', 5, 0, 0)` are one address but two objects, and the
    /// receive path must hand out the canonical one).
    tx: Option<(SockAddr, Py<PyAny>)>,
}

impl AddrCache {
    /// The Python object already made for a received `addr`.
    pub fn object_for(&self, py: Python<'_>, addr: &SockAddr) -> Option<Py<PyAny>> {
        self.rx
            .iter()
            .find(|(sa, _)| sa.same_as(addr))
            .map(|(_, obj)| obj.clone_ref(py))
    }

    /// Remembers a received address; returns the object it evicts (drop it outside the
    /// state cell).
    pub fn remember_received(&mut self, addr: SockAddr, obj: Py<PyAny>) -> Option<Py<PyAny>> {
        if self.rx.len() < RX_SLOTS {
            self.rx.push((addr, obj));
            return None;
        }
        let slot = self.next % RX_SLOTS;
        self.next = slot + 1;
        Some(std::mem::replace(&mut self.rx[slot], (addr, obj)).1)
    }

    /// The kernel address of an object seen before (by identity).
    pub fn sockaddr_for(&self, obj: &Bound<'_, PyAny>) -> Option<SockAddr> {
        self.rx
            .iter()
            .chain(self.tx.iter())
            .find(|(_, o)| o.is(obj))
            .map(|(sa, _)| *sa)
    }

    /// Remembers the last address object given to `sendto`; returns the one it replaces.
    pub fn remember_sent(&mut self, addr: SockAddr, obj: Py<PyAny>) -> Option<Py<PyAny>> {
        self.tx.replace((addr, obj)).map(|(_, o)| o)
    }

    /// Everything, to drop outside the state cell.
    pub fn take(&mut self) -> AddrCache {
        std::mem::take(self)
    }

    /// Reports the cached objects to the garbage collector.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for (_, obj) in self.rx.iter().chain(self.tx.iter()) {
            visit.call(obj)?;
        }
        Ok(())
    }
}
