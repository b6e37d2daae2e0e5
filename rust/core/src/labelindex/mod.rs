//! Incremental label index: which endpoints each selector matches, kept up to date as
//! selectors, endpoints and their "parents" (namespaces) come, change and go. One concept in one
//! file: the index's tables and the evaluations that keep them consistent with each other.
//!
//! The idea is Calico's label-restriction index. Every selector is filed under the one label
//! restriction it implies that narrows the most ([`IndexStrategy`]): a required key with a set of
//! values (`app == "x"`, `tier in {...}`) beats a bare required key (`has(k)`); a selector with
//! no restriction to index on (`all()`, `a != "x"`, pure negations) goes to a scanned set, and a
//! selector whose restrictions contradict themselves can never match and is filed nowhere.
//!
//! - An endpoint change evaluates only the candidate selectors: those filed under one of the
//!   endpoint's (key, value) pairs or keys, plus the scanned set; and of those (and of the
//!   selectors it matched before) only the ones that mention a label whose value changed — a
//!   selector's result depends on the labels it names and nothing else.
//! - A selector change evaluates only the candidate endpoints, found through a reverse index
//!   key → value → endpoints.
//!
//! Parents: an endpoint may name a parent (its namespace). The parent's labels are visible on
//! the endpoint under a prefix (Calico's `pcns.`), and the endpoint's own labels win over an
//! inherited label of the same name. `upsert_parent` changes the labels every child inherits
//! without touching the children's own labels; each child is then re-checked against the
//! selectors that mention a changed inherited label.
//!
//! Every change of a match can be recorded as a [`MatchEvent`] (Calico's OnMatchStarted /
//! OnMatchStopped) for a consumer that maintains IP sets: replaying the events from an empty
//! state gives exactly the current match sets.

mod idhash;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::mem;

use crate::selector::{Labels, Node, Selector};
use idhash::SlotSet;

/// Labels of one endpoint or parent.
pub type LabelMap = BTreeMap<String, String>;

/// Prefix under which a parent's labels are visible on its endpoints (Calico's namespace prefix).
pub const DEFAULT_PARENT_PREFIX: &str = "pcns.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchChange {
    Started,
    Stopped,
}

/// A selector started or stopped matching an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatchEvent<S, E> {
    pub selector: S,
    pub endpoint: E,
    pub change: MatchChange,
}

/// Where a selector is filed in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexStrategy {
    /// Candidates are the endpoints whose label `key` has one of `values` (sorted).
    Values { key: String, values: Vec<String> },
    /// Candidates are the endpoints that have label `key`.
    Present { key: String },
    /// No restriction to index on: evaluated against every endpoint that changes.
    Scanned,
    /// The selector's restrictions contradict each other: it matches nothing.
    Never,
}

impl IndexStrategy {
    /// The most selective restriction of `selector`: values over presence, fewer values
    /// better, and on a tie a label of the endpoint's own over one inherited under
    /// `parent_prefix` (a namespace label is shared by every endpoint of the namespace).
    /// Ties after that go to the first key in sort order, so the choice is deterministic.
    pub fn for_selector(selector: &Selector, parent_prefix: &str) -> IndexStrategy {
        let mut best: Option<((u8, usize, bool), IndexStrategy)> = None;
        for (key, r) in selector.restrictions() {
            let impossible = (r.must_be_present || r.must_have_one_of_values.is_some()) && r.must_be_absent;
            if impossible || r.must_have_one_of_values.as_ref().is_some_and(|vs| vs.is_empty()) {
                return IndexStrategy::Never;
            }
            let inherited = !parent_prefix.is_empty() && key.starts_with(parent_prefix);
            let (score, strategy) = match r.must_have_one_of_values {
                Some(vs) => ((0, vs.len(), inherited), IndexStrategy::Values { key, values: vs.into_iter().collect() }),
                None if r.must_be_present => ((1, 0, inherited), IndexStrategy::Present { key }),
                None => continue,
            };
            if best.as_ref().is_none_or(|(b, _)| score < *b) {
                best = Some((score, strategy));
            }
        }
        best.map_or(IndexStrategy::Scanned, |(_, s)| s)
    }
}

