//! Flow records' verdicts summed, weighted by what each record counted: the totals, the
//! decisions per side and rule, and the records' own verdicts beside the policy's
//! (`judge::RecordJudge` fills it).

use std::collections::HashMap;

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
