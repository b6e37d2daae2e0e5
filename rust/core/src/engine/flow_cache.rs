//! The exact-match flow cache in front of the decision memo, as Open vSwitch keeps its
//! exact-match cache (EMC) in front of its megaflow cache: a packet whose header fields — all
//! those a decision reads — equal a recent packet's takes that packet's record in one hash and
//! one compare, where the memo takes two address lookups, two port classes and two lookups of
//! its own. Real traffic is mostly packets of connections already seen: replaying the cluster
//! benchmark's capture (40,000 distinct 5-tuples in 1M packets) through 4,096 direct-mapped
//! slots, simulated with another hash, hit 94 % of the packets.
//!
//! Direct-mapped, like the EMC: a slot per hash, a new key replacing the old, so a lookup never
//! probes further and a flood of new flows costs one store each. It lives beside the memo (per
//! thread, emptied with it when the snapshot changes) and is used only while the memo is.

use std::hash::{BuildHasher, Hash, Hasher};

use super::cow::MixState;
use super::Defaults;
use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_MALFORMED, FLAG_TRUNCATED};
use crate::engine::records::PacketVerdict;

/// Slots (a power of two): about 360 KiB of keys and records.
const SLOTS: usize = 1 << 12;

/// Every header field a decision reads (`judge::flow_of_header`) and the defaults, as five
/// words; all zeros (no IP version) is an empty slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExactKey([u64; 5]);

impl ExactKey {
    /// The key of a header the memo can judge (IPv4 or IPv6, not malformed); None otherwise.
    #[inline]
    pub fn of(h: &PacketHeader, defaults: Defaults) -> Option<ExactKey> {
        if h.flags & FLAG_MALFORMED != 0 || (h.ip_version != 4 && h.ip_version != 6) {
            return None;
        }
        let (src, dst) = (u128::from_ne_bytes(h.src_addr), u128::from_ne_bytes(h.dst_addr));
        let tail = h.sport as u64
            | (h.dport as u64) << 16
            | (h.protocol as u64) << 32
            | (h.icmp_type as u64) << 40
            | (h.icmp_code as u64) << 48
            | (h.ip_version as u64) << 56
            | ((h.flags & FLAG_HAS_PORTS != 0) as u64) << 60
            | ((h.flags & FLAG_TRUNCATED != 0) as u64) << 61
            | (defaults.pod_allow as u64) << 62
            | (defaults.host_allow as u64) << 63;
        Some(ExactKey([src as u64, (src >> 64) as u64, dst as u64, (dst >> 64) as u64, tail]))
    }

    #[inline]
    fn slot(&self) -> usize {
        (MixState.hash_one(self) >> (64 - SLOTS.trailing_zeros())) as usize
    }
}

/// Hashed word by word (a derived hash would write the array as bytes).
impl Hash for ExactKey {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.iter().for_each(|&w| h.write_u64(w));
    }
}

/// The cache: empty until first used.
#[derive(Default)]
pub struct FlowCache {
    slots: Vec<(ExactKey, PacketVerdict)>,
    /// Whether a slot may be filled (emptying an unused cache is free).
    used: bool,
}

impl FlowCache {
    #[inline]
    pub fn get(&self, key: &ExactKey) -> Option<PacketVerdict> {
        let (k, v) = self.slots.get(key.slot())?;
        (k == key).then_some(*v)
    }

    #[inline]
    pub fn put(&mut self, key: ExactKey, v: PacketVerdict) {
        if self.slots.is_empty() {
            self.slots = vec![(ExactKey::default(), PacketVerdict::default()); SLOTS];
        }
        self.used = true;
        let i = key.slot();
        self.slots[i] = (key, v);
    }

    pub fn clear(&mut self) {
        if std::mem::take(&mut self.used) {
            self.slots.fill((ExactKey::default(), PacketVerdict::default()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(sport: u16) -> PacketHeader {
        let mut h =
            PacketHeader { ip_version: 4, protocol: 6, sport, dport: 80, flags: FLAG_HAS_PORTS, ..Default::default() };
        h.src_addr[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        h.dst_addr[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        h
    }

    #[test]
    fn a_key_holds_every_field_a_decision_reads() {
        let d = Defaults::default();
        let k = |h: &PacketHeader, d: Defaults| ExactKey::of(h, d).expect("an IP header");
        let base = header(40000);
        let mut differ: Vec<PacketHeader> = Vec::new();
        for f in [
            |h: &mut PacketHeader| h.sport += 1,
            |h: &mut PacketHeader| h.dport += 1,
            |h: &mut PacketHeader| h.protocol = 17,
            |h: &mut PacketHeader| h.src_addr[15] ^= 1,
            |h: &mut PacketHeader| h.src_addr[0] ^= 1,
            |h: &mut PacketHeader| h.dst_addr[15] ^= 1,
            |h: &mut PacketHeader| h.dst_addr[3] ^= 1,
            |h: &mut PacketHeader| h.ip_version = 6,
            |h: &mut PacketHeader| h.icmp_type = 8,
            |h: &mut PacketHeader| h.icmp_code = 1,
            |h: &mut PacketHeader| h.flags = 0,
            |h: &mut PacketHeader| h.flags |= FLAG_TRUNCATED,
        ] {
            let mut h = base;
            f(&mut h);
            differ.push(h);
        }
        for h in &differ {
            assert_ne!(k(h, d), k(&base, d), "{h:?}");
        }
        for other in [Defaults { pod_allow: !d.pod_allow, ..d }, Defaults { host_allow: !d.host_allow, ..d }] {
            assert_ne!(k(&base, other), k(&base, d));
        }
        // What no decision reads does not split the key.
        let mut same = base;
        (same.ts_ns, same.pkt_len, same.ifindex, same.tcp_flags) = (7, 1500, 3, 0x12);
        assert_eq!(k(&same, d), k(&base, d));
        let mut bad = base;
        bad.flags |= FLAG_MALFORMED;
        assert_eq!(ExactKey::of(&bad, d), None);
        bad = base;
        bad.ip_version = 0;
        assert_eq!(ExactKey::of(&bad, d), None);
    }

    #[test]
    fn a_slot_holds_the_last_key_put_there() {
        let d = Defaults::default();
        let mut c = FlowCache::default();
        let keys: Vec<ExactKey> = (0..20_000).map(|p| ExactKey::of(&header(p), d).unwrap()).collect();
        assert_eq!(c.get(&keys[0]), None);
        let v = |i: usize| PacketVerdict { allow: 1, ct_state: i as u8, ..Default::default() };
        for (i, k) in keys.iter().enumerate() {
            c.put(*k, v(i));
            assert_eq!(c.get(k), Some(v(i)));
        }
        // Each key is found unless a later one took its slot, and never with another's record.
        let mut last = std::collections::HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            last.insert(k.slot(), i);
        }
        let mut found = 0;
        for (i, k) in keys.iter().enumerate() {
            let kept = last[&k.slot()] == i;
            assert_eq!(c.get(k), kept.then(|| v(i)), "key {i}");
            found += kept as usize;
        }
        assert!(found > SLOTS / 2, "{found} of {} keys kept in {SLOTS} slots", keys.len());
        c.clear();
        assert!(keys.iter().all(|k| c.get(k).is_none()));
    }
}
