//! The engine's mutable state: deltas in, immutable snapshots out.
//!
//! [`Model::apply`] takes one [`Delta`] (objects added, changed or removed, by id), compiles
//! everything it brings first — a delta that does not compile changes nothing — and then updates
//! only what the delta touches:
//!
//! - an endpoint maps to an identity ([`super::identity`]); a new identity enters the label
//!   index, whose match events update the identity sets of the selectors it matches;
//! - a policy's subject and rule peers become composite selectors, interned (equal selectors
//!   share one set) and filed in the index; only identities the policy's subject matched
//!   before or after get their programs recomputed;
//! - a namespace relabel is a parent change in the index: only selectors mentioning a changed
//!   namespace label are re-evaluated, only for that namespace's identities.
//!
//! A program (per identity and direction: the policies that apply, grouped by tier in
//! evaluation order) is interned, so identities with the same policies share one. The snapshot
//! parts live in copy-on-write tables ([`super::cow`]): [`Model::snapshot`] clones their outer
//! tables only, and a later delta copies just the chunks it changes.

use crate::dns::{DomainFacts, DomainPattern};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::cow::FastMap;
use super::identity::{self, IdentityKey};
use super::classes::{ClassLpm, PortClasses};
use super::idset::IdSet;
use super::rules::{CEntity, CRule, CRules, IcmpMatch, LabelCond, NetList, PortMatch, ProtoSet};
use super::snapshot::{AddrRec, EpRec, IdRec, NetsetLpm, ProfileList, Program, ServiceRec, Snapshot, Stage, NO_NAMESPACE};
use super::spec::{
    Delta, EndpointSpec, EntitySpec, LabelMap, NetworkSetSpec, NodeSpec, PolicySpec, ProfileSpec, RuleSpec, RuleSpecs,
    ServiceSpec, TierSpec,
};
use super::{Action, Addr, Direction, EngineError, Kind, Net};
use crate::labelindex::{LabelIndex, MatchChange};
use crate::selector::Selector;

/// Total order of policies within their tiers (felix's policy_sorter): tier, order (unset
/// last), kind, namespace, name; the id last so the order is total even for equal names.
#[derive(Clone, Debug)]
struct SortKey {
    tier_rank: u32,
    order: Option<f64>,
    kind: Arc<str>,
    namespace: Arc<str>,
    name: Arc<str>,
    id: u32,
}

impl SortKey {
    fn cmp(&self, other: &SortKey) -> Ordering {
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

struct NsEntry {
    id: u32,
    labels: LabelMap,
    /// Given by a delta (as opposed to implied by an endpoint naming it).
    explicit: bool,
}

/// An endpoint as the model keeps it, with its label strings interned: label keys and values
/// repeat across thousands of pods, and a `BTreeMap` per pod cost more than the rest together.
struct EpEntry {
    kind: Kind,
    host_network: bool,
    addressable: bool,
    enforced: bool,
    name: Box<str>,
    namespace: Option<Arc<str>>,
    service_account: Option<Arc<str>>,
    /// As written, sorted (service selectors read these; policy sees them plus Calico's).
    raw_labels: Box<[(Arc<str>, Arc<str>)]>,
    /// As policy sees them, when the spec said so (a whole-world spec does).
    labels: Option<Box<[(Arc<str>, Arc<str>)]>>,
    sa_labels: Box<[(Arc<str>, Arc<str>)]>,
    named_ports: Box<[(Arc<str>, u8, u16)]>,
    profiles: Box<[Arc<str>]>,
    ips: Box<[Addr]>,
    identity: u32,
}

const CALICO_ORCHESTRATOR: &str = "projectcalico.org/orchestrator";
const CALICO_NAMESPACE: &str = "projectcalico.org/namespace";
const CALICO_ACCOUNT: &str = "projectcalico.org/serviceaccount";

impl EpEntry {
    /// Whether this node enforces its policy: not another node's endpoint, not a hostNetwork
    /// pod (whose traffic is the node's).
    fn local(&self) -> bool {
        self.enforced && !(self.kind == Kind::Pod && self.host_network)
    }

    fn raw_label(&self, key: &str) -> Option<&str> {
        self.raw_labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.raw_labels[i].1)
    }

    /// The labels policy sees (`EndpointSpec::policy_labels`): written ones, plus for pods the
    /// ones Calico adds when they are not written.
    fn policy_labels(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        if let Some(given) = &self.labels {
            return Box::new(given.iter().map(|(k, v)| (&**k, &**v)));
        }
        let pod = self.kind == Kind::Pod;
        let extra = [
            (CALICO_ORCHESTRATOR, Some("k8s")),
            (CALICO_NAMESPACE, self.namespace.as_deref()),
            (CALICO_ACCOUNT, self.service_account.as_deref()),
        ];
        Box::new(
            self.raw_labels.iter().map(|(k, v)| (&**k, &**v)).chain(
                extra
                    .into_iter()
                    .filter(move |(k, v)| pod && v.is_some() && self.raw_label(k).is_none())
                    .map(|(k, v)| (k, v.unwrap_or_default())),
            ),
        )
    }

    fn has_policy_label(&self, key: &str) -> bool {
        self.policy_labels().any(|(k, _)| k == key)
    }
}

struct IdentityEntry {
    key: IdentityKey,
    ns: Option<u32>,
    refs: usize,
}

struct SelEntry {
    selector: Selector,
    refs: usize,
    /// Policies whose subject this selector is.
    subject_of: Vec<u32>,
}

/// A rule peer whose label condition is relative to the subject's namespace.
struct RelEntry {
    base: Selector,
    spec: EntitySpec,
    /// Subject namespace (None: cluster-scoped subjects) -> interned selector.
    per_ns: HashMap<Option<u32>, u32>,
    refs: usize,
}

/// What compiling one policy's or profile's rules acquired (released when it goes).
#[derive(Default)]
struct Acquired {
    selectors: Vec<u32>,
    relatives: Vec<u32>,
    has_node_selector: bool,
    /// Prefixes and port boundaries the rules compare addresses and ports with.
    prefixes: Vec<Net>,
    ports: Vec<u16>,
}

struct PolicyEntry {
    spec: PolicySpec,
    tier: u32,
    subject: u32,
    directions: [bool; 2],
    compiled: Compiled,
}

struct ProfileEntry {
    spec: ProfileSpec,
    compiled: Compiled,
}

/// Rules (ingress, egress) as specified: the key of compiled rules shared by equal policies.
type RulesKey = (Arc<[RuleSpec]>, Arc<[RuleSpec]>);

/// A policy's or profile's compiled rules and what compiling them acquired; `shared`: the key
/// under which they are shared with the other policies and profiles of equal rules.
struct Compiled {
    rules: Arc<CRules>,
    acquired: Arc<Acquired>,
    shared: Option<RulesKey>,
}

/// Compiled rules shared by every policy and profile whose rules are equal (one allow-list
/// pasted into a policy per namespace is compiled and held once); `users`: how many use them.
/// Only rules whose compiled form depends on nothing but themselves are shared: none with a
/// relative peer (per subject namespace) or a node selector (the nodes' addresses).
struct SharedRules {
    rules: Arc<CRules>,
    acquired: Arc<Acquired>,
    users: usize,
}

struct TierEntry {
    default: Action,
    rank: u32,
}

struct NetSetEntry {
    spec: NetworkSetSpec,
    identity: u32,
    nets: Vec<Net>,
}

struct ServiceEntry {
    spec: ServiceSpec,
    ips: Vec<Addr>,
}

/// Size figures of the model and its current snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelStats {
    pub endpoints: usize,
    pub identities: usize,
    pub namespaces: usize,
    pub policies: usize,
    pub profiles: usize,
    pub rules: usize,
    pub selectors: usize,
    pub programs: usize,
    pub addresses: usize,
    pub set_bytes: usize,
    /// Deltas applied, and how many of them rebuilt everything (only the first, from empty).
    pub deltas: u64,
    pub selector_evaluations: u64,
}

/// A compiled-but-not-yet-applied rule list with the selectors it will need.
#[derive(Default)]
struct PendingRules {
    /// The rules as specified (ingress, egress), and each one's peers checked.
    specs: [Arc<[RuleSpec]>; 2],
    rules: [Vec<PendingRule>; 2],
}

