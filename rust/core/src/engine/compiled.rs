//! Compiled per-endpoint classifier tables: the fast path of the engine.
//!
//! For every local endpoint, direction and address family, the endpoint's program (tiers in
//! order, the policies of each tier that apply to it, then its profiles) is compiled into one
//! priority classifier ([`TupleMerge`]) per *stage* (a tier, or one profile). A rule becomes
//! the [`ClassRule`]s of its alternatives, all with priority = its position in the stage
//! (policy order, then rule order):
//!
//! - the *peer* side (sources on ingress, destinations on egress) becomes prefix sets: selectors
//!   become the /32s or /128s of the endpoints they match (an address counts for the endpoint it
//!   resolves to, as the interpreter resolves it) and the CIDRs of the network sets they match;
//!   `nets` intersect, `not_nets` are subtracted, node selectors become node addresses;
//! - the *subject* side is decided at compile time against the subject: it is "any address of
//!   this endpoint", a few of its addresses, or nothing;
//! - ports are ranges per protocol; named ports resolve per endpoint (the subject's, or each
//!   peer endpoint's as extra /32 entries); `not_ports` become complement ranges;
//! - protocols, `ip_version` (one table per family), ICMP type/code are native matches.
//!
//! What cannot be compiled exactly (services, `not_icmp`, `not_protocols` without a protocol
//! list, Pass through an unresolvable peer, named ports in `not_ports` of a peer) compiles to a
//! *superset* entry marked inexact: on a hit the interpreter's `rule_action` confirms the rule,
//! and the walk goes on to the next match ([`Classifier::matches_below`]) if it does not.
//!
//! Tables are shared: the per-endpoint inputs are reduced to a key (program, profiles,
//! namespace when a rule is namespace-relative, and the compiled subject-side results), and
//! endpoints with equal keys share one compiled side — 1,000 pods selected by one policy share
//! one table, and a policy allowing 1,000 peers is 1,000 entries, not a million.
//!
//! Flows whose ends are not (address resolving to the same endpoint) pairs of one family, or
//! that lack ports of a port protocol or the ICMP type/code, are left to the interpreter.

use std::collections::HashMap;
use std::rc::Rc;

use super::{
    is_port_protocol, Action, Addr, Decision, Defaults, Direction, Endpoint, Engine, Entity, Flow, FlowCtx,
    FlowEnd, Kind, LabelMatch, LogEntry, MatchSet, Net, PortMatch, Reason, Rule, Source, Verdict, PROTO_ICMP,
    PROTO_ICMPV6, PROTO_SCTP, PROTO_TCP, PROTO_UDP, PROTO_UDPLITE,
};
use crate::classifier::{ClassRule, Classifier, Match, PacketKey, PortRange, Prefix, TupleMerge, IPV4_MAPPED};

const PORT_PROTOS: [u8; 4] = [PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_UDPLITE];
/// Above this many port alternatives per entity, fall back to an inexact superset.
const MAX_PALTS: usize = 64;
const NONE: u32 = u32::MAX;

/// A port/protocol alternative: `proto` (None = any) and, for port protocols only, a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PAlt {
    proto: Option<u8>,
    range: Option<(u16, u16)>,
}

const ANY_PALT: PAlt = PAlt { proto: None, range: None };

fn protos_for_range(p: Option<u8>) -> Vec<u8> {
    match p {
        None => PORT_PROTOS.to_vec(),
        Some(x) if is_port_protocol(x) => vec![x],
        Some(_) => Vec::new(),
    }
}

fn expand(p: &PortMatch, owner: Option<&Endpoint>) -> Vec<PAlt> {
    match p {
        PortMatch::Any { protocol } => vec![PAlt { proto: *protocol, range: None }],
        PortMatch::Range { protocol, first, last } => protos_for_range(*protocol)
            .into_iter()
            .filter(|_| first <= last)
            .map(|x| PAlt { proto: Some(x), range: Some((*first, *last)) })
            .collect(),
        PortMatch::Named { protocol, name } => match owner {
            None => Vec::new(),
            Some(o) => o
                .ports
                .iter()
                .filter(|(n, cp, _)| {
                    n.as_deref() == Some(name.as_str()) && protocol.is_none_or(|p| p == *cp) && is_port_protocol(*cp)
                })
                .map(|(_, cp, port)| PAlt { proto: Some(*cp), range: Some((*port, *port)) })
                .collect(),
        },
    }
}

fn restrict(alts: Vec<PAlt>, protos: Option<&[u8]>) -> Vec<PAlt> {
    let Some(protos) = protos else { return alts };
    let mut out = Vec::new();
    for a in alts {
        match a.proto {
            Some(p) => {
                if protos.contains(&p) {
                    out.push(a)
                }
            }
            None => out.extend(protos.iter().map(|&p| PAlt { proto: Some(p), range: a.range })),
        }
    }
    out
}

/// `a` minus `n`; None when the result is not expressible (all protocols but one).
fn subtract_palt(a: PAlt, n: PAlt) -> Option<Vec<PAlt>> {
    let Some(y) = n.proto else { return Some(Vec::new()) };
    match a.proto {
        None => None,
        Some(x) if x != y => Some(vec![a]),
        Some(x) => match n.range {
            None => Some(Vec::new()),
            Some((f, l)) => {
                let (al, ah) = a.range.unwrap_or((0, u16::MAX));
                let mut v = Vec::new();
                if al < f {
                    v.push(PAlt { proto: Some(x), range: Some((al, ah.min(f - 1))) });
                }
                if ah > l {
                    v.push(PAlt { proto: Some(x), range: Some((al.max(l + 1), ah)) });
                }
                Some(v)
            }
        },
    }
}

