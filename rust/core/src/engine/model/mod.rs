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
//!
//! The parts that keep state of their own hold it: `tiers` (tier order and defaults), `ids`
//! (identity and selector numbers), `interner` (label strings), `boundaries` (the prefixes and
//! ports the decision memo's classes are built from), `program_cache` (interned programs and
//! profile lists, compiled when [`Compile`] says) and `check` (a delta compiled before anything
//! changes). The modules named for what they keep (`namespaces`, `selectors`, `identities`,
//! `programs`, `rule_compile`, `policies`, `endpoints`, `services`) hold the `Model` methods for
//! it, which reach across the model's tables: one change (a new identity, a policy's new peer)
//! updates several of them together.

use crate::dns::{DomainFacts, DomainPattern};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::cow::FastMap;
use super::identity::{self, IdentityKey};
use super::idset::IdSet;
use super::rules::{CEntity, CRule, CRules, IcmpMatch, LabelCond, NetList, PortMatch, ProtoSet};
use super::snapshot::{
    AddrRec, EpRec, IdRec, NetsetLpm, ProfileList, Program, ServiceRec, Snapshot, Stage, NO_NAMESPACE,
};
use super::spec::{
    Delta, EndpointSpec, EntitySpec, LabelMap, NetworkSetSpec, NodeSpec, PolicySpec, ProfileSpec, RuleSpec, RuleSpecs,
    ServiceSpec,
};
use super::{Action, Addr, Direction, EngineError, Kind, Net};
use crate::labelindex::{LabelIndex, MatchChange};
use crate::selector::Selector;
use boundaries::Boundaries;
use check::{pending_rules, rules_key, PendingEntity, PendingRules};
use ids::Ids;
use interner::{InternedLabels, Interner};
use program_cache::ProgramCache;
use tiers::{SortKey, TierOrder};

mod boundaries;
mod check;
mod endpoints;
mod identities;
mod ids;
mod interner;
mod namespaces;
mod policies;
mod program_cache;
mod programs;
mod rule_compile;
mod selectors;
mod services;
mod tiers;

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
    raw_labels: InternedLabels,
    /// As policy sees them, when the spec said so (a whole-world spec does).
    labels: Option<InternedLabels>,
    sa_labels: InternedLabels,
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
    identity_numbers: Ids,
    /// Label keys some selector mentions, with how many selectors do (see `identity`).
    referenced: HashMap<String, usize>,
    index: LabelIndex<u32, u32, u32>,
    selectors: HashMap<Selector, u32>,
    sel_entries: FastMap<u32, SelEntry>,
    selector_numbers: Ids,
    relatives: FastMap<u32, RelEntry>,
    next_relative: u32,
    programs: ProgramCache,
    shared_rules: HashMap<RulesKey, SharedRules>,
    policies: FastMap<u32, PolicyEntry>,
    profiles: FastMap<u32, ProfileEntry>,
    profile_ids: HashMap<String, u32>,
    tiers: TierOrder,
    network_sets: FastMap<u32, NetSetEntry>,
    nodes: FastMap<u32, NodeSpec>,
    services: FastMap<u32, ServiceEntry>,
    addr_owners: FastMap<Addr, Vec<u32>>,
    /// Services per namespace name.
    ns_services: HashMap<String, Vec<u32>>,
    netsets_dirty: bool,
    /// The address and port classes of the decision memo (`classes`).
    boundaries: Boundaries,
    /// The network sets holding each class are to be worked out again.
    class_netsets_dirty: bool,
    /// Label keys and values, shared by every endpoint that carries them.
    strings: Interner,
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
            identity_numbers: Ids::default(),
            referenced: HashMap::new(),
            index,
            selectors: HashMap::new(),
            sel_entries: FastMap::default(),
            selector_numbers: Ids::default(),
            relatives: FastMap::default(),
            next_relative: 0,
            programs: ProgramCache::default(),
            shared_rules: HashMap::new(),
            policies: FastMap::default(),
            profiles: FastMap::default(),
            profile_ids: HashMap::new(),
            tiers: TierOrder::default(),
            network_sets: FastMap::default(),
            nodes: FastMap::default(),
            services: FastMap::default(),
            addr_owners: FastMap::default(),
            ns_services: HashMap::new(),
            netsets_dirty: false,
            boundaries: Boundaries::default(),
            class_netsets_dirty: false,
            strings: Interner::default(),
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

    /// Recomputes the programs of identities whose applicable policies changed.
    fn settle(&mut self) {
        while !self.dirty.is_empty() {
            let dirty: Vec<u32> = self.dirty.drain().collect();
            for id in dirty {
                self.recompute_programs(id);
            }
        }
        if let Some(ports) = self.boundaries.changed_port_classes() {
            self.snap.ports = ports;
        }
        if let Some(classes) = self.boundaries.changed_address_classes() {
            self.snap.classes = classes;
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
        self.strings.sweep();
        self.programs.sweep();
        // Compile what is new against the state the snapshot will hold (rules read from it).
        self.programs.compile_fresh(&self.snap, self.deltas == 1);
    }

    /// When the programs a delta makes are compiled (`Compile`).
    pub fn set_compile(&mut self, when: Compile) {
        self.programs.set_compile(when);
    }
}
