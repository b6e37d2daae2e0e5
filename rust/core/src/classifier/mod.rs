//! The multi-field packet classifier: priority (first-match) classification of a packet key over
//! source/destination prefix, source/destination port range, protocol and ICMP type/code.
//!
//! - `rows` (shipped): the bit-vector classifier's parts (rows of rule bits per atom of each
//!   dimension, the atoms of an address and of a port, the first set bit). The engine's compiled
//!   programs (`engine::compiled`) are built of them: every compiled decision goes through them.
//! - `BitVector`: the same parts as a classifier of the rules below, so that the classifier
//!   decisions use is measured on ClassBench's sets beside `rte_acl` and TupleMerge.
//! - `LinearScan`: the baseline and test oracle, rules sorted by priority, first match wins.
//! - `TupleMerge`: the fast classifier, tuple-space search with merged tuples (Daly, Liu,
//!   Torng, "TupleMerge", 2019): rules are hashed into a few tables by the bits they fix,
//!   tables are searched in priority order and the search stops as soon as no remaining table can
//!   hold a better rule. Rules are inserted and removed one at a time (no rebuild). In front of
//!   the tables, a tuple-pruning index (`pruning.rs`; Srinivasan, Suri, Varghese, SIGCOMM 1999)
//!   names the few tables that can hold a match, and a lookup probes those alone.
//!
//! `BitVector`, `LinearScan`, `TupleMerge` and the ClassBench reader (`crate::classbench`) are
//! built with the `bench` feature only: the engine's programs are built of `rows` with their own
//! dimensions (identity sets, relative peers, named ports), not of `ClassRule`s, so the shipped
//! extension carries `rows` alone; the rule types below are what `render` lists rules as.
//!
//! The three implement `Classifier`. Priorities are "lower first"; ties between equal priorities go to
//! the lower rule id, so the result is always deterministic. Internally the pair is one `u64`
//! *rank* `priority << 32 | id`, compared as a number.
//!
//! Addresses are `u128` in network (big-endian) order; IPv4 is IPv4-mapped IPv6
//! (`::ffff:a.b.c.d`), so an IPv4 `/n` prefix is a `/96+n` prefix here ([`Prefix::v4`]).

#[cfg(feature = "bench")]
mod bitvector;
#[cfg(feature = "bench")]
mod linear;
#[cfg(feature = "bench")]
mod pruning;
pub(crate) mod rows;
#[cfg(feature = "bench")]
mod tuplemerge;

#[cfg(feature = "bench")]
pub use bitvector::BitVector;
#[cfg(feature = "bench")]
pub use linear::LinearScan;
#[cfg(feature = "bench")]
pub use tuplemerge::{PruningMode, TupleMerge, TupleMergeConfig, TupleMergeStats, PRUNE_FROM_VISITS};

use crate::batch::PacketHeader;
use core::fmt;

/// The `::ffff:0:0/96` prefix under which IPv4 addresses are mapped.
pub const IPV4_MAPPED: u128 = 0xffff << 32;

/// An address prefix: the top `len` bits of `addr` (bits past `len` are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Prefix {
    pub addr: u128,
    pub len: u8,
}

impl Prefix {
    /// Every address, IPv4 and IPv6.
    pub const ANY: Prefix = Prefix { addr: 0, len: 0 };

    /// IPv4 prefix `a.b.c.d/len` (`len <= 32`) as the IPv4-mapped `/96+len`.
    pub fn v4(addr: u32, len: u8) -> Prefix {
        Prefix { addr: IPV4_MAPPED | addr as u128, len: 96 + len.min(32) }
    }

    /// Mask of the `len` top bits (`len` clamped to 128).
    #[inline]
    pub fn mask(len: u8) -> u128 {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - len.min(128) as u32)
        }
    }

    /// Whether `a` lies in this prefix.
    #[inline]
    pub fn contains(&self, a: u128) -> bool {
        (a ^ self.addr) & Prefix::mask(self.len) == 0
    }
}

/// An inclusive port range `lo..=hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange { lo: 0, hi: u16::MAX };

    /// Exactly one port.
    pub fn exact(p: u16) -> PortRange {
        PortRange { lo: p, hi: p }
    }

    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

impl Default for PortRange {
    fn default() -> Self {
        PortRange::ANY
    }
}

/// One classification rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClassRule {
    /// Caller's id, returned on match; unique within a classifier.
    pub id: u32,
    /// Lower is matched first; equal priorities are ordered by id (lower first).
    pub priority: u32,
    pub src: Prefix,
    pub dst: Prefix,
    pub sport: PortRange,
    pub dport: PortRange,
    /// `None` = any protocol.
    pub proto: Option<u8>,
    /// `None` = any; compared to the key's `icmp_type` whatever the protocol.
    pub icmp_type: Option<u8>,
    /// `None` = any; compared to the key's `icmp_code` whatever the protocol.
    pub icmp_code: Option<u8>,
}

