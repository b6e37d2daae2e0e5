//! Copy-on-write containers for engine snapshots: a change copies the one chunk or shard it
//! touches and shares every other with the snapshots already handed out.
//!
//! - [`ChunkVec`]: a vector indexed by dense `u32` ids, in `Arc`'d chunks of 64 slots.
//! - [`ShardedMap`]: a hash map in 64 `Arc`'d shards, chosen by the key's hash, each an
//!   open-addressing table whose slot a batch can prefetch.
//!
//! Cloning either clones only the outer table of `Arc`s (a snapshot of 10,000 endpoints is
//! 157 reference-count increments); lookups cost one extra indirection over a flat table.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use hashbrown::HashMap;

const CHUNK_BITS: u32 = 6;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Dense `u32`-indexed slots in shared chunks.
#[derive(Clone)]
pub struct ChunkVec<T: Clone> {
    chunks: Vec<Arc<Vec<Option<T>>>>,
    len: usize,
}

impl<T: Clone> Default for ChunkVec<T> {
    fn default() -> Self {
        ChunkVec { chunks: Vec::new(), len: 0 }
    }
}

impl<T: Clone> ChunkVec<T> {
    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        let chunk = self.chunks.get((i >> CHUNK_BITS) as usize)?;
        chunk[(i as usize) & (CHUNK - 1)].as_ref()
    }

    /// Hint: asks for the line of slot `i`.
    #[inline(always)]
    pub fn prefetch(&self, i: u32) {
        if let Some(chunk) = self.chunks.get((i >> CHUNK_BITS) as usize) {
            crate::prefetch::prefetch_ref(&chunk[(i as usize) & (CHUNK - 1)]);
        }
    }

    /// Sets slot `i` (growing as needed); copies its chunk if a snapshot still shares it.
    pub fn set(&mut self, i: u32, value: Option<T>) {
        let c = (i >> CHUNK_BITS) as usize;
        while self.chunks.len() <= c {
            self.chunks.push(Arc::new(vec![None; CHUNK]));
        }
        let slot = &mut Arc::make_mut(&mut self.chunks[c])[(i as usize) & (CHUNK - 1)];
        match (slot.is_some(), value.is_some()) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        *slot = value;
    }

    /// A mutable reference to slot `i`'s value (copying its chunk if shared).
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let c = (i >> CHUNK_BITS) as usize;
        let chunk = self.chunks.get_mut(c)?;
        Arc::make_mut(chunk)[(i as usize) & (CHUNK - 1)].as_mut()
    }

    /// Occupied slots.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk.iter().enumerate().filter_map(move |(j, v)| v.as_ref().map(|v| (((c << CHUNK_BITS) + j) as u32, v)))
        })
    }

    /// Chunks this table shares with `other` (tests show snapshots share what did not change).
    pub fn shared_chunks(&self, other: &ChunkVec<T>) -> usize {
        self.chunks.iter().zip(&other.chunks).filter(|(a, b)| Arc::ptr_eq(a, b)).count()
    }

    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

/// A fast, fixed hasher for the engine's small keys (addresses, ids). Keys in the tables are
/// the inventory's, not an attacker's; lookups of arbitrary keys stay O(1) on average.
#[derive(Clone, Copy, Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 32;
        x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
        x ^= x >> 32;
        x
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64)
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
}

#[derive(Clone, Copy, Default)]
pub struct MixState;

impl BuildHasher for MixState {
    type Hasher = MixHasher;
    #[inline]
    fn build_hasher(&self) -> MixHasher {
        MixHasher(0x243f_6a88_85a3_08d3)
    }
}

pub type FastMap<K, V> = HashMap<K, V, MixState>;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;

/// A hash map in shared shards, each an open-addressing table of its own (linear probing, at
/// most half full), so that a lookup is one hash and, usually, one cache line, and a batch can
/// ask for its keys' lines ahead of the lookups ([`ShardedMap::prefetch`]): hashbrown's
/// tables give no address to prefetch before the probe.
#[derive(Clone)]
pub struct ShardedMap<K: Clone + Hash + Eq, V: Clone> {
    shards: Vec<Arc<Shard<K, V>>>,
    len: usize,
}

/// One shard: slots of a power-of-two count, a key at its hash's slot or the first free one
/// after it.
#[derive(Clone)]
struct Shard<K, V> {
    slots: Box<[Option<(K, V)>]>,
    len: usize,
}

impl<K: Clone + Hash + Eq, V: Clone> Shard<K, V> {
    fn empty() -> Shard<K, V> {
        Shard { slots: Box::new([]), len: 0 }
    }

    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len().wrapping_sub(1))
    }

    #[inline]
    fn get(&self, h: u64, key: &K) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        loop {
            match &self.slots[i] {
                None => return None,
                Some((k, v)) if k == key => return Some(v),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// The slot holding `key`, or the free one where it would go.
    fn find(&self, h: u64, key: &K) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(h);
        loop {
            match &self.slots[i] {
                Some((k, _)) if k != key => i = (i + 1) & mask,
                _ => return i,
            }
        }
    }

    fn insert(&mut self, h: u64, key: K, value: V) -> bool {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let i = self.find(h, &key);
        let new = self.slots[i].is_none();
        self.slots[i] = Some((key, value));
        self.len += new as usize;
        new
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(8);
        let old = std::mem::replace(&mut self.slots, (0..cap).map(|_| None).collect());
        for (k, v) in old.into_vec().into_iter().flatten() {
            let i = self.find(MixState.hash_one(&k), &k);
            self.slots[i] = Some((k, v));
        }
    }

    fn remove(&mut self, h: u64, key: &K) -> Option<V> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.find(h, key);
        let (_, v) = self.slots[i].take()?;
        self.len -= 1;
        // Backward shift: a key after the hole that may not stay past it moves into it.
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let Some((k, _)) = &self.slots[j] else { break };
            let home = self.home(MixState.hash_one(k));
            // Whether `home` lies cyclically in (i, j]: then the key stays where it is.
            let stays = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !stays {
                self.slots[i] = self.slots[j].take();
                i = j;
            }
        }
        Some(v)
    }
}

