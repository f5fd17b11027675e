//! Hash maps keyed by small integers the loop makes itself: fds and op tokens.
//!
//! std's default hasher (SipHash) guards against keys an attacker picks; ours are fd
//! numbers and counters, and SipHash cost ~20 hash rounds' worth of instructions per round
//! trip of a stream transport. One multiply (as rustc's FxHash does for a single word)
//! spreads a key over the high bits hashbrown probes with, and keeps distinct low bits
//! distinct (the factor is odd).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` for integer keys, hashed by [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Multiplicative hasher for one integer key (other input is folded in word by word).
#[derive(Clone, Copy, Default)]
pub struct IntHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl IntHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for IntHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_i32(&mut self, n: i32) {
        self.add(u64::from(n as u32));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: T) -> u64 {
        BuildHasherDefault::<IntHasher>::default().hash_one(v)
    }

    #[test]
    fn distinct_keys_hash_apart_in_low_and_high_bits() {
        let mut low = std::collections::HashSet::new();
        let mut high = std::collections::HashSet::new();
        for fd in 0..128i32 {
            let h = hash(fd);
            low.insert(h & 127);
            high.insert(h >> 57);
        }
        // Every fd in its own bucket of a 128-bucket table; the 7-bit tags well spread.
        assert_eq!(low.len(), 128);
        assert!(high.len() > 64, "{} distinct tags", high.len());
        assert_ne!(hash(1u64), hash(2u64));
        assert_eq!(hash(-1i32), hash(-1i32));
    }

    #[test]
    fn maps_work_with_negative_fds_and_large_tokens() {
        let mut m: IntMap<i32, u32> = IntMap::default();
        for fd in -5..1000 {
            m.insert(fd, fd as u32);
        }
        let mut t: IntMap<u64, u64> = IntMap::default();
        for tok in [0, 1, u64::MAX - 1, 1 << 40, 1 << 63] {
            t.insert(tok, tok ^ 7);
        }
        assert_eq!(m.len(), 1005);
        assert_eq!(m.get(&-5), Some(&(-5i32 as u32)));
        assert_eq!(m.get(&999), Some(&999));
        assert_eq!(t.get(&(1 << 63)), Some(&((1 << 63) ^ 7)));
        assert_eq!(t.get(&2), None);
    }
}
