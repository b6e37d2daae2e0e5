//! The previous engine, an exact whole-world interpreter of the IR: every selector evaluated
//! at build time against every endpoint, every rule walked per flow. It rebuilds from scratch
//! for any change, so it is no longer what answers packets; it stays as a Rust-side oracle that
//! the property tests hold the identity engine ([`super::Model`]) to, on random worlds
//! (`engine::workload::random_spec`, feature `bench`), beside the Python reference evaluator.

use std::collections::{HashMap, HashSet};

use super::rules::{IcmpMatch, NamedPorts, PortMatch};
use super::spec::{self, EntitySpec, LabelMap, RuleSpec, Spec, TargetPort};
use super::{
    kinds_mask, Action, Addr, Decision, Defaults, Direction, EngineError, Flow, FlowEnd, Kind,
    LogEntry, Net, Reason, Source, Verdict, PROTO_ICMP, PROTO_ICMPV6,
};
use super::judge::{flow_of_header, Judge};
use crate::batch::PacketHeader;
use crate::selector::Selector;

// --- compiled form ---------------------------------------------------------------------------

struct Endpoint {
    kind: Kind,
    namespace: Option<String>,
    raw_labels: LabelMap,
    ips: Vec<Addr>,
    ports: Vec<(Option<String>, u8, u16)>,
    host_network: bool,
    /// Whether this node enforces its policy (`EndpointSpec::enforced`).
    enforced: bool,
    /// Indices of the profiles this endpoint carries that exist, in its order.
    profiles: Vec<u32>,
}

impl Endpoint {
    /// Whether policy applies to it: hostNetwork pods' traffic is the node's.
    fn is_local(&self) -> bool {
        !(self.kind == Kind::Pod && self.host_network)
    }

    /// Whether policy applies to it here: local, and not another node's.
    fn is_enforced(&self) -> bool {
        self.enforced && self.is_local()
    }

    fn named_port(&self, name: &str, protocol: u8) -> impl Iterator<Item = u16> + '_ {
        let name = name.to_string();
        self.ports
            .iter()
            .filter(move |(n, p, _)| n.as_deref() == Some(name.as_str()) && *p == protocol)
            .map(|(_, _, port)| *port)
    }
}

impl NamedPorts for Endpoint {
    fn has_named_port(&self, name: &str, protocol: u8, port: u16) -> bool {
        self.ports.iter().any(|(n, p, x)| n.as_deref() == Some(name) && *p == protocol && *x == port)
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
    /// What the `notSelector` matches (endpoints and network sets, whatever the kinds).
    not_labels: Option<MatchSet>,
    kinds: Option<u8>,
    has_selector: bool,
    ports: Vec<PortMatch>,
    not_ports: Vec<PortMatch>,
    unresolvable: bool,
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

pub struct Oracle {
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
        // `notSelector` is no positive condition: it only excludes (see `not_labels`).
        let needs_labels = e.selector.is_some()
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
        let not_labels = match self.opt_selector(&e.not_selector, context)? {
            None => None,
            Some(sel) => Some(MatchSet {
                endpoints: self.spec.endpoints.iter().map(|ep| sel.matches(&*ep.policy_labels())).collect(),
                network_sets: self.spec.network_sets.iter().map(|n| sel.matches(&n.labels)).collect(),
            }),
        };
        let entity = Entity {
            nets,
            not_nets,
            node_addrs,
            has_domains: !e.domains.is_empty(),
            service,
            labels,
            not_labels,
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
            .map(|ep| check(&ep.policy_labels(), ep.namespace.as_deref(), Some(ep)))
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

impl Oracle {
    pub fn from_json(text: &str) -> Result<Oracle, EngineError> {
        let spec: Spec = serde_json::from_str(text).map_err(|e| EngineError::Spec(e.to_string()))?;
        Oracle::build(&spec)
    }

    pub fn build(spec: &Spec) -> Result<Oracle, EngineError> {
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
                enforced: e.enforced,
                profiles: e.profiles.iter().filter_map(|n| profile_index.get(n.as_str()).copied()).collect(),
            });
        }
        // An address resolves to the endpoint that ranks first: not a hostNetwork pod, then
        // by namespace, name and kind (the reference's `Inventory.owner_of`).
        let rank = |i: usize| {
            let e = &spec.endpoints[i];
            (e.host_network, e.namespace.as_deref().unwrap_or(""), e.name.as_str(), e.kind.as_str(), i)
        };
        let mut ip_owner: HashMap<Addr, u32> = HashMap::new();
        for (i, ep) in endpoints.iter().enumerate() {
            if !spec.endpoints[i].addressable {
                continue;
            }
            for a in &ep.ips {
                let best = ip_owner.entry(*a).or_insert(i as u32);
                if rank(i) < rank(*best as usize) {
                    *best = i as u32;
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
                if !sel.matches(&*es.policy_labels()) {
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
        Ok(Oracle {
            endpoints,
            ip_owner,
            network_sets,
            services,
            tier_defaults,
            policies,
            profiles,
            entities: b.entities,
            programs,
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
        Ok(self.interpret_unchecked(flow, defaults))
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

    fn is_enforced(&self, end: &FlowEnd) -> bool {
        end.endpoint.is_some_and(|e| self.endpoints[e as usize].is_enforced())
    }

    fn default_for(&self, end: &FlowEnd, d: Defaults) -> bool {
        match end.endpoint {
            Some(e) if self.endpoints[e as usize].kind == Kind::Host => d.host_allow,
            _ => d.pod_allow,
        }
    }

    fn interpret_unchecked(&self, flow: &Flow, defaults: Defaults) -> Verdict {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = FlowCtx::new(self, flow, src, dst);
        let egress = ctx.side(&src, Direction::Egress, defaults);
        let ingress = ctx.side(&dst, Direction::Ingress, defaults);
        let mut allow = true;
        for (d, end) in [(&egress, &src), (&ingress, &dst)] {
            if self.is_enforced(end) {
                let v = d.as_ref().map_or(self.default_for(end, defaults), |d| d.allow);
                allow &= v;
            }
        }
        Verdict { allow, egress, ingress, awaits_request: false }
    }
}

impl Judge for Oracle {
    fn header_verdict(&self, h: &PacketHeader, defaults: Defaults) -> Option<Verdict> {
        Some(self.interpret_unchecked(&flow_of_header(h)?, defaults))
    }
}

/// One flow being evaluated: both ends resolved, and the network sets containing each address.
struct FlowCtx<'e> {
    engine: &'e Oracle,
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
    fn new(engine: &'e Oracle, flow: &'e Flow, src: FlowEnd, dst: FlowEnd) -> Self {
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
        if !self.engine.is_enforced(end) {
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
                                awaits_request: false,
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
                    awaits_request: false,
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
                                awaits_request: false,
                            })
                        }
                    }
                }
            }
            return Some(Decision { allow: false, tier: None, source: None, rule: None, reason: Reason::Profile, logs, awaits_request: false });
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
            awaits_request: false,
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
        if let Some(not) = &m.not_labels {
            // Excluded when the endpoint (a kind it may see; never a host-network pod) or any
            // network set containing the address matches; an address nothing owns passes.
            if let Some(ep) = end.endpoint {
                let endpoint = &e.endpoints[ep as usize];
                if endpoint.is_local() && m.kinds.is_none_or(|k| k & endpoint.kind.bit() != 0) && not.endpoints[ep as usize] {
                    return false;
                }
            }
            if m.kinds.is_none_or(|k| k & Kind::NetworkSet.bit() != 0) && sets.iter().any(|&s| not.network_sets[s as usize]) {
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
