//! Hash maps keyed by numbers Weir chooses itself (buffer keys, object
//! addresses), not by users: a multiplicative hash spreads them well without
//! SipHash's cost, which admission would otherwise pay on every lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from keys Weir chose.
pub(crate) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, key: usize) {
        self.write_u64(key as u64);
    }
}
