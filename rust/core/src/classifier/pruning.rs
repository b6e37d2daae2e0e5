//! Tuple pruning: which of TupleMerge's tables could hold a rule matching a packet, found before
//! any table is probed.
//!
//! The idea is the pruned tuple space search of Srinivasan, Suri and Varghese ("Packet
//! classification using tuple space search", SIGCOMM 1999, §4): look each field up on its own,
//! learn which tuples have a rule covering the packet's value in that field, and probe only the
//! tuples every field agrees on. Here a field's values are cut into *atoms*, runs of values over
//! which the set of tables with a covering rule does not change (the elementary intervals of the
//! rules' ranges), each with the bitmap of those tables; a lookup ANDs five bitmaps (source and
//! destination address, source and destination port, protocol) and TupleMerge skips every table
//! whose bit is clear. On wildcard-heavy sets (ClassBench ipc1, fw1) most tables a lookup used
//! to visit hold no rule near the packet in some field.
//!
//! Addresses are pruned in the IPv4-mapped space only (ClassBench and most policy are IPv4): an
//! address's atom is found through a directory of its top 16 bits and a short search among the
//! atoms starting inside that /16. A key outside IPv4-mapped space is pruned on ports and
//! protocol alone.
//!
//! The bitmaps are over table uids (stable while a table lives), 128 of them; a table with a
//! higher uid is always visited. Updates keep the index exact-or-wider without building it
//! again: a rule inserted after the build adds its table's bit to the atoms its ranges overlap
//! (a whole field: to the field's `wide` tables), or, when a range overlaps many atoms, marks the
//! table *dirty*, probed for every key; a removal leaves bits that are merely too wide. The index
//! is built again, for exactness, after many updates (`TupleMerge`).

/// Table bits: uids 0..128.
pub(super) type Mask = [u64; 2];

const NONE: Mask = [0, 0];
const ALL: Mask = [u64::MAX, u64::MAX];

/// Uids past this are always visited.
pub(super) const TRACKED: u32 = 128;

/// Where a table's bit is: word and bit (`uid < TRACKED`).
#[inline]
fn bit_of(uid: u32) -> (usize, u64) {
    ((uid / 64) as usize, 1u64 << (uid % 64))
}

/// The tables a lookup probes: bit `uid` set (tables past `TRACKED` are always probed).
pub(super) type Candidates = Mask;

/// One rule's extent, by field, for building the index.
#[derive(Clone, Copy, Debug)]
pub(super) struct Extent {
    pub uid: u32,
    /// IPv4 ranges (inclusive) of the source and destination, `None` when the prefix holds no
    /// IPv4-mapped address.
    pub src: Option<(u32, u32)>,
    pub dst: Option<(u32, u32)>,
    pub sport: (u16, u16),
    pub dport: (u16, u16),
    /// `None`: any protocol.
    pub proto: Option<u8>,
}

/// The IPv4 range of a prefix (`addr` with host bits cleared, `shift` = 128 - length), if it
/// holds any IPv4-mapped address.
pub(super) fn v4_range(addr: u128, shift: u8) -> Option<(u32, u32)> {
    let mapped = super::IPV4_MAPPED;
    if shift >= 32 {
        // A prefix of length <= 96: holds IPv4 space whole or not at all.
        let m = super::Prefix::mask(128 - shift);
        (mapped & m == addr & m).then_some((0, u32::MAX))
    } else {
        ((addr >> 32) == (mapped >> 32)).then(|| {
            let lo = addr as u32;
            let host = if shift == 0 { 0 } else { u32::MAX >> (32 - shift as u32) };
            (lo, lo | host)
        })
    }
}

