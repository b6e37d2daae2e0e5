//! Policies and profiles: filing, replacing and removing them, and the programs they renew.

use super::*;

impl Model {
    pub(super) fn upsert_policy(&mut self, mut spec: PolicySpec, subject_sel: Selector, pending: Option<PendingRules>) {
        let id = spec.id;
        spec.subject.selector = self.strings.intern(&spec.subject.selector);
        let tier = self.tiers.id(&spec.tier).expect("checked: the tier is known");
        let subject = self.acquire_selector(subject_sel);
        let compiled = self.compile_shared(&spec.ingress, &spec.egress, pending);
        if let Some((ingress, egress)) = &compiled.shared {
            // the lists held once, whichever delta brought this copy
            (spec.ingress, spec.egress) = (RuleSpecs::Rules(ingress.clone()), RuleSpecs::Rules(egress.clone()));
        }
        let mut directions = [false; 2];
        for t in &spec.types {
            if let Ok(d) = Direction::parse(t) {
                directions[d as usize] = true;
            }
        }
        let old = self.policies.remove(&id);
        let program_change = old.as_ref().is_none_or(|o| {
            o.subject != subject
                || o.tier != tier
                || o.directions != directions
                || o.spec.order != spec.order
                || o.spec.kind != spec.kind
                || o.spec.namespace != spec.namespace
                || o.spec.name != spec.name
        });
        if let Some(o) = &old {
            if program_change {
                self.mark_matches_dirty(o.subject);
            }
            if program_change {
                // Interned programs group this policy under its old tier and hold its old
                // rules compiled: the identities marked above make new ones.
                self.programs.evict_with(id);
            } else {
                // The same programs, the rules perhaps not: compiled anew.
                self.renew_programs_with(id, o.subject);
            }
            if let Some(e) = self.sel_entries.get_mut(&o.subject) {
                e.subject_of.retain(|&p| p != id);
            }
        }
        self.sel_entries.get_mut(&subject).expect("subject selector").subject_of.push(id);
        if program_change {
            self.mark_matches_dirty(subject);
        }
        let has_relatives = !compiled.acquired.relatives.is_empty();
        self.snap.policies.set(id, Some(compiled.rules.clone()));
        self.policies.insert(id, PolicyEntry { spec, tier, subject, directions, compiled });
        if has_relatives && !program_change {
            // Same programs, new relative peers: derive them for the subject's namespaces.
            let nss: HashSet<Option<u32>> =
                self.set_members(subject).iter().filter_map(|i| self.identities.get(i)).map(|e| e.ns).collect();
            let rels = self.policies[&id].compiled.acquired.relatives.clone();
            for rid in rels {
                for &ns in &nss {
                    self.derive_relative(rid, ns);
                }
            }
        }
        if let Some(o) = old {
            self.release_compiled(o.compiled);
            self.release_selector(o.subject);
        }
    }

    pub(super) fn remove_policy(&mut self, id: u32) {
        let Some(old) = self.policies.remove(&id) else { return };
        // The id may come back as another policy in another tier.
        self.programs.evict_with(id);
        self.mark_matches_dirty(old.subject);
        if let Some(e) = self.sel_entries.get_mut(&old.subject) {
            e.subject_of.retain(|&p| p != id);
        }
        self.snap.policies.set(id, None);
        self.release_compiled(old.compiled);
        self.release_selector(old.subject);
    }

    pub(super) fn upsert_profile(&mut self, mut spec: ProfileSpec, pending: Option<PendingRules>) {
        let id = spec.id;
        let compiled = self.compile_shared(&spec.ingress, &spec.egress, pending);
        if let Some((ingress, egress)) = &compiled.shared {
            (spec.ingress, spec.egress) = (RuleSpecs::Rules(ingress.clone()), RuleSpecs::Rules(egress.clone()));
        }
        self.snap.profiles.set(id, Some(compiled.rules.clone()));
        self.programs.forget_profile_lists_with(id);
        let name = spec.name.clone();
        let old = self.profiles.insert(id, ProfileEntry { spec, compiled });
        let mut renamed = None;
        if let Some(o) = old {
            if o.spec.name != name {
                self.profile_ids.remove(&o.spec.name);
                renamed = Some(o.spec.name.clone());
            }
            self.release_compiled(o.compiled);
        }
        self.profile_ids.insert(name.clone(), id);
        self.refresh_profiles(&name);
        if let Some(old_name) = renamed {
            self.refresh_profiles(&old_name);
        }
    }

    pub(super) fn remove_profile(&mut self, id: u32) {
        let Some(old) = self.profiles.remove(&id) else { return };
        self.programs.forget_profile_lists_with(id);
        self.snap.profiles.set(id, None);
        if self.profile_ids.get(&old.spec.name) == Some(&id) {
            self.profile_ids.remove(&old.spec.name);
        }
        self.refresh_profiles(&old.spec.name);
        self.release_compiled(old.compiled);
    }
}
