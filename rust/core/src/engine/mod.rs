//! The decision engine: a policy set and inventory compiled once into an immutable snapshot that
//! answers, per flow or per batch of packet headers, whether policy allows the traffic and which
//! tier, policy and rule decided — with exactly the semantics of the pure-Python reference
//! evaluator (`pyclassify/reference.py`, DESIGN.md §3), which the differential tests hold it to.
//!
//! What compiling buys: every selector is evaluated once, at build time, into per-entity
//! membership tables (which endpoints and network sets a rule peer matches, per subject namespace
//! where ANP relations make it relative); every endpoint's applicable policies per direction are
//! resolved once; addresses resolve to endpoints through a hash map. Per packet no selector is
//! evaluated and nothing is allocated on the allow path.

mod compiled;
mod net;
pub mod spec;
pub mod workload;

use std::collections::{HashMap, HashSet};

use crate::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_MALFORMED, FLAG_TRUNCATED};
use crate::conntrack::{ConnTrack, QuotedTuple};
use crate::selector::{Selector, SelectorError};
pub use compiled::{CompiledStats, PAlt, RuleMeta, StageListing};
pub use net::{Addr, Net};
use spec::{EntitySpec, LabelMap, PortSpec, RuleSpec, Spec, TargetPort};

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;
pub const PROTO_SCTP: u8 = 132;
pub const PROTO_UDPLITE: u8 = 136;

fn is_port_protocol(p: u8) -> bool {
    matches!(p, PROTO_TCP | PROTO_UDP | PROTO_SCTP | PROTO_UDPLITE)
}

/// The engine layer's one error type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The spec is not what `engine_spec` writes (a bug on the Python side, or hand-written JSON).
    Spec(String),
    /// A selector in the spec does not parse.
    Selector { context: String, error: SelectorError },
    /// A flow that cannot be evaluated (unknown endpoint id, bad address).
    Flow(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Spec(m) => write!(f, "invalid engine spec: {m}"),
            EngineError::Selector { context, error } => write!(f, "{context}: {error}"),
            EngineError::Flow(m) => write!(f, "invalid flow: {m}"),
        }
    }
}

impl std::error::Error for EngineError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
    Pass,
    Log,
}

