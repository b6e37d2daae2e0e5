//! A local endpoint's rules as first-match tables of 6-tuples (`pyclassify render`): the
//! program of one direction and address family with every selector expanded to the prefixes it
//! covers today (the /32s or /128s of the endpoints whose identity it matches, the networks of
//! the network sets it matches), `nets` intersected, `not_nets` and what a `notSelector` matches
//! subtracted, ports as ranges per protocol and named ports resolved per endpoint.
//!
//! What a tuple cannot say exactly (services, `not_icmp`, `not_protocols` without a protocol
//! list, Pass through an unresolvable peer, named ports among `not_ports` of a peer) is listed
//! as a superset tuple marked inexact.

use std::collections::HashMap;

use super::rules::{CEntity, CRule, LabelCond, PortMatch};
use super::snapshot::{IdRec, Snapshot};
use super::{
    is_port_protocol, Action, Addr, Direction, EngineError, Net, Source, PROTO_ICMP, PROTO_ICMPV6, PROTO_SCTP,
    PROTO_TCP, PROTO_UDP, PROTO_UDPLITE,
};
use crate::classifier::{ClassRule, PortRange, Prefix, IPV4_MAPPED};

const PORT_PROTOS: [u8; 4] = [PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_UDPLITE];
/// Above this many port alternatives per entity, fall back to an inexact superset.
const MAX_PALTS: usize = 64;

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

