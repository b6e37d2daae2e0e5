//! The program cache: programs (per direction, a list of policies in evaluation order) and
//! profile lists, interned so identities with the same ones share one, and the ones made since
//! the last snapshot, compiled before it is handed out or on first use ([`Compile`]).

use std::collections::HashSet;
use std::sync::Arc;

use super::Compile;
use crate::engine::cow::FastMap;
use crate::engine::snapshot::{ProfileList, Program, Snapshot, Stage};
use crate::engine::Direction;

/// A program's key: its direction and its policies in evaluation order.
type ProgramKey = (Direction, Vec<u32>);

pub(super) struct ProgramCache {
    /// Each program's slot; a slot keeps its number while its program is renewed, so the
    /// index below does not change when a policy's rules do.
    programs: FastMap<ProgramKey, u32>,
    /// The programs by slot, with their keys; `None`: a free slot (in `free`).
    slots: Vec<Option<(ProgramKey, Arc<Program>)>>,
    free: Vec<u32>,
    /// For each policy, the slots of the programs listing it: a policy's change touches those
    /// alone, not every program (Calico's felix keeps the same index from a policy to what
    /// uses it).
    listing: FastMap<u32, HashSet<u32, crate::engine::cow::MixState>>,
    /// Profile lists, interned as programs are (their compiled form is shared too).
    profile_lists: FastMap<Vec<u32>, Arc<ProfileList>>,
    /// Programs and profile lists made since the last snapshot, compiled before it is handed
    /// out or left to first use (`compile`).
    fresh_programs: Vec<Arc<Program>>,
    fresh_profiles: Vec<Arc<ProfileList>>,
    compile: Compile,
}

impl Default for ProgramCache {
    fn default() -> Self {
        ProgramCache {
            programs: FastMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            listing: FastMap::default(),
            profile_lists: FastMap::default(),
            fresh_programs: Vec::new(),
            fresh_profiles: Vec::new(),
            compile: Compile::Built,
        }
    }
}

impl ProgramCache {
    pub(super) fn len(&self) -> usize {
        self.programs.len()
    }

    /// The interned program of `policies` in direction `d`, its stages made by `stages` if new.
    pub(super) fn program(
        &mut self,
        d: Direction,
        policies: Vec<u32>,
        stages: impl FnOnce(&[u32]) -> Vec<Stage>,
    ) -> Arc<Program> {
        let key = (d, policies);
        if let Some(&slot) = self.programs.get(&key) {
            return self.held(slot).clone();
        }
        let program = Arc::new(Program::new(d, stages(&key.1)));
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for &p in &key.1 {
            self.listing.entry(p).or_default().insert(slot);
        }
        self.programs.insert(key.clone(), slot);
        self.slots[slot as usize] = Some((key, program.clone()));
        self.fresh_programs.push(program.clone());
        program
    }

    fn held(&self, slot: u32) -> &Arc<Program> {
        &self.slots[slot as usize].as_ref().expect("an indexed slot holds a program").1
    }

    /// Empties `slot`: its program leaves the index.
    fn release(&mut self, slot: u32) {
        let Some((key, _)) = self.slots[slot as usize].take() else { return };
        for p in &key.1 {
            if let Some(set) = self.listing.get_mut(p) {
                set.remove(&slot);
                if set.is_empty() {
                    self.listing.remove(p);
                }
            }
        }
        self.programs.remove(&key);
        self.free.push(slot);
    }

    /// The slots of the programs listing `policy`.
    fn slots_listing(&self, policy: u32) -> Vec<u32> {
        self.listing.get(&policy).map(|slots| slots.iter().copied().collect()).unwrap_or_default()
    }

    /// The interned list of these profiles.
    pub(super) fn profiles(&mut self, ids: Vec<u32>) -> Arc<ProfileList> {
        if let Some(p) = self.profile_lists.get(&ids) {
            return p.clone();
        }
        let list = Arc::new(ProfileList::new(ids.clone()));
        self.profile_lists.insert(ids, list.clone());
        if !list.is_empty() {
            self.fresh_profiles.push(list.clone());
        }
        list
    }

    /// The programs listing `policy` made anew (to be compiled against its new rules): each
    /// old program's address to its successor, which takes its slot.
    pub(super) fn renew_with(&mut self, policy: u32) -> FastMap<usize, Arc<Program>> {
        let mut renewed: FastMap<usize, Arc<Program>> = FastMap::default();
        for slot in self.slots_listing(policy) {
            let held = &mut self.slots[slot as usize].as_mut().expect("an indexed slot holds a program").1;
            let fresh = Arc::new(held.renewed());
            let old = std::mem::replace(held, fresh.clone());
            renewed.insert(Arc::as_ptr(&old) as usize, fresh.clone());
            self.fresh_programs.push(fresh);
        }
        renewed
    }

