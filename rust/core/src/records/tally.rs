//! Flow records' verdicts summed, weighted by what each record counted: the totals, the
//! decisions per side and rule, and the records' own verdicts beside the policy's. One pass
//! over a batch, so that summing costs less than judging.

use std::collections::HashMap;

use super::FlowCounts;
use crate::engine::{PacketVerdict, SideVerdict};

/// Records, flows, packets, bytes.
pub type Measures = [u64; 4];

/// A side decision as the summary tells them apart: (direction 0 egress / 1 ingress, tier,
/// source kind, source, rule, reason, allow).
pub type DecisionKey = (u8, i32, u8, i32, i32, u8, u8);

#[derive(Debug, Default)]
pub struct Tally {
    pub totals: Measures,
    pub allowed: Measures,
    pub denied: Measures,
    /// records an end of which no address placed: not judged
    pub unplaced: Measures,
    /// judged records with no policy at that end: [egress, ingress]
    pub no_policy: [Measures; 2],
    pub by_rule: HashMap<DecisionKey, Measures>,
    /// judged records by [their own verdict (0 none, 1 allow, 2 deny, 3 other)][policy's: 0 deny, 1 allow]
    pub reported: [[u64; 2]; 4],
}

fn add(m: &mut Measures, c: &FlowCounts) {
    m[0] += 1;
    m[1] += c.flows;
    m[2] += c.packets;
    m[3] += c.bytes;
}

fn key(direction: u8, s: &SideVerdict) -> DecisionKey {
    (direction, s.tier, s.source_kind, s.source, s.rule, s.reason, s.allow)
}

impl Tally {
    /// Adds a batch: `verdicts[i]` is record `i`'s (ignored where it was not placed).
    pub fn add(&mut self, verdicts: &[PacketVerdict], counts: &[FlowCounts]) {
        // decisions repeat: sum per run of equal keys before touching the map
        let mut last: [Option<(DecisionKey, Measures)>; 2] = [None, None];
        for (v, c) in verdicts.iter().zip(counts) {
            add(&mut self.totals, c);
            if c.has_src == 0 || c.has_dst == 0 {
                add(&mut self.unplaced, c);
                continue;
            }
            add(if v.allow != 0 { &mut self.allowed } else { &mut self.denied }, c);
            self.reported[(c.reported as usize).min(3)][(v.allow != 0) as usize] += 1;
            for (d, side) in [&v.egress, &v.ingress].into_iter().enumerate() {
                if side.present != 1 {
                    add(&mut self.no_policy[d], c);
                    continue;
                }
                let k = key(d as u8, side);
                match &mut last[d] {
                    Some((lk, m)) if *lk == k => add(m, c),
                    slot => {
                        if let Some((lk, m)) = slot.take() {
                            let e = self.by_rule.entry(lk).or_default();
                            for i in 0..4 {
                                e[i] += m[i];
                            }
                        }
                        let mut m = Measures::default();
                        add(&mut m, c);
                        *slot = Some((k, m));
                    }
                }
            }
        }
        for slot in last.iter_mut() {
            if let Some((lk, m)) = slot.take() {
                let e = self.by_rule.entry(lk).or_default();
                for i in 0..4 {
                    e[i] += m[i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_by_records_flows_packets_bytes() {
        let side = SideVerdict { present: 1, allow: 1, tier: 2, source_kind: 1, source: 3, rule: 0, ..Default::default() };
        let v = PacketVerdict { allow: 1, reason: 0, ct_state: 0, http: 0, egress: side, ingress: SideVerdict::default() };
        let c = FlowCounts { flows: 2, packets: 10, bytes: 1000, has_src: 1, has_dst: 1, reported: 2, ..Default::default() };
        let unplaced = FlowCounts { flows: 1, has_src: 1, ..Default::default() };
        let mut t = Tally::default();
        t.add(&[v, v, v], &[c, unplaced, c]);
        assert_eq!(t.totals, [3, 5, 20, 2000]);
        assert_eq!(t.allowed, [2, 4, 20, 2000]);
        assert_eq!(t.unplaced, [1, 1, 0, 0]);
        assert_eq!(t.no_policy[1], [2, 4, 20, 2000]);
        assert_eq!(t.by_rule[&(0, 2, 1, 3, 0, 0, 1)], [2, 4, 20, 2000]);
        assert_eq!(t.reported[2][1], 2);
    }
}