impl ClassRule {
    /// A rule matching every packet, to be narrowed with struct update syntax.
    pub fn any(id: u32, priority: u32) -> ClassRule {
        ClassRule {
            id,
            priority,
            src: Prefix::ANY,
            dst: Prefix::ANY,
            sport: PortRange::ANY,
            dport: PortRange::ANY,
            proto: None,
            icmp_type: None,
            icmp_code: None,
        }
    }

    /// Checks the rule is well formed: prefix lengths at most 128, port ranges with `lo <= hi`.
    pub fn validate(&self) -> Result<(), ClassifierError> {
        for (field, p) in [("src", &self.src), ("dst", &self.dst)] {
            if p.len > 128 {
                return Err(ClassifierError::BadPrefixLength { id: self.id, field, len: p.len });
            }
        }
        for (field, r) in [("sport", &self.sport), ("dport", &self.dport)] {
            if r.lo > r.hi {
                return Err(ClassifierError::BadPortRange { id: self.id, field, lo: r.lo, hi: r.hi });
            }
        }
        Ok(())
    }

    /// Whether the rule matches the key (brute force, the definition every classifier obeys).
    pub fn matches(&self, k: &PacketKey) -> bool {
        self.src.contains(k.src)
            && self.dst.contains(k.dst)
            && self.sport.contains(k.sport)
            && self.dport.contains(k.dport)
            && self.proto.is_none_or(|p| p == k.proto)
            && self.icmp_type.is_none_or(|t| t == k.icmp_type)
            && self.icmp_code.is_none_or(|c| c == k.icmp_code)
    }

    /// `priority << 32 | id`: the total order of rules, lowest first.
    #[inline]
    pub fn rank(&self) -> u64 {
        (self.priority as u64) << 32 | self.id as u64
    }
}

/// The fields of a packet that rules match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PacketKey {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub icmp_type: u8,
    pub icmp_code: u8,
}

impl PacketKey {
    /// The key of a decoded header: addresses read big-endian (IPv4 is already IPv4-mapped in
    /// the header), ports, protocol and ICMP type/code as the decoder wrote them.
    pub fn from_header(h: &PacketHeader) -> PacketKey {
        PacketKey {
            src: u128::from_be_bytes(h.src_addr),
            dst: u128::from_be_bytes(h.dst_addr),
            sport: h.sport,
            dport: h.dport,
            proto: h.protocol,
            icmp_type: h.icmp_type,
            icmp_code: h.icmp_code,
        }
    }

    /// An IPv4 key (addresses as `u32` host integers, mapped to `::ffff:a.b.c.d`).
    pub fn v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> PacketKey {
        PacketKey {
            src: IPV4_MAPPED | src as u128,
            dst: IPV4_MAPPED | dst as u128,
            sport,
            dport,
            proto,
            icmp_type: 0,
            icmp_code: 0,
        }
    }
}

/// A matching rule: its id and priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Match {
    pub id: u32,
    pub priority: u32,
}

#[cfg(feature = "bench")]
impl Match {
    #[inline]
    pub(crate) fn from_rank(rank: u64) -> Match {
        Match { id: rank as u32, priority: (rank >> 32) as u32 }
    }
}

/// Errors of building or updating a classifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassifierError {
    /// A rule with this id is already in the classifier.
    DuplicateId(u32),
    /// A prefix longer than 128 bits.
    BadPrefixLength { id: u32, field: &'static str, len: u8 },
    /// A port range with `lo > hi`.
    BadPortRange { id: u32, field: &'static str, lo: u16, hi: u16 },
    /// The structure would take more than `bound` bytes (`bytes`).
    TooLarge { bytes: usize, bound: usize },
}

impl fmt::Display for ClassifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassifierError::DuplicateId(id) => write!(f, "rule id {id} is already present"),
            ClassifierError::BadPrefixLength { id, field, len } => {
                write!(f, "rule {id}: {field} prefix length {len} exceeds 128")
            }
            ClassifierError::BadPortRange { id, field, lo, hi } => {
                write!(f, "rule {id}: {field} range {lo}-{hi} has lo > hi")
            }
            ClassifierError::TooLarge { bytes, bound } => {
                write!(f, "the classifier would take {bytes} bytes, past its bound of {bound}")
            }
        }
    }
}

impl std::error::Error for ClassifierError {}

/// A priority (first-match) packet classifier.
#[cfg(feature = "bench")]
pub trait Classifier: Send + Sync {
    /// The best matching rule (lowest priority, then lowest id), if any.
    fn classify(&self, key: &PacketKey) -> Option<Match>;

    /// `out[i] = classify(&keys[i])` for `i < min(keys.len(), out.len())`.
    fn classify_batch(&self, keys: &[PacketKey], out: &mut [Option<Match>]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.classify(k);
        }
    }

    /// Appends to `out` every matching rule with priority `< below`, in (priority, id) order.
    /// `out` is not cleared: what it held stays in front.
    fn matches_below(&self, key: &PacketKey, below: u32, out: &mut Vec<Match>);

    /// Number of rules.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate heap bytes held (sum of the capacities of the structures).
    fn memory_bytes(&self) -> usize;
}

