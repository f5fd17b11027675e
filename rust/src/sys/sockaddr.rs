//! Socket addresses as the kernel passes them (`sockaddr_storage` + length), and the text
//! forms of IP addresses as libc writes and reads them.
//! Owns: building and taking apart `sockaddr_in`/`sockaddr_in6`/`sockaddr_un`, `inet_ntop`
//! and `inet_pton`. Not: which Python objects stand for an address (`transports/sockaddr.rs`).
//!
//! The text conversions call libc rather than std's `Display`/`FromStr`: Python's socket
//! module calls libc, and std differs on some forms (glibc writes `::1.2.3.4` where std
//! writes `::102:304`; `inet_pton` and std disagree on a few IPv4 spellings).

use std::ffi::CString;
use std::mem::{offset_of, size_of};

// POSIX, in every Unix libc; the `libc` crate leaves them out.
extern "C" {
    fn inet_ntop(
        af: libc::c_int,
        src: *const libc::c_void,
        dst: *mut libc::c_char,
        size: libc::socklen_t,
    ) -> *const libc::c_char;
    fn inet_pton(af: libc::c_int, src: *const libc::c_char, dst: *mut libc::c_void) -> libc::c_int;
}

/// Bytes before `sun_path` in a `sockaddr_un` (the family field).
const SUN_PATH_OFFSET: usize = offset_of!(libc::sockaddr_un, sun_path);
/// Capacity of `sun_path` (108 on Linux).
pub const SUN_PATH_LEN: usize = size_of::<libc::sockaddr_un>() - SUN_PATH_OFFSET;

/// A socket address of any family, as `recvfrom` fills it or `sendto` reads it.
#[derive(Clone, Copy)]
pub struct SockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

/// A socket address taken apart.
pub enum AddrView<'a> {
    /// No address (`recvfrom` from an unnamed Unix socket).
    Empty,
    /// IPv4: address bytes and port.
    Inet([u8; 4], u16),
    /// IPv6: address bytes, port, flow info, scope id.
    Inet6([u8; 16], u16, u32, u32),
    /// Unix: the `sun_path` bytes the kernel reported (may start with NUL: abstract).
    Unix(&'a [u8]),
    /// Any other family: let Python's socket module handle it.
    Other,
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is plain old data; all-zero bytes are a valid value
    // (family AF_UNSPEC).
    unsafe { std::mem::zeroed() }
}

impl SockAddr {
    /// A zeroed address with room for any family: what `recvfrom` fills (Python zeroes its
    /// buffer too, which decides how an unterminated Unix path reads).
    pub fn empty() -> Self {
        SockAddr {
            storage: zeroed_storage(),
            len: size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }

    /// `sockaddr_in` for `ip:port`.
    pub fn inet(ip: [u8; 4], port: u16) -> Self {
        let mut storage = zeroed_storage();
        // SAFETY: `sockaddr_storage` is larger than and aligned for every sockaddr type.
        let sin = unsafe {
            &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
        };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = port.to_be();
        sin.sin_addr.s_addr = u32::from_ne_bytes(ip);
        SockAddr {
            storage,
            len: size_of::<libc::sockaddr_in>() as libc::socklen_t,
        }
    }

    /// `sockaddr_in6` for `[ip]:port` with flow info and scope id (host byte order, as
    /// Python takes them).
    pub fn inet6(ip: [u8; 16], port: u16, flowinfo: u32, scope_id: u32) -> Self {
        let mut storage = zeroed_storage();
        // SAFETY: as in `inet`.
        let sin6 = unsafe {
            &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
        };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = port.to_be();
        sin6.sin6_flowinfo = flowinfo.to_be();
        sin6.sin6_addr.s6_addr = ip;
        sin6.sin6_scope_id = scope_id;
        SockAddr {
            storage,
            len: size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        }
    }

    /// `sockaddr_un` for a path, as Python builds it: a path starting with NUL is abstract
    /// (its length is exact), any other is NUL-terminated. `None` if it does not fit.
    pub fn unix(path: &[u8]) -> Option<Self> {
        let abstract_ = path.first() == Some(&0);
        if path.is_empty()
            || path.len() > SUN_PATH_LEN
            || (!abstract_ && path.len() >= SUN_PATH_LEN)
        {
            return None;
        }
        let mut storage = zeroed_storage();
        // SAFETY: as in `inet`.
        let sun = unsafe {
            &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_un>()
        };
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in sun.sun_path.iter_mut().zip(path) {
            *dst = *src as libc::c_char;
        }
        let len = SUN_PATH_OFFSET + path.len() + usize::from(!abstract_);
        Some(SockAddr {
            storage,
            len: len as libc::socklen_t,
        })
    }

    /// The address family (`AF_UNSPEC` for an empty address).
    pub fn family(&self) -> i32 {
        if self.len == 0 {
            return libc::AF_UNSPEC;
        }
        i32::from(self.storage.ss_family)
    }

    /// The address taken apart.
    pub fn view(&self) -> AddrView<'_> {
        let len = self.len as usize;
        if len == 0 {
            return AddrView::Empty;
        }
        let base = (&self.storage as *const libc::sockaddr_storage).cast::<u8>();
        match self.family() {
            libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family says the storage holds a `sockaddr_in`, and it is
                // large enough and aligned for one.
                let sin = unsafe { &*base.cast::<libc::sockaddr_in>() };
                AddrView::Inet(
                    sin.sin_addr.s_addr.to_ne_bytes(),
                    u16::from_be(sin.sin_port),
                )
            }
            libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
                // SAFETY: as above, for `sockaddr_in6`.
                let sin6 = unsafe { &*base.cast::<libc::sockaddr_in6>() };
                AddrView::Inet6(
                    sin6.sin6_addr.s6_addr,
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )
            }
            libc::AF_UNIX => {
                // SAFETY: the storage is `size_of::<sockaddr_storage>()` initialised bytes
                // (zeroed, then filled by the kernel); we read inside it only.
                let all = unsafe {
                    std::slice::from_raw_parts(base, size_of::<libc::sockaddr_storage>())
                };
                let path = &all[SUN_PATH_OFFSET..len.clamp(SUN_PATH_OFFSET, all.len())];
                if path.first() == Some(&0) {
                    return AddrView::Unix(path);
                }
                // Python reads a regular path up to its NUL (the zeroed buffer ends it).
                let rest = &all[SUN_PATH_OFFSET..];
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                AddrView::Unix(&rest[..end])
            }
            _ => AddrView::Other,
        }
    }

    /// Whether two addresses are the same bytes (a cache check, not address equality).
    pub fn same_as(&self, other: &SockAddr) -> bool {
        self.len == other.len && self.bytes() == other.bytes()
    }

    fn bytes(&self) -> &[u8] {
        let len = (self.len as usize).min(size_of::<libc::sockaddr_storage>());
        // SAFETY: the storage is fully initialised (zeroed at construction) and `len` is
        // clamped to its size.
        unsafe {
            std::slice::from_raw_parts(
                (&self.storage as *const libc::sockaddr_storage).cast::<u8>(),
                len,
            )
        }
    }

    /// Raw parts for `recvfrom`: the storage to fill and its length in/out.
    pub(super) fn raw_mut(&mut self) -> (*mut libc::sockaddr, *mut libc::socklen_t) {
        (
            (&mut self.storage as *mut libc::sockaddr_storage).cast(),
            &mut self.len,
        )
    }

    /// Raw parts for `sendto`.
    pub(super) fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        (
            (&self.storage as *const libc::sockaddr_storage).cast(),
            self.len,
        )
    }
}

