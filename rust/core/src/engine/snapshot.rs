//! An immutable engine snapshot, and how it answers a flow.
//!
//! Per flow: each address maps to its endpoint (one hash lookup), the endpoint to its identity,
//! the identity to its program per direction (the policies that apply, by tier, in order). A
//! rule peer with label conditions is a membership test of the peer's identity in the peer's
//! identity set; addresses not owned by any endpoint are matched by networks and by the network
//! sets containing them. Nothing is allocated on the allow path.

use crate::dns::{DnsError, DomainFacts};
use crate::http::Request;
use std::cell::{Cell, OnceCell};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use super::classes::{with_memo, ClassLpm, MemoRef, PortClasses, SideKey};
use super::records::{PacketVerdict, SideVerdict, HTTP_AWAITS, HTTP_NONE};
use super::cow::{ChunkVec, FastMap, ShardedMap};
use super::idset::IdSet;
use super::judge::{flow_of_header, Judge};
use super::rules::{CEntity, CRule, CRules, LabelCond, NamedPorts};
use super::spec::TargetPort;
use super::{
    Action, Addr, Decision, Defaults, Direction, EngineError, Flow, FlowEnd, Kind, LogEntry, Net, Reason, Source,
    Verdict, PROTO_TCP,
};
use crate::batch::PacketHeader;

/// The namespace id of cluster-scoped identities.
pub const NO_NAMESPACE: u32 = u32::MAX;
/// The peer identity of an address no endpoint owns, in memo keys.
const OUTSIDE: u32 = u32::MAX;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A process-wide unique id for a snapshot handed out (the decision memo is per snapshot).
pub(crate) fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, AtomicOrdering::Relaxed)
}

/// What an address resolves to: its endpoint, the endpoint's identity, the address's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRec {
    pub endpoint: u32,
    pub identity: u32,
    pub class: u32,
    pub local: bool,
    pub host: bool,
}

#[derive(Clone, Debug)]
pub struct EpRec {
    pub identity: u32,
    pub kind: Kind,
    /// Whether policy applies to it (host-network pods' traffic is the node's).
    pub local: bool,
    pub first_ip: Option<Addr>,
}

#[derive(Clone, Debug)]
pub struct IdRec {
    pub kind: Kind,
    pub local: bool,
    pub ns: u32,
    /// [ingress, egress]
    pub programs: [Arc<Program>; 2],
    /// Named ports: (name, protocol, port).
    pub ports: Arc<Vec<(Arc<str>, u8, u16)>>,
    /// Profiles that exist, in the endpoint's order.
    pub profiles: Arc<Vec<u32>>,
}

impl NamedPorts for IdRec {
    #[inline]
    fn has_named_port(&self, name: &str, protocol: u8, port: u16) -> bool {
        self.ports.iter().any(|(n, p, x)| *p == protocol && *x == port && &**n == name)
    }
}

impl IdRec {
    fn named_ports<'a>(&'a self, name: &'a str, protocol: u8) -> impl Iterator<Item = u16> + 'a {
        self.ports.iter().filter(move |(n, p, _)| *p == protocol && &**n == name).map(|(_, _, x)| *x)
    }
}

/// The policies that apply to an identity in one direction, grouped by tier in order.
#[derive(Debug, Default)]
pub struct Program {
    pub stages: Vec<Stage>,
}

#[derive(Debug)]
pub struct Stage {
    pub tier: u32,
    pub default: Action,
    pub policies: Vec<u32>,
}

/// Which network sets (by identity) contain an address: one hash probe per prefix length.
#[derive(Clone, Debug, Default)]
pub struct NetsetLpm {
    tables: Vec<(bool, u8, FastMap<u128, Vec<u32>>)>,
}

impl NetsetLpm {
    pub fn insert(&mut self, net: Net, identity: u32) {
        let t = match self.tables.iter().position(|(v6, len, _)| *v6 == net.v6 && *len == net.len) {
            Some(i) => i,
            None => {
                self.tables.push((net.v6, net.len, FastMap::default()));
                self.tables.len() - 1
            }
        };
        let ids = self.tables[t].2.entry(net.bits).or_default();
        if !ids.contains(&identity) {
            ids.push(identity);
        }
    }

