//! The selector registry: interned selectors, their identity sets and the label index's match
//! events that keep those sets current.

use super::*;

impl Model {
    /// Applies the index's match events to the identity sets (and marks identities whose
    /// subject matches changed).
    pub(super) fn drain_events(&mut self) {
        for ev in self.index.take_events() {
            let Some(entry) = self.sel_entries.get(&ev.selector) else { continue };
            if !entry.subject_of.is_empty() {
                self.dirty.insert(ev.endpoint);
            }
            if let Some(set) = self.snap.sets.get_mut(ev.selector) {
                let set = Arc::make_mut(set);
                match ev.change {
                    MatchChange::Started => set.insert(ev.endpoint),
                    MatchChange::Stopped => set.remove(ev.endpoint),
                };
                let on = set.contains(ev.endpoint);
                self.set_member_bit(ev.endpoint, ev.selector, on);
            }
        }
    }

    /// Keeps an identity's set bitmap (`IdRec::members`) in step with the sets.
    pub(super) fn set_member_bit(&mut self, identity: u32, set: u32, on: bool) {
        let Some(rec) = self.snap.identities.get(identity) else { return };
        if crate::engine::snapshot::bit(&rec.members, set) == on {
            return;
        }
        let rec = self.snap.identities.get_mut(identity).expect("identity");
        let w = (set / 64) as usize;
        if rec.members.len() <= w {
            let mut grown = rec.members.to_vec();
            grown.resize(w + 1, 0);
            rec.members = grown.into();
        }
        let bits = Arc::make_mut(&mut rec.members);
        if on {
            bits[w] |= 1 << (set % 64);
        } else {
            bits[w] &= !(1 << (set % 64));
        }
    }

    /// Makes every projected key of `selector` project onto identities, re-identifying the
    /// endpoints that carry a key seen for the first time.
    pub(super) fn reference_keys(&mut self, selector: &Selector) {
        let mut fresh = Vec::new();
        for key in selector.keys() {
            if !identity::is_projected_key(key) {
                continue;
            }
            let n = self.referenced.entry(key.to_string()).or_insert(0);
            *n += 1;
            if *n == 1 {
                fresh.push(key.to_string());
            }
        }
        if !fresh.is_empty() {
            self.reidentify(&fresh);
        }
    }

    pub(super) fn unreference_keys(&mut self, selector: &Selector) {
        // Keys stay projected once seen: identities are then finer than needed, never wrong,
        // and a policy that comes back does not split them again.
        for key in selector.keys() {
            if let Some(n) = self.referenced.get_mut(key) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Interns a selector: equal selectors share one id and one identity set.
    pub(super) fn acquire_selector(&mut self, selector: Selector) -> u32 {
        if let Some(&id) = self.selectors.get(&selector) {
            self.sel_entries.get_mut(&id).expect("interned selector").refs += 1;
            return id;
        }
        self.reference_keys(&selector);
        let id = self.selector_numbers.take();
        self.index.add_selector(id, selector.clone());
        // The new selector's own Started events are the set itself.
        let _ = self.index.take_events();
        let set = IdSet::from_iter(self.index.matching_endpoints(&id).into_iter().flatten().copied());
        for member in set.iter().collect::<Vec<u32>>() {
            self.set_member_bit(member, id, true);
        }
        self.snap.sets.set(id, Some(Arc::new(set)));
        self.selectors.insert(selector.clone(), id);
        self.sel_entries.insert(id, SelEntry { selector, refs: 1, subject_of: Vec::new() });
        id
    }

    pub(super) fn release_selector(&mut self, id: u32) {
        let entry = self.sel_entries.get_mut(&id).expect("released selector exists");
        entry.refs -= 1;
        if entry.refs > 0 {
            return;
        }
        let entry = self.sel_entries.remove(&id).expect("released selector exists");
        self.selectors.remove(&entry.selector);
        self.index.remove_selector(&id);
        let _ = self.index.take_events();
        for member in self.set_members(id) {
            self.set_member_bit(member, id, false);
        }
        self.snap.sets.set(id, None);
        self.unreference_keys(&entry.selector);
        self.selector_numbers.give_back(id);
    }

    pub(super) fn set_members(&self, sel: u32) -> Vec<u32> {
        self.snap.sets.get(sel).map(|s| s.iter().collect()).unwrap_or_default()
    }
}