impl PendingRules {
    /// Whether the compiled form depends on the rules alone (see `SharedRules`).
    fn shareable(&self) -> bool {
        self.rules.iter().flatten().all(|r| r.sources.iter().chain(&r.destinations).all(|e| !e.relative && !e.node_selector))
    }
}

struct PendingRule {
    sources: Vec<PendingEntity>,
    destinations: Vec<PendingEntity>,
}

struct PendingEntity {
    selector: Option<Selector>,
    relative: bool,
    node_selector: bool,
    /// The `notSelector`'s own selector (`identity::not_selector`).
    not_selector: Option<Selector>,
}

/// When the programs a delta makes are compiled ([`Model::set_compile`]). A program not yet
/// compiled is compiled by the first lookup that needs it (once: every snapshot holding it
/// shares the result), so a change in force does not wait for the programs it makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compile {
    /// The first build's programs before its snapshot is handed out; a later delta's on first use.
    Built,
    /// Every delta's before its snapshot is handed out.
    Always,
    /// Never before first use.
    OnFirstUse,
}

pub struct Model {
    namespaces: HashMap<String, NsEntry>,
    ns_names: Vec<Option<String>>,
    endpoints: FastMap<u32, EpEntry>,
    /// Endpoints per namespace name (services select within their namespace).
    ns_endpoints: HashMap<String, HashSet<u32>>,
    identities: FastMap<u32, IdentityEntry>,
    identity_ids: HashMap<IdentityKey, u32>,
    free_identities: Vec<u32>,
    next_identity: u32,
    /// Label keys some selector mentions, with how many selectors do (see `identity`).
    referenced: HashMap<String, usize>,
    index: LabelIndex<u32, u32, u32>,
    selectors: HashMap<Selector, u32>,
    sel_entries: FastMap<u32, SelEntry>,
    free_selectors: Vec<u32>,
    next_selector: u32,
    relatives: FastMap<u32, RelEntry>,
    next_relative: u32,
    programs: HashMap<(Direction, Vec<u32>), Arc<Program>>,
    /// Profile lists, interned as programs are (their compiled form is shared too).
    profile_lists: HashMap<Vec<u32>, Arc<ProfileList>>,
    /// Programs and profile lists made since the last snapshot, compiled before it is handed
    /// out or left to first use (`compile`).
    fresh_programs: Vec<Arc<Program>>,
    fresh_profiles: Vec<Arc<ProfileList>>,
    compile: Compile,
    shared_rules: HashMap<RulesKey, SharedRules>,
    policies: FastMap<u32, PolicyEntry>,
    profiles: FastMap<u32, ProfileEntry>,
    profile_ids: HashMap<String, u32>,
    tiers: FastMap<u32, TierEntry>,
    tier_ids: HashMap<String, u32>,
    network_sets: FastMap<u32, NetSetEntry>,
    nodes: FastMap<u32, NodeSpec>,
    services: FastMap<u32, ServiceEntry>,
    addr_owners: FastMap<Addr, Vec<u32>>,
    /// Services per namespace name.
    ns_services: HashMap<String, Vec<u32>>,
    netsets_dirty: bool,
    /// Every prefix and port boundary some rule, network set or node selector compares with, and
    /// how many times: the address and port classes of the decision memo (`classes`).
    prefix_refs: FastMap<Net, usize>,
    port_refs: FastMap<u16, usize>,
    classes_dirty: bool,
    /// The network sets holding each class are to be worked out again.
    class_netsets_dirty: bool,
    ports_dirty: bool,
    /// Label keys and values, shared by every endpoint that carries them.
    strings: std::collections::HashSet<Arc<str>>,
    strings_kept: usize,
    /// Identities whose programs must be recomputed before the next snapshot.
    dirty: HashSet<u32>,
    snap: Snapshot,
    deltas: u64,
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

fn kind_of(text: &str) -> Result<Kind, EngineError> {
    Kind::parse(text)
}

fn parse_addrs(texts: &[String]) -> Result<Vec<Addr>, EngineError> {
    texts.iter().map(|a| Addr::parse(a)).collect()
}

fn icmp(m: &Option<super::spec::IcmpSpec>) -> Option<IcmpMatch> {
    m.as_ref().map(|m| IcmpMatch { icmp_type: m.icmp_type, code: m.code })
}

impl Model {
    pub fn new() -> Model {
        let mut index = LabelIndex::with_parent_prefix(identity::NS_PREFIX);
        index.set_record_events(true);
        Model {
            namespaces: HashMap::new(),
            ns_names: Vec::new(),
            endpoints: FastMap::default(),
            ns_endpoints: HashMap::new(),
            identities: FastMap::default(),
            identity_ids: HashMap::new(),
            free_identities: Vec::new(),
            next_identity: 0,
            referenced: HashMap::new(),
            index,
            selectors: HashMap::new(),
            sel_entries: FastMap::default(),
            free_selectors: Vec::new(),
            next_selector: 0,
            relatives: FastMap::default(),
            next_relative: 0,
            programs: HashMap::new(),
            profile_lists: HashMap::new(),
            fresh_programs: Vec::new(),
            fresh_profiles: Vec::new(),
            compile: Compile::Built,
            shared_rules: HashMap::new(),
            policies: FastMap::default(),
            profiles: FastMap::default(),
            profile_ids: HashMap::new(),
            tiers: FastMap::default(),
            tier_ids: HashMap::new(),
            network_sets: FastMap::default(),
            nodes: FastMap::default(),
            services: FastMap::default(),
            addr_owners: FastMap::default(),
            ns_services: HashMap::new(),
            netsets_dirty: false,
            prefix_refs: FastMap::default(),
            port_refs: FastMap::default(),
            classes_dirty: false,
            class_netsets_dirty: false,
            ports_dirty: false,
            strings: std::collections::HashSet::new(),
            strings_kept: 0,
            dirty: HashSet::new(),
            snap: Snapshot::default(),
            deltas: 0,
        }
    }

    /// A model holding a whole-world spec.
    pub fn from_spec(spec: super::spec::Spec) -> Result<Model, EngineError> {
        let mut m = Model::new();
        m.apply(spec.into_delta())?;
        Ok(m)
    }

    /// What DNS answers taught, for domain rules (shared: learning goes on in it); the
    /// snapshots handed out from now on carry it.
    pub fn set_domain_facts(&mut self, facts: Option<Arc<DomainFacts>>) {
        self.snap.domain_facts = facts;
    }

    /// The current state as an immutable snapshot, sharing its tables with the model.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let mut s = self.snap.clone();
        s.uid = super::snapshot::next_uid();
        Arc::new(s)
    }

    pub fn stats(&self) -> ModelStats {
        let rules = |r: &[RuleSpec], e: &[RuleSpec]| r.len() + e.len();
        ModelStats {
            endpoints: self.endpoints.len(),
            identities: self.identities.len(),
            namespaces: self.namespaces.len(),
            policies: self.policies.len(),
            profiles: self.profiles.len(),
            rules: self.policies.values().map(|p| rules(&p.spec.ingress, &p.spec.egress)).sum::<usize>()
                + self.profiles.values().map(|p| rules(&p.spec.ingress, &p.spec.egress)).sum::<usize>(),
            selectors: self.sel_entries.len(),
            programs: self.programs.len(),
            addresses: self.snap.addrs.len(),
            set_bytes: self.snap.sets.iter().map(|(_, s)| s.memory_bytes()).sum(),
            deltas: self.deltas,
            selector_evaluations: self.index.evaluations(),
        }
    }

    // ---- applying a delta -------------------------------------------------------------------