    pub fn lookup(&self, a: Addr, out: &mut Vec<u32>) {
        for (v6, len, table) in &self.tables {
            if *v6 != a.v6 {
                continue;
            }
            if let Some(ids) = table.get(&(a.bits & super::net::mask(*len))) {
                out.extend_from_slice(ids);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Every network with the identities of the network sets that list it.
    pub fn nets(&self) -> impl Iterator<Item = (Net, &Vec<u32>)> + '_ {
        self.tables
            .iter()
            .flat_map(|(v6, len, t)| t.iter().map(move |(bits, ids)| (Net { bits: *bits, len: *len, v6: *v6 }, ids)))
    }
}

#[derive(Clone, Debug, Default)]
pub struct ServiceRec {
    pub ips: HashSet<Addr>,
    /// Endpoints the service's selector picks (same namespace, raw labels).
    pub members: HashSet<u32>,
    pub ports: Vec<(u16, u8, Option<TargetPort>)>,
}

/// An immutable engine state. Cloning shares every table.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub(crate) addrs: ShardedMap<Addr, AddrRec>,
    pub(crate) endpoints: ChunkVec<EpRec>,
    pub(crate) identities: ChunkVec<IdRec>,
    pub(crate) policies: ChunkVec<Arc<CRules>>,
    pub(crate) profiles: ChunkVec<Arc<CRules>>,
    pub(crate) sets: ChunkVec<Arc<IdSet>>,
    /// (relative peer, subject namespace) -> set id.
    pub(crate) relative: Arc<FastMap<(u32, u32), u32>>,
    pub(crate) netsets: Arc<NetsetLpm>,
    pub(crate) services: Arc<FastMap<(Arc<str>, Arc<str>), Arc<ServiceRec>>>,
    pub(crate) generation: u64,
    /// Unique per snapshot handed out (0 in the model's working copy).
    pub(crate) uid: u64,
    pub(crate) classes: Arc<ClassLpm>,
    pub(crate) ports: Arc<PortClasses>,
    /// What DNS answers taught (domain rules); None: nothing, domain rules match nothing.
    pub(crate) domain_facts: Option<Arc<DomainFacts>>,
}

/// Size figures of a snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotStats {
    pub endpoints: usize,
    pub identities: usize,
    pub policies: usize,
    pub addresses: usize,
    pub sets: usize,
    pub generation: u64,
}

/// One end of a flow, resolved.
struct End<'s> {
    addr: Option<Addr>,
    ep: Option<(u32, &'s EpRec)>,
    ident: Option<&'s IdRec>,
    netsets: OnceCell<Vec<u32>>,
    /// Set when a decision read something the memo key does not hold (service membership).
    uncacheable: Cell<bool>,
}

impl End<'_> {
    fn local(&self) -> bool {
        self.ep.is_some_and(|(_, e)| e.local)
    }
}

enum Hit {
    Match,
    Unresolvable,
}