/// A field's atoms, found through a multibit trie of stride 8 (the DIR-24-8 layout of Gupta,
/// Lin and McKeown, "Routing lookups in hardware at memory access speeds", INFOCOM 1998, cut
/// finer): a slot holds the atom of every value under it, or, when up to [`SCAN_ATOMS`] atoms
/// start under it, the first of them to scan from, or else the node of 256 slots splitting it.
/// Nodes exist only where atoms crowd, so the trie stays a small multiple of the atoms.
struct AtomTrie {
    /// Atom starts, ascending, `starts[0] == 0`; adjacent atoms have different masks.
    starts: Vec<u32>,
    masks: Vec<Mask>,
    /// The bits below the root's: the field's width (32 for addresses, 16 for ports) less the
    /// root's stride.
    below_root: u32,
    /// By the top bits of the value.
    root: Vec<u32>,
    /// Nodes of 256 slots, by the next 8 bits.
    nodes: Vec<u32>,
    /// Tables given, since the build, a rule covering every value of the field.
    wide: Mask,
}

/// A slot's kind, in its top two bits; the rest is an atom or node index.
const LEAF: u32 = 0;
const SCAN: u32 = 1 << 30;
const NODE: u32 = 2 << 30;
const INDEX: u32 = (1 << 30) - 1;

/// Atoms a rule inserted after the build may overlap in one field and still be added to them;
/// past it, its table is marked dirty.
const COVER_ATOMS: usize = 64;

/// Atoms starting under a slot up to which the slot scans them rather than split.
const SCAN_ATOMS: usize = 8;
/// The root's stride: addresses by their /16 (256 KiB of root a field), ports by their top byte.
const ADDR_ROOT: u32 = 16;
const PORT_ROOT: u32 = 8;

impl AtomTrie {
    /// Sweeps the ranges' boundaries (inclusive `lo..=hi` within the field) into atoms, then
    /// builds the trie over them.
    fn build(ranges: impl Iterator<Item = (u64, u64, u32)>, bits: u32, root_bits: u32) -> AtomTrie {
        let max = (1u64 << bits) - 1;
        let mut events: Vec<(u64, u32, bool)> = Vec::new();
        for (lo, hi, uid) in ranges {
            if uid < TRACKED {
                events.push((lo, uid, true));
                events.push((hi + 1, uid, false));
            }
        }
        events.sort_unstable_by_key(|e| e.0);
        let mut counts = [0u32; TRACKED as usize];
        let mut cur = NONE;
        let below_root = bits - root_bits;
        let mut t = AtomTrie {
            starts: vec![0],
            masks: vec![NONE],
            below_root,
            root: Vec::new(),
            nodes: Vec::new(),
            wide: NONE,
        };
        let mut i = 0;
        while i < events.len() {
            let p = events[i].0;
            while i < events.len() && events[i].0 == p {
                let (_, uid, open) = events[i];
                let c = &mut counts[uid as usize];
                if open {
                    *c += 1;
                } else {
                    *c -= 1;
                }
                let (w, b) = bit_of(uid);
                if *c > 0 {
                    cur[w] |= b;
                } else {
                    cur[w] &= !b;
                }
                i += 1;
            }
            if p > max {
                break;
            }
            if p == 0 {
                t.masks[0] = cur;
            } else if *t.masks.last().expect("never empty") != cur {
                t.starts.push(p as u32);
                t.masks.push(cur);
            }
        }
        t.starts.shrink_to_fit();
        t.masks.shrink_to_fit();
        let mut a = 0usize;
        t.root = (0..1u64 << root_bits).map(|c| t.slot(c << below_root, below_root, &mut a)).collect();
        t.nodes.shrink_to_fit();
        t
    }

    /// The slot for values `base .. base + 2^bits`; `a` is the atom holding `base` or an earlier
    /// one, left at the atom holding `base`.
    fn slot(&mut self, base: u64, bits: u32, a: &mut usize) -> u32 {
        let starts = &self.starts;
        while *a + 1 < starts.len() && starts[*a + 1] as u64 <= base {
            *a += 1;
        }
        let end = base + (1u64 << bits);
        let inside = starts[*a + 1..].partition_point(|&s| (s as u64) < end);
        if inside == 0 {
            return LEAF | *a as u32;
        }
        if inside <= SCAN_ATOMS {
            return SCAN | *a as u32;
        }
        let node = self.nodes.len() / 256;
        self.nodes.resize(self.nodes.len() + 256, 0);
        let child = bits - 8;
        for c in 0..256u64 {
            let slot = self.slot(base + (c << child), child, a);
            self.nodes[node * 256 + c as usize] = slot;
        }
        NODE | node as u32
    }

