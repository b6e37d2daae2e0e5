//! The baseline: every rule in (priority, id) order, first match wins. Also the test oracle.

use super::{ClassRule, Classifier, ClassifierError, Entry, Match, PacketKey};

/// Rules sorted by (priority, id); classification scans them in order and stops at the first
/// match. O(n) per packet; exists as the oracle and the baseline every benchmark is compared to.
#[derive(Clone, Debug, Default)]
pub struct LinearScan {
    entries: Vec<Entry>,
}

impl LinearScan {
    /// An empty classifier.
    pub fn new() -> LinearScan {
        LinearScan::default()
    }

    /// Builds from rules in any order; errors on a malformed rule or a duplicate id.
    pub fn build(rules: &[ClassRule]) -> Result<LinearScan, ClassifierError> {
        let mut entries = Vec::with_capacity(rules.len());
        for r in rules {
            r.validate()?;
            entries.push(Entry::new(r));
        }
        entries.sort_unstable_by_key(|e| e.rank);
        let mut ids: Vec<u32> = entries.iter().map(|e| e.rank as u32).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ClassifierError::DuplicateId(w[0]));
        }
        Ok(LinearScan { entries })
    }

    /// Adds one rule at its place in priority order (O(n)).
    pub fn insert(&mut self, rule: ClassRule) -> Result<(), ClassifierError> {
        rule.validate()?;
        if self.entries.iter().any(|e| e.rank as u32 == rule.id) {
            return Err(ClassifierError::DuplicateId(rule.id));
        }
        let e = Entry::new(&rule);
        let at = self.entries.partition_point(|x| x.rank < e.rank);
        self.entries.insert(at, e);
        Ok(())
    }

    /// Removes the rule with this id; false if there is none (O(n)).
    pub fn remove(&mut self, id: u32) -> bool {
        match self.entries.iter().position(|e| e.rank as u32 == id) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Classifier for LinearScan {
    fn classify(&self, key: &PacketKey) -> Option<Match> {
        self.entries.iter().find(|e| e.matches(key)).map(|e| Match::from_rank(e.rank))
    }

    fn matches_below(&self, key: &PacketKey, below: u32, out: &mut Vec<Match>) {
        let limit = (below as u64) << 32;
        out.extend(
            self.entries
                .iter()
                .take_while(|e| e.rank < limit)
                .filter(|e| e.matches(key))
                .map(|e| Match::from_rank(e.rank)),
        );
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn memory_bytes(&self) -> usize {
        self.entries.capacity() * core::mem::size_of::<Entry>()
    }
}
