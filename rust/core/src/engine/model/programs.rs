//! Programs: which policies apply to an identity per direction, in tier order, interned so equal
//! lists share one; and the prefix and port boundaries the decision memo's classes are built from.

use super::*;

impl Model {
    pub(super) fn sort_key(&self, policy: u32) -> SortKey {
        let p = &self.policies[&policy];
        SortKey {
            tier_rank: self.tiers.rank(p.tier),
            order: p.spec.order,
            kind: Arc::from(p.spec.kind.as_str()),
            namespace: Arc::from(p.spec.namespace.as_deref().unwrap_or("")),
            name: Arc::from(p.spec.name.as_str()),
            id: policy,
        }
    }

    /// The interned program of `policies` (already in evaluation order) in direction `d`.
    pub(super) fn intern_program(&mut self, d: Direction, policies: Vec<u32>) -> Arc<Program> {
        let (known, tiers) = (&self.policies, &self.tiers);
        self.programs.program(d, policies, |policies| {
            let mut stages: Vec<Stage> = Vec::new();
            for &pid in policies {
                let tier = known[&pid].tier;
                match stages.last_mut() {
                    Some(st) if st.tier == tier => st.policies.push(pid),
                    _ => {
                        let default = tiers.default_action(tier);
                        stages.push(Stage { tier, default, policies: vec![pid] })
                    }
                }
            }
            stages
        })
    }

    /// The interned list of these profiles.
    pub(super) fn intern_profiles(&mut self, ids: Vec<u32>) -> Arc<ProfileList> {
        self.programs.profiles(ids)
    }

    /// A policy's rules changed (not which identities it applies to, nor where): the programs
    /// listing it are made anew, to be compiled against the new rules, and the identities
    /// holding them take the new ones.
    pub(super) fn renew_programs_with(&mut self, policy: u32, subject: u32) {
        let renewed = self.programs.renew_with(policy);
        if renewed.is_empty() {
            return;
        }
        for id in self.set_members(subject) {
            let Some(rec) = self.snap.identities.get(id) else { continue };
            let ptrs = [0, 1].map(|d| Arc::as_ptr(&rec.programs[d]) as usize);
            if ptrs.iter().any(|p| renewed.contains_key(p)) {
                let rec = self.snap.identities.get_mut(id).expect("identity");
                for (d, ptr) in ptrs.iter().enumerate() {
                    if let Some(fresh) = renewed.get(ptr) {
                        rec.programs[d] = fresh.clone();
                    }
                }
            }
        }
    }

    /// Which policies apply to identity `id`, per direction, in evaluation order.
    pub(super) fn recompute_programs(&mut self, id: u32) {
        let Some(entry) = self.identities.get(&id) else { return };
        let ns = entry.ns;
        let local = matches!(entry.key.kind(), identity::KIND_POD | identity::KIND_HOST);
        if !local {
            return;
        }
        let mut applying: Vec<u32> = Vec::new();
        if let Some(sels) = self.index.matching_selectors(&id) {
            for sel in sels {
                if let Some(e) = self.sel_entries.get(sel) {
                    applying.extend(e.subject_of.iter().copied());
                }
            }
        }
        let mut keyed: Vec<(SortKey, u32)> = applying.iter().map(|&p| (self.sort_key(p), p)).collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut programs = Vec::with_capacity(2);
        for d in Direction::BOTH {
            let list: Vec<u32> =
                keyed.iter().map(|(_, p)| *p).filter(|p| self.policies[p].directions[d as usize]).collect();
            programs.push(self.intern_program(d, list));
        }
        let profiles = self.resolve_profiles(&self.identities[&id].key.profiles);
        let mut rels: Vec<u32> =
            applying.iter().flat_map(|p| self.policies[p].compiled.acquired.relatives.clone()).collect();
        rels.extend(profiles.iter().flat_map(|p| self.profiles[p].compiled.acquired.relatives.clone()));
        for rid in rels {
            if !self.relatives[&rid].per_ns.contains_key(&ns) {
                self.derive_relative(rid, ns);
            }
        }
        let profiles = self.intern_profiles(profiles);
        if let Some(rec) = self.snap.identities.get_mut(id) {
            rec.programs = [programs[0].clone(), programs[1].clone()];
            rec.profiles = profiles;
        }
    }

    pub(super) fn mark_matches_dirty(&mut self, sel: u32) {
        let members = self.set_members(sel);
        self.dirty.extend(members);
    }
}
