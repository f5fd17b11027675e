//! IP address text as libc reads and writes it (what Python's socket module does, and
//! what rsloop's datagram and socket paths use): any text parses or is refused without
//! harm, and every address written as text reads back as the same address.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/sys/sockaddr.rs"]
mod sockaddr;

use sockaddr::{ipv6_text, parse_ipv4, parse_ipv6};

fuzz_target!(|data: &[u8]| {
    // Any 16 bytes are an IPv6 address: its text reads back as it.
    if data.len() >= 16 {
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&data[..16]);
        let text = ipv6_text(&ip);
        assert_eq!(parse_ipv6(&text), Some(ip), "{text}");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(v4) = parse_ipv4(text) {
        // What libc reads as IPv4, written back in dotted quad, reads the same.
        let dotted = std::net::Ipv4Addr::from(v4).to_string();
        assert_eq!(parse_ipv4(&dotted), Some(v4), "{text:?}");
    }
    if let Some(v6) = parse_ipv6(text) {
        let back = ipv6_text(&v6);
        assert_eq!(parse_ipv6(&back), Some(v6), "{text:?} -> {back}");
        // std agrees on the number, whatever spelling libc chose.
        let std_ip: std::net::Ipv6Addr = back.parse().unwrap_or_else(|e| panic!("{back}: {e}"));
        assert_eq!(std_ip.octets(), v6, "{back}");
    }
});