/// `inet_ntop(AF_INET6, ip)`: an IPv6 address as libc (and so Python) writes it.
pub fn ipv6_text(ip: &[u8; 16]) -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: `ip` is the 16 bytes of an in6_addr; `buf` is writable for its full length,
    // more than INET6_ADDRSTRLEN (46), so inet_ntop cannot fail for lack of room.
    let res = unsafe {
        inet_ntop(
            libc::AF_INET6,
            ip.as_ptr().cast(),
            buf.as_mut_ptr(),
            buf.len() as libc::socklen_t,
        )
    };
    if res.is_null() {
        return std::net::Ipv6Addr::from(*ip).to_string();
    }
    // SAFETY: on success inet_ntop wrote a NUL-terminated string into `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// `inet_pton(AF_INET, text)`: the address bytes if libc reads `text` as IPv4.
pub fn parse_ipv4(text: &str) -> Option<[u8; 4]> {
    let c = CString::new(text).ok()?;
    let mut out = [0u8; 4];
    // SAFETY: `c` is NUL-terminated; `out` is writable for the 4 bytes of an in_addr.
    let ok = unsafe { inet_pton(libc::AF_INET, c.as_ptr(), out.as_mut_ptr().cast()) };
    (ok == 1).then_some(out)
}

/// `inet_pton(AF_INET6, text)`: the address bytes if libc reads `text` as IPv6.
pub fn parse_ipv6(text: &str) -> Option<[u8; 16]> {
    let c = CString::new(text).ok()?;
    let mut out = [0u8; 16];
    // SAFETY: `c` is NUL-terminated; `out` is writable for the 16 bytes of an in6_addr.
    let ok = unsafe { inet_pton(libc::AF_INET6, c.as_ptr(), out.as_mut_ptr().cast()) };
    (ok == 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inet_round_trips() {
        let a = SockAddr::inet([127, 0, 0, 1], 5353);
        assert_eq!(a.family(), libc::AF_INET);
        assert!(matches!(a.view(), AddrView::Inet([127, 0, 0, 1], 5353)));
        let ip = parse_ipv6("fe80::1").expect("v6");
        let b = SockAddr::inet6(ip, 1, 2, 3);
        assert!(matches!(b.view(), AddrView::Inet6(x, 1, 2, 3) if x == ip));
        assert!(!a.same_as(&b));
    }

    #[test]
    fn text_forms_are_libc_ones() {
        assert_eq!(parse_ipv4("10.0.0.1"), Some([10, 0, 0, 1]));
        assert_eq!(parse_ipv4("localhost"), None);
        assert_eq!(parse_ipv4("::1"), None);
        let compat = parse_ipv6("::1.2.3.4").expect("v6");
        assert_eq!(ipv6_text(&compat), "::1.2.3.4");
        assert_eq!(
            ipv6_text(&parse_ipv6("::ffff:127.0.0.1").expect("v6")),
            "::ffff:127.0.0.1"
        );
    }

    #[test]
    fn unix_paths_follow_python() {
        let p = SockAddr::unix(b"/tmp/x").expect("fits");
        assert!(matches!(p.view(), AddrView::Unix(b"/tmp/x")));
        let a = SockAddr::unix(b"\0abc").expect("fits");
        assert!(matches!(a.view(), AddrView::Unix(b"\0abc")));
        assert!(SockAddr::unix(&[b'a'; SUN_PATH_LEN]).is_none());
        assert!(SockAddr::unix(b"").is_none());
    }
}
