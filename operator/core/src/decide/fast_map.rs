//! [`FastMap`]: the hash map for names the program itself puts in.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: the cycle hashes many short names; SipHash's protection against hash flooding is
/// not needed for names the cycle itself puts in.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A hash map with [`Fnv`] hashing, for maps keyed by short names of the world (jobs, nodes,
/// instances) that the program itself puts in.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
