//! Equivalence classes of addresses and ports, and the per-thread memo of side decisions they
//! make exact.
//!
//! A side decision (one direction of one flow) reads the addresses only through prefix tests
//! (`nets`, `notNets`, network sets, node addresses) and the ports only through comparisons with
//! range ends and named-port numbers. So:
//!
//! - an address's **class** is the longest prefix of the snapshot's prefix set containing it: the
//!   prefixes containing an address form a chain, and its longest member determines the rest;
//! - a port's **class** is its position among the sorted boundaries (every range's first and
//!   last + 1, every named port and service port and its successor).
//!
//! Two flows whose subject and peer have equal identities and classes, and equal protocol, port
//! classes, ICMP type and code, get the same decision — except through a Calico `services`
//! match, which reads endpoint membership: a walk that evaluates one is not memoized. That is
//! Cilium's per-identity policy map (identity, protocol, port), filled on demand instead of
//! precomputed for every identity pair.

use std::cell::RefCell;

use super::cow::FastMap;
use super::flow_cache::{ExactKey, FlowCache};
use super::net::mask;
use super::records::{PacketVerdict, SideVerdict};
use super::{Addr, Net};

/// Which prefix of a set is the longest one containing an address (0: none; else index + 1).
#[derive(Clone, Debug, Default)]
pub struct ClassLpm {
    /// (v6, prefix length, masked bits -> class), longest first.
    tables: Vec<(bool, u8, FastMap<u128, u32>)>,
    count: u32,
}

impl ClassLpm {
    pub fn build<'a>(prefixes: impl IntoIterator<Item = &'a Net>) -> ClassLpm {
        let mut lpm = ClassLpm::default();
        for net in prefixes {
            let t = match lpm.tables.iter().position(|(v6, len, _)| *v6 == net.v6 && *len == net.len) {
                Some(i) => i,
                None => {
                    lpm.tables.push((net.v6, net.len, FastMap::default()));
                    lpm.tables.len() - 1
                }
            };
            let next = lpm.count + 1;
            if lpm.tables[t].2.insert(net.bits, next).is_none() {
                lpm.count = next;
            }
        }
        lpm.tables.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        lpm
    }

    #[inline]
    pub fn class_of(&self, a: Addr) -> u32 {
        for (v6, len, table) in &self.tables {
            if *v6 != a.v6 {
                continue;
            }
            if let Some(&c) = table.get(&(a.bits & mask(*len))) {
                return c;
            }
        }
        0
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Every class with its prefix, as (class, network).
    pub fn classes(&self) -> impl Iterator<Item = (u32, Net)> + '_ {
        self.tables
            .iter()
            .flat_map(|(v6, len, t)| t.iter().map(move |(bits, &c)| (c, Net { bits: *bits, len: *len, v6: *v6 })))
    }

    /// Every prefix of the set as (v6, length in the mapped space, masked bits).
    pub fn prefixes(&self) -> impl Iterator<Item = (bool, u8, u128)> + '_ {
        self.tables.iter().flat_map(|(v6, len, t)| t.keys().map(move |bits| (*v6, *len, *bits)))
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Sorted port boundaries: a port's class is how many boundaries are <= it.
#[derive(Clone, Debug, Default)]
pub struct PortClasses {
    bounds: Vec<u16>,
    /// Every port's class (128 KiB): one load where a binary search over the boundaries takes a
    /// dependent load per step, on every packet the memo judges (twice). Empty when the classes
    /// do not fit 16 bits (every port a boundary).
    table: Box<[u16]>,
}

impl PortClasses {
    pub fn build(bounds: impl IntoIterator<Item = u16>) -> PortClasses {
        let mut b: Vec<u16> = bounds.into_iter().collect();
        b.sort_unstable();
        b.dedup();
        let table = if b.len() <= u16::MAX as usize {
            let mut t = vec![0u16; 1 << 16];
            let ends = b.iter().skip(1).map(|&e| e as usize).chain([1 << 16]);
            for (class, (&from, to)) in b.iter().zip(ends).enumerate() {
                t[from as usize..to].fill(class as u16 + 1);
            }
            t.into_boxed_slice()
        } else {
            Box::new([])
        };
        PortClasses { bounds: b, table }
    }

    #[inline]
    pub fn class_of(&self, port: Option<u16>) -> u32 {
        match port {
            None => u32::MAX,
            Some(p) => match self.table.get(p as usize) {
                Some(&c) => c as u32,
                None => self.bounds.partition_point(|&b| b <= p) as u32,
            },
        }
    }

    pub fn len(&self) -> usize {
        self.bounds.len()
    }

