//! Keys numbered in order of arrival, found through a flat open-addressing table of 8-byte
//! slots (a fingerprint of the key's hash and its number), so that a lookup can be asked for
//! ahead of time: [`KeyTable::prefetch_slot`] for a record some places ahead, then
//! [`KeyTable::peek`] for its number once the slot is in cache, so the caller fetches what it
//! keeps per key. Records of many keys come in no order: each lookup would otherwise wait for
//! memory, one at a time.
//!
//! A hint is only a hint: the lookup itself ([`KeyTable::find_or_insert`]) compares whole keys.

use crate::prefetch::prefetch;

/// A key with a 64-bit hash (positions from its low bits, fingerprints from its high ones).
pub trait TableKey: Copy + Eq {
    fn hash64(&self) -> u64;
}

pub struct KeyTable<K> {
    /// 0: empty; else the hash's high 32 bits, then the key's number plus one.
    slots: Vec<u64>,
    mask: usize,
    /// By number.
    keys: Vec<K>,
}

const MIN_SLOTS: usize = 1024;

impl<K: TableKey> Default for KeyTable<K> {
    fn default() -> Self {
        KeyTable { slots: vec![0; MIN_SLOTS], mask: MIN_SLOTS - 1, keys: Vec::new() }
    }
}

impl<K: TableKey> KeyTable<K> {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    #[inline]
    fn fingerprint(hash: u64) -> u64 {
        hash & 0xffff_ffff_0000_0000
    }

    /// Hint: the slot where a key of `hash` is looked for first will be read soon.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        prefetch(&self.slots[hash as usize & self.mask]);
    }

    /// The number of the key the first slot of `hash` holds if its fingerprint is `hash`'s
    /// (probably that key: a hint, to fetch what is kept per key), its key asked for too.
    #[inline]
    pub fn peek(&self, hash: u64) -> Option<usize> {
        let slot = self.slots[hash as usize & self.mask];
        if slot != 0 && slot & 0xffff_ffff_0000_0000 == Self::fingerprint(hash) {
            let i = (slot as u32 - 1) as usize;
            let key = &self.keys[i];
            prefetch(key);
            // a key may straddle two cache lines: its last byte's too
            prefetch((key as *const K as *const u8).wrapping_add(std::mem::size_of::<K>() - 1));
            return Some(i);
        }
        None
    }

    /// `key`'s number (`hash`: its `hash64`), and whether it was added now (numbered next).
    #[inline]
    pub fn find_or_insert(&mut self, key: &K, hash: u64) -> (usize, bool) {
        let fp = Self::fingerprint(hash);
        let mut at = hash as usize & self.mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                break;
            }
            if slot & 0xffff_ffff_0000_0000 == fp {
                let i = (slot as u32 - 1) as usize;
                if self.keys[i] == *key {
                    return (i, false);
                }
            }
            at = (at + 1) & self.mask;
        }
        let i = self.keys.len();
        assert!(i < u32::MAX as usize, "at most 2^32 - 1 keys");
        self.keys.push(*key);
        self.slots[at] = fp | (i as u64 + 1);
        if self.keys.len() * 2 > self.slots.len() {
            self.grow();
        }
        (i, true)
    }

    /// Twice the slots (kept at most half full: probes stay short).
    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        self.slots = vec![0; size];
        self.mask = size - 1;
        for (i, k) in self.keys.iter().enumerate() {
            let hash = k.hash64();
            let mut at = hash as usize & self.mask;
            while self.slots[at] != 0 {
                at = (at + 1) & self.mask;
            }
            self.slots[at] = Self::fingerprint(hash) | (i as u64 + 1);
        }
    }

    /// Forgets every key (the slots stay allocated at their size).
    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    struct K(u64, u64);

    impl TableKey for K {
        fn hash64(&self) -> u64 {
            // a poor hash on purpose: many equal fingerprints and collisions
            (self.0 % 7) << 32 | (self.0 % 13)
        }
    }

    #[test]
    fn keys_numbered_in_arrival_order_and_found_again() {
        let mut t = KeyTable::default();
        let keys: Vec<K> = (0..5000u64).map(|i| K(i * 7919 % 5003, i)).collect();
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(t.find_or_insert(k, k.hash64()), (n, true));
        }
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(t.find_or_insert(k, k.hash64()), (n, false));
            if let Some(i) = t.peek(k.hash64()) {
                assert!(i < keys.len());
            }
        }
        assert_eq!(t.len(), 5000);
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.find_or_insert(&keys[9], keys[9].hash64()), (0, true));
    }
}