impl Snapshot {
    pub fn stats(&self) -> SnapshotStats {
        SnapshotStats {
            endpoints: self.endpoints.len(),
            identities: self.identities.len(),
            policies: self.policies.len(),
            addresses: self.addrs.len(),
            sets: self.sets.len(),
            generation: self.generation,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The endpoint an address resolves to.
    pub fn owner_of(&self, a: Addr) -> Option<u32> {
        self.addrs.get(&a).map(|r| r.endpoint)
    }

    /// The identity of an endpoint.
    pub fn identity_of(&self, endpoint: u32) -> Option<u32> {
        self.endpoints.get(endpoint).map(|e| e.identity)
    }

    /// The policies of `tier` that select `endpoint` in direction `d`, in evaluation order: the
    /// ones a decision at the end of that tier (`Reason::EndOfTier`) isolated it by. Empty when
    /// none applies there (or the endpoint is not enforced here).
    pub fn tier_policies(&self, endpoint: u32, d: Direction, tier: u32) -> Result<Vec<u32>, EngineError> {
        let ep = self.endpoints.get(endpoint).ok_or_else(|| EngineError::Flow(format!("no endpoint {endpoint}")))?;
        if !ep.local {
            return Ok(Vec::new());
        }
        let Some(ident) = self.identities.get(ep.identity) else { return Ok(Vec::new()) };
        Ok(ident.programs[d as usize].stages.iter().find(|s| s.tier == tier).map_or_else(Vec::new, |s| s.policies.clone()))
    }

    /// The class of an address: which prefix of the snapshot's set is the longest one holding it
    /// (0: none). An endpoint's address has the class of its address, as flows see it.
    pub fn address_class(&self, a: Addr) -> u32 {
        self.addrs.get(&a).map_or_else(|| self.classes.class_of(a), |r| r.class)
    }

    /// Every prefix a side decision tests addresses against (rule nets, network sets, node
    /// addresses): addresses in the same longest prefix of this set are judged alike.
    pub fn class_prefixes(&self) -> Vec<Net> {
        self.classes.prefixes().map(|(v6, len, bits)| Net { bits, len, v6 }).collect()
    }

    /// The port boundaries: ports between two consecutive ones are judged alike.
    pub fn port_bounds(&self) -> &[u16] {
        self.ports.bounds()
    }

    /// Tables this snapshot shares with `other` (endpoint and address tables; for tests).
    pub fn shared_with(&self, other: &Snapshot) -> (usize, usize) {
        (self.endpoints.shared_chunks(&other.endpoints), self.addrs.shared_shards(&other.addrs))
    }

    pub fn evaluate(&self, flow: &Flow, defaults: Defaults) -> Result<Verdict, EngineError> {
        self.evaluate_request(flow, None, defaults)
    }

    /// Like [`Snapshot::evaluate`], for a TCP flow that carries `request` (its connection's
    /// HTTP request: `http` rules match it); None: not known, such rules match nothing and the
    /// verdict says whether it awaits one.
    pub fn evaluate_request(&self, flow: &Flow, request: Option<&Request>, defaults: Defaults) -> Result<Verdict, EngineError> {
        for end in [&flow.src, &flow.dst] {
            match end.endpoint {
                Some(e) if self.endpoints.get(e).is_none() => return Err(EngineError::Flow(format!("no endpoint {e}"))),
                None if end.addr.is_none() => {
                    return Err(EngineError::Flow("a flow end needs an endpoint or an address".into()))
                }
                _ => {}
            }
        }
        Ok(self.evaluate_flow(flow, request, defaults).0)
    }

    #[inline]
    fn resolve(&self, end: &FlowEnd) -> End<'_> {
        let ep_id = match end.endpoint {
            Some(e) => Some(e),
            None => end.addr.and_then(|a| self.addrs.get(&a).map(|r| r.endpoint)),
        };
        let ep = ep_id.and_then(|i| self.endpoints.get(i).map(|e| (i, e)));
        let addr = end.addr.or_else(|| ep.and_then(|(_, e)| e.first_ip));
        let ident = ep.and_then(|(_, e)| self.identities.get(e.identity));
        End { addr, ep, ident, netsets: OnceCell::new(), uncacheable: Cell::new(false) }
    }

    fn default_for(end: &End<'_>, d: Defaults) -> bool {
        match end.ep {
            Some((_, e)) if e.kind == Kind::Host => d.host_allow,
            _ => d.pod_allow,
        }
    }

    #[inline]
    pub(crate) fn evaluate_unchecked(&self, flow: &Flow, defaults: Defaults) -> Verdict {
        self.evaluate_flow(flow, None, defaults).0
    }
}

impl Judge for Snapshot {
    #[inline]
    fn header_verdict(&self, h: &PacketHeader, defaults: Defaults) -> Option<Verdict> {
        Some(self.evaluate_unchecked(&flow_of_header(h)?, defaults))
    }

    fn request_verdict(&self, h: &PacketHeader, request: &Request, defaults: Defaults) -> Option<Verdict> {
        Some(self.evaluate_flow(&flow_of_header(h)?, Some(request), defaults).0)
    }

    fn classify_detailed(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults) {
        with_memo(self.uid, |memo| {
            for (h, o) in headers.iter().zip(out.iter_mut()) {
                *o = self.memo_verdict(memo, h, defaults);
            }
        })
    }

