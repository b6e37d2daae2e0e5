//! Per-batch accounting that replay needs beside the verdicts, kept native so that no per-flow
//! or per-packet work goes through Python objects:
//!
//! - [`FlowSet`]: the distinct connections seen (a 5-tuple, the same in both directions);
//! - [`ServiceIndex`]: which packets are to or from a Service's virtual address and port;
//! - [`VerdictTally`]: a batch's verdicts counted by reason, and those policy judged by the
//!   decision at each end.

use std::collections::HashSet;

use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_MALFORMED};
use crate::conntrack::code::{NEW_PICKUP, NEW_PICKUP_REPLY};
use crate::conntrack::key::{canon_ports, FlowKey};
use crate::engine::cow::{FastMap, MixState};
use crate::engine::{PacketVerdict, SideVerdict, HTTP_AWAITS, HTTP_TABLE_FULL, PACKET_POLICY};

/// A header's connection, the same key from both ends (the conntrack's canonical port key).
fn connection(h: &PacketHeader) -> FlowKey {
    let (src, dst) = (u128::from_be_bytes(h.src_addr), u128::from_be_bytes(h.dst_addr));
    canon_ports(src, dst, h.sport, h.dport, h.protocol).0
}

/// The distinct connections of every batch added, exactly (no hashing away of collisions).
#[derive(Default)]
pub struct FlowSet {
    seen: HashSet<FlowKey, MixState>,
}

impl FlowSet {
    pub fn new() -> FlowSet {
        FlowSet::default()
    }

    /// Adds the connections of `headers`; a header whose `skip` entry is nonzero is left out (a
    /// packet that could not be decoded has no connection). `skip` may be shorter (the rest
    /// counts).
    pub fn add(&mut self, headers: &[PacketHeader], skip: &[u8]) {
        for (i, h) in headers.iter().enumerate() {
            if skip.get(i).is_some_and(|&s| s != 0) {
                continue;
            }
            self.seen.insert(connection(h));
        }
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// Service entries (virtual address, protocol, port), the first entry of a key winning, and
/// the lookup of a batch's packets against them.
pub struct ServiceIndex {
    entries: FastMap<([u8; 16], u8, u16), i64>,
}

impl ServiceIndex {
    pub fn new<I: IntoIterator<Item = ([u8; 16], u8, u16)>>(keys: I) -> ServiceIndex {
        let mut entries = FastMap::default();
        for (i, key) in keys.into_iter().enumerate() {
            entries.entry(key).or_insert(i as i64);
        }
        ServiceIndex { entries }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry of a virtual address, protocol and port, if one.
    #[inline]
    pub fn entry_of(&self, addr: &[u8; 16], protocol: u8, port: u16) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries.get(&(*addr, protocol, port)).map(|&i| i as usize)
    }

    /// Per header: the entry its destination is (a request: `forward` true) or else its source
    /// is (a reply), -1 if neither. Only headers with ports and not malformed are looked up.
    /// Writes `min(headers, entry, forward)` rows.
    pub fn lookup(&self, headers: &[PacketHeader], entry: &mut [i64], forward: &mut [bool]) {
        for ((h, e), f) in headers.iter().zip(entry.iter_mut()).zip(forward.iter_mut()) {
            *e = -1;
            *f = false;
            if self.entries.is_empty() || h.flags & FLAG_HAS_PORTS == 0 || h.flags & FLAG_MALFORMED != 0 {
                continue;
            }
            if let Some(&i) = self.entries.get(&(h.dst_addr, h.protocol, h.dport)) {
                *e = i;
                *f = true;
            } else if let Some(&i) = self.entries.get(&(h.src_addr, h.protocol, h.sport)) {
                *e = i;
            }
        }
    }
}

/// What decided one end of a packet policy judged: (direction: 0 egress, 1 ingress, tier,
/// source kind, source, rule, reason, allow), as `SideVerdict` holds them.
pub type RuleKey = (u8, i32, u8, i32, i32, u8, u8);

/// How many reasons `PacketVerdict::reason` counts apart; a larger value counts in the last.
pub const REASONS: usize = 8;

/// One batch's verdicts counted: packets by reason, and of those policy judged, how many were
/// allowed, picked a TCP connection up mid-stream, or had no decision at an end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerdictCounts {
    pub packets: u64,
    pub allowed: u64,
    pub by_reason: [u64; REASONS],
    pub policy_allowed: u64,
    pub pickups: u64,
    /// Packets judged by rule with no decision at that end (egress, ingress).
    pub no_policy: [u64; 2],
}

/// The packets policy judged in every batch added, by what decided at each end. A packet whose
/// decision is an HTTP outcome rather than a rule's (admitted provisionally, or denied because
/// its request stream cannot be judged) is counted as judged but not by rule, unless `add` is
/// told to count outcomes by rule too.
#[derive(Default)]
pub struct VerdictTally {
    by_rule: FastMap<RuleKey, u64>,
}

impl VerdictTally {
    pub fn new() -> VerdictTally {
        VerdictTally::default()
    }