    /// The index of the atom holding `x`.
    #[inline(always)]
    fn atom_of(&self, x: u32) -> usize {
        let mut shift = self.below_root;
        let mut e = self.root[(x >> shift) as usize];
        loop {
            match e & !INDEX {
                LEAF => return (e & INDEX) as usize,
                SCAN => {
                    let mut i = (e & INDEX) as usize;
                    while self.starts.get(i + 1).is_some_and(|&s| s <= x) {
                        i += 1;
                    }
                    return i;
                }
                _ => {
                    shift -= 8;
                    e = self.nodes[((e & INDEX) as usize) << 8 | (x >> shift & 0xff) as usize];
                }
            }
        }
    }

    /// The tables with a rule covering `x` (or wider).
    #[inline(always)]
    fn lookup(&self, x: u32) -> Mask {
        let m = &self.masks[self.atom_of(x)];
        [m[0] | self.wide[0], m[1] | self.wide[1]]
    }

    /// Adds table `(w, b)` for a rule covering `lo..=hi` (the field's every value when
    /// `whole`): to every atom the range overlaps, or to `wide`. False, adding nothing, when the
    /// range overlaps more than `COVER_ATOMS` atoms.
    fn cover(&mut self, lo: u32, hi: u32, whole: bool, (w, b): (usize, u64)) -> bool {
        if whole {
            self.wide[w] |= b;
            return true;
        }
        let (first, last) = (self.atom_of(lo), self.atom_of(hi));
        if last - first >= COVER_ATOMS {
            return false;
        }
        for m in &mut self.masks[first..=last] {
            m[w] |= b;
        }
        true
    }

    fn bytes(&self) -> usize {
        self.starts.capacity() * 4
            + self.masks.capacity() * core::mem::size_of::<Mask>()
            + (self.root.capacity() + self.nodes.capacity()) * 4
    }
}

/// The pruning index of a TupleMerge (see the module documentation).
pub(super) struct Pruning {
    src: AtomTrie,
    dst: AtomTrie,
    sport: AtomTrie,
    dport: AtomTrie,
    proto: Vec<Mask>,
    /// Tables given, since the build, a rule of any protocol.
    proto_wide: Mask,
    /// Tables that received a rule since the build: always visited.
    dirty: Mask,
}

impl Pruning {
    pub fn build(extents: &[Extent]) -> Pruning {
        let addr = |f: fn(&Extent) -> Option<(u32, u32)>| {
            let ranges = extents.iter().filter_map(move |e| f(e).map(|(lo, hi)| (lo as u64, hi as u64, e.uid)));
            AtomTrie::build(ranges, 32, ADDR_ROOT)
        };
        let port = |f: fn(&Extent) -> (u16, u16)| {
            let ranges = extents.iter().map(move |e| {
                let (lo, hi) = f(e);
                (lo as u64, hi as u64, e.uid)
            });
            AtomTrie::build(ranges, 16, PORT_ROOT)
        };
        let mut proto = vec![NONE; 256];
        for e in extents.iter().filter(|e| e.uid < TRACKED) {
            let (w, b) = bit_of(e.uid);
            match e.proto {
                Some(p) => proto[p as usize][w] |= b,
                None => proto.iter_mut().for_each(|m| m[w] |= b),
            }
        }
        Pruning {
            src: addr(|e| e.src),
            dst: addr(|e| e.dst),
            sport: port(|e| e.sport),
            dport: port(|e| e.dport),
            proto,
            proto_wide: NONE,
            dirty: NONE,
        }
    }

