//! A fast hasher for the index's own dense `u32` slot numbers.
//!
//! Slots are handed out by the index itself (never chosen by a caller or the network), so a
//! keyed hash buys nothing here; label strings keep std's keyed SipHash.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci multiply, then fold the high bits down: hashbrown uses the top 7 bits as the
        // control byte and the low bits as the bucket, and both need to vary.
        let h = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

pub type SlotBuild = BuildHasherDefault<SlotHasher>;
pub type SlotSet = HashSet<u32, SlotBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_slots_spread_over_buckets() {
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for i in 0..1024u32 {
            let mut h = SlotHasher::default();
            h.write_u32(i);
            let x = h.finish();
            low.insert(x & 1023);
            top.insert(x >> 57);
        }
        assert!(low.len() > 600, "low bits collide: {}", low.len());
        assert_eq!(top.len(), 128, "top 7 bits do not vary");
    }
}