    /// Applies one delta atomically: everything it brings is compiled and checked first; on an
    /// error nothing changes and the error says which object.
    pub fn apply(&mut self, mut delta: Delta) -> Result<(), EngineError> {
        let checked = self.check(&delta)?;
        self.deltas += 1;
        // Tiers first: policies name them.
        if let Some(tiers) = &delta.tiers {
            self.set_tiers(tiers);
        }
        for ns in &delta.namespaces {
            self.upsert_namespace(&ns.name, Some(ns.labels.clone()));
        }
        // Nodes before the rules whose node selectors resolve to their addresses.
        for id in &delta.remove_nodes {
            self.nodes.remove(id);
        }
        for n in &delta.nodes {
            self.nodes.insert(n.id, n.clone());
        }
        if !delta.nodes.is_empty() || !delta.remove_nodes.is_empty() {
            self.recompile_node_selectors();
        }
        // Removals first, so an id removed and given to a new object in the same delta is the
        // new object's at the end.
        for id in &delta.remove_policies {
            self.remove_policy(*id);
        }
        for id in &delta.remove_profiles {
            self.remove_profile(*id);
        }
        for id in &delta.remove_network_sets {
            self.remove_network_set(*id);
        }
        for id in &delta.remove_services {
            self.remove_service(*id);
        }
        for id in &delta.remove_endpoints {
            self.remove_endpoint(*id);
        }
        // Selectors before the identities they match, so new label keys project first.
        let mut pending_profiles = checked.profiles.into_iter();
        for p in &delta.profiles {
            let pending = pending_profiles.next().flatten();
            self.upsert_profile(p.clone(), pending);
        }
        let mut pending_policies = checked.policies.into_iter();
        for (p, (subject, pending)) in delta.policies.iter().zip(pending_policies.by_ref()) {
            self.upsert_policy(p.clone(), checked.subjects[subject].clone(), pending);
        }
        for n in &delta.network_sets {
            self.upsert_network_set(n);
        }
        for s in &delta.services {
            self.upsert_service(s);
        }
        // Moved, not copied: at cluster scale the endpoints are most of a delta.
        for mut e in std::mem::take(&mut delta.endpoints) {
            e.ips.shrink_to_fit();
            self.upsert_endpoint(e);
        }
        for name in &delta.remove_namespaces {
            self.upsert_namespace(name, None);
        }
        if self.netsets_dirty {
            self.rebuild_netset_lpm();
        }
        self.settle();
        self.snap.generation += 1;
        Ok(())
    }

    /// Compiles every policy and profile of `delta` and checks its other objects, without
    /// changing anything.
    fn check(&self, delta: &Delta) -> Result<Checked, EngineError> {
        let mut out = Checked::default();
        if let Some(why) = delta.unresolved() {
            return Err(EngineError::Spec(why));
        }
        // Rules compiled once per distinct (ingress, egress): later policies naming the same
        // lists, and lists compiled before (equal, so checked then), share them.
        let mut checked: HashSet<(*const RuleSpec, *const RuleSpec)> = HashSet::new();
        let mut subjects: HashMap<&super::spec::SubjectSpec, usize> = HashMap::new();
        let mut pending = |ingress: &RuleSpecs, egress: &RuleSpecs, context: &str| {
            let pair = (ingress.as_ptr(), egress.as_ptr());
            if checked.contains(&pair) || rules_key(ingress, egress).is_some_and(|k| self.shared_rules.contains_key(&k)) {
                return Ok(None);
            }
            let p = pending_rules(ingress, egress, context)?;
            if p.shareable() {
                checked.insert(pair);
            }
            Ok::<_, EngineError>(Some(p))
        };
        if let Some(tiers) = &delta.tiers {
            for t in tiers {
                Action::parse(&t.default_action)?;
            }
        }
        let tier_known = |name: &str| match &delta.tiers {
            Some(ts) => ts.iter().any(|t| t.name == name),
            None => self.tier_ids.contains_key(name),
        };
        for p in &delta.policies {
            let context = format!("policy {} ({}/{})", p.id, p.kind, p.name);
            if !tier_known(&p.tier) {
                return Err(EngineError::Spec(format!("{context} names unknown tier {:?}", p.tier)));
            }
            for t in &p.types {
                Direction::parse(t)?;
            }
            // One parse per distinct subject (policies of one subject hold its selector once).
            let subject = match subjects.get(&p.subject) {
                Some(&i) => i,
                None => {
                    out.subjects.push(identity::subject_selector(&p.subject, &context)?);
                    subjects.insert(&p.subject, out.subjects.len() - 1);
                    out.subjects.len() - 1
                }
            };
            out.policies.push((subject, pending(&p.ingress, &p.egress, &context)?));
        }
        for p in &delta.profiles {
            let context = format!("profile {}", p.name);
            out.profiles.push(pending(&p.ingress, &p.egress, &context)?);
        }
        for e in &delta.endpoints {
            kind_of(&e.kind)?;
            parse_addrs(&e.ips)?;
        }
        for n in &delta.network_sets {
            NetList::parse(&n.nets)?;
        }
        for n in &delta.nodes {
            parse_addrs(&n.addresses)?;
        }
        for s in &delta.services {
            parse_addrs(&s.ips)?;
        }
        Ok(out)
    }

    /// Recomputes the programs of identities whose applicable policies changed.
    fn settle(&mut self) {
        while !self.dirty.is_empty() {
            let dirty: Vec<u32> = self.dirty.drain().collect();
            for id in dirty {
                self.recompute_programs(id);
            }
        }
        if self.ports_dirty {
            self.snap.ports = Arc::new(PortClasses::build(self.port_refs.keys().copied()));
            self.ports_dirty = false;
        }
        if self.classes_dirty {
            self.snap.classes = Arc::new(ClassLpm::build(self.prefix_refs.keys()));
            self.classes_dirty = false;
            self.class_netsets_dirty = true;
            let addrs: Vec<Addr> = self.addr_owners.keys().copied().collect();
            for a in addrs {
                self.refresh_owner(a);
            }
        }
        if self.class_netsets_dirty {
            // Every network-set network is a class prefix: the class decides which sets hold
            // an address.
            let classes = &self.snap.classes;
            let mut table: Vec<Box<[u32]>> = vec![Box::default(); classes.len() + 1];
            if !self.snap.netsets.is_empty() {
                for (c, net) in classes.classes() {
                    let mut v = Vec::new();
                    self.snap.netsets.holding(net, &mut v);
                    v.sort_unstable();
                    v.dedup();
                    table[c as usize] = v.into_boxed_slice();
                }
            }
            self.snap.class_netsets = Arc::new(table);
            self.class_netsets_dirty = false;
        }
        // Forget strings no endpoint or identity uses any more (pods come and go).
        if self.strings.len() > 2 * self.strings_kept.max(1024) {
            self.strings.retain(|s| Arc::strong_count(s) > 1);
            self.strings_kept = self.strings.len();
        }
        // Forget programs no identity uses any more.
        if self.programs.len() > 64 {
            self.programs.retain(|_, p| Arc::strong_count(p) > 1);
        }
        if self.profile_lists.len() > 64 {
            self.profile_lists.retain(|_, p| Arc::strong_count(p) > 1);
        }
        // Compile what is new against the state the snapshot will hold (rules read from it).
        let programs = std::mem::take(&mut self.fresh_programs);
        let profiles = std::mem::take(&mut self.fresh_profiles);
        let eager = match self.compile {
            Compile::Always => true,
            Compile::Built => self.deltas == 1,
            Compile::OnFirstUse => false,
        };
        if eager {
            for p in programs {
                if Arc::strong_count(&p) > 1 {
                    let _ = p.compiled(&self.snap);
                }
            }
            for p in profiles {
                if Arc::strong_count(&p) > 1 {
                    for d in Direction::BOTH {
                        let _ = p.compiled(&self.snap, d);
                    }
                }
            }
        }
    }

    /// When the programs a delta makes are compiled (`Compile`).
    pub fn set_compile(&mut self, when: Compile) {
        self.compile = when;
    }

    // ---- namespaces ---------------------------------------------------------------------------

    fn ns_id(&mut self, name: &str) -> u32 {
        if let Some(ns) = self.namespaces.get(name) {
            return ns.id;
        }
        let id = self.ns_names.len() as u32;
        self.ns_names.push(Some(name.to_string()));
        let labels = identity::namespace_labels(name, None);
        self.namespaces.insert(name.to_string(), NsEntry { id, labels: labels.clone(), explicit: false });
        self.index.upsert_parent(id, labels);
        self.drain_events();
        id
    }