    /// Forgets the programs listing `policy` (it went, or moved tier).
    pub(super) fn evict_with(&mut self, policy: u32) {
        for slot in self.slots_listing(policy) {
            self.release(slot);
        }
    }

    /// Forgets the profile lists naming `profile` (its rules changed or it went).
    pub(super) fn forget_profile_lists_with(&mut self, profile: u32) {
        self.profile_lists.retain(|ids, _| !ids.contains(&profile));
    }

    /// Forgets every program (tier order and defaults are inside each).
    pub(super) fn clear_programs(&mut self) {
        self.programs.clear();
        self.slots.clear();
        self.free.clear();
        self.listing.clear();
    }

    /// Forgets programs and profile lists no identity uses any more.
    pub(super) fn sweep(&mut self) {
        if self.programs.len() > 64 {
            let unused: Vec<u32> = (0..self.slots.len() as u32)
                .filter(|&s| self.slots[s as usize].as_ref().is_some_and(|(_, p)| Arc::strong_count(p) == 1))
                .collect();
            for slot in unused {
                self.release(slot);
            }
        }
        if self.profile_lists.len() > 64 {
            self.profile_lists.retain(|_, p| Arc::strong_count(p) > 1);
        }
    }

    pub(super) fn set_compile(&mut self, when: Compile) {
        self.compile = when;
    }

    /// Compiles what was made since the last call against `snap`, the state the next snapshot
    /// holds (rules are read from it), if `compile` says now; `first`: this is the first delta.
    pub(super) fn compile_fresh(&mut self, snap: &Snapshot, first: bool) {
        let programs = std::mem::take(&mut self.fresh_programs);
        let profiles = std::mem::take(&mut self.fresh_profiles);
        let eager = match self.compile {
            Compile::Always => true,
            Compile::Built => first,
            Compile::OnFirstUse => false,
        };
        if eager {
            for p in programs {
                if Arc::strong_count(&p) > 1 {
                    let _ = p.compiled(snap);
                }
            }
            for p in profiles {
                if Arc::strong_count(&p) > 1 {
                    for d in Direction::BOTH {
                        let _ = p.compiled(snap, d);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64: a fixed sequence of steps, without the `bench` feature's generator.
    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
        }

        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    impl ProgramCache {
        /// Whether `listing` says exactly which programs list each policy, and `programs`
        /// where each is (brute force).
        fn index_is_exact(&self) -> bool {
            let mut want: FastMap<u32, HashSet<u32, crate::engine::cow::MixState>> = FastMap::default();
            let mut held = 0;
            for (slot, entry) in self.slots.iter().enumerate() {
                let Some((key, _)) = entry else { continue };
                held += 1;
                if self.programs.get(key) != Some(&(slot as u32)) {
                    return false;
                }
                for &policy in &key.1 {
                    want.entry(policy).or_default().insert(slot as u32);
                }
            }
            let free: HashSet<u32> = self.free.iter().copied().collect();
            want == self.listing
                && held == self.programs.len()
                && free.len() == self.free.len()
                && free.iter().all(|&s| self.slots[s as usize].is_none())
                && held + free.len() == self.slots.len()
        }

        fn all(&self) -> impl Iterator<Item = &Arc<Program>> {
            self.slots.iter().flatten().map(|(_, p)| p)
        }
    }

    fn stages(policies: &[u32]) -> Vec<Stage> {
        vec![Stage { tier: 0, default: crate::engine::Action::Deny, policies: policies.to_vec() }]
    }

    #[test]
    fn the_policy_index_follows_every_change() {
        let mut r = Rng::new(7);
        let mut cache = ProgramCache::default();
        let mut held: Vec<Arc<Program>> = Vec::new();
        for step in 0..3000 {
            match r.below(6) {
                0 | 1 => {
                    let n = 1 + r.below(6);
                    let list: Vec<u32> = (0..n).map(|_| r.below(20) as u32).collect();
                    let d = if r.below(2) == 0 { Direction::Ingress } else { Direction::Egress };
                    held.push(cache.program(d, list, stages));
                }
                2 => {
                    let policy = r.below(20) as u32;
                    let renewed = cache.renew_with(policy);
                    for h in held.iter_mut() {
                        if let Some(fresh) = renewed.get(&(Arc::as_ptr(h) as usize)) {
                            *h = fresh.clone();
                        }
                    }
                    assert!(cache.all().all(|p| !p.lists(policy) || renewed.values().any(|f| Arc::ptr_eq(f, p))));
                }
                3 => cache.evict_with(r.below(20) as u32),
                4 => {
                    if !held.is_empty() {
                        held.swap_remove(r.below(held.len()));
                    }
                    cache.fresh_programs.clear();
                    cache.sweep();
                }
                _ => {
                    if r.below(50) == 0 {
                        cache.clear_programs();
                    }
                }
            }
            assert!(cache.index_is_exact(), "step {step}");
        }
    }
}