impl Action {
    fn parse(text: &str) -> Result<Action, EngineError> {
        match text {
            "Allow" => Ok(Action::Allow),
            "Deny" => Ok(Action::Deny),
            "Pass" => Ok(Action::Pass),
            "Log" => Ok(Action::Log),
            other => Err(EngineError::Spec(format!("unknown action {other:?}"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ingress = 0,
    Egress = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Host,
    NetworkSet,
}

impl Kind {
    fn parse(text: &str) -> Result<Kind, EngineError> {
        match text {
            "pod" => Ok(Kind::Pod),
            "host" => Ok(Kind::Host),
            "networkset" => Ok(Kind::NetworkSet),
            other => Err(EngineError::Spec(format!("unknown endpoint kind {other:?}"))),
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

fn kinds_mask(kinds: &[String]) -> Result<u8, EngineError> {
    kinds.iter().try_fold(0u8, |m, k| Ok(m | Kind::parse(k)?.bit()))
}

/// Why a direction was decided as it was (DESIGN.md §4 `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Rule = 0,
    EndOfTier = 1,
    Profile = 2,
    Default = 3,
}

/// What decided: a policy's rule or a profile's rule (indices into the spec's lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Policy(u32),
    Profile(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub tier: Option<u32>,
    pub source: Source,
    pub rule: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allow: bool,
    pub tier: Option<u32>,
    pub source: Option<Source>,
    pub rule: Option<u32>,
    pub reason: Reason,
    pub logs: Vec<LogEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allow: bool,
    pub egress: Option<Decision>,
    pub ingress: Option<Decision>,
}

/// Defaults when no policy decides (DESIGN.md §3 "After all tiers").
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub pod_allow: bool,
    pub host_allow: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults { pod_allow: true, host_allow: false }
    }
}

/// One end of a flow: an address, a known endpoint (by index), or both.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowEnd {
    pub addr: Option<Addr>,
    pub endpoint: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub src: FlowEnd,
    pub dst: FlowEnd,
    pub protocol: u8,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

// --- compiled form ---------------------------------------------------------------------------

struct Endpoint {
    kind: Kind,
    namespace: Option<String>,
    raw_labels: LabelMap,
    ips: Vec<Addr>,
    ports: Vec<(Option<String>, u8, u16)>,
    host_network: bool,
    /// Indices of the profiles this endpoint carries that exist, in its order.
    profiles: Vec<u32>,
}

impl Endpoint {
    /// Whether policy applies to it: hostNetwork pods' traffic is the node's.
    fn is_local(&self) -> bool {
        !(self.kind == Kind::Pod && self.host_network)
    }

    fn named_port(&self, name: &str, protocol: u8) -> impl Iterator<Item = u16> + '_ {
        let name = name.to_string();
        self.ports
            .iter()
            .filter(move |(n, p, _)| n.as_deref() == Some(name.as_str()) && *p == protocol)
            .map(|(_, _, port)| *port)
    }
}

struct NetworkSet {
    nets: Vec<Net>,
}

struct Service {
    namespace: String,
    selector: Option<LabelMap>,
    ips: HashSet<Addr>,
    ports: Vec<(u16, u8, Option<TargetPort>)>,
}

#[derive(Clone)]
enum PortMatch {
    Any { protocol: Option<u8> },
    Range { protocol: Option<u8>, first: u16, last: u16 },
    Named { protocol: Option<u8>, name: String },
}

impl PortMatch {
    fn compile(p: &PortSpec) -> Result<PortMatch, EngineError> {
        Ok(match (&p.name, p.first, p.last) {
            (Some(name), _, _) => PortMatch::Named { protocol: p.protocol, name: name.clone() },
            (None, Some(first), Some(last)) => PortMatch::Range { protocol: p.protocol, first, last },
            (None, None, None) => PortMatch::Any { protocol: p.protocol },
            _ => return Err(EngineError::Spec("a port range needs first and last".into())),
        })
    }

    fn protocol(&self) -> Option<u8> {
        match self {
            PortMatch::Any { protocol } | PortMatch::Range { protocol, .. } | PortMatch::Named { protocol, .. } => {
                *protocol
            }
        }
    }

    fn matches(&self, protocol: u8, port: Option<u16>, owner: Option<&Endpoint>) -> bool {
        if let Some(p) = self.protocol() {
            if p != protocol {
                return false;
            }
        }
        let PortMatch::Any { .. } = self else {
            let Some(port) = port else { return false };
            if !is_port_protocol(protocol) {
                return false;
            }
            return match self {
                PortMatch::Range { first, last, .. } => *first <= port && port <= *last,
                PortMatch::Named { name, .. } => owner.is_some_and(|o| o.named_port(name, protocol).any(|p| p == port)),
                PortMatch::Any { .. } => unreachable!(),
            };
        };
        true
    }
}

/// Which endpoints and network sets a rule peer's label conditions accept.
#[derive(Clone, Default)]
struct MatchSet {
    endpoints: Vec<bool>,
    network_sets: Vec<bool>,
}

enum LabelMatch {
    None,
    Static(MatchSet),
    /// ANP `related`/`sameLabels`: depends on the subject's namespace.
    Relative(HashMap<Option<String>, MatchSet>),
}

struct Entity {
    nets: Vec<Net>,
    not_nets: Vec<Net>,
    node_addrs: Option<HashSet<Addr>>,
    has_domains: bool,
    /// `Some(None)`: the service names nothing in the inventory (never matches).
    service: Option<Option<u32>>,
    labels: LabelMatch,
    kinds: Option<u8>,
    has_selector: bool,
    ports: Vec<PortMatch>,
    not_ports: Vec<PortMatch>,
    unresolvable: bool,
}

#[derive(Clone, Copy)]
struct IcmpMatch {
    icmp_type: Option<u8>,
    code: Option<u8>,
}

struct Rule {
    action: Action,
    ip_version: Option<u8>,
    protocols: Option<[bool; 256]>,
    not_protocols: [bool; 256],
    icmp: Option<IcmpMatch>,
    not_icmp: Option<IcmpMatch>,
    sources: Vec<u32>,
    destinations: Vec<u32>,
}

struct RuleList {
    ingress: Vec<Rule>,
    egress: Vec<Rule>,
}

impl RuleList {
    fn get(&self, d: Direction) -> &[Rule] {
        match d {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }
}

/// The tiers (in order) that have policies applying to one endpoint in one direction.
type SideProgram = Vec<(u32, Vec<u32>)>;

pub struct Engine {
    endpoints: Vec<Endpoint>,
    ip_owner: HashMap<Addr, u32>,
    network_sets: Vec<NetworkSet>,
    services: Vec<Service>,
    tier_defaults: Vec<Action>,
    policies: Vec<RuleList>,
    profiles: Vec<RuleList>,
    entities: Vec<Entity>,
    /// Per endpoint: [ingress, egress] programs.
    programs: Vec<[SideProgram; 2]>,
    /// The programs compiled into classifier tables (None: interpreter only).
    compiled: Option<compiled::Compiled>,
}

/// Engine size figures for `stats()`.
#[derive(Debug, Clone, Copy)]
pub struct EngineStats {
    pub endpoints: usize,
    pub policies: usize,
    pub rules: usize,
    pub entities: usize,
    pub addresses: usize,
}

// --- building --------------------------------------------------------------------------------

struct Builder<'a> {
    spec: &'a Spec,
    ns_labels: HashMap<String, LabelMap>,
    selectors: HashMap<String, Selector>,
    entities: Vec<Entity>,
    /// Namespaces of local endpoints (for relative peers): None = cluster-scoped subject.
    subject_namespaces: Vec<Option<String>>,
    services: HashMap<(String, String), u32>,
}

impl<'a> Builder<'a> {
    fn selector(&mut self, text: &str, context: &str) -> Result<Selector, EngineError> {
        if let Some(s) = self.selectors.get(text) {
            return Ok(s.clone());
        }
        let s = Selector::parse(text).map_err(|error| EngineError::Selector { context: context.to_string(), error })?;
        self.selectors.insert(text.to_string(), s.clone());
        Ok(s)
    }

    fn opt_selector(&mut self, text: &Option<String>, context: &str) -> Result<Option<Selector>, EngineError> {
        text.as_deref().map(|t| self.selector(t, context)).transpose()
    }

    fn namespace_labels(&self, ns: Option<&str>) -> LabelMap {
        match ns {
            None => LabelMap::new(),
            Some(ns) => self.ns_labels.get(ns).cloned().unwrap_or_else(|| {
                // A namespace with no manifest exists implicitly, as the reference has it.
                let mut m = LabelMap::new();
                m.insert("kubernetes.io/metadata.name".into(), ns.into());
                m.insert("projectcalico.org/name".into(), ns.into());
                m
            }),
        }
    }

    fn entity(&mut self, e: &EntitySpec, context: &str) -> Result<u32, EngineError> {
        let nets = e.nets.iter().map(|n| Net::parse(n)).collect::<Result<Vec<_>, _>>()?;
        let not_nets = e.not_nets.iter().map(|n| Net::parse(n)).collect::<Result<Vec<_>, _>>()?;
        let node_addrs = match &e.node_selector {
            None => None,
            Some(text) => {
                let sel = self.selector(text, context)?;
                let mut addrs = HashSet::new();
                for node in &self.spec.nodes {
                    if sel.matches(&node.labels) {
                        for a in &node.addresses {
                            addrs.insert(Addr::parse(a)?);
                        }
                    }
                }
                Some(addrs)
            }
        };
        let service = e.service.as_ref().map(|(ns, name)| self.services.get(&(ns.clone(), name.clone())).copied());
        let kinds = e.endpoint_kinds.as_deref().map(kinds_mask).transpose()?;
        let needs_labels = e.selector.is_some()
            || e.not_selector.is_some()
            || e.endpoint_kinds.is_some()
            || e.namespace.is_some()
            || e.namespace_selector.is_some()
            || e.namespace_relation.is_some()
            || !e.same_labels.is_empty()
            || !e.not_same_labels.is_empty()
            || e.service_account_names.is_some()
            || e.service_account_selector.is_some();
        let labels = if !needs_labels {
            LabelMatch::None
        } else if e.namespace_relation.is_some() || !e.same_labels.is_empty() || !e.not_same_labels.is_empty() {
            let mut per = HashMap::new();
            for ns in self.subject_namespaces.clone() {
                let set = self.match_set(e, ns.as_deref(), context)?;
                per.insert(ns, set);
            }
            LabelMatch::Relative(per)
        } else {
            LabelMatch::Static(self.match_set(e, None, context)?)
        };
        let entity = Entity {
            nets,
            not_nets,
            node_addrs,
            has_domains: e.has_domains,
            service,
            labels,
            kinds,
            has_selector: e.selector.is_some(),
            ports: e.ports.iter().map(PortMatch::compile).collect::<Result<_, _>>()?,
            not_ports: e.not_ports.iter().map(PortMatch::compile).collect::<Result<_, _>>()?,
            unresolvable: e.unresolvable,
        };
        self.entities.push(entity);
        Ok((self.entities.len() - 1) as u32)
    }

    /// The reference's `labelled_matches` for every endpoint and network set, once.
    fn match_set(&mut self, e: &EntitySpec, subject_ns: Option<&str>, context: &str) -> Result<MatchSet, EngineError> {
        let selector = self.opt_selector(&e.selector, context)?;
        let not_selector = self.opt_selector(&e.not_selector, context)?;
        let ns_selector = self.opt_selector(&e.namespace_selector, context)?;
        let sa_selector = self.opt_selector(&e.service_account_selector, context)?;
        let relation_self = match e.namespace_relation.as_deref() {
            None => None,
            Some("Self") => Some(true),
            Some("NotSelf") => Some(false),
            Some(other) => return Err(EngineError::Spec(format!("unknown namespace relation {other:?}"))),
        };
        let mine = self.namespace_labels(subject_ns);
        let sa_names: Option<HashSet<&str>> =
            e.service_account_names.as_ref().map(|v| v.iter().map(String::as_str).collect());
        let check = |labels: &LabelMap, ns: Option<&str>, ep: Option<&spec::EndpointSpec>| -> bool {
            if selector.as_ref().is_some_and(|s| !s.matches(labels)) {
                return false;
            }
            if not_selector.as_ref().is_some_and(|s| s.matches(labels)) {
                return false;
            }
            if e.namespace.as_deref().is_some_and(|want| ns != Some(want)) {
                return false;
            }
            if let Some(nss) = &ns_selector {
                if nss.is_global() {
                    if ns.is_some() {
                        return false;
                    }
                } else {
                    match ns {
                        None => return false,
                        Some(n) => {
                            if !nss.matches(&self.namespace_labels(Some(n))) {
                                return false;
                            }
                        }
                    }
                }
            }
            if let Some(want_same) = relation_self {
                let same = ns.is_some() && ns == subject_ns;
                if same != want_same {
                    return false;
                }
            }
            if !e.same_labels.is_empty() || !e.not_same_labels.is_empty() {
                let Some(n) = ns else { return false };
                let theirs = self.namespace_labels(Some(n));
                for key in &e.same_labels {
                    match (mine.get(key), theirs.get(key)) {
                        (Some(a), Some(b)) if a == b => {}
                        _ => return false,
                    }
                }
                for key in &e.not_same_labels {
                    if mine.get(key) == theirs.get(key) {
                        return false;
                    }
                }
            }
            if let Some(names) = &sa_names {
                match ep.and_then(|ep| ep.service_account.as_deref()) {
                    Some(sa) if names.contains(sa) => {}
                    _ => return false,
                }
            }
            if let Some(sel) = &sa_selector {
                match ep {
                    Some(ep) if sel.matches(&ep.sa_labels) => {}
                    _ => return false,
                }
            }
            true
        };
        let endpoints = self
            .spec
            .endpoints
            .iter()
            .map(|ep| check(&ep.labels, ep.namespace.as_deref(), Some(ep)))
            .collect();
        let network_sets = self
            .spec
            .network_sets
            .iter()
            .map(|n| check(&n.labels, n.namespace.as_deref(), None))
            .collect();
        Ok(MatchSet { endpoints, network_sets })
    }

    fn rule(&mut self, r: &RuleSpec, context: &str) -> Result<Rule, EngineError> {
        let mut not_protocols = [false; 256];
        for p in &r.not_protocols {
            not_protocols[*p as usize] = true;
        }
        let protocols = r.protocols.as_ref().map(|ps| {
            let mut set = [false; 256];
            for p in ps {
                set[*p as usize] = true;
            }
            set
        });
        let icmp = |m: &Option<spec::IcmpSpec>| m.as_ref().map(|m| IcmpMatch { icmp_type: m.icmp_type, code: m.code });
        let sources = r.sources.iter().map(|e| self.entity(e, context)).collect::<Result<_, _>>()?;
        let destinations = r.destinations.iter().map(|e| self.entity(e, context)).collect::<Result<_, _>>()?;
        Ok(Rule {
            action: Action::parse(&r.action)?,
            ip_version: r.ip_version,
            protocols,
            not_protocols,
            icmp: icmp(&r.icmp),
            not_icmp: icmp(&r.not_icmp),
            sources,
            destinations,
        })
    }

    fn rules(&mut self, ingress: &[RuleSpec], egress: &[RuleSpec], context: &str) -> Result<RuleList, EngineError> {
        Ok(RuleList {
            ingress: ingress.iter().map(|r| self.rule(r, context)).collect::<Result<_, _>>()?,
            egress: egress.iter().map(|r| self.rule(r, context)).collect::<Result<_, _>>()?,
        })
    }
}

impl Engine {
    pub fn from_json(text: &str) -> Result<Engine, EngineError> {
        let spec: Spec = serde_json::from_str(text).map_err(|e| EngineError::Spec(e.to_string()))?;
        Engine::build(&spec)
    }

    /// Builds the interpreter's tables and compiles them into classifier tables.
    pub fn build(spec: &Spec) -> Result<Engine, EngineError> {
        Engine::build_with(spec, true)
    }

    /// `compile: false` builds the interpreter only (the baseline of the benchmarks and tests).
    pub fn build_with(spec: &Spec, compile: bool) -> Result<Engine, EngineError> {
        let mut engine = Engine::build_interpreter(spec)?;
        if compile {
            engine.compiled = Some(compiled::compile(&engine));
        }
        Ok(engine)
    }

    /// Size figures of the compiled tables (None when built without them).
    pub fn compiled_stats(&self) -> Option<CompiledStats> {
        self.compiled.as_ref().map(|c| c.stats())
    }

    /// The compiled stages of one endpoint's side for one address family (`render`), computed
    /// afresh with the same compiler as the shared tables.
    pub fn compiled_listing(&self, endpoint: u32, direction: Direction, v6: bool) -> Result<Vec<StageListing>, EngineError> {
        let ep = self.endpoints.get(endpoint as usize).ok_or_else(|| EngineError::Flow(format!("no endpoint {endpoint}")))?;
        if !ep.is_local() {
            return Ok(Vec::new());
        }
        Ok(compiled::listing(self, endpoint as usize, direction, v6))
    }

    fn build_interpreter(spec: &Spec) -> Result<Engine, EngineError> {
        let mut endpoints = Vec::with_capacity(spec.endpoints.len());
        let profile_index: HashMap<&str, u32> =
            spec.profiles.iter().enumerate().map(|(i, p)| (p.name.as_str(), i as u32)).collect();
        for e in &spec.endpoints {
            endpoints.push(Endpoint {
                kind: Kind::parse(&e.kind)?,
                namespace: e.namespace.clone(),
                raw_labels: e.raw_labels.clone(),
                ips: e.ips.iter().map(|a| Addr::parse(a)).collect::<Result<_, _>>()?,
                ports: e.ports.iter().map(|p| (p.name.clone(), p.protocol, p.port)).collect(),
                host_network: e.host_network,
                profiles: e.profiles.iter().filter_map(|n| profile_index.get(n.as_str()).copied()).collect(),
            });
        }
        // An address resolves to its first endpoint that is not a hostNetwork pod, else the first.
        let mut ip_owner: HashMap<Addr, u32> = HashMap::new();
        for pass_host_network in [false, true] {
            for (i, ep) in endpoints.iter().enumerate() {
                if ep.host_network != pass_host_network || !spec.endpoints[i].addressable {
                    continue;
                }
                for a in &ep.ips {
                    ip_owner.entry(*a).or_insert(i as u32);
                }
            }
        }
        let network_sets = spec
            .network_sets
            .iter()
            .map(|n| Ok(NetworkSet { nets: n.nets.iter().map(|x| Net::parse(x)).collect::<Result<_, _>>()? }))
            .collect::<Result<Vec<_>, EngineError>>()?;
        let mut services = Vec::new();
        let mut service_index = HashMap::new();
        for (i, s) in spec.services.iter().enumerate() {
            service_index.insert((s.namespace.clone(), s.name.clone()), i as u32);
            services.push(Service {
                namespace: s.namespace.clone(),
                selector: s.selector.clone(),
                ips: s.ips.iter().map(|a| Addr::parse(a)).collect::<Result<_, _>>()?,
                ports: s
                    .ports
                    .iter()
                    .map(|p| {
                        let target = match &p.target_port {
                            None => None,
                            Some(TargetPort::Number(n)) => Some(TargetPort::Number(*n)),
                            Some(TargetPort::Name(s)) => Some(TargetPort::Name(s.clone())),
                        };
                        (p.port, p.protocol, target)
                    })
                    .collect(),
            });
        }
        let mut subject_namespaces: Vec<Option<String>> =
            spec.endpoints.iter().map(|e| e.namespace.clone()).collect::<HashSet<_>>().into_iter().collect();
        subject_namespaces.sort();
        let mut b = Builder {
            spec,
            ns_labels: spec.namespaces.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            selectors: HashMap::new(),
            entities: Vec::new(),
            subject_namespaces,
            services: service_index,
        };
        let tier_index: HashMap<&str, u32> =
            spec.tiers.iter().enumerate().map(|(i, t)| (t.name.as_str(), i as u32)).collect();
        let tier_defaults = spec.tiers.iter().map(|t| Action::parse(&t.default_action)).collect::<Result<Vec<_>, _>>()?;
        let mut policies = Vec::with_capacity(spec.policies.len());
        for (i, p) in spec.policies.iter().enumerate() {
            policies.push(b.rules(&p.ingress, &p.egress, &format!("policy {i}"))?);
        }
        let mut profiles = Vec::with_capacity(spec.profiles.len());
        for p in &spec.profiles {
            profiles.push(b.rules(&p.ingress, &p.egress, &format!("profile {}", p.name))?);
        }
        // Which policies apply to each endpoint, per direction, grouped by tier in order.
        let mut programs: Vec<[SideProgram; 2]> = vec![[Vec::new(), Vec::new()]; endpoints.len()];
        for (pi, p) in spec.policies.iter().enumerate() {
            let tier = *tier_index
                .get(p.tier.as_str())
                .ok_or_else(|| EngineError::Spec(format!("policy {pi} names unknown tier {:?}", p.tier)))?;
            let ctx = format!("policy {pi} subject");
            let s = &p.subject;
            let sel = b.selector(&s.selector, &ctx)?;
            let ns_sel = b.opt_selector(&s.namespace_selector, &ctx)?;
            let sa_sel = b.opt_selector(&s.service_account_selector, &ctx)?;
            let kinds = kinds_mask(&s.endpoint_kinds)?;
            let directions: Vec<Direction> = p
                .types
                .iter()
                .map(|t| match t.as_str() {
                    "ingress" => Ok(Direction::Ingress),
                    "egress" => Ok(Direction::Egress),
                    other => Err(EngineError::Spec(format!("unknown policy type {other:?}"))),
                })
                .collect::<Result<_, _>>()?;
            for (ei, (ep, es)) in endpoints.iter().zip(&spec.endpoints).enumerate() {
                if kinds & ep.kind.bit() == 0 {
                    continue;
                }
                if s.namespace.is_some() && es.namespace != s.namespace {
                    continue;
                }
                if !sel.matches(&es.labels) {
                    continue;
                }
                if let Some(nss) = &ns_sel {
                    match es.namespace.as_deref() {
                        Some(n) if nss.matches(&b.namespace_labels(Some(n))) => {}
                        _ => continue,
                    }
                }
                if sa_sel.as_ref().is_some_and(|sel| !sel.matches(&es.sa_labels)) {
                    continue;
                }
                for d in &directions {
                    let side = &mut programs[ei][*d as usize];
                    match side.last_mut() {
                        Some((t, list)) if *t == tier => list.push(pi as u32),
                        _ => side.push((tier, vec![pi as u32])),
                    }
                }
            }
        }
        // Policies arrive sorted by tier then order; keep tiers in tier order regardless.
        for sides in &mut programs {
            for side in sides.iter_mut() {
                side.sort_by_key(|(t, _)| *t);
            }
        }
        Ok(Engine {
            endpoints,
            ip_owner,
            network_sets,
            services,
            tier_defaults,
            policies,
            profiles,
            entities: b.entities,
            programs,
            compiled: None,
        })
    }

    pub fn stats(&self) -> EngineStats {
        let rules = self.policies.iter().chain(&self.profiles).map(|r| r.ingress.len() + r.egress.len()).sum();
        EngineStats {
            endpoints: self.endpoints.len(),
            policies: self.policies.len(),
            rules,
            entities: self.entities.len(),
            addresses: self.ip_owner.len(),
        }
    }

    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    // --- evaluating --------------------------------------------------------------------------

    pub fn evaluate(&self, flow: &Flow, defaults: Defaults) -> Result<Verdict, EngineError> {
        self.check_flow(flow)?;
        Ok(self.evaluate_unchecked(flow, defaults))
    }

    fn check_flow(&self, flow: &Flow) -> Result<(), EngineError> {
        for end in [&flow.src, &flow.dst] {
            if let Some(e) = end.endpoint {
                if e as usize >= self.endpoints.len() {
                    return Err(EngineError::Flow(format!("no endpoint {e}")));
                }
            } else if end.addr.is_none() {
                return Err(EngineError::Flow("a flow end needs an endpoint or an address".into()));
            }
        }
        Ok(())
    }

    fn resolve(&self, end: &FlowEnd) -> FlowEnd {
        if end.endpoint.is_some() || end.addr.is_none() {
            return *end;
        }
        FlowEnd { addr: end.addr, endpoint: end.addr.and_then(|a| self.ip_owner.get(&a).copied()) }
    }

    fn address(&self, end: &FlowEnd) -> Option<Addr> {
        end.addr.or_else(|| end.endpoint.and_then(|e| self.endpoints[e as usize].ips.first().copied()))
    }

    fn is_local(&self, end: &FlowEnd) -> bool {
        end.endpoint.is_some_and(|e| self.endpoints[e as usize].is_local())
    }

    fn default_for(&self, end: &FlowEnd, d: Defaults) -> bool {
        match end.endpoint {
            Some(e) if self.endpoints[e as usize].kind == Kind::Host => d.host_allow,
            _ => d.pod_allow,
        }
    }

    /// Like [`Engine::evaluate`], always by the interpreter (the compiled tables' oracle).
    pub fn evaluate_interpreted(&self, flow: &Flow, defaults: Defaults) -> Result<Verdict, EngineError> {
        self.check_flow(flow)?;
        Ok(self.interpret_unchecked(flow, defaults))
    }

    fn evaluate_unchecked(&self, flow: &Flow, defaults: Defaults) -> Verdict {
        if let Some(v) = self.compiled_verdict(flow, defaults) {
            return v;
        }
        self.interpret_unchecked(flow, defaults)
    }

    fn interpret_unchecked(&self, flow: &Flow, defaults: Defaults) -> Verdict {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = FlowCtx::new(self, flow, src, dst);
        let egress = ctx.side(&src, Direction::Egress, defaults);
        let ingress = ctx.side(&dst, Direction::Ingress, defaults);
        let mut allow = true;
        for (d, end) in [(&egress, &src), (&ingress, &dst)] {
            if self.is_local(end) {
                let v = d.as_ref().map_or(self.default_for(end, defaults), |d| d.allow);
                allow &= v;
            }
        }
        Verdict { allow, egress, ingress }
    }

    /// Verdicts for a batch of decoded headers: 1 allow, 0 deny. Malformed or truncated packets
    /// without the fields policy needs are denied (the default chosen before parsing).
    pub fn classify_batch(&self, headers: &[PacketHeader], out: &mut [u8], defaults: Defaults) {
        for (h, o) in headers.iter().zip(out.iter_mut()) {
            *o = self.header_verdict(h, defaults).is_some_and(|v| v.allow) as u8;
        }
    }

    /// Like [`Engine::classify_batch`], with the deciding tier, policy and rule of each direction.
    pub fn classify_detailed(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults) {
        self.classify_detailed_with(headers, out, defaults, true)
    }

    /// `compiled: false`: by the interpreter alone (the benchmarks' same-run baseline).
    pub fn classify_detailed_with(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults, compiled: bool) {
        for (h, o) in headers.iter().zip(out.iter_mut()) {
            *o = match self.header_verdict_with(h, defaults, compiled) {
                Some(v) => PacketVerdict::judged(&v),
                None => PacketVerdict::malformed(),
            };
        }
    }

    /// Classifies a batch with connection tracking: packets of connections already allowed
    /// (and their replies, and ICMP errors about them) pass without policy; a packet that may
    /// open a connection is judged by policy and, if allowed, starts tracking. Time is each
    /// header's capture timestamp. `quotes`, parallel to `headers`, carries the flow each ICMP
    /// error quotes.
    pub fn classify_tracked(
        &self,
        ct: &mut ConnTrack,
        headers: &[PacketHeader],
        quotes: Option<&[QuotedTuple]>,
        out: &mut [PacketVerdict],
        defaults: Defaults,
    ) {
        for (i, (h, o)) in headers.iter().zip(out.iter_mut()).enumerate() {
            if h.flags & FLAG_MALFORMED != 0 {
                *o = PacketVerdict::malformed();
                continue;
            }
            let mut judged = None;
            let quoted = quotes.and_then(|q| q.get(i));
            let (state, allowed) = ct.track_judged(h, quoted, h.ts_ns, |h| {
                let v = self.header_verdict(h, defaults);
                let allow = v.as_ref().is_some_and(|v| v.allow);
                judged = Some(v);
                allow
            });
            *o = match judged {
                Some(Some(v)) => PacketVerdict::judged(&v),
                Some(None) => PacketVerdict::malformed(),
                None if state.allows() => PacketVerdict { allow: 1, reason: PACKET_ESTABLISHED, ..Default::default() },
                None => PacketVerdict { allow: 0, reason: PACKET_INVALID, ..Default::default() },
            };
            o.allow = allowed as u8;
            o.ct_state = state.code();
        }
    }

    /// The verdict for one decoded header; None if it lacks what policy needs.
    pub fn header_verdict(&self, h: &PacketHeader, defaults: Defaults) -> Option<Verdict> {
        self.header_verdict_with(h, defaults, true)
    }

    /// `compiled: false` answers by the interpreter alone (baseline and oracle).
    pub fn header_verdict_with(&self, h: &PacketHeader, defaults: Defaults, compiled: bool) -> Option<Verdict> {
        if h.flags & FLAG_MALFORMED != 0 || (h.ip_version != 4 && h.ip_version != 6) {
            return None;
        }
        let has_ports = h.flags & FLAG_HAS_PORTS != 0;
        if h.flags & FLAG_TRUNCATED != 0 && !has_ports && is_port_protocol(h.protocol) {
            return None;
        }
        let icmp = matches!(h.protocol, PROTO_ICMP | PROTO_ICMPV6);
        let flow = Flow {
            src: FlowEnd { addr: Some(Addr::from_header(&h.src_addr, h.ip_version)), endpoint: None },
            dst: FlowEnd { addr: Some(Addr::from_header(&h.dst_addr, h.ip_version)), endpoint: None },
            protocol: h.protocol,
            sport: has_ports.then_some(h.sport),
            dport: has_ports.then_some(h.dport),
            icmp_type: icmp.then_some(h.icmp_type),
            icmp_code: icmp.then_some(h.icmp_code),
        };
        Some(if compiled { self.evaluate_unchecked(&flow, defaults) } else { self.interpret_unchecked(&flow, defaults) })
    }
}

/// `PacketVerdict::reason`: policy judged the packet.
pub const PACKET_POLICY: u8 = 0;
/// It belongs to a connection already allowed (or is a reply to one, or an ICMP error about one).
pub const PACKET_ESTABLISHED: u8 = 1;
/// It could not be decoded far enough to judge: denied (the default chosen before parsing).
pub const PACKET_MALFORMED: u8 = 2;
/// Connection tracking found it invalid (e.g. a TCP packet that opens nothing): denied.
pub const PACKET_INVALID: u8 = 3;

/// One direction's decision in batch output. `source_kind`: 0 none, 1 policy, 2 profile;
/// `tier`, `source`, `rule` are -1 when absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideVerdict {
    pub present: u8,
    pub allow: u8,
    pub reason: u8,
    pub source_kind: u8,
    pub tier: i32,
    pub source: i32,
    pub rule: i32,
}

impl Default for SideVerdict {
    fn default() -> Self {
        SideVerdict { present: 0, allow: 0, reason: 0, source_kind: 0, tier: -1, source: -1, rule: -1 }
    }
}

impl SideVerdict {
    fn from(d: &Option<Decision>) -> SideVerdict {
        let Some(d) = d else { return SideVerdict::default() };
        let (source_kind, source) = match d.source {
            None => (0, -1),
            Some(Source::Policy(i)) => (1, i as i32),
            Some(Source::Profile(i)) => (2, i as i32),
        };
        SideVerdict {
            present: 1,
            allow: d.allow as u8,
            reason: d.reason as u8,
            source_kind,
            tier: d.tier.map_or(-1, |t| t as i32),
            source,
            rule: d.rule.map_or(-1, |r| r as i32),
        }
    }
}

/// The batch output record, one per packet header (36 bytes; `pyclassify.engine.VERDICT_DTYPE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketVerdict {
    pub allow: u8,
    /// `PACKET_POLICY`, `PACKET_ESTABLISHED`, `PACKET_MALFORMED` or `PACKET_INVALID`.
    pub reason: u8,
    /// Connection-tracking state code (`conntrack::code`), 0 without tracking.
    pub ct_state: u8,
    pub reserved: u8,
    pub egress: SideVerdict,
    pub ingress: SideVerdict,
}

const _: () = assert!(std::mem::size_of::<PacketVerdict>() == 36);

impl PacketVerdict {
    fn judged(v: &Verdict) -> PacketVerdict {
        PacketVerdict {
            allow: v.allow as u8,
            reason: PACKET_POLICY,
            ct_state: 0,
            reserved: 0,
            egress: SideVerdict::from(&v.egress),
            ingress: SideVerdict::from(&v.ingress),
        }
    }

    fn malformed() -> PacketVerdict {
        PacketVerdict { reason: PACKET_MALFORMED, ..Default::default() }
    }
}

/// One flow being evaluated: both ends resolved, and the network sets containing each address.
struct FlowCtx<'e> {
    engine: &'e Engine,
    flow: &'e Flow,
    src: FlowEnd,
    dst: FlowEnd,
    src_addr: Option<Addr>,
    dst_addr: Option<Addr>,
    src_sets: Vec<u32>,
    dst_sets: Vec<u32>,
    version: Option<u8>,
}

enum Hit {
    Match,
    Unresolvable,
}

impl<'e> FlowCtx<'e> {
    fn new(engine: &'e Engine, flow: &'e Flow, src: FlowEnd, dst: FlowEnd) -> Self {
        let src_addr = engine.address(&src);
        let dst_addr = engine.address(&dst);
        let sets = |a: Option<Addr>| -> Vec<u32> {
            let Some(a) = a else { return Vec::new() };
            engine
                .network_sets
                .iter()
                .enumerate()
                .filter(|(_, n)| n.nets.iter().any(|net| net.contains(a)))
                .map(|(i, _)| i as u32)
                .collect()
        };
        let version = src_addr.or(dst_addr).map(|a| a.version());
        FlowCtx { engine, flow, src, dst, src_sets: sets(src_addr), dst_sets: sets(dst_addr), src_addr, dst_addr, version }
    }