/// The port condition of an entity (ports minus not_ports) with named ports resolved against
/// `owner`, restricted to `protos`; `(alternatives, exact)`. Inexact results are supersets.
fn port_alts(ports: &[PortMatch], not_ports: &[PortMatch], owner: Option<&Endpoint>, protos: Option<&[u8]>) -> (Vec<PAlt>, bool) {
    let pos = if ports.is_empty() { vec![ANY_PALT] } else { ports.iter().flat_map(|p| expand(p, owner)).collect() };
    let mut pos = restrict(pos, protos);
    pos.sort_by_key(|a| (a.proto, a.range));
    pos.dedup();
    let superset = pos.clone();
    for n in not_ports {
        for neg in expand(n, owner) {
            let mut next = Vec::new();
            for a in &pos {
                match subtract_palt(*a, neg) {
                    Some(v) => next.extend(v),
                    None => return (superset, false),
                }
            }
            pos = next;
            if pos.len() > MAX_PALTS {
                return (superset, false);
            }
        }
    }
    (pos, true)
}

// --- prefix sets -----------------------------------------------------------------------------

fn fam_any(fam: usize) -> Prefix {
    if fam == 0 {
        Prefix { addr: IPV4_MAPPED, len: 96 }
    } else {
        Prefix::ANY
    }
}

fn fam_of(v6: bool) -> usize {
    v6 as usize
}

fn net_prefix(n: &Net) -> Prefix {
    Prefix { addr: n.bits, len: n.len }
}

fn host(a: Addr) -> Prefix {
    Prefix { addr: a.bits, len: 128 }
}

fn within(outer: Prefix, inner: Prefix) -> bool {
    outer.len <= inner.len && outer.contains(inner.addr)
}

fn intersect(a: &[Prefix], b: &[Prefix]) -> Vec<Prefix> {
    let mut out = Vec::new();
    for &x in a {
        for &y in b {
            if within(x, y) {
                out.push(y)
            } else if within(y, x) {
                out.push(x)
            }
        }
    }
    normalize(out)
}

fn subtract_prefix(a: &[Prefix], q: Prefix) -> Vec<Prefix> {
    let mut out = Vec::new();
    for &p in a {
        if within(q, p) {
            continue;
        }
        if within(p, q) {
            for l in p.len..q.len {
                let bit = 1u128 << (127 - l as u32);
                out.push(Prefix { addr: (q.addr & Prefix::mask(l + 1)) ^ bit, len: l + 1 });
            }
        } else {
            out.push(p);
        }
    }
    out
}

fn normalize(mut v: Vec<Prefix>) -> Vec<Prefix> {
    for p in v.iter_mut() {
        p.addr &= Prefix::mask(p.len);
    }
    v.sort_by_key(|p| (p.len, p.addr));
    v.dedup();
    v
}

// --- compiled form ---------------------------------------------------------------------------

/// What one rule position of a stage stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleMeta {
    pub source: Source,
    pub rule: u32,
    pub action: Action,
}

/// One stage's compiled rules, before they go into a classifier (also what `render` shows).
#[derive(Clone, Debug)]
pub struct StageListing {
    /// The tier, for a policy tier; None for a profile.
    pub tier: Option<u32>,
    /// The profile, for a profile stage.
    pub profile: Option<u32>,
    /// The tier's default action (policy tiers).
    pub default: Option<Action>,
    /// Rule positions (= priorities) in evaluation order.
    pub rules: Vec<RuleMeta>,
    /// Entries: `(class rule, exact)`; `class_rule.priority` indexes `rules`.
    pub entries: Vec<(ClassRule, bool)>,
}

/// One policy's (or profile's) rules for one subject-side signature: shared by every side
/// whose stage lists that policy with the same subject-side results.
struct Group {
    rules: Vec<RuleMeta>,
    inexact: Vec<bool>,
    walk: bool,
    tm: TupleMerge,
    entries: usize,
}

struct Stage {
    tier: Option<u32>,
    default: Option<Action>,
    profile: bool,
    /// Indices into `Compiled::groups`, in policy order.
    groups: Vec<u32>,
}

struct Side {
    stages: Vec<Stage>,
    has_profiles: bool,
    empty_program: bool,
}

pub(super) struct Compiled {
    groups: Vec<Group>,
    sides: Vec<Side>,
    /// `[endpoint][direction][family]` -> index into `sides` (`NONE`: never consulted).
    index: Vec<[[u32; 2]; 2]>,
}

/// Size figures of the compiled tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompiledStats {
    /// Distinct compiled sides (shared between endpoints with equal keys).
    pub sides: usize,
    /// (endpoint, direction, family) programs that point at a side.
    pub programs: usize,
    /// Distinct compiled policy tables (one policy's rules for one subject-side signature).
    pub groups: usize,
    pub stages: usize,
    pub entries: usize,
    pub inexact_entries: usize,
    pub memory_bytes: usize,
}