impl<K: Clone + Hash + Eq, V: Clone> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap { shards: (0..SHARDS).map(|_| Arc::new(Shard::empty())).collect(), len: 0 }
    }
}

impl<K: Clone + Hash + Eq, V: Clone> ShardedMap<K, V> {
    /// The key's hash: its shard from the high bits, its slot from the low ones.
    #[inline(always)]
    pub fn hash(key: &K) -> u64 {
        MixState.hash_one(key)
    }

    #[inline(always)]
    fn shard(&self, h: u64) -> &Shard<K, V> {
        &self.shards[(h >> (64 - SHARD_BITS)) as usize]
    }

    #[inline]
    pub fn get(&self, key: &K) -> Option<&V> {
        self.get_hashed(Self::hash(key), key)
    }

    /// [`ShardedMap::get`] with the key's hash ([`ShardedMap::hash`]) already made.
    #[inline]
    pub fn get_hashed(&self, h: u64, key: &K) -> Option<&V> {
        self.shard(h).get(h, key)
    }

    /// Hint: asks for the line of the slot a lookup of hash `h` reads first.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        let s = self.shard(h);
        if !s.slots.is_empty() {
            crate::prefetch::prefetch_ref(&s.slots[s.home(h)]);
        }
    }

    pub fn insert(&mut self, key: K, value: V) {
        let h = Self::hash(&key);
        let shard = Arc::make_mut(&mut self.shards[(h >> (64 - SHARD_BITS)) as usize]);
        if shard.insert(h, key, value) {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let h = Self::hash(key);
        let s = (h >> (64 - SHARD_BITS)) as usize;
        self.shards[s].get(h, key)?;
        let out = Arc::make_mut(&mut self.shards[s]).remove(h, key);
        self.len -= 1;
        out
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.shards.iter().flat_map(|s| s.slots.iter().flatten().map(|(k, v)| (k, v)))
    }

    pub fn shared_shards(&self, other: &ShardedMap<K, V>) -> usize {
        self.shards.iter().zip(&other.shards).filter(|(a, b)| Arc::ptr_eq(a, b)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_vec_copies_only_the_touched_chunk() {
        let mut a: ChunkVec<u32> = ChunkVec::default();
        for i in 0..1000 {
            a.set(i, Some(i * 2));
        }
        let snapshot = a.clone();
        a.set(5, Some(7));
        a.set(900, None);
        assert_eq!(snapshot.get(5), Some(&10));
        assert_eq!(a.get(5), Some(&7));
        assert_eq!(a.get(900), None);
        assert_eq!(snapshot.get(900), Some(&1800));
        assert_eq!(a.len(), 999);
        assert_eq!(a.shared_chunks(&snapshot), a.chunk_count() - 2);
        assert_eq!(a.iter().count(), 999);
        assert_eq!(a.get(5000), None);
    }

    #[test]
    fn sharded_map_copies_only_the_touched_shard() {
        let mut m: ShardedMap<u128, u32> = ShardedMap::default();
        for i in 0..10_000u128 {
            m.insert(i, i as u32);
        }
        let snapshot = m.clone();
        m.insert(77, 1);
        assert_eq!(m.remove(&78), Some(78));
        assert_eq!(m.remove(&1_000_000), None);
        assert_eq!(snapshot.get(&77), Some(&77));
        assert_eq!(m.get(&77), Some(&1));
        assert_eq!(m.len(), 9_999);
        assert!(m.shared_shards(&snapshot) >= SHARDS - 2);
    }

    /// Inserts and removals in any order leave what a std map holds (the backward shift of a
    /// removal keeps every key reachable from its slot).
    #[test]
    fn sharded_map_agrees_with_a_std_map() {
        let mut m: ShardedMap<u64, u64> = ShardedMap::default();
        let mut want = std::collections::HashMap::new();
        let mut x = 1u64;
        for step in 0..200_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Few distinct keys, so inserts replace and removals find them.
            let key = (x >> 33) % 3_000;
            if (x >> 13) % 3 == 0 {
                assert_eq!(m.remove(&key), want.remove(&key), "step {step}");
            } else {
                m.insert(key, step);
                want.insert(key, step);
            }
            assert_eq!(m.len(), want.len());
        }
        for key in 0..3_000u64 {
            assert_eq!(m.get(&key), want.get(&key), "key {key}");
        }
        assert_eq!(m.iter().count(), want.len());
    }
}