    /// The boundaries, ascending: each starts a class (and 0 starts the first).
    pub fn bounds(&self) -> &[u16] {
        &self.bounds
    }

    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty()
    }
}

/// Everything a memoized side decision depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideKey {
    /// Direction, IP version, the defaults and the protocol.
    pub flags: u32,
    pub subject: u32,
    pub subject_class: u32,
    /// The peer's identity (`u32::MAX`: an address no endpoint owns).
    pub peer: u32,
    pub peer_class: u32,
    pub sport: u32,
    pub dport: u32,
    pub icmp: u32,
}

/// Hashed as four words, two fields to a word: half the mixing rounds of a field at a time, on
/// each of the memo's two lookups a packet.
impl std::hash::Hash for SideKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let pair = |a: u32, b: u32| (a as u64) << 32 | b as u64;
        h.write_u64(pair(self.flags, self.subject));
        h.write_u64(pair(self.subject_class, self.peer));
        h.write_u64(pair(self.peer_class, self.icmp));
        h.write_u64(pair(self.sport, self.dport));
    }
}

/// Entries a thread keeps before it starts over (about 2 MiB).
const MEMO_CAP: usize = 1 << 16;
/// Lookups per window in which the hit rate is judged, the hits below which the memo only costs
/// (traffic with few repeated keys: a scan, a flood of new flows), and how many packets it is
/// then left out before it is tried again: twice as many after each window that failed in a row
/// (up to `BYPASS_MAX`), as a retransmission timer backs off, so traffic that never repeats pays
/// for a trial window less and less often; a window that hits starts over from `BYPASS`.
const WINDOW: u32 = 1 << 13;
const WORTH_IT: u32 = WINDOW / 4;
const BYPASS: u32 = 1 << 16;
const BYPASS_MAX: u32 = 1 << 20;

struct Memo {
    snapshot: u64,
    map: FastMap<SideKey, SideVerdict>,
    hits: u64,
    misses: u64,
    window: u32,
    window_hits: u32,
    bypass: u32,
    /// The packets the next failed window leaves the memo out for.
    backoff: u32,
    /// In front of the map, while the memo is in use.
    exact: FlowCache,
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        snapshot: u64::MAX,
        map: FastMap::default(),
        hits: 0,
        misses: 0,
        window: 0,
        window_hits: 0,
        bypass: 0,
        backoff: BYPASS,
        exact: FlowCache::default(),
    });
}

/// Runs `f` with this thread's memo for snapshot `uid` (emptied when the snapshot changed).
pub fn with_memo<R>(uid: u64, f: impl FnOnce(&mut MemoRef<'_>) -> R) -> R {
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.snapshot != uid {
            m.snapshot = uid;
            m.map.clear();
            m.exact.clear();
        }
        let mut r = MemoRef { memo: &mut m };
        f(&mut r)
    })
}

pub struct MemoRef<'a> {
    memo: &'a mut Memo,
}

impl MemoRef<'_> {
    /// Whether the next packet should go through the memo: false while it is left out because
    /// it was not hitting.
    #[inline]
    pub fn in_use(&mut self) -> bool {
        if self.memo.bypass > 0 {
            self.memo.bypass -= 1;
            return false;
        }
        true
    }

    /// How many of the next `n` packets go without the memo (it is left out while it was not
    /// hitting), counted as passed by it: [`MemoRef::in_use`] for each, at once.
    #[inline]
    pub fn leave_out(&mut self, n: usize) -> usize {
        let k = (self.memo.bypass as usize).min(n);
        self.memo.bypass -= k as u32;
        k
    }

    #[inline]
    pub fn get(&mut self, key: &SideKey) -> Option<SideVerdict> {
        let v = self.memo.map.get(key).copied();
        self.count(v.is_some());
        v
    }

    /// A whole packet's record from the exact-match cache in front of the memo; a hit counts as
    /// the memo's (its hit rate decides whether both are used).
    #[inline]
    pub fn exact_get(&mut self, key: &ExactKey) -> Option<PacketVerdict> {
        let v = self.memo.exact.get(key);
        if v.is_some() {
            self.count(true);
        }
        v
    }

    #[inline]
    pub fn exact_put(&mut self, key: ExactKey, v: PacketVerdict) {
        self.memo.exact.put(key, v);
    }

    #[inline]
    fn count(&mut self, hit: bool) {
        let m = &mut *self.memo;
        if hit {
            m.hits += 1;
            m.window_hits += 1;
        } else {
            m.misses += 1;
        }
        m.window += 1;
        if m.window == WINDOW {
            if m.window_hits < WORTH_IT {
                m.bypass = m.backoff;
                m.backoff = (m.backoff * 2).min(BYPASS_MAX);
            } else {
                m.backoff = BYPASS;
            }
            m.window = 0;
            m.window_hits = 0;
        }
    }

    #[inline]
    pub fn put(&mut self, key: SideKey, v: SideVerdict) {
        if self.memo.map.len() >= MEMO_CAP {
            self.memo.map.clear();
        }
        self.memo.map.insert(key, v);
    }
}

