//! Tier ordering: tiers ranked by their order (unset last) then name, each with its default
//! action, and the total order of policies within them.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use super::Model;
use crate::engine::cow::FastMap;
use crate::engine::spec::TierSpec;
use crate::engine::Action;

struct TierEntry {
    default: Action,
    rank: u32,
}

/// The tiers of the last delta that named them, ranked.
#[derive(Default)]
pub(super) struct TierOrder {
    tiers: FastMap<u32, TierEntry>,
    ids: HashMap<String, u32>,
}

impl TierOrder {
    /// Replaces the tiers with `tiers`, ranked: order (unset last), then name.
    fn set(&mut self, tiers: &[TierSpec]) {
        let mut order: Vec<&TierSpec> = tiers.iter().collect();
        order.sort_by(|a, b| {
            a.order
                .is_none()
                .cmp(&b.order.is_none())
                .then_with(|| a.order.unwrap_or(0.0).total_cmp(&b.order.unwrap_or(0.0)))
                .then_with(|| a.name.cmp(&b.name))
        });
        self.tiers.clear();
        self.ids.clear();
        for (rank, t) in order.into_iter().enumerate() {
            let default = Action::parse(&t.default_action).unwrap_or(Action::Deny);
            self.tiers.insert(t.id, TierEntry { default, rank: rank as u32 });
            self.ids.insert(t.name.clone(), t.id);
        }
    }

    pub(super) fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// A tier's rank (an unknown tier after every known one).
    pub(super) fn rank(&self, tier: u32) -> u32 {
        self.tiers.get(&tier).map_or(u32::MAX, |t| t.rank)
    }

    /// A tier's default action (an unknown tier's: deny).
    pub(super) fn default_action(&self, tier: u32) -> Action {
        self.tiers.get(&tier).map_or(Action::Deny, |t| t.default)
    }
}

/// Total order of policies within their tiers (felix's policy_sorter): tier, order (unset
/// last), kind, namespace, name; the id last so the order is total even for equal names.
#[derive(Clone, Debug)]
pub(super) struct SortKey {
    pub(super) tier_rank: u32,
    pub(super) order: Option<f64>,
    pub(super) kind: Arc<str>,
    pub(super) namespace: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) id: u32,
}

impl SortKey {
    pub(super) fn cmp(&self, other: &SortKey) -> Ordering {
        self.tier_rank
            .cmp(&other.tier_rank)
            .then_with(|| self.order.is_none().cmp(&other.order.is_none()))
            .then_with(|| self.order.unwrap_or(0.0).total_cmp(&other.order.unwrap_or(0.0)))
            .then_with(|| self.kind.cmp(&other.kind))
            .then_with(|| self.namespace.cmp(&other.namespace))
            .then_with(|| self.name.cmp(&other.name))
            .then_with(|| self.id.cmp(&other.id))
    }
}

impl Model {
    pub(super) fn set_tiers(&mut self, tiers: &[TierSpec]) {
        self.tiers.set(tiers);
        let ids: Vec<u32> = self.policies.keys().copied().collect();
        for id in ids {
            let name = self.policies[&id].spec.tier.clone();
            if let Some(tier) = self.tiers.id(&name) {
                self.policies.get_mut(&id).expect("policy").tier = tier;
            }
        }
        // Tier order and defaults are inside every program.
        self.programs.clear_programs();
        let local: Vec<u32> = self.identities.keys().copied().collect();
        self.dirty.extend(local);
    }
}