    /// Sets a namespace's labels (None: back to the implicit labels of a namespace with no
    /// manifest). Identities of the namespace keep their keys; the index re-checks only the
    /// selectors mentioning a changed namespace label, and relative peers are re-derived.
    fn upsert_namespace(&mut self, name: &str, labels: Option<LabelMap>) {
        let id = self.ns_id(name);
        let explicit = labels.is_some();
        let labels = identity::namespace_labels(name, labels.as_ref());
        let entry = self.namespaces.get_mut(name).expect("namespace just interned");
        entry.explicit = explicit;
        if entry.labels == labels {
            return;
        }
        entry.labels = labels.clone();
        self.index.upsert_parent(id, labels);
        self.drain_events();
        // Relative peers compare the subject's namespace labels with the peer's.
        let rels: Vec<u32> =
            self.relatives.iter().filter(|(_, r)| r.per_ns.contains_key(&Some(id))).map(|(&rid, _)| rid).collect();
        for rid in rels {
            self.derive_relative(rid, Some(id));
        }
    }

    fn ns_labels(&self, ns: Option<u32>) -> LabelMap {
        match ns.and_then(|i| self.ns_names.get(i as usize).cloned().flatten()) {
            Some(name) => self.namespaces.get(&name).map(|n| n.labels.clone()).unwrap_or_default(),
            None => LabelMap::new(),
        }
    }

    // ---- label index plumbing ---------------------------------------------------------------