    /// The tables that may hold a rule matching the key.
    #[inline(always)]
    pub fn candidates(&self, src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> Candidates {
        let v4 = |a: u128| (a >> 32) == (super::IPV4_MAPPED >> 32);
        let s = if v4(src) { self.src.lookup(src as u32) } else { ALL };
        let d = if v4(dst) { self.dst.lookup(dst as u32) } else { ALL };
        let sp = self.sport.lookup(sport as u32);
        let dp = self.dport.lookup(dport as u32);
        let p = &self.proto[proto as usize];
        let pr = [p[0] | self.proto_wide[0], p[1] | self.proto_wide[1]];
        let w = |i: usize| (s[i] & d[i] & sp[i] & dp[i] & pr[i]) | self.dirty[i];
        [w(0), w(1)]
    }

    /// A rule put in table `e.uid` after the build: its table's bit added where the rule's
    /// ranges lie (atoms it overlaps, or the field's `wide` tables), or, when a range overlaps too
    /// many atoms, the table marked dirty (probed whatever the key until the next build).
    pub fn insert(&mut self, e: &Extent) {
        if e.uid >= TRACKED {
            return;
        }
        let bit = bit_of(e.uid);
        let addr = |t: &mut AtomTrie, r: Option<(u32, u32)>| match r {
            None => true, // holds no IPv4 address: no IPv4 key matches it here
            Some((lo, hi)) => t.cover(lo, hi, lo == 0 && hi == u32::MAX, bit),
        };
        let port =
            |t: &mut AtomTrie, (lo, hi): (u16, u16)| t.cover(lo as u32, hi as u32, lo == 0 && hi == u16::MAX, bit);
        let fits = addr(&mut self.src, e.src)
            & addr(&mut self.dst, e.dst)
            & port(&mut self.sport, e.sport)
            & port(&mut self.dport, e.dport);
        match e.proto {
            Some(p) => self.proto[p as usize][bit.0] |= bit.1,
            None => self.proto_wide[bit.0] |= bit.1,
        }
        if !fits {
            self.dirty[bit.0] |= bit.1;
        }
    }

    pub fn bytes(&self) -> usize {
        self.src.bytes()
            + self.dst.bytes()
            + self.sport.bytes()
            + self.dport.bytes()
            + self.proto.capacity() * core::mem::size_of::<Mask>()
    }

    /// Atoms per field (source, destination, source port, destination port): for reports.
    pub fn atoms(&self) -> [usize; 4] {
        [self.src.starts.len(), self.dst.starts.len(), self.sport.starts.len(), self.dport.starts.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_range_of_prefixes() {
        use super::super::Prefix;
        let p = Prefix::v4(0x0a00_0000, 8);
        assert_eq!(v4_range(p.addr, 128 - p.len), Some((0x0a00_0000, 0x0aff_ffff)));
        assert_eq!(v4_range(0, 128), Some((0, u32::MAX)));
        let v6 = 0x2001_0db8u128 << 96;
        assert_eq!(v4_range(v6, 96), None);
        let h = Prefix::v4(0x0102_0304, 32);
        assert_eq!(v4_range(h.addr, 0), Some((0x0102_0304, 0x0102_0304)));
        assert_eq!(v4_range(super::super::IPV4_MAPPED, 32), Some((0, u32::MAX)));
    }

    #[test]
    fn atoms_hold_the_covering_tables() {
        let ext = |uid, src: (u32, u32), dport: (u16, u16)| Extent {
            uid,
            src: Some(src),
            dst: Some((0, u32::MAX)),
            sport: (0, u16::MAX),
            dport,
            proto: None,
        };
        let p = Pruning::build(&[
            ext(0, (0x0a00_0000, 0x0aff_ffff), (80, 80)),
            ext(1, (0x0a01_0000, 0x0a01_00ff), (0, 1023)),
            ext(130, (0, 0), (0, 0)),
        ]);
        let k =
            |s: u32, dp: u16| p.candidates(super::super::IPV4_MAPPED | s as u128, super::super::IPV4_MAPPED, 1, dp, 6);
        assert_eq!(k(0x0a01_0005, 80), [0b11, 0]);
        assert_eq!(k(0x0a02_0005, 80), [0b01, 0]);
        assert_eq!(k(0x0a01_0005, 81), [0b10, 0]);
        assert_eq!(k(0x0b00_0000, 80), [0, 0]);
        // Outside IPv4: the addresses prune nothing.
        assert_eq!(p.candidates(1, 1, 1, 80, 6), [0b11, 0]);
    }
}