    fn side(&self, end: &FlowEnd, d: Direction, defaults: Defaults) -> Option<Decision> {
        if !self.engine.is_local(end) {
            return None;
        }
        let subject = end.endpoint? as usize;
        let e = self.engine;
        let mut logs = Vec::new();
        let program = &e.programs[subject][d as usize];
        for (tier, policies) in program {
            let mut passed = false;
            'policies: for &pi in policies {
                for (ri, rule) in e.policies[pi as usize].get(d).iter().enumerate() {
                    let Some(action) = self.rule_action(rule, subject) else { continue };
                    match action {
                        Action::Log => logs.push(LogEntry { tier: Some(*tier), source: Source::Policy(pi), rule: ri as u32 }),
                        Action::Pass => {
                            passed = true;
                            break 'policies;
                        }
                        Action::Allow | Action::Deny => {
                            return Some(Decision {
                                allow: action == Action::Allow,
                                tier: Some(*tier),
                                source: Some(Source::Policy(pi)),
                                rule: Some(ri as u32),
                                reason: Reason::Rule,
                                logs,
                            })
                        }
                    }
                }
            }
            let default = e.tier_defaults[*tier as usize];
            if !passed && default != Action::Pass {
                return Some(Decision {
                    allow: default == Action::Allow,
                    tier: Some(*tier),
                    source: None,
                    rule: None,
                    reason: Reason::EndOfTier,
                    logs,
                });
            }
        }
        let profiles = &e.endpoints[subject].profiles;
        if !profiles.is_empty() {
            for &pi in profiles {
                for (ri, rule) in e.profiles[pi as usize].get(d).iter().enumerate() {
                    let Some(action) = self.rule_action(rule, subject) else { continue };
                    match action {
                        Action::Log => logs.push(LogEntry { tier: None, source: Source::Profile(pi), rule: ri as u32 }),
                        Action::Pass => break,
                        Action::Allow | Action::Deny => {
                            return Some(Decision {
                                allow: action == Action::Allow,
                                tier: None,
                                source: Some(Source::Profile(pi)),
                                rule: Some(ri as u32),
                                reason: Reason::Profile,
                                logs,
                            })
                        }
                    }
                }
            }
            return Some(Decision { allow: false, tier: None, source: None, rule: None, reason: Reason::Profile, logs });
        }
        if program.is_empty() {
            return None;
        }
        Some(Decision {
            allow: e.default_for(end, defaults),
            tier: None,
            source: None,
            rule: None,
            reason: Reason::Default,
            logs,
        })
    }