    /// Applies the index's match events to the identity sets (and marks identities whose
    /// subject matches changed).
    fn drain_events(&mut self) {
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
    fn set_member_bit(&mut self, identity: u32, set: u32, on: bool) {
        let Some(rec) = self.snap.identities.get(identity) else { return };
        if super::snapshot::bit(&rec.members, set) == on {
            return;
        }
        let rec = self.snap.identities.get_mut(identity).expect("identity");
        let bits = Arc::make_mut(&mut rec.members);
        let w = (set / 64) as usize;
        if bits.len() <= w {
            bits.resize(w + 1, 0);
        }
        if on {
            bits[w] |= 1 << (set % 64);
        } else {
            bits[w] &= !(1 << (set % 64));
        }
    }

    /// Makes every projected key of `selector` project onto identities, re-identifying the
    /// endpoints that carry a key seen for the first time.
    fn reference_keys(&mut self, selector: &Selector) {
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

    fn unreference_keys(&mut self, selector: &Selector) {
        // Keys stay projected once seen: identities are then finer than needed, never wrong,
        // and a policy that comes back does not split them again.
        for key in selector.keys() {
            if let Some(n) = self.referenced.get_mut(key) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Interns a selector: equal selectors share one id and one identity set.
    fn acquire_selector(&mut self, selector: Selector) -> u32 {
        if let Some(&id) = self.selectors.get(&selector) {
            self.sel_entries.get_mut(&id).expect("interned selector").refs += 1;
            return id;
        }
        self.reference_keys(&selector);
        let id = self.free_selectors.pop().unwrap_or_else(|| {
            self.next_selector += 1;
            self.next_selector - 1
        });
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

    fn release_selector(&mut self, id: u32) {
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
        self.free_selectors.push(id);
    }

    fn set_members(&self, sel: u32) -> Vec<u32> {
        self.snap.sets.get(sel).map(|s| s.iter().collect()).unwrap_or_default()
    }

    // ---- identities ---------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn identity_key<'a>(
        &self,
        labels: impl Iterator<Item = (&'a str, &'a str)>,
        sa_labels: impl Iterator<Item = (&'a str, &'a str)>,
        kind: &str,
        ns: Option<&str>,
        sa: Option<&str>,
        ports: Vec<(Arc<str>, u8, u16)>,
        profiles: &[Arc<str>],
    ) -> IdentityKey {
        let mut out: BTreeMap<Arc<str>, Arc<str>> = BTreeMap::new();
        for (k, v) in labels {
            if identity::is_user_key(k) && self.referenced.contains_key(k) {
                out.insert(self.shared(k), self.shared(v));
            }
        }
        for (k, v) in sa_labels {
            let key = format!("{}{k}", identity::SA_PREFIX);
            if self.referenced.contains_key(&key) {
                out.insert(Arc::from(key), self.shared(v));
            }
        }
        out.insert(Arc::from(identity::KIND), Arc::from(kind));
        if let Some(ns) = ns {
            out.insert(Arc::from(identity::NS), self.shared(ns));
        }
        if let Some(sa) = sa {
            if self.referenced.contains_key(identity::SA) {
                out.insert(Arc::from(identity::SA), self.shared(sa));
            }
        }
        let mut ports = ports;
        ports.sort();
        ports.dedup();
        IdentityKey { labels: out.into_iter().collect(), ports, profiles: profiles.to_vec() }
    }

    /// An interned string if known (the model's interner), else a new one.
    fn shared(&self, s: &str) -> Arc<str> {
        self.strings.get(s).cloned().unwrap_or_else(|| Arc::from(s))
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        a
    }

    fn intern_labels(&mut self, labels: &LabelMap) -> Box<[(Arc<str>, Arc<str>)]> {
        labels.iter().map(|(k, v)| (self.intern(k), self.intern(v))).collect()
    }

    /// The slim form of an endpoint spec.
    fn slim(&mut self, spec: EndpointSpec, kind: Kind, ips: Vec<Addr>, identity: u32) -> EpEntry {
        let named_ports = spec
            .ports
            .iter()
            .filter_map(|p| p.name.as_deref().map(|n| (self.intern(n), p.protocol, p.port)))
            .collect();
        EpEntry {
            kind,
            host_network: spec.host_network,
            addressable: spec.addressable,
            enforced: spec.enforced,
            name: spec.name.into_boxed_str(),
            namespace: spec.namespace.as_deref().map(|n| self.intern(n)),
            service_account: spec.service_account.as_deref().map(|n| self.intern(n)),
            raw_labels: self.intern_labels(&spec.raw_labels),
            labels: spec.labels.as_ref().map(|l| self.intern_labels(l)),
            sa_labels: self.intern_labels(&spec.sa_labels),
            named_ports,
            profiles: spec.profiles.iter().map(|p| self.intern(p)).collect(),
            ips: ips.into_boxed_slice(),
            identity,
        }
    }

    fn endpoint_key(&self, e: &EpEntry) -> IdentityKey {
        let kind_name = match e.kind {
            Kind::Pod if e.host_network => identity::KIND_HOSTNET,
            Kind::Pod => identity::KIND_POD,
            Kind::Host => identity::KIND_HOST,
            Kind::NetworkSet => identity::KIND_NETWORKSET,
        };
        self.identity_key(
            e.policy_labels(),
            e.sa_labels.iter().map(|(k, v)| (&**k, &**v)),
            kind_name,
            e.namespace.as_deref(),
            e.service_account.as_deref(),
            e.named_ports.to_vec(),
            &e.profiles,
        )
    }

    fn netset_key(&self, n: &NetworkSetSpec) -> IdentityKey {
        let labels = n.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        self.identity_key(labels, std::iter::empty(), identity::KIND_NETWORKSET, n.namespace.as_deref(), None, Vec::new(), &[])
    }

    /// The identity for `key`, created (and filed in the index) if new; takes a reference.
    fn acquire_identity(&mut self, key: IdentityKey) -> u32 {
        if let Some(&id) = self.identity_ids.get(&key) {
            self.identities.get_mut(&id).expect("interned identity").refs += 1;
            return id;
        }
        let id = self.free_identities.pop().unwrap_or_else(|| {
            self.next_identity += 1;
            self.next_identity - 1
        });
        let ns = key.namespace().map(str::to_string).map(|n| self.ns_id(&n));
        let local = matches!(key.kind(), identity::KIND_POD | identity::KIND_HOST);
        let kind = match key.kind() {
            identity::KIND_HOST => Kind::Host,
            identity::KIND_NETWORKSET => Kind::NetworkSet,
            _ => Kind::Pod,
        };
        let empty = self.intern_program(Direction::Ingress, Vec::new());
        let rec = IdRec {
            kind,
            local,
            ns: ns.unwrap_or(NO_NAMESPACE),
            programs: [empty.clone(), self.intern_program(Direction::Egress, Vec::new())],
            ports: Arc::new(key.ports.clone()),
            profiles: {
                let ids = self.resolve_profiles(&key.profiles);
                self.intern_profiles(ids)
            },
            members: Arc::default(),
        };
        self.snap.identities.set(id, Some(rec));
        for (_, _, port) in &key.ports {
            self.add_port_bounds(*port, *port);
        }
        self.index.upsert_endpoint_with_parent(id, key.label_map(), ns);
        self.identity_ids.insert(key.clone(), id);
        self.identities.insert(id, IdentityEntry { key, ns, refs: 1 });
        self.drain_events();
        if local {
            self.dirty.insert(id);
        }
        id
    }

    fn release_identity(&mut self, id: u32) {
        let entry = self.identities.get_mut(&id).expect("released identity exists");
        entry.refs -= 1;
        if entry.refs > 0 {
            return;
        }
        let entry = self.identities.remove(&id).expect("released identity exists");
        for (_, _, port) in &entry.key.ports {
            self.drop_port_bounds(*port, *port);
        }
        self.identity_ids.remove(&entry.key);
        self.index.remove_endpoint(&id);
        self.drain_events();
        self.dirty.remove(&id);
        self.snap.identities.set(id, None);
        self.free_identities.push(id);
    }

    /// Moves endpoints and network sets carrying a newly referenced key to their new identity.
    fn reidentify(&mut self, keys: &[String]) {
        let carries = |e: &EpEntry| {
            keys.iter().any(|k| {
                if k == identity::SA {
                    e.service_account.is_some()
                } else if let Some(rest) = k.strip_prefix(identity::SA_PREFIX) {
                    e.sa_labels.iter().any(|(x, _)| &**x == rest)
                } else {
                    e.has_policy_label(k)
                }
            })
        };
        let eps: Vec<u32> = self.endpoints.iter().filter(|(_, e)| carries(e)).map(|(&id, _)| id).collect();
        for id in eps {
            let (key, old) = {
                let e = &self.endpoints[&id];
                (self.endpoint_key(e), e.identity)
            };
            let new = self.acquire_identity(key);
            self.endpoints.get_mut(&id).expect("endpoint").identity = new;
            if let Some(rec) = self.snap.endpoints.get_mut(id) {
                rec.identity = new;
            }
            let ips = self.endpoints[&id].ips.clone();
            for a in ips.iter() {
                if self.addr_owners.contains_key(a) {
                    self.refresh_owner(*a);
                }
            }
            self.release_identity(old);
        }
        let carries_label = |labels: &LabelMap| keys.iter().any(|k| labels.contains_key(k));
        let sets: Vec<u32> = self
            .network_sets
            .iter()
            .filter(|(_, n)| carries_label(&n.spec.labels))
            .map(|(&id, _)| id)
            .collect();
        for id in sets {
            let key = self.netset_key(&self.network_sets[&id].spec);
            let new = self.acquire_identity(key);
            let old = std::mem::replace(&mut self.network_sets.get_mut(&id).expect("network set").identity, new);
            self.release_identity(old);
            self.netsets_dirty = true;
        }
    }

    fn resolve_profiles(&self, names: &[Arc<str>]) -> Vec<u32> {
        names.iter().filter_map(|n| self.profile_ids.get(&**n).copied()).collect()
    }

    /// Refreshes the resolved profiles of identities that name `name`.
    fn refresh_profiles(&mut self, name: &str) {
        let ids: Vec<u32> = self
            .identities
            .iter()
            .filter(|(_, e)| e.key.profiles.iter().any(|p| &**p == name))
            .map(|(&id, _)| id)
            .collect();
        // Their programs are recomputed, which resolves profiles and derives relative peers.
        self.dirty.extend(ids);
    }

    // ---- programs -----------------------------------------------------------------------------

    fn sort_key(&self, policy: u32) -> SortKey {
        let p = &self.policies[&policy];
        SortKey {
            tier_rank: self.tiers.get(&p.tier).map_or(u32::MAX, |t| t.rank),
            order: p.spec.order,
            kind: Arc::from(p.spec.kind.as_str()),
            namespace: Arc::from(p.spec.namespace.as_deref().unwrap_or("")),
            name: Arc::from(p.spec.name.as_str()),
            id: policy,
        }
    }

    /// The interned program of `policies` (already in evaluation order) in direction `d`.
    fn intern_program(&mut self, d: Direction, policies: Vec<u32>) -> Arc<Program> {
        if let Some(p) = self.programs.get(&(d, policies.clone())) {
            return p.clone();
        }
        let mut stages: Vec<Stage> = Vec::new();
        for &pid in &policies {
            let tier = self.policies[&pid].tier;
            match stages.last_mut() {
                Some(st) if st.tier == tier => st.policies.push(pid),
                _ => {
                    let default = self.tiers.get(&tier).map_or(Action::Deny, |t| t.default);
                    stages.push(Stage { tier, default, policies: vec![pid] })
                }
            }
        }
        let program = Arc::new(Program::new(d, stages));
        self.programs.insert((d, policies), program.clone());
        self.fresh_programs.push(program.clone());
        program
    }

    /// The interned list of these profiles.
    fn intern_profiles(&mut self, ids: Vec<u32>) -> Arc<ProfileList> {
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

    /// A policy's rules changed (not which identities it applies to, nor where): the programs
    /// listing it are made anew, to be compiled against the new rules, and the identities
    /// holding them take the new ones.
    fn renew_programs_with(&mut self, policy: u32, subject: u32) {
        let mut renewed: FastMap<usize, Arc<Program>> = FastMap::default();
        let keys: Vec<(Direction, Vec<u32>)> = self.programs.iter().filter(|(_, p)| p.lists(policy)).map(|(k, _)| k.clone()).collect();
        for k in keys {
            let old = self.programs[&k].clone();
            let fresh = Arc::new(old.renewed());
            renewed.insert(Arc::as_ptr(&old) as usize, fresh.clone());
            self.fresh_programs.push(fresh.clone());
            self.programs.insert(k, fresh);
        }
        if renewed.is_empty() {
            return;
        }
        for id in self.set_members(subject) {
            let Some(rec) = self.snap.identities.get(id) else { continue };
            let ptrs = rec.programs.clone().map(|p| Arc::as_ptr(&p) as usize);
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

    /// A profile's rules changed or it went: the interned lists naming it are forgotten (the
    /// identities naming it are recomputed and take new ones).
    fn forget_profile_lists_with(&mut self, profile: u32) {
        self.profile_lists.retain(|ids, _| !ids.contains(&profile));
    }

    /// Which policies apply to identity `id`, per direction, in evaluation order.
    fn recompute_programs(&mut self, id: u32) {
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
        let mut rels: Vec<u32> = applying.iter().flat_map(|p| self.policies[p].compiled.acquired.relatives.clone()).collect();
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

    fn add_prefix(&mut self, net: Net) {
        let n = self.prefix_refs.entry(net).or_insert(0);
        *n += 1;
        self.classes_dirty |= *n == 1;
    }

    fn drop_prefix(&mut self, net: Net) {
        if let Some(n) = self.prefix_refs.get_mut(&net) {
            *n -= 1;
            if *n == 0 {
                self.prefix_refs.remove(&net);
                self.classes_dirty = true;
            }
        }
    }

    /// A port value compared for equality or as a range end: it and its successor bound classes.
    fn add_port_bounds(&mut self, first: u16, last: u16) {
        for b in [Some(first), last.checked_add(1)].into_iter().flatten() {
            let n = self.port_refs.entry(b).or_insert(0);
            *n += 1;
            self.ports_dirty |= *n == 1;
        }
    }

    fn drop_port_bounds(&mut self, first: u16, last: u16) {
        for b in [Some(first), last.checked_add(1)].into_iter().flatten() {
            if let Some(n) = self.port_refs.get_mut(&b) {
                *n -= 1;
                if *n == 0 {
                    self.port_refs.remove(&b);
                    self.ports_dirty = true;
                }
            }
        }
    }

    fn evict_programs_with(&mut self, policy: u32) {
        self.programs.retain(|(_, list), _| !list.contains(&policy));
    }

    fn mark_matches_dirty(&mut self, sel: u32) {
        let members = self.set_members(sel);
        self.dirty.extend(members);
    }

    // ---- tiers --------------------------------------------------------------------------------

    fn set_tiers(&mut self, tiers: &[TierSpec]) {
        let mut order: Vec<&TierSpec> = tiers.iter().collect();
        order.sort_by(|a, b| {
            a.order
                .is_none()
                .cmp(&b.order.is_none())
                .then_with(|| a.order.unwrap_or(0.0).total_cmp(&b.order.unwrap_or(0.0)))
                .then_with(|| a.name.cmp(&b.name))
        });
        self.tiers.clear();
        self.tier_ids.clear();
        for (rank, t) in order.into_iter().enumerate() {
            let default = Action::parse(&t.default_action).unwrap_or(Action::Deny);
            self.tiers.insert(t.id, TierEntry { default, rank: rank as u32 });
            self.tier_ids.insert(t.name.clone(), t.id);
        }
        let ids: Vec<u32> = self.policies.keys().copied().collect();
        for id in ids {
            let name = self.policies[&id].spec.tier.clone();
            if let Some(&tier) = self.tier_ids.get(&name) {
                self.policies.get_mut(&id).expect("policy").tier = tier;
            }
        }
        // Tier order and defaults are inside every program.
        self.programs.clear();
        let local: Vec<u32> = self.identities.keys().copied().collect();
        self.dirty.extend(local);
    }

    // ---- rules --------------------------------------------------------------------------------

    fn node_addrs(&self, text: &str) -> Arc<HashSet<Addr>> {
        let sel = identity::parse(text, "node selector").unwrap_or_else(|_| Selector::from_node(crate::selector::Node::Has(identity::NEVER.into())));
        let mut out = HashSet::new();
        for n in self.nodes.values() {
            if sel.matches(&n.labels) {
                out.extend(n.addresses.iter().filter_map(|a| Addr::parse(a).ok()));
            }
        }
        Arc::new(out)
    }

    /// A relative peer: its selectors per subject namespace are derived on demand.
    fn acquire_relative(&mut self, base: Selector, spec: EntitySpec) -> u32 {
        self.reference_keys(&base);
        let id = self.next_relative;
        self.next_relative += 1;
        self.relatives.insert(id, RelEntry { base, spec, per_ns: HashMap::new(), refs: 1 });
        id
    }

    fn derive_relative(&mut self, rid: u32, ns: Option<u32>) {
        let mine = self.ns_labels(ns);
        let name = ns.and_then(|i| self.ns_names.get(i as usize).cloned().flatten());
        let r = &self.relatives[&rid];
        let selector = identity::relative_selector(&r.base, &r.spec, name.as_deref(), &mine)
            .unwrap_or_else(|_| Selector::from_node(crate::selector::Node::Has(identity::NEVER.into())));
        let sel = self.acquire_selector(selector);
        let old = self.relatives.get_mut(&rid).expect("relative").per_ns.insert(ns, sel);
        Arc::make_mut(&mut self.snap.relative).insert((rid, ns.unwrap_or(NO_NAMESPACE)), sel);
        if let Some(old) = old {
            self.release_selector(old);
        }
    }

    fn release_relative(&mut self, rid: u32) {
        let r = self.relatives.get_mut(&rid).expect("relative");
        r.refs -= 1;
        if r.refs > 0 {
            return;
        }
        let r = self.relatives.remove(&rid).expect("relative");
        let rel = Arc::make_mut(&mut self.snap.relative);
        for (ns, sel) in &r.per_ns {
            rel.remove(&(rid, ns.unwrap_or(NO_NAMESPACE)));
            let _ = sel;
        }
        for (_, sel) in r.per_ns {
            self.release_selector(sel);
        }
        self.unreference_keys(&r.base);
    }

    fn compile_entity(&mut self, e: &EntitySpec, pending: PendingEntity, acq: &mut Acquired) -> CEntity {
        let labels = match pending.selector {
            None => LabelCond::None,
            Some(sel) if pending.relative => {
                let rid = self.acquire_relative(sel, e.clone());
                acq.relatives.push(rid);
                LabelCond::Relative(rid)
            }
            Some(sel) => {
                let id = self.acquire_selector(sel);
                acq.selectors.push(id);
                LabelCond::Set(id)
            }
        };
        let not_labels = pending.not_selector.map(|sel| {
            let id = self.acquire_selector(sel);
            acq.selectors.push(id);
            id
        });
        acq.has_node_selector |= e.node_selector.is_some();
        let ports: Vec<PortMatch> = e.ports.iter().filter_map(|p| PortMatch::compile(p).ok()).collect();
        let not_ports: Vec<PortMatch> = e.not_ports.iter().filter_map(|p| PortMatch::compile(p).ok()).collect();
        for p in ports.iter().chain(&not_ports) {
            if let PortMatch::Range { first, last, .. } = p {
                self.add_port_bounds(*first, *last);
                acq.ports.extend([*first, *last]);
            }
        }
        let nets = NetList::parse(&e.nets).unwrap_or_default();
        let not_nets = NetList::parse(&e.not_nets).unwrap_or_default();
        let node_addrs = e.node_selector.as_deref().map(|t| self.node_addrs(t));
        let host_nets = node_addrs.iter().flat_map(|s| s.iter()).map(|a| Net { bits: a.bits, len: 128, v6: a.v6 });
        let prefixes: Vec<Net> = nets.0.iter().chain(&not_nets.0).copied().chain(host_nets).collect();
        for n in &prefixes {
            self.add_prefix(*n);
        }
        acq.prefixes.extend(prefixes);
        CEntity {
            nets,
            not_nets,
            node_addrs,
            domains: (!e.domains.is_empty())
                .then(|| e.domains.iter().filter_map(|d| DomainPattern::parse(d).ok()).collect::<Arc<[_]>>()),
            service: e.service.as_ref().map(|(ns, name)| (Arc::from(ns.as_str()), Arc::from(name.as_str()))),
            labels,
            netsets: identity::netsets_allowed(e),
            not_labels,
            ports,
            not_ports,
            unresolvable: e.unresolvable,
        }
    }

    fn compile_rules(&mut self, pending: PendingRules) -> (CRules, Acquired) {
        let mut acq = Acquired::default();
        let mut out = CRules::default();
        let [ingress, egress] = pending.rules;
        let [ingress_specs, egress_specs] = pending.specs;
        for (d, list, specs) in [(Direction::Ingress, ingress, ingress_specs), (Direction::Egress, egress, egress_specs)] {
            for (pr, r) in list.into_iter().zip(specs.iter()) {
                let sources = r.sources.iter().zip(pr.sources).map(|(e, p)| self.compile_entity(e, p, &mut acq)).collect();
                let destinations =
                    r.destinations.iter().zip(pr.destinations).map(|(e, p)| self.compile_entity(e, p, &mut acq)).collect();
                let rule = CRule {
                    action: Action::parse(&r.action).unwrap_or(Action::Deny),
                    ip_version: r.ip_version,
                    protocols: r.protocols.as_deref().map(ProtoSet::of),
                    not_protocols: ProtoSet::of(&r.not_protocols),
                    icmp: icmp(&r.icmp),
                    not_icmp: icmp(&r.not_icmp),
                    sources,
                    destinations,
                    http: r.http.as_ref().and_then(|h| CRule::compile_http(h).ok()).map(Arc::new),
                };
                match d {
                    Direction::Ingress => out.ingress.push(rule),
                    Direction::Egress => out.egress.push(rule),
                }
            }
        }
        (out, acq)
    }

    fn release_acquired(&mut self, acq: &Acquired) {
        for n in &acq.prefixes {
            self.drop_prefix(*n);
        }
        for pair in acq.ports.chunks(2) {
            self.drop_port_bounds(pair[0], pair[1]);
        }
        for &sel in &acq.selectors {
            self.release_selector(sel);
        }
        for &rid in &acq.relatives {
            self.release_relative(rid);
        }
    }

    /// What compiled rules shared with another policy acquired, acquired again for one more
    /// user (relatives and node selectors are never shared).
    fn reacquire(&mut self, acq: &Acquired) {
        for n in &acq.prefixes {
            self.add_prefix(*n);
        }
        for pair in acq.ports.chunks(2) {
            self.add_port_bounds(pair[0], pair[1]);
        }
        for sel in &acq.selectors {
            self.sel_entries.get_mut(sel).expect("a shared rule's selector is held by its other users").refs += 1;
        }
    }

    /// The compiled rules of `ingress` and `egress`: those of a policy or profile with equal
    /// rules, shared (each user acquires their selectors, prefixes and ports), or compiled now
    /// from `pending` (None: the rules were checked equal to shared ones in this delta).
    fn compile_shared(&mut self, ingress: &RuleSpecs, egress: &RuleSpecs, pending: Option<PendingRules>) -> Compiled {
        let key = rules_key(ingress, egress);
        if let Some(entry) = key.as_ref().and_then(|k| self.shared_rules.get_mut(k)) {
            entry.users += 1;
            let (rules, acquired) = (entry.rules.clone(), entry.acquired.clone());
            self.reacquire(&acquired);
            let shared = key.and_then(|k| self.shared_rules.get_key_value(&k).map(|(k, _)| k.clone()));
            return Compiled { rules, acquired, shared };
        }
        // Rules equal to shared ones whose last user went earlier in this delta: they were
        // checked when first compiled, so checking them again finds nothing.
        let pending = pending.or_else(|| pending_rules(ingress, egress, "shared rules").ok()).unwrap_or_default();
        let shareable = pending.shareable();
        let (rules, acquired) = self.compile_rules(pending);
        let (rules, acquired) = (Arc::new(rules), Arc::new(acquired));
        let shared = key.filter(|_| shareable);
        if let Some(k) = &shared {
            self.shared_rules.insert(k.clone(), SharedRules { rules: rules.clone(), acquired: acquired.clone(), users: 1 });
        }
        Compiled { rules, acquired, shared }
    }

    fn release_compiled(&mut self, compiled: Compiled) {
        self.release_acquired(&compiled.acquired);
        if let Some(k) = compiled.shared {
            if let Some(entry) = self.shared_rules.get_mut(&k) {
                entry.users -= 1;
                if entry.users == 0 {
                    self.shared_rules.remove(&k);
                }
            }
        }
    }

    /// Node labels or addresses changed: rules with node selectors are compiled again (their
    /// selectors are unchanged, so no set moves).
    fn recompile_node_selectors(&mut self) {
        let ids: Vec<u32> =
            self.policies.iter().filter(|(_, p)| p.compiled.acquired.has_node_selector).map(|(&i, _)| i).collect();
        for id in ids {
            let spec = self.policies[&id].spec.clone();
            if let Ok(subject) = identity::subject_selector(&spec.subject, "policy") {
                if let Ok(pending) = pending_rules(&spec.ingress, &spec.egress, "policy") {
                    self.upsert_policy(spec, subject, Some(pending));
                }
            }
        }
        let ids: Vec<u32> =
            self.profiles.iter().filter(|(_, p)| p.compiled.acquired.has_node_selector).map(|(&i, _)| i).collect();
        for id in ids {
            let spec = self.profiles[&id].spec.clone();
            if let Ok(pending) = pending_rules(&spec.ingress, &spec.egress, "profile") {
                self.upsert_profile(spec, Some(pending));
            }
        }
    }

    // ---- policies and profiles ----------------------------------------------------------------

    fn upsert_policy(&mut self, mut spec: PolicySpec, subject_sel: Selector, pending: Option<PendingRules>) {
        let id = spec.id;
        spec.subject.selector = self.intern(&spec.subject.selector);
        let tier = self.tier_ids[&spec.tier];
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
                self.evict_programs_with(id);
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

    fn remove_policy(&mut self, id: u32) {
        let Some(old) = self.policies.remove(&id) else { return };
        // The id may come back as another policy in another tier.
        self.evict_programs_with(id);
        self.mark_matches_dirty(old.subject);
        if let Some(e) = self.sel_entries.get_mut(&old.subject) {
            e.subject_of.retain(|&p| p != id);
        }
        self.snap.policies.set(id, None);
        self.release_compiled(old.compiled);
        self.release_selector(old.subject);
    }

    fn upsert_profile(&mut self, mut spec: ProfileSpec, pending: Option<PendingRules>) {
        let id = spec.id;
        let compiled = self.compile_shared(&spec.ingress, &spec.egress, pending);
        if let Some((ingress, egress)) = &compiled.shared {
            (spec.ingress, spec.egress) = (RuleSpecs::Rules(ingress.clone()), RuleSpecs::Rules(egress.clone()));
        }
        self.snap.profiles.set(id, Some(compiled.rules.clone()));
        self.forget_profile_lists_with(id);
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

    fn remove_profile(&mut self, id: u32) {
        let Some(old) = self.profiles.remove(&id) else { return };
        self.forget_profile_lists_with(id);
        self.snap.profiles.set(id, None);
        if self.profile_ids.get(&old.spec.name) == Some(&id) {
            self.profile_ids.remove(&old.spec.name);
        }
        self.refresh_profiles(&old.spec.name);
        self.release_compiled(old.compiled);
    }

    // ---- endpoints and addresses ----------------------------------------------------------------

    /// Which of the endpoints sharing an address it resolves to: a pod's own address wins over
    /// host-network pods on its node; then by namespace, name and kind (the reference
    /// evaluator's `Inventory.owner_of` rule).
    fn owner_rank(&self, id: u32) -> (bool, &str, &str, &str, u32) {
        let e = &self.endpoints[&id];
        let kind = if e.kind == Kind::Host { "host" } else { "pod" };
        (e.host_network, e.namespace.as_deref().unwrap_or(""), &e.name, kind, id)
    }

    fn refresh_owner(&mut self, a: Addr) {
        let winner = self
            .addr_owners
            .get(&a)
            .and_then(|owners| owners.iter().copied().min_by(|x, y| self.owner_rank(*x).cmp(&self.owner_rank(*y))));
        match winner {
            Some(w) => {
                let e = &self.endpoints[&w];
                let rec = AddrRec {
                    endpoint: w,
                    identity: e.identity,
                    class: self.snap.classes.class_of(a),
                    local: e.local(),
                    host: e.kind == Kind::Host,
                };
                if self.snap.addrs.get(&a) != Some(&rec) {
                    self.snap.addrs.insert(a, rec);
                }
            }
            None => {
                self.addr_owners.remove(&a);
                self.snap.addrs.remove(&a);
            }
        }
    }

    fn upsert_endpoint(&mut self, spec: EndpointSpec) {
        let id = spec.id;
        let kind = kind_of(&spec.kind).unwrap_or(Kind::Pod);
        let ips = parse_addrs(&spec.ips).unwrap_or_default();
        let mut entry = self.slim(spec, kind, ips, u32::MAX);
        let identity = self.acquire_identity(self.endpoint_key(&entry));
        entry.identity = identity;
        let old = self.endpoints.remove(&id);
        let mut touched: Vec<Addr> = Vec::new();
        if let Some(o) = &old {
            if o.addressable {
                for a in o.ips.iter() {
                    if let Some(owners) = self.addr_owners.get_mut(a) {
                        owners.retain(|&x| x != id);
                    }
                    touched.push(*a);
                }
            }
            if let Some(ns) = &o.namespace {
                if let Some(set) = self.ns_endpoints.get_mut(&**ns) {
                    set.remove(&id);
                }
            }
        }
        let rec = EpRec {
            identity,
            kind,
            local: entry.local(),
            first_ip: entry.ips.first().copied(),
        };
        if entry.addressable {
            for a in entry.ips.iter() {
                let owners = self.addr_owners.entry(*a).or_default();
                if !owners.contains(&id) {
                    owners.push(id);
                }
                touched.push(*a);
            }
        }
        if let Some(ns) = &entry.namespace {
            self.ns_endpoints.entry(ns.to_string()).or_default().insert(id);
        }
        let nss: Vec<String> =
            old.iter().filter_map(|o| o.namespace.as_deref().map(str::to_string)).chain(entry.namespace.as_deref().map(str::to_string)).collect();
        self.endpoints.insert(id, entry);
        self.snap.endpoints.set(id, Some(rec));
        touched.sort_by_key(|a| (a.v6, a.bits));
        touched.dedup();
        for a in touched {
            self.refresh_owner(a);
        }
        for ns in nss {
            self.refresh_service_members(&ns, id);
        }
        if let Some(o) = old {
            self.release_identity(o.identity);
        }
    }

    fn remove_endpoint(&mut self, id: u32) {
        let Some(old) = self.endpoints.remove(&id) else { return };
        self.snap.endpoints.set(id, None);
        if old.addressable {
            for a in &old.ips {
                if let Some(owners) = self.addr_owners.get_mut(a) {
                    owners.retain(|&x| x != id);
                }
                self.refresh_owner(*a);
            }
        }
        if let Some(ns) = &old.namespace {
            if let Some(set) = self.ns_endpoints.get_mut(&**ns) {
                set.remove(&id);
            }
            self.refresh_service_members(ns, id);
        }
        self.release_identity(old.identity);
    }

    // ---- network sets, services ---------------------------------------------------------------

    fn upsert_network_set(&mut self, spec: &NetworkSetSpec) {
        let key = self.netset_key(spec);
        let identity = self.acquire_identity(key);
        let nets = NetList::parse(&spec.nets).unwrap_or_default().0;
        for n in &nets {
            self.add_prefix(*n);
        }
        let old = self.network_sets.insert(spec.id, NetSetEntry { spec: spec.clone(), identity, nets });
        if let Some(o) = old {
            for n in &o.nets {
                self.drop_prefix(*n);
            }
            self.release_identity(o.identity);
        }
        self.netsets_dirty = true;
    }

    fn remove_network_set(&mut self, id: u32) {
        if let Some(o) = self.network_sets.remove(&id) {
            for n in &o.nets {
                self.drop_prefix(*n);
            }
            self.release_identity(o.identity);
            self.netsets_dirty = true;
        }
    }

    fn rebuild_netset_lpm(&mut self) {
        let mut lpm = NetsetLpm::default();
        for n in self.network_sets.values() {
            for net in &n.nets {
                lpm.insert(*net, n.identity);
            }
        }
        self.snap.netsets = Arc::new(lpm);
        self.netsets_dirty = false;
        self.class_netsets_dirty = true;
    }

    fn service_member(spec: &ServiceSpec, ep: &EpEntry) -> bool {
        match &spec.selector {
            Some(sel) if !sel.is_empty() => {
                ep.namespace.as_deref() == Some(spec.namespace.as_str())
                    && sel.iter().all(|(k, v)| ep.raw_label(k) == Some(v.as_str()))
            }
            _ => false,
        }
    }

    fn service_ports(spec: &ServiceSpec) -> Vec<u16> {
        let mut v = Vec::new();
        for p in &spec.ports {
            v.push(p.port);
            if let Some(super::spec::TargetPort::Number(n)) = p.target_port {
                v.push(n);
            }
        }
        v
    }

    fn upsert_service(&mut self, spec: &ServiceSpec) {
        let ips = parse_addrs(&spec.ips).unwrap_or_default();
        for p in Self::service_ports(spec) {
            self.add_port_bounds(p, p);
        }
        if let Some(old) = self.services.remove(&spec.id) {
            for p in Self::service_ports(&old.spec) {
                self.drop_port_bounds(p, p);
            }
            if let Some(list) = self.ns_services.get_mut(&old.spec.namespace) {
                list.retain(|&s| s != spec.id);
            }
            Arc::make_mut(&mut self.snap.services)
                .remove(&(Arc::from(old.spec.namespace.as_str()), Arc::from(old.spec.name.as_str())));
        }
        let members: HashSet<u32> = self
            .ns_endpoints
            .get(&spec.namespace)
            .into_iter()
            .flatten()
            .copied()
            .filter(|e| self.endpoints.get(e).is_some_and(|ep| Self::service_member(spec, ep)))
            .collect();
        let rec = ServiceRec {
            ips: ips.iter().copied().collect(),
            members,
            ports: spec.ports.iter().map(|p| (p.port, p.protocol, p.target_port.clone())).collect(),
        };
        Arc::make_mut(&mut self.snap.services)
            .insert((Arc::from(spec.namespace.as_str()), Arc::from(spec.name.as_str())), Arc::new(rec));
        self.ns_services.entry(spec.namespace.clone()).or_default().push(spec.id);
        self.services.insert(spec.id, ServiceEntry { spec: spec.clone(), ips });
    }

    fn remove_service(&mut self, id: u32) {
        let Some(old) = self.services.remove(&id) else { return };
        for p in Self::service_ports(&old.spec) {
            self.drop_port_bounds(p, p);
        }
        if let Some(list) = self.ns_services.get_mut(&old.spec.namespace) {
            list.retain(|&s| s != id);
        }
        Arc::make_mut(&mut self.snap.services)
            .remove(&(Arc::from(old.spec.namespace.as_str()), Arc::from(old.spec.name.as_str())));
        let _ = old.ips;
    }

    /// Re-checks endpoint `ep`'s membership in the selector-based services of namespace `ns`.
    fn refresh_service_members(&mut self, ns: &str, ep: u32) {
        let Some(list) = self.ns_services.get(ns) else { return };
        for &sid in list.clone().iter() {
            let svc = &self.services[&sid];
            let member = self.endpoints.get(&ep).is_some_and(|e| Self::service_member(&svc.spec, e));
            let key = (Arc::from(svc.spec.namespace.as_str()), Arc::from(svc.spec.name.as_str()));
            let services = Arc::make_mut(&mut self.snap.services);
            if let Some(rec) = services.get_mut(&key) {
                if rec.members.contains(&ep) != member {
                    let rec = Arc::make_mut(rec);
                    if member {
                        rec.members.insert(ep);
                    } else {
                        rec.members.remove(&ep);
                    }
                }
            }
        }
    }

}

/// What `check` found: per policy its subject (a position in `subjects`, each distinct one
/// parsed once) and its rules checked (None: equal to rules checked before, whose compiled
/// form is shared).
#[derive(Default)]
struct Checked {
    subjects: Vec<Selector>,
    policies: Vec<(usize, Option<PendingRules>)>,
    profiles: Vec<Option<PendingRules>>,
}

/// The key of `ingress` and `egress` among shared compiled rules (None while unresolved).
fn rules_key(ingress: &RuleSpecs, egress: &RuleSpecs) -> Option<RulesKey> {
    Some((ingress.shared()?.clone(), egress.shared()?.clone()))
}

fn pending_rules(ingress: &RuleSpecs, egress: &RuleSpecs, context: &str) -> Result<PendingRules, EngineError> {
    let specs = rules_key(ingress, egress)
        .ok_or_else(|| EngineError::Spec(format!("{context}: its rules name a rule list that is not in the delta")))?;
    let mut out = PendingRules { specs: [specs.0, specs.1], rules: [Vec::new(), Vec::new()] };
    for (d, list) in [(0, &**ingress), (1, &**egress)] {
        for (i, r) in list.iter().enumerate() {
            let context = format!("{context} rule {i}");
            Action::parse(&r.action)?;
            if let Some(h) = &r.http {
                CRule::compile_http(h)?;
            }
            let entity = |e: &EntitySpec| -> Result<PendingEntity, EngineError> {
                NetList::parse(&e.nets)?;
                NetList::parse(&e.not_nets)?;
                for p in e.ports.iter().chain(&e.not_ports) {
                    PortMatch::compile(p)?;
                }
                if let Some(text) = &e.node_selector {
                    identity::parse(text, &context)?;
                }
                for d in &e.domains {
                    DomainPattern::parse(d).map_err(|why| EngineError::Spec(format!("{context}: domain {d:?}: {why}")))?;
                }
                let selector = if identity::needs_labels(e) { Some(identity::entity_selector(e, &context)?) } else { None };
                if identity::is_relative(e) {
                    // the relation itself must be valid
                    identity::relative_selector(&Selector::all(), e, None, &LabelMap::new())?;
                }
                let not_selector = identity::not_selector(e, &context)?;
                Ok(PendingEntity {
                    selector,
                    relative: identity::is_relative(e),
                    node_selector: e.node_selector.is_some(),
                    not_selector,
                })
            };
            let sources = r.sources.iter().map(entity).collect::<Result<_, _>>()?;
            let destinations = r.destinations.iter().map(entity).collect::<Result<_, _>>()?;
            out.rules[d].push(PendingRule { sources, destinations });
        }
    }
    Ok(out)
}