/// This thread's memo hits and misses so far (benchmarks report the hit rate).
pub fn memo_counts() -> (u64, u64) {
    MEMO.with(|m| {
        let m = m.borrow();
        (m.hits, m.misses)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packets the memo is left out for after each trial window, the windows hitting as
    /// many times as `hits` says.
    fn left_out_after(hits: &[u32]) -> Vec<usize> {
        with_memo(u64::MAX - 1, |memo| {
            memo.memo.bypass = 0;
            memo.memo.backoff = BYPASS;
            let hit =
                SideKey { flags: 0, subject: 0, subject_class: 0, peer: 0, peer_class: 0, sport: 0, dport: 0, icmp: 0 };
            memo.put(hit, SideVerdict::ABSENT);
            let mut out = Vec::new();
            for &h in hits {
                for i in 0..WINDOW {
                    let miss = SideKey { subject: 1, sport: i, ..hit };
                    memo.get(if i < h { &hit } else { &miss });
                }
                out.push(memo.leave_out(usize::MAX));
            }
            out
        })
    }

    #[test]
    fn a_memo_that_keeps_missing_is_left_out_longer_each_time() {
        let b = BYPASS as usize;
        assert_eq!(left_out_after(&[0; 7]), [b, 2 * b, 4 * b, 8 * b, 16 * b, 16 * b, 16 * b]);
        // Hitting often enough keeps it in, and starts the backoff over.
        assert_eq!(left_out_after(&[0, 0, WORTH_IT, 0, WORTH_IT - 1]), [b, 2 * b, 0, b, 2 * b]);
    }

    #[test]
    fn class_is_the_longest_containing_prefix() {
        let nets: Vec<Net> = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "0.0.0.0/0", "fd00::/64"]
            .iter()
            .map(|t| Net::parse(t).unwrap())
            .collect();
        let lpm = ClassLpm::build(&nets);
        let c = |t: &str| lpm.class_of(Addr::parse(t).unwrap());
        assert_eq!(c("10.1.2.3"), c("10.1.2.200"));
        assert_ne!(c("10.1.2.3"), c("10.1.3.3"));
        assert_eq!(c("10.1.3.3"), c("10.1.200.1"));
        assert_ne!(c("10.2.0.1"), c("10.1.3.3"));
        assert_eq!(c("11.0.0.1"), c("192.168.1.1"));
        assert_ne!(c("11.0.0.1"), c("10.2.0.1"));
        assert_eq!(c("2001:db8::1"), 0);
        assert_ne!(c("fd00::1"), 0);
        // an IPv4 network never contains an IPv6 address, even a v4-mapped one
        assert_eq!(c("::ffff:10.1.2.3"), 0);
    }

    #[test]
    fn a_ports_class_from_the_table_is_the_count_of_boundaries_at_or_below_it() {
        let mut r = 0x2545_f491_4f6c_dd1du64;
        for n in [0usize, 1, 2, 7, 300] {
            let bounds: Vec<u16> = (0..n)
                .map(|_| {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    r as u16
                })
                .chain(if n == 7 { vec![0, 65535] } else { vec![] })
                .collect();
            let p = PortClasses::build(bounds.iter().copied());
            assert_eq!(p.table.len(), 1 << 16);
            for port in 0..=u16::MAX {
                let below = p.bounds.iter().filter(|&&b| b <= port).count() as u32;
                assert_eq!(p.class_of(Some(port)), below, "port {port} among {:?}", p.bounds);
            }
        }
        let every = PortClasses::build(0..=u16::MAX);
        assert!(every.table.is_empty());
        assert_eq!(every.class_of(Some(65535)), 65536);
        assert_eq!(every.class_of(Some(0)), 1);
    }

    #[test]
    fn port_classes_split_at_boundaries() {
        let p = PortClasses::build([80, 81, 8080, 8081, 1000]);
        assert_eq!(p.class_of(Some(79)), p.class_of(Some(0)));
        assert_ne!(p.class_of(Some(80)), p.class_of(Some(79)));
        assert_ne!(p.class_of(Some(80)), p.class_of(Some(81)));
        assert_eq!(p.class_of(Some(81)), p.class_of(Some(999)));
        assert_eq!(p.class_of(Some(40000)), p.class_of(Some(65535)));
        assert_ne!(p.class_of(None), p.class_of(Some(0)));
    }
}