/// Dense storage with stable `u32` slots and slot reuse.
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab { items: Vec::new(), free: Vec::new() }
    }

    fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(item);
                slot
            }
            None => {
                let slot = u32::try_from(self.items.len()).expect("more than 2^32 entries in a label index");
                self.items.push(Some(item));
                slot
            }
        }
    }

    fn remove(&mut self, slot: u32) -> T {
        let item = self.items[slot as usize].take().expect("label index: removing a free slot");
        self.free.push(slot);
        item
    }

    fn get(&self, slot: u32) -> &T {
        self.items[slot as usize].as_ref().expect("label index: dangling slot")
    }

    fn get_mut(&mut self, slot: u32) -> &mut T {
        self.items[slot as usize].as_mut().expect("label index: dangling slot")
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items.iter().enumerate().filter_map(|(i, t)| t.as_ref().map(|t| (i as u32, t)))
    }
}

struct SelEntry<S> {
    id: S,
    selector: Selector,
    /// Interned ids of the label keys the selector mentions, sorted.
    keys: Vec<u32>,
    strategy: IndexStrategy,
    /// The selector is exactly its strategy's restriction (`k == v`, `k in {..}`, `has(k)`,
    /// `all()`): finding it through the index proves the match, no evaluation needed.
    exact: bool,
    matches: SlotSet,
}

struct EpEntry<E> {
    id: E,
    labels: LabelMap,
    parent: Option<u32>,
    matches: SlotSet,
}

struct ParentEntry<P> {
    id: P,
    /// The parent's labels with the prefix already applied.
    labels: LabelMap,
    /// Whether `upsert_parent` set it (as opposed to only being named by endpoints).
    known: bool,
    children: SlotSet,
}

#[derive(Default)]
struct KeySelectors {
    present: SlotSet,
    by_value: HashMap<String, SlotSet>,
}

/// An endpoint's labels as selectors see them: its own, then its parent's (prefixed).
#[derive(Clone, Copy)]
struct Effective<'a> {
    own: &'a LabelMap,
    parent: Option<&'a LabelMap>,
}

impl Labels for Effective<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match self.own.get(key) {
            Some(v) => Some(v.as_str()),
            None => self.parent.and_then(|p| p.get(key)).map(String::as_str),
        }
    }
}