impl Compiled {
    pub(super) fn stats(&self) -> CompiledStats {
        let mut s = CompiledStats { sides: self.sides.len(), groups: self.groups.len(), ..Default::default() };
        s.programs = self.index.iter().flatten().flatten().filter(|&&i| i != NONE).count();
        for side in &self.sides {
            s.stages += side.stages.len();
            s.memory_bytes += side.stages.iter().map(|st| st.groups.capacity() * 4 + 32).sum::<usize>();
        }
        for g in &self.groups {
            s.entries += g.entries;
            s.inexact_entries += g.inexact.iter().filter(|&&b| b).count();
            s.memory_bytes += g.tm.memory_bytes() + g.inexact.capacity() + g.rules.capacity() * 16;
        }
        s.memory_bytes += self.index.capacity() * 16;
        s
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum SubjSig {
    Never,
    Any(Vec<PAlt>, bool),
    Addrs(Vec<u128>, Vec<PAlt>, bool),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SideKey {
    dir: u8,
    fam: u8,
    program: Vec<(u32, Vec<u32>)>,
    profiles: Vec<u32>,
    ns: Option<u32>,
    sigs: Vec<SubjSig>,
}

#[derive(Clone)]
struct Alt {
    prefixes: Vec<Prefix>,
    palts: Vec<PAlt>,
    exact: bool,
}

struct RuleInfo {
    protos: Option<Vec<u8>>,
    exact: bool,
}

fn rule_info(rule: &Rule, engine: &Engine) -> RuleInfo {
    let mut protos: Option<Vec<u8>> =
        rule.protocols.as_ref().map(|set| (0..=255u8).filter(|&p| set[p as usize] && !rule.not_protocols[p as usize]).collect());
    let mut exact = true;
    if protos.is_none() && rule.not_protocols.iter().any(|&b| b) {
        exact = false;
    }
    if rule.icmp.is_some() {
        protos = Some(match protos {
            None => vec![PROTO_ICMP, PROTO_ICMPV6],
            Some(v) => v.into_iter().filter(|p| matches!(*p, PROTO_ICMP | PROTO_ICMPV6)).collect(),
        });
    }
    if rule.not_icmp.is_some() {
        exact = false;
    }
    if rule.action == Action::Pass
        && rule.sources.iter().chain(&rule.destinations).any(|&e| engine.entities[e as usize].unresolvable)
    {
        exact = false;
    }
    RuleInfo { protos, exact }
}

fn entity_has_named(m: &Entity) -> (bool, bool) {
    let named = |v: &[PortMatch]| v.iter().any(|p| matches!(p, PortMatch::Named { .. }));
    (named(&m.ports), named(&m.not_ports))
}

fn port_names(m: &Entity) -> Vec<&str> {
    m.ports
        .iter()
        .chain(&m.not_ports)
        .filter_map(|p| match p {
            PortMatch::Named { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

struct Compiler<'e> {
    e: &'e Engine,
    /// `[endpoint][family]`: the endpoint's addresses that resolve to it.
    owned: Vec<[Vec<Addr>; 2]>,
    ns_ids: HashMap<Option<String>, u32>,
    peer_cache: HashMap<(u32, u8, Option<u32>), Rc<Vec<Alt>>>,
    /// Per rule (by address of the Rule, stable while the engine lives) its protocol info.
    infos: HashMap<*const Rule, Rc<RuleInfo>>,
}

impl<'e> Compiler<'e> {
    fn new(e: &'e Engine) -> Compiler<'e> {
        let mut owned: Vec<[Vec<Addr>; 2]> = vec![[Vec::new(), Vec::new()]; e.endpoints.len()];
        for (i, ep) in e.endpoints.iter().enumerate() {
            for a in &ep.ips {
                if e.ip_owner.get(a) == Some(&(i as u32)) && !owned[i][fam_of(a.v6)].contains(a) {
                    owned[i][fam_of(a.v6)].push(*a);
                }
            }
        }
        let mut ns_ids = HashMap::new();
        for ep in &e.endpoints {
            let n = ns_ids.len() as u32;
            ns_ids.entry(ep.namespace.clone()).or_insert(n);
        }
        Compiler { e, owned, ns_ids, peer_cache: HashMap::new(), infos: HashMap::new() }
    }

    fn info(&mut self, rule: &Rule) -> Rc<RuleInfo> {
        let e = self.e;
        self.infos.entry(rule as *const Rule).or_insert_with(|| Rc::new(rule_info(rule, e))).clone()
    }

    fn label_set<'a>(&self, m: &'a Entity, subject: usize) -> Option<Option<&'a MatchSet>> {
        match &m.labels {
            LabelMatch::None => Some(None),
            LabelMatch::Static(s) => Some(Some(s)),
            LabelMatch::Relative(per) => per.get(&self.e.endpoints[subject].namespace).map(Some),
        }
    }

    /// The interpreter's `entity_matches` minus ports and services, at an address of the subject.
    fn subject_addr_match(&self, m: &Entity, set: Option<&MatchSet>, a: Addr, s: usize) -> bool {
        let e = self.e;
        if !m.nets.is_empty() && !m.nets.iter().any(|n| n.contains(a)) {
            return false;
        }
        if m.not_nets.iter().any(|n| n.contains(a)) {
            return false;
        }
        if m.node_addrs.as_ref().is_some_and(|addrs| !addrs.contains(&a)) {
            return false;
        }
        if let Some(set) = set {
            let ep = &e.endpoints[s];
            let mut any = ep.is_local() && m.kinds.is_none_or(|k| k & ep.kind.bit() != 0) && set.endpoints[s];
            if !any && m.has_selector && m.kinds.is_none_or(|k| k & Kind::NetworkSet.bit() != 0) {
                any = e
                    .network_sets
                    .iter()
                    .enumerate()
                    .any(|(i, n)| set.network_sets[i] && n.nets.iter().any(|net| net.contains(a)));
            }
            if !any {
                return false;
            }
        }
        true
    }

    fn subject_sig(&self, m: &Entity, action: Action, info: &RuleInfo, s: usize, fam: usize) -> SubjSig {
        let ep = &self.e.endpoints[s];
        let protos = info.protos.as_deref();
        if m.unresolvable {
            return match action {
                Action::Allow | Action::Log => SubjSig::Never,
                Action::Deny => {
                    let (p, ex) = port_alts(&m.ports, &m.not_ports, Some(ep), protos);
                    SubjSig::Any(p, ex)
                }
                Action::Pass => SubjSig::Any(port_alts(&m.ports, &m.not_ports, Some(ep), protos).0, false),
            };
        }
        if m.has_domains || matches!(m.service, Some(None)) {
            return SubjSig::Never;
        }
        let owned = &self.owned[s][fam];
        let Some(set) = self.label_set(m, s) else { return SubjSig::Never };
        let hits: Vec<u128> =
            owned.iter().filter(|&&a| self.subject_addr_match(m, set, a, s)).map(|a| a.bits).collect();
        if hits.is_empty() {
            return SubjSig::Never;
        }
        let (palts, ex) = port_alts(&m.ports, &m.not_ports, Some(ep), protos);
        if palts.is_empty() {
            return SubjSig::Never;
        }
        let exact = ex && m.service.is_none();
        if hits.len() == owned.len() {
            SubjSig::Any(palts, exact)
        } else {
            SubjSig::Addrs(hits, palts, exact)
        }
    }

    fn peer_alts(&mut self, eid: u32, action: Action, info: &RuleInfo, s: usize, fam: usize) -> Rc<Vec<Alt>> {
        let m = &self.e.entities[eid as usize];
        let ns = match m.labels {
            LabelMatch::Relative(_) => Some(self.ns_ids[&self.e.endpoints[s].namespace]),
            _ => None,
        };
        let key = (eid, fam as u8, ns);
        if let Some(v) = self.peer_cache.get(&key) {
            return v.clone();
        }
        let v = Rc::new(self.compute_peer_alts(m, action, info, s, fam));
        self.peer_cache.insert(key, v.clone());
        v
    }

    fn compute_peer_alts(&self, m: &Entity, action: Action, info: &RuleInfo, s: usize, fam: usize) -> Vec<Alt> {
        let e = self.e;
        let protos = info.protos.as_deref();
        let mut exact = true;
        let mut p = vec![fam_any(fam)];
        if m.unresolvable {
            match action {
                Action::Allow | Action::Log => return Vec::new(),
                Action::Pass => exact = false,
                Action::Deny => {}
            }
        } else {
            if m.has_domains || matches!(m.service, Some(None)) {
                return Vec::new();
            }
            if !m.nets.is_empty() {
                let nets: Vec<Prefix> = m.nets.iter().filter(|n| fam_of(n.v6) == fam).map(net_prefix).collect();
                p = intersect(&p, &nets);
            }
            for q in m.not_nets.iter().filter(|n| fam_of(n.v6) == fam) {
                p = subtract_prefix(&p, net_prefix(q));
            }
            if let Some(addrs) = &m.node_addrs {
                let nodes: Vec<Prefix> = addrs.iter().filter(|a| fam_of(a.v6) == fam).map(|a| host(*a)).collect();
                p = intersect(&p, &nodes);
            }
            if m.service.is_some() {
                exact = false;
            }
            let Some(set) = self.label_set(m, s) else { return Vec::new() };
            if let Some(set) = set {
                let mut l = Vec::new();
                for (i, ep) in e.endpoints.iter().enumerate() {
                    if set.endpoints[i] && ep.is_local() && m.kinds.is_none_or(|k| k & ep.kind.bit() != 0) {
                        l.extend(self.owned[i][fam].iter().map(|a| host(*a)));
                    }
                }
                if m.has_selector && m.kinds.is_none_or(|k| k & Kind::NetworkSet.bit() != 0) {
                    for (i, n) in e.network_sets.iter().enumerate() {
                        if set.network_sets[i] {
                            l.extend(n.nets.iter().filter(|n| fam_of(n.v6) == fam).map(net_prefix));
                        }
                    }
                }
                p = intersect(&p, &normalize(l));
            }
        }
        let p = normalize(p);
        if p.is_empty() {
            return Vec::new();
        }
        let (has_pos, has_neg) = entity_has_named(m);
        let (base, ex) = port_alts(&m.ports, &m.not_ports, None, protos);
        let mut alts = Vec::new();
        let mut per_endpoint = Vec::new();
        if has_pos || has_neg {
            let names = port_names(m);
            for (i, ep) in e.endpoints.iter().enumerate() {
                if !ep.ports.iter().any(|(n, _, _)| n.as_deref().is_some_and(|n| names.contains(&n))) {
                    continue;
                }
                for a in &self.owned[i][fam] {
                    let h = host(*a);
                    if p.iter().any(|&q| within(q, h)) {
                        let (pa, pex) = port_alts(&m.ports, &m.not_ports, Some(ep), protos);
                        if !pa.is_empty() {
                            per_endpoint.push(Alt { prefixes: vec![h], palts: pa, exact: exact && pex });
                        } else if has_neg {
                            per_endpoint.push(Alt { prefixes: vec![h], palts: Vec::new(), exact });
                        }
                    }
                }
            }
        }
        // With named ports in not_ports, the base entry would wrongly cover endpoints whose
        // named ports it excludes: keep it as a superset to be confirmed.
        let base_exact = exact && ex && !(has_neg && !per_endpoint.is_empty());
        if !base.is_empty() {
            alts.push(Alt { prefixes: p, palts: base, exact: base_exact });
        }
        alts.extend(per_endpoint.into_iter().filter(|a| !a.palts.is_empty()));
        alts
    }

    fn sig_alt(sig: &SubjSig, fam: usize) -> Option<Alt> {
        match sig {
            SubjSig::Never => None,
            SubjSig::Any(p, ex) => Some(Alt { prefixes: vec![fam_any(fam)], palts: p.clone(), exact: *ex }),
            SubjSig::Addrs(a, p, ex) => Some(Alt {
                prefixes: a.iter().map(|&bits| Prefix { addr: bits, len: 128 }).collect(),
                palts: p.clone(),
                exact: *ex,
            }),
        }
    }

    /// The rules of one side, in evaluation order: (stage info, rules).
    fn stage_rules(&self, s: usize, d: Direction) -> Vec<(Option<u32>, Option<u32>, Vec<(Source, u32, &'e Rule)>)> {
        let e = self.e;
        let mut out = Vec::new();
        for (tier, policies) in &e.programs[s][d as usize] {
            let mut rules = Vec::new();
            for &pi in policies {
                for (ri, r) in e.policies[pi as usize].get(d).iter().enumerate() {
                    rules.push((Source::Policy(pi), ri as u32, r));
                }
            }
            out.push((Some(*tier), None, rules));
        }
        for &pi in &e.endpoints[s].profiles {
            let rules = e.profiles[pi as usize]
                .get(d)
                .iter()
                .enumerate()
                .map(|(ri, r)| (Source::Profile(pi), ri as u32, r))
                .collect();
            out.push((None, Some(pi), rules));
        }
        out
    }

    fn key(&mut self, s: usize, d: Direction, fam: usize) -> SideKey {
        let e = self.e;
        let mut sigs = Vec::new();
        let mut relative = false;
        for (_, _, rules) in self.stage_rules(s, d) {
            for (_, _, r) in rules {
                if r.ip_version.is_some_and(|v| v != if fam == 0 { 4 } else { 6 }) {
                    continue;
                }
                let info = self.info(r);
                let (subject_side, peer_side) = match d {
                    Direction::Egress => (&r.sources, &r.destinations),
                    Direction::Ingress => (&r.destinations, &r.sources),
                };
                relative |= peer_side.iter().chain(subject_side).any(|&x| matches!(e.entities[x as usize].labels, LabelMatch::Relative(_)));
                for &x in subject_side {
                    sigs.push(self.subject_sig(&e.entities[x as usize], r.action, &info, s, fam));
                }
            }
        }
        SideKey {
            dir: d as u8,
            fam: fam as u8,
            program: e.programs[s][d as usize].clone(),
            profiles: e.endpoints[s].profiles.clone(),
            ns: relative.then(|| self.ns_ids[&e.endpoints[s].namespace]),
            sigs,
        }
    }

    /// One policy's (or profile's) rules compiled: positions local to the group.
    fn group_listing(&mut self, s: usize, d: Direction, fam: usize, rules: &[(Source, u32, &'e Rule)]) -> StageListing {
        let e = self.e;
        let mut st = StageListing { tier: None, profile: None, default: None, rules: Vec::new(), entries: Vec::new() };
        for &(source, ri, r) in rules {
            let pos = st.rules.len() as u32;
            st.rules.push(RuleMeta { source, rule: ri, action: r.action });
            if r.ip_version.is_some_and(|v| v != if fam == 0 { 4 } else { 6 }) {
                continue;
            }
            let info = self.info(r);
            if info.protos.as_ref().is_some_and(|p| p.is_empty()) {
                continue;
            }
            let (subject_side, peer_side) = match d {
                Direction::Egress => (&r.sources, &r.destinations),
                Direction::Ingress => (&r.destinations, &r.sources),
            };
            let base = || {
                vec![Alt {
                    prefixes: vec![fam_any(fam)],
                    palts: restrict(vec![ANY_PALT], info.protos.as_deref()),
                    exact: true,
                }]
            };
            let subj: Vec<Alt> = if subject_side.is_empty() {
                base()
            } else {
                subject_side
                    .iter()
                    .filter_map(|&x| Self::sig_alt(&self.subject_sig(&e.entities[x as usize], r.action, &info, s, fam), fam))
                    .collect()
            };
            let peer: Vec<Alt> = if peer_side.is_empty() {
                base()
            } else {
                let mut v = Vec::new();
                for &x in peer_side {
                    v.extend(self.peer_alts(x, r.action, &info, s, fam).iter().cloned());
                }
                v
            };
            let (src, dst) = match d {
                Direction::Egress => (&subj, &peer),
                Direction::Ingress => (&peer, &subj),
            };
            let icmp = r.icmp;
            for sa in src {
                for da in dst {
                    let exact = sa.exact && da.exact && info.exact;
                    for spa in &sa.palts {
                        for dpa in &da.palts {
                            let proto = match (spa.proto, dpa.proto) {
                                (None, x) | (x, None) => x,
                                (Some(a), Some(b)) if a == b => Some(a),
                                _ => continue,
                            };
                            let range = |r: Option<(u16, u16)>| r.map_or(PortRange::ANY, |(lo, hi)| PortRange { lo, hi });
                            for sp in &sa.prefixes {
                                for dp in &da.prefixes {
                                    let id = st.entries.len() as u32;
                                    st.entries.push((
                                        ClassRule {
                                            id,
                                            priority: pos,
                                            src: *sp,
                                            dst: *dp,
                                            sport: range(spa.range),
                                            dport: range(dpa.range),
                                            proto,
                                            icmp_type: icmp.and_then(|m| m.icmp_type),
                                            icmp_code: icmp.and_then(|m| m.code),
                                        },
                                        exact,
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
        st
    }

    fn groups(rules: Vec<(Source, u32, &'e Rule)>) -> Vec<Vec<(Source, u32, &'e Rule)>> {
        let mut out: Vec<Vec<(Source, u32, &'e Rule)>> = Vec::new();
        for r in rules {
            match out.last_mut() {
                Some(g) if g[0].0 == r.0 => g.push(r),
                _ => out.push(vec![r]),
            }
        }
        out
    }

    fn listing(&mut self, s: usize, d: Direction, fam: usize) -> Vec<StageListing> {
        let e = self.e;
        let mut out = Vec::new();
        for (tier, profile, rules) in self.stage_rules(s, d) {
            let mut st = StageListing {
                tier,
                profile,
                default: tier.map(|t| e.tier_defaults[t as usize]),
                rules: Vec::new(),
                entries: Vec::new(),
            };
            for g in Self::groups(rules) {
                let part = self.group_listing(s, d, fam, &g);
                let (base, ids) = (st.rules.len() as u32, st.entries.len() as u32);
                st.rules.extend(part.rules);
                st.entries.extend(part.entries.into_iter().map(|(mut r, ex)| {
                    r.priority += base;
                    r.id += ids;
                    (r, ex)
                }));
            }
            out.push(st);
        }
        out
    }

    fn group_key(&mut self, s: usize, d: Direction, fam: usize, rules: &[(Source, u32, &'e Rule)]) -> GroupKey {
        let e = self.e;
        let mut sigs = Vec::new();
        let mut relative = false;
        for &(_, _, r) in rules {
            if r.ip_version.is_some_and(|v| v != if fam == 0 { 4 } else { 6 }) {
                continue;
            }
            let info = self.info(r);
            let (subject_side, peer_side) = match d {
                Direction::Egress => (&r.sources, &r.destinations),
                Direction::Ingress => (&r.destinations, &r.sources),
            };
            relative |= peer_side.iter().chain(subject_side).any(|&x| matches!(e.entities[x as usize].labels, LabelMatch::Relative(_)));
            for &x in subject_side {
                sigs.push(self.subject_sig(&e.entities[x as usize], r.action, &info, s, fam));
            }
        }
        let source = match rules[0].0 {
            Source::Policy(i) => (false, i),
            Source::Profile(i) => (true, i),
        };
        GroupKey { source, dir: d as u8, fam: fam as u8, ns: relative.then(|| self.ns_ids[&e.endpoints[s].namespace]), sigs }
    }

    /// None if a classifier refuses the generated rules (a bug): the interpreter answers then.
    fn side(&mut self, s: usize, d: Direction, fam: usize, pool: &mut Pool) -> Option<Side> {
        let e = self.e;
        let mut stages = Vec::new();
        for (tier, profile, rules) in self.stage_rules(s, d) {
            let mut groups = Vec::new();
            for g in Self::groups(rules) {
                let key = self.group_key(s, d, fam, &g);
                let gi = match pool.keys.get(&key) {
                    Some(&gi) => gi,
                    None => {
                        let st = self.group_listing(s, d, fam, &g);
                        let rules: Vec<ClassRule> = st.entries.iter().map(|(r, _)| *r).collect();
                        let inexact: Vec<bool> = st.entries.iter().map(|(_, ex)| !ex).collect();
                        let walk = inexact.iter().any(|&b| b) || st.rules.iter().any(|r| r.action == Action::Log);
                        // Rules are generated well formed (prefix <= 128, lo <= hi, unique ids).
                        let tm = TupleMerge::build(&rules).ok()?;
                        pool.groups.push(Group { rules: st.rules, inexact, walk, tm, entries: rules.len() });
                        let gi = (pool.groups.len() - 1) as u32;
                        pool.keys.insert(key, gi);
                        gi
                    }
                };
                groups.push(gi);
            }
            stages.push(Stage { tier, default: tier.map(|t| e.tier_defaults[t as usize]), profile: profile.is_some(), groups });
        }
        Some(Side {
            stages,
            has_profiles: !e.endpoints[s].profiles.is_empty(),
            empty_program: e.programs[s][d as usize].is_empty(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GroupKey {
    source: (bool, u32),
    dir: u8,
    fam: u8,
    ns: Option<u32>,
    sigs: Vec<SubjSig>,
}

#[derive(Default)]
struct Pool {
    groups: Vec<Group>,
    keys: HashMap<GroupKey, u32>,
}

/// Compiles every local endpoint's sides, sharing equal ones.
pub(super) fn compile(e: &Engine) -> Compiled {
    let mut c = Compiler::new(e);
    let mut pool = Pool::default();
    let mut sides = Vec::new();
    let mut by_key: HashMap<SideKey, u32> = HashMap::new();
    let mut index = vec![[[NONE; 2]; 2]; e.endpoints.len()];
    for s in 0..e.endpoints.len() {
        if !e.endpoints[s].is_local() {
            continue;
        }
        for d in [Direction::Ingress, Direction::Egress] {
            for fam in 0..2 {
                if c.owned[s][fam].is_empty() {
                    continue; // no address resolves to it: flows reach it only by endpoint id
                }
                let key = c.key(s, d, fam);
                let i = match by_key.get(&key) {
                    Some(&i) => i,
                    None => {
                        let i = match c.side(s, d, fam, &mut pool) {
                            Some(side) => {
                                sides.push(side);
                                (sides.len() - 1) as u32
                            }
                            None => NONE,
                        };
                        by_key.insert(key, i);
                        i
                    }
                };
                index[s][d as usize][fam] = i;
            }
        }
    }
    Compiled { groups: pool.groups, sides, index }
}

/// The compiled stages of one endpoint's side (what `render` prints).
pub(super) fn listing(e: &Engine, s: usize, d: Direction, v6: bool) -> Vec<StageListing> {
    Compiler::new(e).listing(s, d, fam_of(v6))
}

impl Engine {
    /// One group's first deciding match (Log entries recorded on the way).
    #[allow(clippy::too_many_arguments)]
    fn group_walk<'e>(
        &'e self,
        g: &Group,
        tier: Option<u32>,
        key: &PacketKey,
        d: Direction,
        subject: usize,
        flow: &'e Flow,
        src: &FlowEnd,
        dst: &FlowEnd,
        lazy: &mut Lazy<'e>,
        logs: &mut Vec<LogEntry>,
    ) -> StageOutcome {
        if !g.walk {
            return match g.tm.classify(key) {
                None => StageOutcome::NoMatch,
                Some(m) => {
                    let meta = g.rules[m.priority as usize];
                    match meta.action {
                        Action::Pass => StageOutcome::Passed,
                        a => StageOutcome::Decided(a, meta),
                    }
                }
            };
        }
        let mut hits: Vec<Match> = Vec::new();
        g.tm.matches_below(key, u32::MAX, &mut hits);
        let mut last = u32::MAX;
        for m in hits {
            if m.priority == last {
                continue; // another entry of a rule already taken (or refuted)
            }
            last = m.priority;
            let meta = g.rules[m.priority as usize];
            let action = if g.inexact[m.id as usize] {
                let ctx = lazy.ctx.get_or_insert_with(|| FlowCtx::new(self, flow, *src, *dst));
                let rule = match meta.source {
                    Source::Policy(pi) => &self.policies[pi as usize].get(d)[meta.rule as usize],
                    Source::Profile(pi) => &self.profiles[pi as usize].get(d)[meta.rule as usize],
                };
                match ctx.rule_action(rule, subject) {
                    Some(a) => a,
                    None => continue, // the superset entry hit, the rule does not match
                }
            } else {
                meta.action
            };
            match action {
                Action::Log => logs.push(LogEntry { tier, source: meta.source, rule: meta.rule }),
                Action::Pass => return StageOutcome::Passed,
                a => return StageOutcome::Decided(a, meta),
            }
        }
        StageOutcome::NoMatch
    }
}

enum StageOutcome {
    Decided(Action, RuleMeta),
    Passed,
    NoMatch,
}

struct Lazy<'e> {
    ctx: Option<FlowCtx<'e>>,
}

impl Engine {
    /// The verdict through the compiled tables; None when the flow is not one they answer.
    pub(super) fn compiled_verdict(&self, flow: &Flow, defaults: Defaults) -> Option<Verdict> {
        let c = self.compiled.as_ref()?;
        let (sa, da) = (flow.src.addr?, flow.dst.addr?);
        if sa.v6 != da.v6 {
            return None;
        }
        let so = self.ip_owner.get(&sa).copied();
        let dso = self.ip_owner.get(&da).copied();
        if flow.src.endpoint.is_some_and(|x| Some(x) != so) || flow.dst.endpoint.is_some_and(|x| Some(x) != dso) {
            return None;
        }
        let p = flow.protocol;
        let ports = is_port_protocol(p);
        if ports && (flow.sport.is_none() || flow.dport.is_none()) {
            return None;
        }
        let icmp = matches!(p, PROTO_ICMP | PROTO_ICMPV6);
        if icmp && (flow.icmp_type.is_none() || flow.icmp_code.is_none()) {
            return None;
        }
        let key = PacketKey {
            src: sa.bits,
            dst: da.bits,
            sport: if ports { flow.sport.unwrap_or(0) } else { 0 },
            dport: if ports { flow.dport.unwrap_or(0) } else { 0 },
            proto: p,
            icmp_type: if icmp { flow.icmp_type.unwrap_or(0) } else { 0 },
            icmp_code: if icmp { flow.icmp_code.unwrap_or(0) } else { 0 },
        };
        let src = FlowEnd { addr: Some(sa), endpoint: so };
        let dst = FlowEnd { addr: Some(da), endpoint: dso };
        let fam = fam_of(sa.v6);
        let mut lazy = Lazy { ctx: None };
        let egress = self.compiled_side(c, &src, Direction::Egress, fam, &key, flow, &src, &dst, defaults, &mut lazy)?;
        let ingress = self.compiled_side(c, &dst, Direction::Ingress, fam, &key, flow, &src, &dst, defaults, &mut lazy)?;
        let mut allow = true;
        for (d, end) in [(&egress, &src), (&ingress, &dst)] {
            if self.is_local(end) {
                allow &= d.as_ref().map_or(self.default_for(end, defaults), |d| d.allow);
            }
        }
        Some(Verdict { allow, egress, ingress })
    }

    #[allow(clippy::too_many_arguments)]
    fn compiled_side<'e>(
        &'e self,
        c: &'e Compiled,
        end: &FlowEnd,
        d: Direction,
        fam: usize,
        key: &PacketKey,
        flow: &'e Flow,
        src: &FlowEnd,
        dst: &FlowEnd,
        defaults: Defaults,
        lazy: &mut Lazy<'e>,
    ) -> Option<Option<Decision>> {
        if !self.is_local(end) {
            return Some(None);
        }
        let subject = end.endpoint? as usize;
        let i = c.index[subject][d as usize][fam];
        if i == NONE {
            return None;
        }
        let side = &c.sides[i as usize];
        let mut logs = Vec::new();
        for stage in &side.stages {
            let mut outcome = StageOutcome::NoMatch;
            for &gi in &stage.groups {
                outcome = self.group_walk(&c.groups[gi as usize], stage.tier, key, d, subject, flow, src, dst, lazy, &mut logs);
                if !matches!(outcome, StageOutcome::NoMatch) {
                    break;
                }
            }
            match outcome {
                StageOutcome::Decided(a, meta) => {
                    return Some(Some(Decision {
                        allow: a == Action::Allow,
                        tier: stage.tier,
                        source: Some(meta.source),
                        rule: Some(meta.rule),
                        reason: if stage.profile { Reason::Profile } else { Reason::Rule },
                        logs,
                    }))
                }
                StageOutcome::Passed => {}
                StageOutcome::NoMatch => {
                    if let Some(default) = stage.default {
                        if default != Action::Pass {
                            return Some(Some(Decision {
                                allow: default == Action::Allow,
                                tier: stage.tier,
                                source: None,
                                rule: None,
                                reason: Reason::EndOfTier,
                                logs,
                            }));
                        }
                    }
                }
            }
        }
        if side.has_profiles {
            return Some(Some(Decision { allow: false, tier: None, source: None, rule: None, reason: Reason::Profile, logs }));
        }
        if side.empty_program {
            return Some(None);
        }
        Some(Some(Decision {
            allow: self.default_for(end, defaults),
            tier: None,
            source: None,
            rule: None,
            reason: Reason::Default,
            logs,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::workload::{flow_header, policy_workload, random_flow, random_spec, workload_flows, Rng, WorkloadShape};
    use super::super::{Defaults, Engine, FlowEnd, PacketVerdict};

    const DEFAULTS: [Defaults; 2] = [Defaults { pod_allow: true, host_allow: false }, Defaults { pod_allow: false, host_allow: true }];

    #[test]
    fn compiled_equals_interpreter_on_random_worlds() {
        let (mut compiled, mut total, mut ruled) = (0usize, 0usize, 0usize);
        for seed in 0..4000u64 {
            let spec = random_spec(seed);
            let engine = Engine::from_json(&spec.to_string()).expect("random spec builds");
            let mut r = Rng::new(seed.wrapping_mul(7919) + 1);
            for i in 0..80 {
                let mut flow = random_flow(&mut r);
                if i % 3 == 0 {
                    // name the endpoint too, as `explain` does: the compiled path takes it when it
                    // is the address's own endpoint
                    flow.src = FlowEnd { endpoint: flow.src.addr.and_then(|a| engine.ip_owner.get(&a).copied()), ..flow.src };
                }
                for d in DEFAULTS {
                    let want = engine.evaluate_interpreted(&flow, d).expect("valid flow");
                    let got = engine.evaluate(&flow, d).expect("valid flow");
                    assert_eq!(got, want, "seed {seed}: {flow:?}");
                    let h = flow_header(&flow);
                    let fast = engine.header_verdict_with(&h, d, true);
                    let slow = engine.header_verdict_with(&h, d, false);
                    assert_eq!(fast, slow, "seed {seed} (header): {flow:?}");
                }
                compiled += engine.compiled_verdict(&flow, DEFAULTS[0]).is_some() as usize;
                if let Ok(v) = engine.evaluate(&flow, DEFAULTS[0]) {
                    ruled += [v.egress, v.ingress].iter().flatten().filter(|d| d.reason == super::super::Reason::Rule).count();
                }
                total += 1;
            }
        }
        // The comparison means something only if the compiled path answered most flows.
        assert!(compiled * 10 > total * 9, "compiled path took {compiled} of {total} flows");
        assert!(ruled * 50 > total, "only {ruled} of {total} flows decided by a rule");
    }

    #[test]
    fn compiled_equals_interpreter_on_policy_workload() {
        let shape = WorkloadShape { pods: 900, namespaces: 12, policies: 120, seed: 3 };
        let engine = Engine::from_json(&policy_workload(shape).to_string()).expect("workload builds");
        let flows = workload_flows(shape, 4000, 9);
        let headers: Vec<_> = flows.iter().map(flow_header).collect();
        let mut fast = vec![PacketVerdict::default(); headers.len()];
        let mut slow = fast.clone();
        engine.classify_detailed_with(&headers, &mut fast, DEFAULTS[0], true);
        engine.classify_detailed_with(&headers, &mut slow, DEFAULTS[0], false);
        for (i, f) in flows.iter().enumerate() {
            assert_eq!(fast[i], slow[i], "{f:?}");
            assert_eq!(engine.evaluate(f, DEFAULTS[0]), engine.evaluate_interpreted(f, DEFAULTS[0]), "{f:?}");
        }
        let allowed = fast.iter().filter(|v| v.allow == 1).count();
        assert!(allowed > 0 && allowed < fast.len(), "a workload that decides both ways: {allowed}");
    }

    #[test]
    fn equal_programs_share_one_table() {
        let shape = WorkloadShape { pods: 2000, namespaces: 10, policies: 50, seed: 5 };
        let engine = Engine::from_json(&policy_workload(shape).to_string()).expect("workload builds");
        let s = engine.compiled_stats().expect("compiled");
        assert_eq!(s.programs, 2 * 2000, "every pod has an IPv4 side per direction");
        assert!(s.sides * 4 < s.programs, "{s:?}");
    }
}