    fn icmp_matches(&self, m: &IcmpMatch) -> bool {
        let f = self.flow;
        if !matches!(f.protocol, PROTO_ICMP | PROTO_ICMPV6) {
            return false;
        }
        if m.icmp_type.is_some() && f.icmp_type != m.icmp_type {
            return false;
        }
        if m.code.is_some() && f.icmp_code != m.code {
            return false;
        }
        true
    }

    fn rule_action(&self, rule: &Rule, subject: usize) -> Option<Action> {
        let f = self.flow;
        if let (Some(want), Some(v)) = (rule.ip_version, self.version) {
            if want != v {
                return None;
            }
        }
        if rule.protocols.as_ref().is_some_and(|set| !set[f.protocol as usize]) {
            return None;
        }
        if rule.not_protocols[f.protocol as usize] {
            return None;
        }
        if rule.icmp.as_ref().is_some_and(|m| !self.icmp_matches(m)) {
            return None;
        }
        if rule.not_icmp.as_ref().is_some_and(|m| self.icmp_matches(m)) {
            return None;
        }
        let src_hit = self.any_entity(&rule.sources, true, subject, rule.action)?;
        let dst_hit = self.any_entity(&rule.destinations, false, subject, rule.action)?;
        if rule.action == Action::Pass && (matches!(src_hit, Hit::Unresolvable) || matches!(dst_hit, Hit::Unresolvable)) {
            return Some(Action::Deny);
        }
        Some(rule.action)
    }