impl<'a> Effective<'a> {
    fn pairs(self) -> impl Iterator<Item = (&'a str, &'a str)> {
        let own = self.own;
        own.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(
            self.parent
                .into_iter()
                .flat_map(|p| p.iter())
                .filter(move |(k, _)| !own.contains_key(k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
    }

    fn to_map(self) -> LabelMap {
        self.pairs().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }
}

/// What changed in an endpoint's effective labels.
#[derive(Default)]
struct Delta {
    /// Keys whose value changed, appeared or went (sorted, unique).
    changed: Vec<String>,
    /// Interned ids of the changed keys some selector mentions (sorted, unique).
    changed_ids: Vec<u32>,
    removed: Vec<(String, String)>,
    added: Vec<(String, String)>,
}

impl Delta {
    fn between(old: Effective<'_>, new: Effective<'_>) -> Delta {
        let mut d = Delta::default();
        for (k, v) in old.pairs() {
            if new.get(k) != Some(v) {
                d.removed.push((k.to_owned(), v.to_owned()));
                d.changed.push(k.to_owned());
            }
        }
        for (k, v) in new.pairs() {
            if old.get(k) != Some(v) {
                d.added.push((k.to_owned(), v.to_owned()));
                d.changed.push(k.to_owned());
            }
        }
        d.changed.sort_unstable();
        d.changed.dedup();
        d
    }
}

/// Whether two sorted key-id lists share a key.
fn mentions_any(keys: &[u32], changed: &[u32]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < keys.len() && j < changed.len() {
        match keys[i].cmp(&changed[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

static EMPTY_LABELS: LabelMap = BTreeMap::new();

/// Whether the selector says no more than the restriction it is filed under.
fn is_exact(selector: &Selector) -> bool {
    matches!(selector.root(), Node::All | Node::Global | Node::Has(_) | Node::Eq(..) | Node::In(..))
}

/// The index. `S`: selector ids, `E`: endpoint ids, `P`: parent (namespace) ids.
pub struct LabelIndex<S, E, P = String> {
    prefix: String,
    sels: Slab<SelEntry<S>>,
    sel_slots: HashMap<S, u32>,
    eps: Slab<EpEntry<E>>,
    ep_slots: HashMap<E, u32>,
    parents: Slab<ParentEntry<P>>,
    parent_slots: HashMap<P, u32>,
    /// key → selectors filed under `Present{key}` and, per value, under `Values{key, ..}`.
    sel_index: HashMap<String, KeySelectors>,
    scanned: SlotSet,
    /// key → value → endpoints whose effective labels have it.
    ep_index: HashMap<String, HashMap<String, SlotSet>>,
    /// Ids of every label key a selector has mentioned (kept: keys are few and reused).
    key_ids: HashMap<String, u32>,
    record_events: bool,
    events: Vec<MatchEvent<S, E>>,
    evaluations: u64,
}

impl<S, E, P> Default for LabelIndex<S, E, P>
where
    S: Hash + Eq + Clone,
    E: Hash + Eq + Clone,
    P: Hash + Eq + Clone,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<S, E, P> LabelIndex<S, E, P>
where
    S: Hash + Eq + Clone,
    E: Hash + Eq + Clone,
    P: Hash + Eq + Clone,
{
    /// An empty index; parents' labels are visible under [`DEFAULT_PARENT_PREFIX`].
    pub fn new() -> Self {
        Self::with_parent_prefix(DEFAULT_PARENT_PREFIX)
    }

    pub fn with_parent_prefix(prefix: &str) -> Self {
        LabelIndex {
            prefix: prefix.to_owned(),
            sels: Slab::new(),
            sel_slots: HashMap::new(),
            eps: Slab::new(),
            ep_slots: HashMap::new(),
            parents: Slab::new(),
            parent_slots: HashMap::new(),
            sel_index: HashMap::new(),
            scanned: SlotSet::default(),
            ep_index: HashMap::new(),
            key_ids: HashMap::new(),
            record_events: false,
            events: Vec::new(),
            evaluations: 0,
        }
    }

    pub fn parent_prefix(&self) -> &str {
        &self.prefix
    }

    /// Record match changes for [`take_events`](Self::take_events) from now on (off by default,
    /// so an index nobody drains does not grow a log).
    pub fn set_record_events(&mut self, on: bool) {
        self.record_events = on;
        if !on {
            self.events.clear();
        }
    }

    pub fn records_events(&self) -> bool {
        self.record_events
    }

    /// The match changes recorded since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<MatchEvent<S, E>> {
        mem::take(&mut self.events)
    }

    /// Selector evaluations done so far (how much work the index saved is visible in tests).
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    pub fn selector_count(&self) -> usize {
        self.sel_slots.len()
    }

    pub fn endpoint_count(&self) -> usize {
        self.ep_slots.len()
    }

    pub fn contains_selector(&self, id: &S) -> bool {
        self.sel_slots.contains_key(id)
    }

    pub fn contains_endpoint(&self, id: &E) -> bool {
        self.ep_slots.contains_key(id)
    }

    pub fn strategy(&self, id: &S) -> Option<&IndexStrategy> {
        self.sel_slots.get(id).map(|&s| &self.sels.get(s).strategy)
    }

    /// Endpoints `id` matches (None: no such selector).
    pub fn matching_endpoints(&self, id: &S) -> Option<impl Iterator<Item = &E> + '_> {
        let slot = *self.sel_slots.get(id)?;
        Some(self.sels.get(slot).matches.iter().map(move |&e| &self.eps.get(e).id))
    }

    /// Selectors that match endpoint `id` (None: no such endpoint).
    pub fn matching_selectors(&self, id: &E) -> Option<impl Iterator<Item = &S> + '_> {
        let slot = *self.ep_slots.get(id)?;
        Some(self.eps.get(slot).matches.iter().map(move |&s| &self.sels.get(s).id))
    }

    /// The labels selectors see on endpoint `id`: its own plus its parent's under the prefix.
    pub fn effective_labels(&self, id: &E) -> Option<LabelMap> {
        let slot = *self.ep_slots.get(id)?;
        Some(self.effective(slot).to_map())
    }

    fn effective(&self, ep_slot: u32) -> Effective<'_> {
        let ep = self.eps.get(ep_slot);
        Effective { own: &ep.labels, parent: ep.parent.map(|p| &self.parents.get(p).labels) }
    }

    fn key_id(&mut self, key: &str) -> u32 {
        if let Some(&id) = self.key_ids.get(key) {
            return id;
        }
        let id = u32::try_from(self.key_ids.len()).expect("more than 2^32 label keys");
        self.key_ids.insert(key.to_owned(), id);
        id
    }

    /// Fills `delta.changed_ids` from `delta.changed`.
    fn intern_changed(&self, mut delta: Delta) -> Delta {
        delta.changed_ids = delta.changed.iter().filter_map(|k| self.key_ids.get(k).copied()).collect();
        delta.changed_ids.sort_unstable();
        delta
    }

    fn emit(&mut self, sel: u32, ep: u32, change: MatchChange) {
        if self.record_events {
            let selector = self.sels.get(sel).id.clone();
            let endpoint = self.eps.get(ep).id.clone();
            self.events.push(MatchEvent { selector, endpoint, change });
        }
    }

    // ---- selectors ------------------------------------------------------------------------

    /// Adds selector `id`, or replaces it (only the difference in matches is reported).
    pub fn add_selector(&mut self, id: S, selector: Selector) {
        let strategy = IndexStrategy::for_selector(&selector, &self.prefix);
        let exact = is_exact(&selector);
        let mut keys: Vec<u32> = selector.keys().into_iter().map(|k| self.key_id(k)).collect();
        keys.sort_unstable();
        let (slot, old_matches) = match self.sel_slots.get(&id) {
            Some(&slot) => {
                let se = self.sels.get_mut(slot);
                let old_strategy = mem::replace(&mut se.strategy, strategy.clone());
                se.selector = selector;
                se.keys = keys;
                se.exact = exact;
                let old = mem::take(&mut se.matches);
                self.unfile_selector(slot, &old_strategy);
                (slot, old)
            }
            None => {
                let entry = SelEntry {
                    id: id.clone(),
                    selector,
                    keys,
                    strategy: strategy.clone(),
                    exact,
                    matches: SlotSet::default(),
                };
                let slot = self.sels.insert(entry);
                self.sel_slots.insert(id, slot);
                (slot, SlotSet::default())
            }
        };
        let new_matches = self.scan_candidates(slot, &strategy);
        self.file_selector(slot, &strategy);
        let stopped: Vec<u32> = old_matches.iter().copied().filter(|e| !new_matches.contains(e)).collect();
        let started: Vec<u32> = new_matches.iter().copied().filter(|e| !old_matches.contains(e)).collect();
        self.sels.get_mut(slot).matches = new_matches;
        for e in stopped {
            self.eps.get_mut(e).matches.remove(&slot);
            self.emit(slot, e, MatchChange::Stopped);
        }
        for e in started {
            self.eps.get_mut(e).matches.insert(slot);
            self.emit(slot, e, MatchChange::Started);
        }
    }

    /// Removes selector `id`; false if there was none.
    pub fn remove_selector(&mut self, id: &S) -> bool {
        let Some(slot) = self.sel_slots.get(id).copied() else { return false };
        let strategy = self.sels.get(slot).strategy.clone();
        self.unfile_selector(slot, &strategy);
        let matches = mem::take(&mut self.sels.get_mut(slot).matches);
        for e in matches {
            self.eps.get_mut(e).matches.remove(&slot);
            self.emit(slot, e, MatchChange::Stopped);
        }
        self.sel_slots.remove(id);
        self.sels.remove(slot);
        true
    }

    /// Endpoints among the strategy's candidates that selector `slot` matches.
    fn scan_candidates(&mut self, slot: u32, strategy: &IndexStrategy) -> SlotSet {
        let selector = &self.sels.get(slot).selector;
        let exact = self.sels.get(slot).exact;
        let mut out = SlotSet::default();
        let mut evaluations = 0u64;
        let mut check = |e: u32| {
            if exact {
                out.insert(e);
                return;
            }
            evaluations += 1;
            let ep = self.eps.get(e);
            let eff = Effective { own: &ep.labels, parent: ep.parent.map(|p| &self.parents.get(p).labels) };
            if selector.matches(&eff) {
                out.insert(e);
            }
        };
        match strategy {
            IndexStrategy::Never => {}
            IndexStrategy::Values { key, values } => {
                if let Some(by_value) = self.ep_index.get(key) {
                    for v in values {
                        for &e in by_value.get(v).into_iter().flatten() {
                            check(e);
                        }
                    }
                }
            }
            IndexStrategy::Present { key } => {
                for eps in self.ep_index.get(key).into_iter().flat_map(|m| m.values()) {
                    for &e in eps {
                        check(e);
                    }
                }
            }
            IndexStrategy::Scanned => {
                for (e, _) in self.eps.iter() {
                    check(e);
                }
            }
        }
        self.evaluations += evaluations;
        out
    }

    fn file_selector(&mut self, slot: u32, strategy: &IndexStrategy) {
        match strategy {
            IndexStrategy::Never => {}
            IndexStrategy::Scanned => {
                self.scanned.insert(slot);
            }
            IndexStrategy::Present { key } => {
                self.sel_index.entry(key.clone()).or_default().present.insert(slot);
            }
            IndexStrategy::Values { key, values } => {
                let ks = self.sel_index.entry(key.clone()).or_default();
                for v in values {
                    ks.by_value.entry(v.clone()).or_default().insert(slot);
                }
            }
        }
    }

    fn unfile_selector(&mut self, slot: u32, strategy: &IndexStrategy) {
        match strategy {
            IndexStrategy::Never => {}
            IndexStrategy::Scanned => {
                self.scanned.remove(&slot);
            }
            IndexStrategy::Present { key } | IndexStrategy::Values { key, .. } => {
                let Some(ks) = self.sel_index.get_mut(key) else { return };
                if let IndexStrategy::Values { values, .. } = strategy {
                    for v in values {
                        if let Some(set) = ks.by_value.get_mut(v) {
                            set.remove(&slot);
                            if set.is_empty() {
                                ks.by_value.remove(v);
                            }
                        }
                    }
                } else {
                    ks.present.remove(&slot);
                }
                if ks.present.is_empty() && ks.by_value.is_empty() {
                    self.sel_index.remove(key);
                }
            }
        }
    }

    // ---- endpoints ------------------------------------------------------------------------

    /// Adds or updates endpoint `id` with its own labels and no parent.
    pub fn upsert_endpoint(&mut self, id: E, labels: LabelMap) {
        self.upsert_endpoint_with_parent(id, labels, None);
    }

    /// Adds or updates endpoint `id`; `parent`'s labels (see [`upsert_parent`](Self::upsert_parent))
    /// are visible on it under the prefix. A parent not yet known contributes no labels.
    pub fn upsert_endpoint_with_parent(&mut self, id: E, labels: LabelMap, parent: Option<P>) {
        let new_parent = parent.map(|p| self.parent_slot(p));
        let Some(&slot) = self.ep_slots.get(&id) else {
            let entry = EpEntry { id: id.clone(), labels, parent: new_parent, matches: SlotSet::default() };
            let slot = self.eps.insert(entry);
            self.ep_slots.insert(id, slot);
            if let Some(p) = new_parent {
                self.parents.get_mut(p).children.insert(slot);
            }
            let delta = Delta::between(Effective { own: &EMPTY_LABELS, parent: None }, self.effective(slot));
            self.apply(slot, &delta, true);
            return;
        };
        let old_parent = self.eps.get(slot).parent;
        let delta = {
            let old = self.effective(slot);
            let new = Effective { own: &labels, parent: new_parent.map(|p| &self.parents.get(p).labels) };
            self.intern_changed(Delta::between(old, new))
        };
        let ep = self.eps.get_mut(slot);
        ep.labels = labels;
        ep.parent = new_parent;
        if old_parent != new_parent {
            if let Some(p) = new_parent {
                self.parents.get_mut(p).children.insert(slot);
            }
            if let Some(p) = old_parent {
                self.parents.get_mut(p).children.remove(&slot);
                self.release_parent(p);
            }
        }
        self.apply(slot, &delta, false);
    }

    /// Removes endpoint `id`; false if there was none.
    pub fn remove_endpoint(&mut self, id: &E) -> bool {
        let Some(slot) = self.ep_slots.get(id).copied() else { return false };
        let delta = Delta::between(self.effective(slot), Effective { own: &EMPTY_LABELS, parent: None });
        self.unindex_pairs(slot, &delta.removed);
        let matches = mem::take(&mut self.eps.get_mut(slot).matches);
        for s in matches {
            self.sels.get_mut(s).matches.remove(&slot);
            self.emit(s, slot, MatchChange::Stopped);
        }
        if let Some(p) = self.eps.get(slot).parent {
            self.parents.get_mut(p).children.remove(&slot);
            self.release_parent(p);
        }
        self.ep_slots.remove(id);
        self.eps.remove(slot);
        true
    }

    // ---- parents --------------------------------------------------------------------------

    /// Sets the labels of parent `id` (unprefixed: the index adds the prefix); every endpoint
    /// naming it is re-checked against the selectors that mention a changed inherited label.
    pub fn upsert_parent(&mut self, id: P, labels: LabelMap) {
        let prefixed: LabelMap = labels.into_iter().map(|(k, v)| (format!("{}{k}", self.prefix), v)).collect();
        let slot = self.parent_slot(id);
        let pe = self.parents.get_mut(slot);
        pe.known = true;
        let old = mem::replace(&mut pe.labels, prefixed);
        self.reparent_children(slot, &old);
    }

    /// Forgets parent `id`'s labels (its endpoints keep naming it and see no inherited labels
    /// until it comes back); false if it was not known.
    pub fn remove_parent(&mut self, id: &P) -> bool {
        let Some(slot) = self.parent_slots.get(id).copied() else { return false };
        let pe = self.parents.get_mut(slot);
        let was_known = mem::replace(&mut pe.known, false);
        let old = mem::take(&mut pe.labels);
        self.reparent_children(slot, &old);
        self.release_parent(slot);
        was_known
    }

    fn reparent_children(&mut self, slot: u32, old: &LabelMap) {
        let children: Vec<u32> = self.parents.get(slot).children.iter().copied().collect();
        for child in children {
            let delta = {
                let new = self.effective(child);
                self.intern_changed(Delta::between(Effective { own: new.own, parent: Some(old) }, new))
            };
            self.apply(child, &delta, false);
        }
    }

    fn parent_slot(&mut self, id: P) -> u32 {
        if let Some(&slot) = self.parent_slots.get(&id) {
            return slot;
        }
        let entry = ParentEntry { id: id.clone(), labels: LabelMap::new(), known: false, children: SlotSet::default() };
        let slot = self.parents.insert(entry);
        self.parent_slots.insert(id, slot);
        slot
    }

    /// Frees a parent entry nobody set and nobody names.
    fn release_parent(&mut self, slot: u32) {
        let pe = self.parents.get(slot);
        if !pe.known && pe.children.is_empty() {
            let pe = self.parents.remove(slot);
            self.parent_slots.remove(&pe.id);
        }
    }

    // ---- the incremental step -------------------------------------------------------------

    fn unindex_pairs(&mut self, slot: u32, pairs: &[(String, String)]) {
        for (k, v) in pairs {
            if let Some(by_value) = self.ep_index.get_mut(k) {
                if let Some(set) = by_value.get_mut(v) {
                    set.remove(&slot);
                    if set.is_empty() {
                        by_value.remove(v);
                        if by_value.is_empty() {
                            self.ep_index.remove(k);
                        }
                    }
                }
            }
        }
    }

    /// Brings the reverse index and the matches of endpoint `slot` (already holding its new
    /// labels and parent) up to date with `delta`. `fresh`: the endpoint is new.
    fn apply(&mut self, slot: u32, delta: &Delta, fresh: bool) {
        self.unindex_pairs(slot, &delta.removed);
        for (k, v) in &delta.added {
            // Look up before inserting so an existing key or value costs no allocation.
            let by_value = match self.ep_index.get_mut(k.as_str()) {
                Some(m) => m,
                None => self.ep_index.entry(k.clone()).or_default(),
            };
            match by_value.get_mut(v.as_str()) {
                Some(set) => {
                    set.insert(slot);
                }
                None => {
                    by_value.entry(v.clone()).or_default().insert(slot);
                }
            }
        }
        if delta.changed_ids.is_empty() && !fresh {
            // No selector mentions a changed label: no match can have changed.
            return;
        }
        let mut evaluations = 0u64;
        let (stopped, started) = {
            let ep = self.eps.get(slot);
            let eff = Effective { own: &ep.labels, parent: ep.parent.map(|p| &self.parents.get(p).labels) };
            let sels = &self.sels;
            let mut stopped = Vec::new();
            for &s in &ep.matches {
                let se = sels.get(s);
                if mentions_any(&se.keys, &delta.changed_ids) {
                    evaluations += 1;
                    if !se.selector.matches(&eff) {
                        stopped.push(s);
                    }
                }
            }
            let mut started = Vec::new();
            let mut consider = |s: u32| {
                if ep.matches.contains(&s) {
                    return;
                }
                let se = sels.get(s);
                if !fresh && !mentions_any(&se.keys, &delta.changed_ids) {
                    return;
                }
                if se.exact {
                    started.push(s);
                    return;
                }
                evaluations += 1;
                if se.selector.matches(&eff) {
                    started.push(s);
                }
            };
            // Each selector is filed under one key, and an endpoint has one value per key, so
            // no selector comes up twice here.
            for (k, v) in eff.pairs() {
                if let Some(ks) = self.sel_index.get(k) {
                    ks.present.iter().for_each(|&s| consider(s));
                    if let Some(set) = ks.by_value.get(v) {
                        set.iter().for_each(|&s| consider(s));
                    }
                }
            }
            self.scanned.iter().for_each(|&s| consider(s));
            (stopped, started)
        };
        self.evaluations += evaluations;
        for s in stopped {
            self.eps.get_mut(slot).matches.remove(&s);
            self.sels.get_mut(s).matches.remove(&slot);
            self.emit(s, slot, MatchChange::Stopped);
        }
        for s in started {
            self.eps.get_mut(slot).matches.insert(s);
            self.sels.get_mut(s).matches.insert(slot);
            self.emit(s, slot, MatchChange::Started);
        }
    }

    /// Checks the index's internal bookkeeping against a from-scratch recomputation (for tests;
    /// O(endpoints × selectors)). Returns the first inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expect_ep_index: HashMap<&str, HashMap<&str, Vec<u32>>> = HashMap::new();
        for (e, ep) in self.eps.iter() {
            let eff = self.effective(e);
            for (k, v) in eff.pairs() {
                expect_ep_index.entry(k).or_default().entry(v).or_default().push(e);
            }
            for (s, se) in self.sels.iter() {
                let m = se.selector.matches(&eff);
                if m != ep.matches.contains(&s) || m != se.matches.contains(&e) {
                    return Err(format!("selector slot {s} vs endpoint slot {e}: matches is {m}, index disagrees"));
                }
            }
            if let Some(p) = ep.parent {
                if !self.parents.get(p).children.contains(&e) {
                    return Err(format!("endpoint slot {e} missing from its parent's children"));
                }
            }
        }
        let got: usize = self.ep_index.values().flat_map(|m| m.values()).map(|s| s.len()).sum();
        let want: usize = expect_ep_index.values().flat_map(|m| m.values()).map(Vec::len).sum();
        if got != want {
            return Err(format!("reverse index holds {got} entries, want {want}"));
        }
        for (k, by_value) in &expect_ep_index {
            for (v, eps) in by_value {
                let set = self.ep_index.get(*k).and_then(|m| m.get(*v));
                if eps.iter().any(|e| !set.is_some_and(|s| s.contains(e))) {
                    return Err(format!("reverse index misses {k}={v}"));
                }
            }
        }
        let filed: usize = self.scanned.len()
            + self
                .sel_index
                .values()
                .map(|ks| ks.present.len() + ks.by_value.values().map(|s| s.len()).sum::<usize>())
                .sum::<usize>();
        let want_filed: usize = self
            .sels
            .iter()
            .map(|(_, se)| match &se.strategy {
                IndexStrategy::Never => 0,
                IndexStrategy::Scanned | IndexStrategy::Present { .. } => 1,
                IndexStrategy::Values { values, .. } => values.len(),
            })
            .sum();
        if filed != want_filed {
            return Err(format!("selector index holds {filed} entries, want {want_filed}"));
        }
        for (_, pe) in self.parents.iter() {
            if !pe.known && pe.children.is_empty() {
                return Err("an unused parent entry was not freed".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
