//! Socket addresses <-> the Python objects the `socket` module uses for them.
//! Owns: `makesockaddr` for AF_INET, AF_INET6 and AF_UNIX, and the common forms of
//! `getsockaddrarg` for them (numeric host text, int port; a Unix path). Not: the rarer
//! forms (host names, `''`, `'<broadcast>'`, scoped `'fe80::1%eth0'` text, int subclasses,
//! other families): [`from_python`] returns `None` for those and the caller hands the
//! address to Python's `socket.sendto`, which parses (or rejects) it exactly as asyncio sees.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};

use crate::sys::sockaddr::{self, AddrView, SockAddr};

/// The Python object `socket.recvfrom` returns for `addr` (Python's `makesockaddr`):
/// `(host, port)`, `(host, port, flowinfo, scope_id)`, a path `str`, `bytes` for a Linux
/// abstract name, `None` for no address. `None` also for a family Python would describe
/// otherwise; callers only pass addresses of the three families above.
pub fn to_python<'py>(py: Python<'py>, addr: &SockAddr) -> PyResult<Bound<'py, PyAny>> {
    Ok(match addr.view() {
        AddrView::Inet(ip, port) => (Ipv4Addr::from(ip).to_string(), port)
            .into_pyobject(py)?
            .into_any(),
        AddrView::Inet6(ip, port, flowinfo, scope_id) => {
            (sockaddr::ipv6_text(&ip), port, flowinfo, scope_id)
                .into_pyobject(py)?
                .into_any()
        }
        // Linux abstract namespace: the exact name, leading NUL included, as bytes.
        AddrView::Unix(path) if path.first() == Some(&0) => PyBytes::new(py, path).into_any(),
        // A path: decoded with the filesystem encoding (PyUnicode_DecodeFSDefault).
        AddrView::Unix(path) => OsStr::from_bytes(path).into_pyobject(py)?.into_any(),
        AddrView::Empty | AddrView::Other => py.None().into_bound(py),
    })
}

/// The kernel address for `obj` on a socket of `family`, if it is one of the forms parsed
/// here; `None` sends the caller to Python's `socket.sendto`.
pub fn from_python(family: i32, obj: &Bound<'_, PyAny>) -> Option<SockAddr> {
    match family {
        libc::AF_INET => {
            let t = obj.cast_exact::<PyTuple>().ok()?;
            if t.len() != 2 {
                return None;
            }
            let ip = sockaddr::parse_ipv4(numeric_host(&t.get_item(0).ok()?)?)?;
            Some(SockAddr::inet(ip, port(&t.get_item(1).ok()?)?))
        }
        libc::AF_INET6 => {
            let t = obj.cast_exact::<PyTuple>().ok()?;
            if !(2..=4).contains(&t.len()) {
                return None;
            }
            let host_obj = t.get_item(0).ok()?;
            let host = numeric_host(&host_obj)?;
            // Python resolves scoped text ("fe80::1%eth0") through getaddrinfo.
            if host.contains('%') {
                return None;
            }
            let ip = sockaddr::parse_ipv6(host)?;
            let port = port(&t.get_item(1).ok()?)?;
            let flowinfo = match t.get_item(2) {
                Ok(v) => exact_u32(&v).filter(|f| *f <= 0xfffff)?,
                Err(_) => 0,
            };
            let scope_id = match t.get_item(3) {
                Ok(v) => exact_u32(&v)?,
                Err(_) => 0,
            };
            Some(SockAddr::inet6(ip, port, flowinfo, scope_id))
        }
        libc::AF_UNIX => {
            if let Ok(b) = obj.cast_exact::<PyBytes>() {
                return SockAddr::unix(b.as_bytes());
            }
            // str: encoded with the filesystem encoding (PyUnicode_EncodeFSDefault).
            let s = obj.cast_exact::<PyString>().ok()?;
            let path: std::ffi::OsString = s.extract().ok()?;
            SockAddr::unix(path.as_bytes())
        }
        _ => None,
    }
}

/// An exact `str` host that is plain ASCII (Python's idna converter passes those through
/// unchanged; anything else is encoded and resolved by Python).
fn numeric_host<'a>(obj: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    let s = obj.cast_exact::<PyString>().ok()?.to_str().ok()?;
    (!s.is_empty() && s.is_ascii()).then_some(s)
}

fn port(obj: &Bound<'_, PyAny>) -> Option<u16> {
    obj.cast_exact::<PyInt>().ok()?.extract::<u16>().ok()
}

fn exact_u32(obj: &Bound<'_, PyAny>) -> Option<u32> {
    obj.cast_exact::<PyInt>().ok()?.extract::<u32>().ok()
}