    /// Adds a batch's decisions by rule, and returns its counts.
    pub fn add(&mut self, verdicts: &[PacketVerdict], outcomes_by_rule: bool) -> VerdictCounts {
        let mut c = VerdictCounts::default();
        for v in verdicts {
            c.packets += 1;
            c.allowed += (v.allow != 0) as u64;
            c.by_reason[(v.reason as usize).min(REASONS - 1)] += 1;
            if v.reason != PACKET_POLICY {
                continue;
            }
            c.policy_allowed += (v.allow != 0) as u64;
            c.pickups += matches!(v.ct_state, NEW_PICKUP | NEW_PICKUP_REPLY) as u64;
            let provisional = v.http == HTTP_AWAITS && v.allow != 0;
            if (provisional || v.http >= HTTP_TABLE_FULL) && !outcomes_by_rule {
                continue;
            }
            for (direction, side) in [(0u8, &v.egress), (1u8, &v.ingress)] {
                if side.present != 1 {
                    c.no_policy[direction as usize] += 1;
                    continue;
                }
                *self.by_rule.entry(rule_key(direction, side)).or_insert(0) += 1;
            }
        }
        c
    }

    /// The packets by the decision at each end added since the last call, in no particular
    /// order; the tally is empty after.
    pub fn drain(&mut self) -> Vec<(RuleKey, u64)> {
        self.by_rule.drain().collect()
    }
}

fn rule_key(direction: u8, s: &SideVerdict) -> RuleKey {
    (direction, s.tier, s.source_kind, s.source, s.rule, s.reason, s.allow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(src: u8, sport: u16, dst: u8, dport: u16, protocol: u8, flags: u8) -> PacketHeader {
        let mut h = PacketHeader::default();
        h.src_addr[15] = src;
        h.dst_addr[15] = dst;
        h.sport = sport;
        h.dport = dport;
        h.protocol = protocol;
        h.flags = flags;
        h
    }

    #[test]
    fn a_connection_counts_once_in_both_directions() {
        let mut flows = FlowSet::new();
        let batch = [
            header(1, 1000, 2, 80, 6, FLAG_HAS_PORTS),
            header(2, 80, 1, 1000, 6, FLAG_HAS_PORTS),
            header(1, 1000, 2, 80, 17, FLAG_HAS_PORTS), // another protocol: another connection
            header(1, 1001, 2, 80, 6, FLAG_HAS_PORTS),
            header(9, 9, 9, 9, 6, FLAG_MALFORMED),
        ];
        flows.add(&batch, &[0, 0, 0, 0, 1]);
        assert_eq!(flows.len(), 3);
        flows.add(&batch[..2], &[]);
        assert_eq!(flows.len(), 3);
    }

    #[test]
    fn requests_and_replies_find_their_entry_and_the_first_entry_wins() {
        let mut vip = [0u8; 16];
        vip[15] = 100;
        let index = ServiceIndex::new([(vip, 6, 80), (vip, 17, 53), (vip, 6, 80)]);
        assert_eq!(index.len(), 2);
        let batch = [
            header(1, 1000, 100, 80, 6, FLAG_HAS_PORTS),
            header(100, 80, 1, 1000, 6, FLAG_HAS_PORTS),
            header(1, 1000, 100, 53, 6, FLAG_HAS_PORTS), // the port is UDP's only
            header(1, 1000, 100, 53, 17, FLAG_HAS_PORTS | FLAG_MALFORMED),
            header(1, 1000, 100, 53, 17, 0),
        ];
        let (mut entry, mut forward) = ([7i64; 5], [true; 5]);
        index.lookup(&batch, &mut entry, &mut forward);
        assert_eq!(entry, [0, 0, -1, -1, -1]);
        assert_eq!(forward, [true, false, false, false, false]);
    }
}