    fn any_entity(&self, entities: &[u32], source: bool, subject: usize, action: Action) -> Option<Hit> {
        if entities.is_empty() {
            return Some(Hit::Match);
        }
        for &id in entities {
            let m = &self.engine.entities[id as usize];
            if m.unresolvable {
                // Fail closed: an Allow never matches through it, Deny/Pass always do.
                if matches!(action, Action::Allow | Action::Log) {
                    continue;
                }
                if self.ports_match(m, source) {
                    return Some(Hit::Unresolvable);
                }
                continue;
            }
            if self.entity_matches(m, source, subject) {
                return Some(Hit::Match);
            }
        }
        None
    }

    fn end(&self, source: bool) -> (&FlowEnd, Option<Addr>, &[u32]) {
        if source {
            (&self.src, self.src_addr, &self.src_sets)
        } else {
            (&self.dst, self.dst_addr, &self.dst_sets)
        }
    }

    fn entity_matches(&self, m: &Entity, source: bool, subject: usize) -> bool {
        let e = self.engine;
        let (end, ip, sets) = self.end(source);
        if !m.nets.is_empty() && !ip.is_some_and(|a| m.nets.iter().any(|n| n.contains(a))) {
            return false;
        }
        if !m.not_nets.is_empty() && ip.is_some_and(|a| m.not_nets.iter().any(|n| n.contains(a))) {
            return false;
        }
        if let Some(addrs) = &m.node_addrs {
            if !ip.is_some_and(|a| addrs.contains(&a)) {
                return false;
            }
        }
        if m.has_domains {
            return false; // DNS-learned addresses are not known here: never widen (fail closed)
        }
        if let Some(service) = m.service {
            if !self.service_matches(m, service, source) {
                return false;
            }
        }
        let set = match &m.labels {
            LabelMatch::None => None,
            LabelMatch::Static(s) => Some(s),
            LabelMatch::Relative(per) => match per.get(&e.endpoints[subject].namespace) {
                Some(s) => Some(s),
                None => return false,
            },
        };
        if let Some(set) = set {
            let mut any = false;
            if let Some(ep) = end.endpoint {
                let endpoint = &e.endpoints[ep as usize];
                // A hostNetwork pod's traffic carries the node's address: pod selectors never see it.
                if endpoint.is_local() && m.kinds.is_none_or(|k| k & endpoint.kind.bit() != 0) {
                    any = set.endpoints[ep as usize];
                }
            }
            if !any && m.has_selector && m.kinds.is_none_or(|k| k & Kind::NetworkSet.bit() != 0) {
                any = sets.iter().any(|&s| set.network_sets[s as usize]);
            }
            if !any {
                return false;
            }
        }
        self.ports_match(m, source)
    }

