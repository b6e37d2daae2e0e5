//! The program cache: programs (per direction, a list of policies in evaluation order) and
//! profile lists, interned so identities with the same ones share one, and the ones made since
//! the last snapshot, compiled before it is handed out or on first use ([`Compile`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::Compile;
use crate::engine::cow::FastMap;
use crate::engine::snapshot::{ProfileList, Program, Snapshot, Stage};
use crate::engine::Direction;

pub(super) struct ProgramCache {
    programs: HashMap<(Direction, Vec<u32>), Arc<Program>>,
    /// Profile lists, interned as programs are (their compiled form is shared too).
    profile_lists: HashMap<Vec<u32>, Arc<ProfileList>>,
    /// Programs and profile lists made since the last snapshot, compiled before it is handed
    /// out or left to first use (`compile`).
    fresh_programs: Vec<Arc<Program>>,
    fresh_profiles: Vec<Arc<ProfileList>>,
    compile: Compile,
}

impl Default for ProgramCache {
    fn default() -> Self {
        ProgramCache {
            programs: HashMap::new(),
            profile_lists: HashMap::new(),
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
        if let Some(p) = self.programs.get(&(d, policies.clone())) {
            return p.clone();
        }
        let program = Arc::new(Program::new(d, stages(&policies)));
        self.programs.insert((d, policies), program.clone());
        self.fresh_programs.push(program.clone());
        program
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
    /// old program's address to its successor.
    pub(super) fn renew_with(&mut self, policy: u32) -> FastMap<usize, Arc<Program>> {
        let mut renewed: FastMap<usize, Arc<Program>> = FastMap::default();
        let keys: Vec<(Direction, Vec<u32>)> =
            self.programs.iter().filter(|(_, p)| p.lists(policy)).map(|(k, _)| k.clone()).collect();
        for k in keys {
            let old = self.programs[&k].clone();
            let fresh = Arc::new(old.renewed());
            renewed.insert(Arc::as_ptr(&old) as usize, fresh.clone());
            self.fresh_programs.push(fresh.clone());
            self.programs.insert(k, fresh);
        }
        renewed
    }

    /// Forgets the programs listing `policy` (it went, or moved tier).
    pub(super) fn evict_with(&mut self, policy: u32) {
        self.programs.retain(|(_, list), _| !list.contains(&policy));
    }

    /// Forgets the profile lists naming `profile` (its rules changed or it went).
    pub(super) fn forget_profile_lists_with(&mut self, profile: u32) {
        self.profile_lists.retain(|ids, _| !ids.contains(&profile));
    }

    /// Forgets every program (tier order and defaults are inside each).
    pub(super) fn clear_programs(&mut self) {
        self.programs.clear();
    }

    /// Forgets programs and profile lists no identity uses any more.
    pub(super) fn sweep(&mut self) {
        if self.programs.len() > 64 {
            self.programs.retain(|_, p| Arc::strong_count(p) > 1);
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
