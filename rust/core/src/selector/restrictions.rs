//! Label restrictions: necessary conditions a selector puts on labels, as Calico's
//! label-restriction index uses them to find candidate selectors for an endpoint.
//!
//! Every restriction is implied by the selector (if the selector matches, the restriction
//! holds), never the reverse; an empty map means "no restriction we can index on".

use std::collections::{BTreeMap, BTreeSet};

use super::ast::Node;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelRestriction {
    pub must_be_present: bool,
    pub must_be_absent: bool,
    /// `Some(values)`: the label's value must be one of them (empty = unsatisfiable).
    pub must_have_one_of_values: Option<BTreeSet<String>>,
}

impl LabelRestriction {
    fn present() -> Self {
        LabelRestriction { must_be_present: true, ..Default::default() }
    }

    fn values<I: IntoIterator<Item = String>>(vs: I) -> Self {
        LabelRestriction {
            must_be_present: true,
            must_be_absent: false,
            must_have_one_of_values: Some(vs.into_iter().collect()),
        }
    }

    fn is_empty(&self) -> bool {
        !self.must_be_present && !self.must_be_absent && self.must_have_one_of_values.is_none()
    }

    /// Both hold (AND).
    fn intersect(&mut self, other: &LabelRestriction) {
        self.must_be_present |= other.must_be_present;
        self.must_be_absent |= other.must_be_absent;
        self.must_have_one_of_values = match (self.must_have_one_of_values.take(), &other.must_have_one_of_values) {
            (Some(a), Some(b)) => Some(a.intersection(b).cloned().collect()),
            (Some(a), None) => Some(a),
            (None, Some(b)) => Some(b.clone()),
            (None, None) => None,
        };
    }

    /// One of them holds (OR).
    fn union(&self, other: &LabelRestriction) -> LabelRestriction {
        LabelRestriction {
            must_be_present: self.must_be_present && other.must_be_present,
            must_be_absent: self.must_be_absent && other.must_be_absent,
            must_have_one_of_values: match (&self.must_have_one_of_values, &other.must_have_one_of_values) {
                (Some(a), Some(b)) => Some(a.union(b).cloned().collect()),
                _ => None,
            },
        }
    }
}

pub type Restrictions = BTreeMap<String, LabelRestriction>;

/// Restrictions of `node`, or of its negation when `negated` (De Morgan through the tree).
pub fn restrictions(node: &Node, negated: bool) -> Restrictions {
    let mut out = Restrictions::new();
    match (node, negated) {
        (Node::All | Node::Global, _) => {}
        (Node::Has(k), false) => {
            out.insert(k.clone(), LabelRestriction::present());
        }
        (Node::Has(k), true) => {
            out.insert(k.clone(), LabelRestriction { must_be_absent: true, ..Default::default() });
        }
        (Node::Eq(k, v), false) | (Node::Ne(k, v), true) => {
            out.insert(k.clone(), LabelRestriction::values([v.clone()]));
        }
        (Node::In(k, vs), false) | (Node::NotIn(k, vs), true) => {
            out.insert(k.clone(), LabelRestriction::values(vs.iter().cloned()));
        }
        (Node::Contains(k, _) | Node::StartsWith(k, _) | Node::EndsWith(k, _), false) => {
            out.insert(k.clone(), LabelRestriction::present());
        }
        // Negated comparisons also match endpoints without the label: nothing to index.
        (Node::Eq(..) | Node::In(..) | Node::Contains(..) | Node::StartsWith(..) | Node::EndsWith(..), true)
        | (Node::Ne(..) | Node::NotIn(..), false) => {}
        (Node::Not(n), neg) => return restrictions(n, !neg),
        (Node::And(ns), false) | (Node::Or(ns), true) => {
            for n in ns {
                for (k, r) in restrictions(n, negated) {
                    out.entry(k).or_default().intersect(&r);
                }
            }
        }
        (Node::Or(ns), false) | (Node::And(ns), true) => {
            let mut iter = ns.iter();
            if let Some(first) = iter.next() {
                out = restrictions(first, negated);
                for n in iter {
                    let other = restrictions(n, negated);
                    out = out
                        .iter()
                        .filter_map(|(k, r)| other.get(k).map(|o| (k.clone(), r.union(o))))
                        .filter(|(_, r)| !r.is_empty())
                        .collect();
                }
            }
        }
    }
    out
}