    fn packet_verdict(&self, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        with_memo(self.uid, |memo| self.memo_verdict(memo, h, defaults))
    }
}

impl Snapshot {
    /// One header's verdict record through the decision memo (see `classes`): each local side
    /// is looked up by its key and walked only on a miss.
    #[inline]
    fn memo_verdict(&self, memo: &mut MemoRef<'_>, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        let Some(flow) = flow_of_header(h) else { return PacketVerdict::undecodable(h) };
        if !memo.in_use() {
            return PacketVerdict::judged(&self.evaluate_unchecked(&flow, defaults));
        }
        let (Some(sa), Some(da)) = (flow.src.addr, flow.dst.addr) else { return PacketVerdict::malformed() };
        let src = self.addrs.get(&sa).copied();
        let dst = self.addrs.get(&da).copied();
        let src_local = src.is_some_and(|r| r.local);
        let dst_local = dst.is_some_and(|r| r.local);
        if !src_local && !dst_local {
            // No policy applies to either end.
            return PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        }
        let class = |a: Addr, r: Option<AddrRec>| r.map_or_else(|| self.classes.class_of(a), |r| r.class);
        let (sc, dc) = (class(sa, src), class(da, dst));
        let icmp = ((flow.icmp_type.unwrap_or(0) as u32) << 8) | flow.icmp_code.unwrap_or(0) as u32;
        let base = (flow.protocol as u32)
            | ((sa.v6 as u32) << 8)
            | ((defaults.pod_allow as u32) << 9)
            | ((defaults.host_allow as u32) << 10)
            | ((flow.icmp_type.is_some() as u32) << 11);
        let sport = self.ports.class_of(flow.sport);
        let dport = self.ports.class_of(flow.dport);
        let key = |d: Direction, subject: AddrRec, subject_class: u32, peer: Option<AddrRec>, peer_class: u32| SideKey {
            flags: base | ((d as u32) << 12),
            subject: subject.identity,
            subject_class,
            peer: peer.map_or(OUTSIDE, |p| p.identity),
            peer_class,
            sport,
            dport,
            icmp,
        };
        let mut out = PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        let mut sides: [Option<SideVerdict>; 2] = [None, None];
        let mut keys: [Option<SideKey>; 2] = [None, None];
        if let Some(s) = src.filter(|r| r.local) {
            let k = key(Direction::Egress, s, sc, dst, dc);
            sides[0] = memo.get(&k);
            keys[0] = Some(k);
        }
        if let Some(d) = dst.filter(|r| r.local) {
            let k = key(Direction::Ingress, d, dc, src, sc);
            sides[1] = memo.get(&k);
            keys[1] = Some(k);
        }
        if (keys[0].is_some() && sides[0].is_none()) || (keys[1].is_some() && sides[1].is_none()) {
            // Walk the programs; memoize each side unless it read service membership.
            let (verdict, uncacheable) = self.evaluate_flow(&flow, None, defaults);
            let judged = PacketVerdict::judged(&verdict);
            for (i, side) in [judged.egress, judged.ingress].into_iter().enumerate() {
                if let Some(k) = keys[i] {
                    if !uncacheable {
                        memo.put(k, side);
                    }
                    sides[i] = Some(side);
                }
            }
        }
        let (mut allow, mut awaits) = (true, true);
        for (i, rec) in [src, dst].into_iter().enumerate() {
            let Some(rec) = rec.filter(|r| r.local) else { continue };
            let side = sides[i].unwrap_or_default();
            let a = if side.present != 0 {
                side.allow != 0
            } else if rec.host {
                defaults.host_allow
            } else {
                defaults.pod_allow
            };
            allow &= a;
            awaits &= a || side.awaits != 0;
        }
        out.allow = allow as u8;
        out.http = if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE };
        out.egress = sides[0].unwrap_or_default();
        out.ingress = sides[1].unwrap_or_default();
        out
    }

    /// Evaluates a flow (carrying `request`, if known) and reports whether the walk read
    /// anything outside the memo key.
    #[inline]
    fn evaluate_flow(&self, flow: &Flow, request: Option<&Request>, defaults: Defaults) -> (Verdict, bool) {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = Ctx {
            s: self,
            flow,
            request,
            awaits: Cell::new(false),
            src: &src,
            dst: &dst,
            version: src.addr.or(dst.addr).map(|a| a.version()),
        };
        let egress = ctx.side(&src, Direction::Egress, defaults);
        let ingress = ctx.side(&dst, Direction::Ingress, defaults);
        let (mut allow, mut awaits) = (true, true);
        for (d, end) in [(&egress, &src), (&ingress, &dst)] {
            if end.local() {
                let a = d.as_ref().map_or(Self::default_for(end, defaults), |d| d.allow);
                allow &= a;
                awaits &= a || d.as_ref().is_some_and(|d| d.awaits_request);
            }
        }
        let awaits_request = !allow && awaits;
        (Verdict { allow, egress, ingress, awaits_request }, src.uncacheable.get())
    }
}