fn expand(p: &PortMatch, owner: Option<&IdRec>) -> Vec<PAlt> {
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
                .filter(|(n, cp, _)| **n == **name && protocol.is_none_or(|p| p == *cp) && is_port_protocol(*cp))
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
fn port_alts(
    ports: &[PortMatch],
    not_ports: &[PortMatch],
    owner: Option<&IdRec>,
    protos: Option<&[u8]>,
) -> (Vec<PAlt>, bool) {
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

/// What one rule position of a stage stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleMeta {
    pub source: Source,
    pub rule: u32,
    pub action: Action,
}

/// One stage's rules as tuples (what `render` shows).
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

#[derive(Clone, Debug, PartialEq, Eq)]
enum SubjSig {
    Never,
    Any(Vec<PAlt>, bool),
    Addrs(Vec<u128>, Vec<PAlt>, bool),
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

fn rule_info(rule: &CRule) -> RuleInfo {
    let mut protos: Option<Vec<u8>> =
        rule.protocols.as_ref().map(|set| set.iter().filter(|&p| !rule.not_protocols.contains(p)).collect());
    let mut exact = true;
    if protos.is_none() && !rule.not_protocols.is_empty() {
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
    if rule.action == Action::Pass && rule.sources.iter().chain(&rule.destinations).any(|e| e.unresolvable) {
        exact = false;
    }
    RuleInfo { protos, exact }
}

fn entity_has_named(m: &CEntity) -> (bool, bool) {
    let named = |v: &[PortMatch]| v.iter().any(|p| matches!(p, PortMatch::Named { .. }));
    (named(&m.ports), named(&m.not_ports))
}

fn port_names(m: &CEntity) -> Vec<&str> {
    m.ports
        .iter()
        .chain(&m.not_ports)
        .filter_map(|p| match p {
            PortMatch::Named { name, .. } => Some(&**name),
            _ => None,
        })
        .collect()
}

struct Lister<'s> {
    s: &'s Snapshot,
    /// Endpoint -> its addresses that resolve to it, per family.
    owned: HashMap<u32, [Vec<Addr>; 2]>,
    subject: u32,
    ident: &'s IdRec,
}

impl<'s> Lister<'s> {
    fn set_of(&self, m: &CEntity) -> Option<Option<u32>> {
        match m.labels {
            LabelCond::None => Some(None),
            LabelCond::Set(id) => Some(Some(id)),
            LabelCond::Relative(rid) => self.s.relative.get(&(rid, self.ident.ns)).map(|&id| Some(id)),
        }
    }

    fn in_set(&self, set: u32, identity: u32) -> bool {
        self.s.sets.get(set).is_some_and(|s| s.contains(identity))
    }

    fn netsets_at(&self, a: Addr) -> Vec<u32> {
        let mut v = Vec::new();
        self.s.netsets.lookup(a, &mut v);
        v
    }

    /// The snapshot's `entity_matches` minus ports and services, at an address of the subject.
    fn subject_addr_match(&self, m: &CEntity, set: Option<u32>, a: Addr) -> bool {
        if !m.nets.is_empty() && !m.nets.contains(a) {
            return false;
        }
        if m.not_nets.contains(a) {
            return false;
        }
        if m.node_addrs.as_ref().is_some_and(|addrs| !addrs.contains(&a)) {
            return false;
        }
        if let Some(set) = set {
            let identity = self.s.endpoints.get(self.subject).map(|e| e.identity);
            let mut any = identity.is_some_and(|i| self.in_set(set, i));
            if !any && m.netsets {
                any = self.netsets_at(a).into_iter().any(|n| self.in_set(set, n));
            }
            if !any {
                return false;
            }
        }
        if let Some(not) = m.not_labels {
            let identity = self.s.endpoints.get(self.subject).map(|e| e.identity);
            if identity.is_some_and(|i| self.in_set(not, i))
                || self.netsets_at(a).into_iter().any(|n| self.in_set(not, n))
            {
                return false;
            }
        }
        true
    }

    /// What a `notSelector` set excludes in family `fam`: the addresses of the endpoints whose
    /// identity is in it and the networks of the network sets in it, sorted.
    fn excluded(&self, not: u32, fam: usize) -> Vec<Prefix> {
        let mut out = Vec::new();
        for (ep, owned) in &self.owned {
            if self.s.endpoints.get(*ep).is_some_and(|e| self.in_set(not, e.identity)) {
                out.extend(owned[fam].iter().map(|a| host(*a)));
            }
        }
        for (net, ids) in self.s.netsets.nets() {
            if fam_of(net.v6) == fam && ids.iter().any(|&n| self.in_set(not, n)) {
                out.push(net_prefix(&net));
            }
        }
        normalize(out)
    }

    fn owned(&self, ep: u32, fam: usize) -> &[Addr] {
        self.owned.get(&ep).map_or(&[], |o| &o[fam])
    }

    fn subject_sig(&self, m: &CEntity, action: Action, info: &RuleInfo, fam: usize) -> SubjSig {
        let protos = info.protos.as_deref();
        let owner = Some(self.ident);
        if m.unresolvable {
            return match action {
                Action::Allow | Action::Log => SubjSig::Never,
                Action::Deny => {
                    let (p, ex) = port_alts(&m.ports, &m.not_ports, owner, protos);
                    SubjSig::Any(p, ex)
                }
                Action::Pass => SubjSig::Any(port_alts(&m.ports, &m.not_ports, owner, protos).0, false),
            };
        }
        if m.domains.is_some()
            || (m.service.is_some() && !self.s.services.contains_key(m.service.as_ref().expect("service")))
        {
            return SubjSig::Never;
        }
        let Some(set) = self.set_of(m) else { return SubjSig::Never };
        let owned = self.owned(self.subject, fam);
        let hits: Vec<u128> = owned.iter().filter(|&&a| self.subject_addr_match(m, set, a)).map(|a| a.bits).collect();
        if hits.is_empty() {
            return SubjSig::Never;
        }
        let (palts, ex) = port_alts(&m.ports, &m.not_ports, owner, protos);
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

    fn peer_alts(&self, m: &CEntity, action: Action, info: &RuleInfo, fam: usize) -> Vec<Alt> {
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
            if m.domains.is_some()
                || (m.service.is_some() && !self.s.services.contains_key(m.service.as_ref().expect("service")))
            {
                return Vec::new();
            }
            if !m.nets.is_empty() {
                let nets: Vec<Prefix> = m.nets.0.iter().filter(|n| fam_of(n.v6) == fam).map(net_prefix).collect();
                p = intersect(&p, &nets);
            }
            for q in m.not_nets.0.iter().filter(|n| fam_of(n.v6) == fam) {
                p = subtract_prefix(&p, net_prefix(q));
            }
            if let Some(addrs) = &m.node_addrs {
                let nodes: Vec<Prefix> = addrs.iter().filter(|a| fam_of(a.v6) == fam).map(|a| host(*a)).collect();
                p = intersect(&p, &nodes);
            }
            if m.service.is_some() {
                exact = false;
            }
            let Some(set) = self.set_of(m) else { return Vec::new() };
            if let Some(set) = set {
                let mut l = Vec::new();
                for (ep, owned) in &self.owned {
                    let identity = self.s.endpoints.get(*ep).map(|e| e.identity);
                    if identity.is_some_and(|i| self.in_set(set, i)) {
                        l.extend(owned[fam].iter().map(|a| host(*a)));
                    }
                }
                if m.netsets {
                    for net in self.s.netsets.nets() {
                        if fam_of(net.0.v6) == fam && net.1.iter().any(|&n| self.in_set(set, n)) {
                            l.push(net_prefix(&net.0));
                        }
                    }
                }
                p = intersect(&p, &normalize(l));
            }
            if let Some(not) = m.not_labels {
                for q in self.excluded(not, fam) {
                    p = subtract_prefix(&p, q);
                }
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
            let mut eps: Vec<&u32> = self.owned.keys().collect();
            eps.sort();
            for &ep in eps {
                let Some(ident) = self.s.endpoints.get(ep).and_then(|e| self.s.identities.get(e.identity)) else {
                    continue;
                };
                if !ident.ports.iter().any(|(n, _, _)| names.contains(&&**n)) {
                    continue;
                }
                for a in self.owned(ep, fam) {
                    let h = host(*a);
                    if p.iter().any(|&q| within(q, h)) {
                        let (pa, pex) = port_alts(&m.ports, &m.not_ports, Some(ident), protos);
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
        let base_exact = exact && ex && (!has_neg || per_endpoint.is_empty());
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

    fn push_rule(&self, st: &mut StageListing, source: Source, ri: u32, r: &CRule, d: Direction, fam: usize) {
        let pos = st.rules.len() as u32;
        st.rules.push(RuleMeta { source, rule: ri, action: r.action });
        if r.ip_version.is_some_and(|v| v != if fam == 0 { 4 } else { 6 }) {
            return;
        }
        let info = rule_info(r);
        if info.protos.as_ref().is_some_and(|p| p.is_empty()) {
            return;
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
            subject_side.iter().filter_map(|m| Self::sig_alt(&self.subject_sig(m, r.action, &info, fam), fam)).collect()
        };
        let peer: Vec<Alt> = if peer_side.is_empty() {
            base()
        } else {
            peer_side.iter().flat_map(|m| self.peer_alts(m, r.action, &info, fam)).collect()
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
}

impl Snapshot {
    /// The stages of one local endpoint's side for one address family, in evaluation order.
    pub fn listing(&self, endpoint: u32, d: Direction, v6: bool) -> Result<Vec<StageListing>, EngineError> {
        let ep = self.endpoints.get(endpoint).ok_or_else(|| EngineError::Flow(format!("no endpoint {endpoint}")))?;
        if !ep.local {
            return Ok(Vec::new());
        }
        let ident =
            self.identities.get(ep.identity).ok_or_else(|| EngineError::Flow(format!("no identity for {endpoint}")))?;
        let mut owned: HashMap<u32, [Vec<Addr>; 2]> = HashMap::new();
        for (a, r) in self.addrs.iter() {
            owned.entry(r.endpoint).or_default()[fam_of(a.v6)].push(*a);
        }
        for v in owned.values_mut() {
            for fam in v.iter_mut() {
                fam.sort_by_key(|a| a.bits);
            }
        }
        let lister = Lister { s: self, owned, subject: endpoint, ident };
        let fam = fam_of(v6);
        let mut out = Vec::new();
        for stage in ident.programs[d as usize].stages.iter() {
            let mut st = StageListing {
                tier: Some(stage.tier),
                profile: None,
                default: Some(stage.default),
                rules: Vec::new(),
                entries: Vec::new(),
            };
            for &pid in &stage.policies {
                if let Some(rules) = self.policies.get(pid) {
                    for (ri, r) in rules.get(d).iter().enumerate() {
                        lister.push_rule(&mut st, Source::Policy(pid), ri as u32, r, d, fam);
                    }
                }
            }
            out.push(st);
        }
        for &pi in ident.profiles.iter() {
            let mut st =
                StageListing { tier: None, profile: Some(pi), default: None, rules: Vec::new(), entries: Vec::new() };
            if let Some(rules) = self.profiles.get(pi) {
                for (ri, r) in rules.get(d).iter().enumerate() {
                    lister.push_rule(&mut st, Source::Profile(pi), ri as u32, r, d, fam);
                }
            }
            out.push(st);
        }
        Ok(out)
    }
}