    fn ports_match(&self, m: &Entity, source: bool) -> bool {
        let f = self.flow;
        let port = if source { f.sport } else { f.dport };
        let owner = self.end(source).0.endpoint.map(|e| &self.engine.endpoints[e as usize]);
        if !m.ports.is_empty() && !m.ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        if m.not_ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        true
    }

    fn service_matches(&self, m: &Entity, service: Option<u32>, source: bool) -> bool {
        let Some(si) = service else { return false };
        let svc = &self.engine.services[si as usize];
        let (end, ip, _) = self.end(source);
        let ep = end.endpoint.map(|e| &self.engine.endpoints[e as usize]);
        let mut member = ip.is_some_and(|a| svc.ips.contains(&a));
        if !member {
            if let (Some(ep), Some(sel)) = (ep, &svc.selector) {
                if !sel.is_empty() && ep.namespace.as_deref() == Some(svc.namespace.as_str()) {
                    member = sel.iter().all(|(k, v)| ep.raw_labels.get(k) == Some(v));
                }
            }
        }
        if !member {
            return false;
        }
        if source || !m.ports.is_empty() || svc.ports.is_empty() {
            return true;
        }
        let f = self.flow;
        let Some(dport) = f.dport else { return false };
        for (port, protocol, target) in &svc.ports {
            if *protocol != f.protocol {
                continue;
            }
            match target {
                Some(TargetPort::Name(name)) => {
                    if ep.is_some_and(|ep| ep.named_port(name, f.protocol).any(|p| p == dport)) {
                        return true;
                    }
                }
                Some(TargetPort::Number(n)) => {
                    if dport == *n || dport == *port {
                        return true;
                    }
                }
                None => {
                    if dport == *port {
                        return true;
                    }
                }
            }
        }
        false
    }
}