/// A rule flattened for matching: one 64-byte cache line, every test branch-free.
#[cfg(feature = "bench")]
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Entry {
    /// Source prefix, host bits cleared.
    pub src: u128,
    pub dst: u128,
    pub rank: u64,
    pub sport_lo: u16,
    /// `hi - lo`: `p` is in the range iff `p - lo` (wrapping) `<= span`.
    pub sport_span: u16,
    pub dport_lo: u16,
    pub dport_span: u16,
    /// `128 - len`: the key matches iff `(key ^ src) >> shift == 0` (shift 128 = any).
    pub src_shift: u8,
    pub dst_shift: u8,
    pub proto: u8,
    pub proto_mask: u8,
    pub icmp_type: u8,
    pub icmp_type_mask: u8,
    pub icmp_code: u8,
    pub icmp_code_mask: u8,
}

#[cfg(feature = "bench")]
const _: () = assert!(core::mem::size_of::<Entry>() == 64);

#[cfg(feature = "bench")]
impl Entry {
    pub fn new(r: &ClassRule) -> Entry {
        let opt = |o: Option<u8>| (o.unwrap_or(0), if o.is_some() { 0xff } else { 0 });
        let (proto, proto_mask) = opt(r.proto);
        let (icmp_type, icmp_type_mask) = opt(r.icmp_type);
        let (icmp_code, icmp_code_mask) = opt(r.icmp_code);
        Entry {
            src: r.src.addr & Prefix::mask(r.src.len),
            dst: r.dst.addr & Prefix::mask(r.dst.len),
            rank: r.rank(),
            sport_lo: r.sport.lo,
            sport_span: r.sport.hi.wrapping_sub(r.sport.lo),
            dport_lo: r.dport.lo,
            dport_span: r.dport.hi.wrapping_sub(r.dport.lo),
            src_shift: 128 - r.src.len.min(128),
            dst_shift: 128 - r.dst.len.min(128),
            proto,
            proto_mask,
            icmp_type,
            icmp_type_mask,
            icmp_code,
            icmp_code_mask,
        }
    }

    #[inline(always)]
    pub fn matches(&self, k: &PacketKey) -> bool {
        // Non-short-circuit `&`: all tests are cheap, and branches on data mispredict.
        ((k.src ^ self.src).checked_shr(self.src_shift as u32).unwrap_or(0) == 0)
            & ((k.dst ^ self.dst).checked_shr(self.dst_shift as u32).unwrap_or(0) == 0)
            & (k.sport.wrapping_sub(self.sport_lo) <= self.sport_span)
            & (k.dport.wrapping_sub(self.dport_lo) <= self.dport_span)
            & ((k.proto & self.proto_mask) == self.proto)
            & ((k.icmp_type & self.icmp_type_mask) == self.icmp_type)
            & ((k.icmp_code & self.icmp_code_mask) == self.icmp_code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "bench")]
    #[test]
    fn entry_matches_like_rule() {
        let r = ClassRule {
            src: Prefix::v4(0x0a00_0000, 8),
            dport: PortRange { lo: 80, hi: 90 },
            proto: Some(6),
            ..ClassRule::any(1, 1)
        };
        let e = Entry::new(&r);
        for (k, want) in [
            (PacketKey::v4(0x0a01_0203, 1, 5, 80, 6), true),
            (PacketKey::v4(0x0a01_0203, 1, 5, 90, 6), true),
            (PacketKey::v4(0x0a01_0203, 1, 5, 91, 6), false),
            (PacketKey::v4(0x0a01_0203, 1, 5, 79, 6), false),
            (PacketKey::v4(0x0b01_0203, 1, 5, 80, 6), false),
            (PacketKey::v4(0x0a01_0203, 1, 5, 80, 17), false),
        ] {
            assert_eq!(r.matches(&k), want, "{k:?}");
            assert_eq!(e.matches(&k), want, "{k:?}");
        }
    }

    #[test]
    fn validate_rejects_bad_rules() {
        let mut r = ClassRule::any(7, 0);
        r.src.len = 129;
        assert_eq!(r.validate(), Err(ClassifierError::BadPrefixLength { id: 7, field: "src", len: 129 }));
        let mut r = ClassRule::any(8, 0);
        r.dport = PortRange { lo: 10, hi: 9 };
        let e = r.validate().unwrap_err();
        assert_eq!(e.to_string(), "rule 8: dport range 10-9 has lo > hi");
    }

    #[test]
    fn from_header_reads_big_endian() {
        let mut h = PacketHeader::default();
        h.src_addr[10] = 0xff;
        h.src_addr[11] = 0xff;
        h.src_addr[12..].copy_from_slice(&[10, 1, 2, 3]);
        h.dst_addr[15] = 1;
        h.sport = 1234;
        h.dport = 80;
        h.protocol = 6;
        h.icmp_type = 3;
        h.icmp_code = 4;
        let k = PacketKey::from_header(&h);
        assert_eq!(k.src, IPV4_MAPPED | 0x0a01_0203);
        assert_eq!(k.dst, 1);
        assert_eq!((k.sport, k.dport, k.proto, k.icmp_type, k.icmp_code), (1234, 80, 6, 3, 4));
        assert!(Prefix::v4(0x0a00_0000, 8).contains(k.src));
    }
}
