//! Socket addresses as the kernel hands them over (`recvfrom`'s storage and length, any
//! bytes, any length) and as rsloop builds them from Python's tuples and paths: taking one
//! apart never reads outside the storage, and what was built comes back as it went in.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/sys/sockaddr.rs"]
mod sockaddr;

use sockaddr::{AddrView, SockAddr, SUN_PATH_LEN};

const STORAGE: usize = std::mem::size_of::<libc::sockaddr_storage>();

fn from_kernel(len: u32, bytes: &[u8]) -> SockAddr {
    let mut addr = SockAddr::empty();
    let (name, len_out) = addr.raw_mut();
    let n = bytes.len().min(STORAGE);
    // SAFETY: `name` points at the address's `sockaddr_storage` (STORAGE bytes, writable)
    // and `len_out` at its length, as for `recvfrom`; we copy at most STORAGE bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
        *len_out = len;
    }
    addr
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) % (2 * STORAGE as u32);
    let rest = &data[4..];

    // 1. Whatever the kernel wrote (any family, any reported length): a view, in bounds.
    let k = from_kernel(len, rest);
    let mut storage = [0u8; STORAGE];
    storage[..rest.len().min(STORAGE)].copy_from_slice(&rest[..rest.len().min(STORAGE)]);
    match k.view() {
        AddrView::Empty => assert_eq!(len, 0),
        AddrView::Inet(ip, port) => {
            assert!(len as usize >= std::mem::size_of::<libc::sockaddr_in>());
            assert_eq!(ip, storage[4..8]);
            assert_eq!(port, u16::from_be_bytes([storage[2], storage[3]]));
        }
        AddrView::Inet6(ip, port, _, _) => {
            assert!(len as usize >= std::mem::size_of::<libc::sockaddr_in6>());
            assert_eq!(ip, storage[8..24]);
            assert_eq!(port, u16::from_be_bytes([storage[2], storage[3]]));
        }
        AddrView::Unix(path) => {
            // Never past the storage (CPython's makesockaddr reads a longer reported
            // length into its own storage union the same way).
            assert!(path.len() <= STORAGE - 2, "{}", path.len());
            if path.first() == Some(&0) {
                // Abstract: exactly the reported bytes after the family, clamped.
                let end = (len as usize).clamp(2, STORAGE);
                assert_eq!(path, &storage[2..end]);
            } else {
                assert!(!path.contains(&0));
            }
        }
        AddrView::Other => {}
    }
    assert!(k.same_as(&k.clone()));

    // 2. A path as Python passes it: it fits or is refused, and reads back the same.
    match SockAddr::unix(rest) {
        None => assert!(
            rest.is_empty()
                || rest.len() > SUN_PATH_LEN
                || (rest[0] != 0 && rest.len() >= SUN_PATH_LEN)
        ),
        Some(a) => {
            assert_eq!(a.family(), libc::AF_UNIX);
            let AddrView::Unix(back) = a.view() else {
                panic!("a Unix address did not read back as one")
            };
            if rest[0] == 0 {
                assert_eq!(back, rest);
            } else {
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                assert_eq!(back, &rest[..end]);
            }
        }
    }

    // 3. IP addresses as Python passes them: the same numbers back.
    if rest.len() >= 24 {
        let port = u16::from_le_bytes([rest[0], rest[1]]);
        let v4: [u8; 4] = rest[2..6].try_into().unwrap_or_default();
        assert!(
            matches!(SockAddr::inet(v4, port).view(), AddrView::Inet(ip, p) if ip == v4 && p == port)
        );
        let v6: [u8; 16] = rest[6..22].try_into().unwrap_or_default();
        let flow = u32::from(rest[22]) << 12;
        let scope = u32::from(rest[23]);
        assert!(matches!(
            SockAddr::inet6(v6, port, flow, scope).view(),
            AddrView::Inet6(ip, p, f, s) if ip == v6 && p == port && f == flow && s == scope
        ));
    }
});