struct Ctx<'a, 's> {
    s: &'s Snapshot,
    flow: &'a Flow,
    /// The connection's HTTP request, if known (`http` rules).
    request: Option<&'a Request>,
    /// The side being decided passed an `http` rule for want of a request.
    awaits: Cell<bool>,
    src: &'a End<'s>,
    dst: &'a End<'s>,
    version: Option<u8>,
}

impl<'s> Ctx<'_, 's> {
    fn side(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> Option<Decision> {
        self.awaits.set(false);
        let mut decision = self.walk(end, d, defaults);
        if let Some(dec) = decision.as_mut() {
            dec.awaits_request = !dec.allow && self.awaits.get();
        }
        decision
    }

    fn walk(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> Option<Decision> {
        if !end.local() {
            return None;
        }
        let subject = end.ident?;
        let s = self.s;
        let mut logs = Vec::new();
        let program = &subject.programs[d as usize];
        for stage in &program.stages {
            let mut passed = false;
            'policies: for &pid in &stage.policies {
                let Some(rules) = s.policies.get(pid) else { continue };
                for (ri, rule) in rules.get(d).iter().enumerate() {
                    let Some(action) = self.rule_action(rule, subject) else { continue };
                    match action {
                        Action::Log => logs.push(LogEntry { tier: Some(stage.tier), source: Source::Policy(pid), rule: ri as u32 }),
                        Action::Pass => {
                            passed = true;
                            break 'policies;
                        }
                        Action::Allow | Action::Deny => {
                            return Some(Decision {
                                allow: action == Action::Allow,
                                tier: Some(stage.tier),
                                source: Some(Source::Policy(pid)),
                                rule: Some(ri as u32),
                                reason: Reason::Rule,
                                logs,
                                awaits_request: false,
                            })
                        }
                    }
                }
            }
            if !passed && stage.default != Action::Pass {
                return Some(Decision {
                    allow: stage.default == Action::Allow,
                    tier: Some(stage.tier),
                    source: None,
                    rule: None,
                    reason: Reason::EndOfTier,
                    logs,
                    awaits_request: false,
                });
            }
        }
        if !subject.profiles.is_empty() {
            for &pi in subject.profiles.iter() {
                let Some(rules) = s.profiles.get(pi) else { continue };
                for (ri, rule) in rules.get(d).iter().enumerate() {
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
        if program.stages.is_empty() {
            return None;
        }
        Some(Decision {
            allow: Snapshot::default_for(end, defaults),
            tier: None,
            source: None,
            rule: None,
            reason: Reason::Default,
            logs,
            awaits_request: false,
        })
    }

    #[inline]
    fn rule_action(&self, rule: &CRule, subject: &IdRec) -> Option<Action> {
        let f = self.flow;
        if let (Some(want), Some(v)) = (rule.ip_version, self.version) {
            if want != v {
                return None;
            }
        }
        if rule.protocols.as_ref().is_some_and(|set| !set.contains(f.protocol)) {
            return None;
        }
        if rule.not_protocols.contains(f.protocol) {
            return None;
        }
        if rule.icmp.as_ref().is_some_and(|m| !m.matches(f.protocol, f.icmp_type, f.icmp_code)) {
            return None;
        }
        if rule.not_icmp.as_ref().is_some_and(|m| m.matches(f.protocol, f.icmp_type, f.icmp_code)) {
            return None;
        }
        let src_hit = self.any_entity(&rule.sources, true, subject, rule.action)?;
        let dst_hit = self.any_entity(&rule.destinations, false, subject, rule.action)?;
        if rule.action == Action::Pass && (matches!(src_hit, Hit::Unresolvable) || matches!(dst_hit, Hit::Unresolvable)) {
            return Some(Action::Deny);
        }
        if let Some(http) = &rule.http {
            // Only a TCP connection carries requests; until its request is known the rule
            // matches nothing, and the side's decision awaits it.
            if f.protocol != PROTO_TCP {
                return None;
            }
            let Some(request) = self.request else {
                self.awaits.set(true);
                return None;
            };
            if !http.matches(request) {
                return None;
            }
        }
        Some(rule.action)
    }

    #[inline]
    fn any_entity(&self, entities: &[CEntity], source: bool, subject: &IdRec, action: Action) -> Option<Hit> {
        if entities.is_empty() {
            return Some(Hit::Match);
        }
        for m in entities {
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

    #[inline]
    fn end(&self, source: bool) -> &End<'s> {
        if source {
            self.src
        } else {
            self.dst
        }
    }

    fn entity_matches(&self, m: &CEntity, source: bool, subject: &IdRec) -> bool {
        let end = self.end(source);
        let ip = end.addr;
        if !m.nets.is_empty() && !ip.is_some_and(|a| m.nets.contains(a)) {
            return false;
        }
        if !m.not_nets.is_empty() && ip.is_some_and(|a| m.not_nets.contains(a)) {
            return false;
        }
        if let Some(addrs) = &m.node_addrs {
            if !ip.is_some_and(|a| addrs.contains(&a)) {
                return false;
            }
        }
        if let Some(patterns) = &m.domains {
            // Learned addresses change without a delta: a decision that read them is not memoized.
            self.src.uncacheable.set(true);
            let learned = match (&self.s.domain_facts, ip) {
                (Some(facts), Some(a)) => facts.matches(a.to_ip(), self.flow.ts_ns, patterns),
                _ => false,
            };
            if !learned {
                return false;
            }
        }
        if let Some(service) = &m.service {
            if !self.service_matches(m, service, source) {
                return false;
            }
        }
        let set_id = match m.labels {
            LabelCond::None => None,
            LabelCond::Set(id) => Some(id),
            LabelCond::Relative(rid) => match self.s.relative.get(&(rid, subject.ns)) {
                Some(&id) => Some(id),
                None => return false,
            },
        };
        if let Some(id) = set_id {
            let Some(set) = self.s.sets.get(id) else { return false };
            if !self.in_set(end, set, m.netsets) {
                return false;
            }
        }
        if let Some(id) = m.not_labels {
            // notSelector: excluded when the endpoint or any network set containing the address
            // is in its set (which holds only the kinds it may see).
            if self.s.sets.get(id).is_some_and(|set| self.in_set(end, set, true)) {
                return false;
            }
        }
        self.ports_match(m, source)
    }

    /// Whether the identity of the end's endpoint, or (when `netsets`) that of a network set
    /// containing its address, is in `set`.
    #[inline]
    fn in_set(&self, end: &End<'s>, set: &IdSet, netsets: bool) -> bool {
        // Host-network pods have an identity no selector matches.
        if end.ep.is_some_and(|(_, e)| set.contains(e.identity)) {
            return true;
        }
        if !netsets || self.s.netsets.is_empty() {
            return false;
        }
        end.netsets
            .get_or_init(|| {
                let mut v = Vec::new();
                if let Some(a) = end.addr {
                    self.s.netsets.lookup(a, &mut v);
                }
                v
            })
            .iter()
            .any(|&n| set.contains(n))
    }

    #[inline]
    fn ports_match(&self, m: &CEntity, source: bool) -> bool {
        if m.ports.is_empty() && m.not_ports.is_empty() {
            return true;
        }
        let f = self.flow;
        let port = if source { f.sport } else { f.dport };
        let owner = self.end(source).ident;
        if !m.ports.is_empty() && !m.ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        if m.not_ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        true
    }

    fn service_matches(&self, m: &CEntity, service: &(Arc<str>, Arc<str>), source: bool) -> bool {
        self.src.uncacheable.set(true);
        let Some(svc) = self.s.services.get(service) else { return false };
        let end = self.end(source);
        let member = end.addr.is_some_and(|a| svc.ips.contains(&a)) || end.ep.is_some_and(|(i, _)| svc.members.contains(&i));
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
                    if end.ident.is_some_and(|id| id.named_ports(name, f.protocol).any(|p| p == dport)) {
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

impl Snapshot {
    /// Learns the answers of one DNS payload (UDP, or TCP length-prefixed messages) into the
    /// domain facts this snapshot reads: (new facts, the malformation's index in
    /// `DNS_ERROR_NAMES` if any). Without facts, nothing.
    pub fn learn_dns(&self, payload: &[u8], now_ns: u64, tcp: bool) -> (usize, Option<usize>) {
        let Some(facts) = &self.domain_facts else { return (0, None) };
        let (learned, error) = facts.learn_payload(payload, now_ns, tcp);
        (learned, error.and_then(|e| DnsError::ALL.iter().position(|x| *x == e)))
    }
}

/// The rules a decision's source refers to (`render` and explanations).
impl Snapshot {
    pub fn policy_rules(&self, policy: u32) -> Option<&CRules> {
        self.policies.get(policy).map(|r| &**r)
    }
}
