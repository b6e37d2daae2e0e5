//! An immutable engine snapshot, and how it answers a flow.
//!
//! Per flow: each address maps to its endpoint (one hash lookup), the endpoint to its identity,
//! the identity to its program per direction (the policies that apply, by tier, in order), and
//! the program's compiled form decides the side ([`super::compiled`]: one lookup, whatever the
//! number of rules). The rule walk below (`Ctx::walk`) is the same decision rule by rule: it
//! decides what the compiled form leaves out (a program with a Calico `services` or `domains`
//! peer or past the memory bound, a flow carrying its HTTP request) and is the baseline the
//! compiled form is held to. In it a rule peer with label conditions is a membership test of the
//! peer's identity in the peer's identity set; addresses not owned by any endpoint are matched by
//! networks and by the network sets containing them. Nothing is allocated on the allow path.

use crate::dns::{DnsError, DomainFacts};
use crate::http::Request;
use std::cell::{Cell, OnceCell};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};

use super::classes::{with_memo, ClassLpm, MemoRef, PortClasses, SideKey};
use super::compiled::{CompileStats, Compiled, Key, LogSink, Outcome, Probe, StageRef, Walked};
use super::records::{PacketVerdict, SideVerdict, HTTP_AWAITS, HTTP_NONE, PACKET_POLICY};
use super::cow::{ChunkVec, FastMap, ShardedMap};
use super::idset::IdSet;
use super::judge::{flow_of_header, Judge};
use super::rules::{CEntity, CRule, CRules, LabelCond, NamedPorts, PortMatch};
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
    pub profiles: Arc<ProfileList>,
    /// Which identity sets hold it: bit `i` for set `i` (the sets, transposed: the compiled
    /// programs test a peer's membership in many sets at once through these).
    pub members: Arc<Vec<u64>>,
}

impl IdRec {
    /// Whether set `set` holds this identity.
    #[inline]
    pub fn in_set(&self, set: u32) -> bool {
        bit(&self.members, set)
    }
}

/// Bit `i` of a bitmap (false past its end).
#[inline]
pub(crate) fn bit(bits: &[u64], i: u32) -> bool {
    bits.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
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

/// The policies that apply to an identity in one direction, grouped by tier in order, and their
/// compiled form (`compiled`): built when the model makes the program, or on first use. A
/// program is never changed: when a policy's rules change, the programs listing it are made
/// anew, so a compiled program always agrees with the rules of the snapshots holding it.
#[derive(Debug)]
pub struct Program {
    pub stages: Vec<Stage>,
    pub direction: Direction,
    compiled: OnceLock<Result<Compiled, Walked>>,
}

impl Program {
    pub fn new(direction: Direction, stages: Vec<Stage>) -> Program {
        Program { stages, direction, compiled: OnceLock::new() }
    }

    /// The same stages, to be compiled again (a policy's rules changed).
    pub fn renewed(&self) -> Program {
        Program::new(self.direction, self.stages.iter().map(|s| Stage { tier: s.tier, default: s.default, policies: s.policies.clone() }).collect())
    }

    /// Whether the program lists `policy`.
    pub fn lists(&self, policy: u32) -> bool {
        self.stages.iter().any(|s| s.policies.contains(&policy))
    }

    /// The compiled program, built now if it was not yet; Err: why it is walked instead.
    pub fn compiled(&self, snap: &Snapshot) -> Result<&Compiled, Walked> {
        self.compiled
            .get_or_init(|| {
                let stages: Vec<StageRef<'_>> = self
                    .stages
                    .iter()
                    .map(|s| StageRef::Tier { tier: s.tier, default: s.default, policies: &s.policies })
                    .collect();
                Compiled::build(snap, self.direction, &stages)
            })
            .as_ref()
            .map_err(|w| *w)
    }

    /// The compiled program if it was built (Err: walked), None if not yet.
    pub fn compiled_if_built(&self) -> Option<Result<&Compiled, Walked>> {
        self.compiled.get().map(|r| r.as_ref().map_err(|w| *w))
    }
}

/// The profiles of an identity (those that exist, in its order), and their compiled form per
/// direction, built as a program's is.
#[derive(Debug, Default)]
pub struct ProfileList {
    pub ids: Vec<u32>,
    compiled: [OnceLock<Result<Compiled, Walked>>; 2],
}

impl ProfileList {
    pub fn new(ids: Vec<u32>) -> ProfileList {
        ProfileList { ids, compiled: Default::default() }
    }

    pub fn compiled(&self, snap: &Snapshot, d: Direction) -> Result<&Compiled, Walked> {
        self.compiled[d as usize]
            .get_or_init(|| {
                let stages: Vec<StageRef<'_>> = self.ids.iter().map(|&p| StageRef::Profile(p)).collect();
                Compiled::build(snap, d, &stages)
            })
            .as_ref()
            .map_err(|w| *w)
    }

    pub fn compiled_if_built(&self, d: Direction) -> Option<Result<&Compiled, Walked>> {
        self.compiled[d as usize].get().map(|r| r.as_ref().map_err(|w| *w))
    }
}

impl std::ops::Deref for ProfileList {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        &self.ids
    }
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

    /// The network sets holding every address of `net` (their networks are `net` or wider).
    pub fn holding(&self, net: Net, out: &mut Vec<u32>) {
        for (v6, len, table) in &self.tables {
            if *v6 != net.v6 || *len > net.len {
                continue;
            }
            if let Some(ids) = table.get(&(net.bits & super::net::mask(*len))) {
                out.extend_from_slice(ids);
            }
        }
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
    /// The network sets (by identity) holding the addresses of each address class.
    pub(crate) class_netsets: Arc<Vec<Box<[u32]>>>,
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
    netsets: OnceCell<&'s [u32]>,
    /// The address's class, when resolving it gave it.
    class: Option<u32>,
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

    /// [`Snapshot::evaluate`] by walking the programs rule by rule, never through their
    /// compiled form: the baseline of the benchmarks and of the compiled path's property test.
    pub fn evaluate_walked(&self, flow: &Flow, defaults: Defaults) -> Result<Verdict, EngineError> {
        self.check_flow(flow)?;
        Ok(self.evaluate_flow_by(flow, None, defaults, Path::Walk).0)
    }

    /// The verdict of one decoded header by walking the rules (see [`Snapshot::evaluate_walked`]).
    pub fn header_verdict_walked(&self, h: &PacketHeader, defaults: Defaults) -> Option<Verdict> {
        Some(self.evaluate_flow_by(&flow_of_header(h)?, None, defaults, Path::Walk).0)
    }

    /// A batch through the compiled programs alone, without the decision memo in front (the
    /// benchmarks' cold path).
    pub fn classify_compiled(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults) {
        for (h, o) in headers.iter().zip(out.iter_mut()) {
            *o = match flow_of_header(h) {
                Some(flow) => self.flow_record(&flow, defaults),
                None => PacketVerdict::undecodable(h),
            };
        }
    }

    /// Compiles every program and profile list of the local identities now (the model does
    /// when it makes them; a snapshot built otherwise compiles on first use).
    pub fn compile_all(&self) {
        for (_, rec) in self.identities.iter() {
            if !rec.local {
                continue;
            }
            for d in Direction::BOTH {
                let _ = rec.programs[d as usize].compiled(self);
                if !rec.profiles.is_empty() {
                    let _ = rec.profiles.compiled(self, d);
                }
            }
        }
    }

    /// What the compiled programs of the local identities are: how many are compiled (and the
    /// bytes they hold), not yet compiled, or walked and why.
    pub fn compile_stats(&self) -> CompileStats {
        let mut st = CompileStats::default();
        let mut seen: HashSet<(usize, u8)> = HashSet::new();
        for (_, rec) in self.identities.iter() {
            if !rec.local {
                continue;
            }
            let mut walked = false;
            for d in Direction::BOTH {
                let program = &rec.programs[d as usize];
                let mut parts = vec![(Arc::as_ptr(program) as usize, program.compiled_if_built())];
                if !rec.profiles.is_empty() {
                    parts.push((Arc::as_ptr(&rec.profiles) as usize + d as usize, rec.profiles.compiled_if_built(d)));
                }
                for (ptr, built) in parts {
                    walked |= matches!(built, Some(Err(_)));
                    if !seen.insert((ptr, d as u8)) {
                        continue;
                    }
                    st.programs += 1;
                    match built {
                        None => st.not_compiled += 1,
                        Some(Ok(c)) => {
                            st.compiled += 1;
                            st.bytes += c.memory_bytes();
                            st.alternatives += c.alternatives();
                        }
                        Some(Err(Walked::Services)) => st.walked_services += 1,
                        Some(Err(Walked::Domains)) => st.walked_domains += 1,
                        Some(Err(Walked::Bound(_))) => st.walked_memory += 1,
                    }
                }
            }
            st.identities += 1;
            st.walked_identities += walked as usize;
        }
        st
    }

    /// The programs walked because their compiled form would exceed the memory bound: per
    /// program, its direction, the policies it lists, the bytes it would take, and the local
    /// identities holding it (what `check` reports).
    pub fn walked_for_memory(&self) -> Vec<(Direction, Vec<u32>, usize, Vec<u32>)> {
        let mut out: Vec<(Direction, Vec<u32>, usize, Vec<u32>)> = Vec::new();
        let mut at: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for (id, rec) in self.identities.iter() {
            if !rec.local {
                continue;
            }
            for d in Direction::BOTH {
                let program = &rec.programs[d as usize];
                if let Some(Err(Walked::Bound(bytes))) = program.compiled_if_built() {
                    let key = Arc::as_ptr(program) as usize;
                    let i = *at.entry(key).or_insert_with(|| {
                        let policies = program.stages.iter().flat_map(|s| s.policies.iter().copied()).collect();
                        out.push((d, policies, bytes, Vec::new()));
                        out.len() - 1
                    });
                    out[i].3.push(id);
                }
            }
        }
        out
    }

    fn check_flow(&self, flow: &Flow) -> Result<(), EngineError> {
        for end in [&flow.src, &flow.dst] {
            match end.endpoint {
                Some(e) if self.endpoints.get(e).is_none() => return Err(EngineError::Flow(format!("no endpoint {e}"))),
                None if end.addr.is_none() => {
                    return Err(EngineError::Flow("a flow end needs an endpoint or an address".into()))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Like [`Snapshot::evaluate`], for a TCP flow that carries `request` (its connection's
    /// HTTP request: `http` rules match it); None: not known, such rules match nothing and the
    /// verdict says whether it awaits one.
    pub fn evaluate_request(&self, flow: &Flow, request: Option<&Request>, defaults: Defaults) -> Result<Verdict, EngineError> {
        self.check_flow(flow)?;
        Ok(self.evaluate_flow(flow, request, defaults).0)
    }

    #[inline]
    fn resolve(&self, end: &FlowEnd) -> End<'_> {
        let mut class = None;
        let ep_id = match end.endpoint {
            Some(e) => Some(e),
            None => end.addr.and_then(|a| {
                self.addrs.get(&a).map(|r| {
                    class = Some(r.class);
                    r.endpoint
                })
            }),
        };
        let ep = ep_id.and_then(|i| self.endpoints.get(i).map(|e| (i, e)));
        let addr = end.addr.or_else(|| ep.and_then(|(_, e)| e.first_ip));
        let ident = ep.and_then(|(_, e)| self.identities.get(e.identity));
        End { addr, ep, ident, netsets: OnceCell::new(), class, uncacheable: Cell::new(false) }
    }

    /// The network sets (by identity) holding an address of class `class`.
    #[inline]
    fn class_netsets(&self, class: u32) -> &[u32] {
        self.class_netsets.get(class as usize).map_or(&[], |v| &v[..])
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
            return self.flow_record(&flow, defaults);
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
        let want = [keys[0].is_some() && sides[0].is_none(), keys[1].is_some() && sides[1].is_none()];
        if want[0] || want[1] {
            // The compiled programs decide the missing sides; each is memoized unless it read
            // what the key does not hold (service membership, learned domains: walked).
            let (records, uncacheable) = match self.records_compiled(&flow, [src, dst], [Some(sc), Some(dc)], defaults, want) {
                Some(records) => (records, false),
                None => self.side_records(&flow, defaults, want),
            };
            for i in 0..2 {
                if let (true, Some(k)) = (want[i], keys[i]) {
                    if !uncacheable {
                        memo.put(k, records[i]);
                    }
                    sides[i] = Some(records[i]);
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
        self.evaluate_flow_by(flow, request, defaults, Path::Compiled)
    }

    /// The side records `want`ed of an address-only flow whose ends resolve to `recs` (and
    /// address classes `classes`, when known), each decided by its compiled program; None when
    /// one of them is walked instead.
    #[inline]
    fn records_compiled(
        &self,
        flow: &Flow,
        recs: [Option<AddrRec>; 2],
        classes: [Option<u32>; 2],
        defaults: Defaults,
        want: [bool; 2],
    ) -> Option<[SideVerdict; 2]> {
        let ends = [0, 1].map(|i| EndView {
            ident: recs[i].and_then(|r| self.identities.get(r.identity)),
            class: classes[i],
            addr: if i == 0 { flow.src.addr } else { flow.dst.addr },
        });
        let key = Key {
            version: flow.src.addr.or(flow.dst.addr).map(|a| a.version()),
            protocol: flow.protocol,
            ports: [flow.sport, flow.dport],
            icmp_type: flow.icmp_type,
            icmp_code: flow.icmp_code,
            addrs: [flow.src.addr, flow.dst.addr],
        };
        let mut out = [SideVerdict::default(); 2];
        for (i, d) in [(0, Direction::Egress), (1, Direction::Ingress)] {
            if !want[i] {
                continue;
            }
            let Some(rec) = recs[i].filter(|r| r.local) else { continue };
            let Some(subject) = ends[i].ident else { continue };
            let lean = Lean { s: self, ends: &ends, protocol: flow.protocol, ports: [flow.sport, flow.dport], ns: subject.ns };
            let mut logs = LogCount::default();
            let mut awaits = false;
            let decided = self.compiled_decision(d, subject, rec.host, &lean, &key, defaults, &mut logs, &mut awaits).ok()?;
            out[i] = side_verdict(decided, logs.0, awaits);
        }
        Some(out)
    }

    /// One side decided by the compiled programs of `subject` (and its profiles); Err when one
    /// of them is walked instead.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn compiled_decision<P: Probe, L: LogSink>(
        &self,
        d: Direction,
        subject: &IdRec,
        host: bool,
        probe: &P,
        key: &Key,
        defaults: Defaults,
        logs: &mut L,
        awaits: &mut bool,
    ) -> Result<Option<Decided>, ()> {
        let program = &subject.programs[d as usize];
        let compiled = program.compiled(self).map_err(|_| ())?;
        let decided = |o: Outcome, reason: Reason| match o {
            Outcome::Rule { allow, tier, source, rule } => Some(Decided { allow, tier, source: Some(source), rule: Some(rule), reason }),
            Outcome::EndOfTier { allow, tier } => {
                Some(Decided { allow, tier: Some(tier), source: None, rule: None, reason: Reason::EndOfTier })
            }
            Outcome::Through => None,
        };
        if let Some(x) = decided(compiled.decide(key, probe, logs, awaits), Reason::Rule) {
            return Ok(Some(x));
        }
        if !subject.profiles.is_empty() {
            let p = subject.profiles.compiled(self, d).map_err(|_| ())?;
            return Ok(Some(decided(p.decide(key, probe, logs, awaits), Reason::Profile).unwrap_or(Decided {
                allow: false,
                tier: None,
                source: None,
                rule: None,
                reason: Reason::Profile,
            })));
        }
        if program.stages.is_empty() {
            return Ok(None);
        }
        let allow = if host { defaults.host_allow } else { defaults.pod_allow };
        Ok(Some(Decided { allow, tier: None, source: None, rule: None, reason: Reason::Default }))
    }

    /// One flow's verdict record, each side decided by its compiled program (or walked).
    #[inline]
    fn flow_record(&self, flow: &Flow, defaults: Defaults) -> PacketVerdict {
        if let (Some(sa), Some(da), None, None) = (flow.src.addr, flow.dst.addr, flow.src.endpoint, flow.dst.endpoint) {
            let recs = [self.addrs.get(&sa).copied(), self.addrs.get(&da).copied()];
            let local = [recs[0].is_some_and(|r| r.local), recs[1].is_some_and(|r| r.local)];
            if !local[0] && !local[1] {
                return PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
            }
            if let Some(sides) = self.records_compiled(flow, recs, [recs[0].map(|r| r.class), recs[1].map(|r| r.class)], defaults, local) {
                let (mut allow, mut awaits) = (true, true);
                for i in 0..2 {
                    let Some(rec) = recs[i].filter(|r| r.local) else { continue };
                    let side = &sides[i];
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
                return PacketVerdict {
                    allow: allow as u8,
                    reason: PACKET_POLICY,
                    ct_state: 0,
                    http: if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE },
                    egress: sides[0],
                    ingress: sides[1],
                };
            }
        }
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        if !src.local() && !dst.local() {
            return PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        }
        let ctx = Ctx::new(self, flow, None, &src, &dst, Path::Compiled);
        let egress = ctx.side_record(&src, Direction::Egress, defaults);
        let ingress = ctx.side_record(&dst, Direction::Ingress, defaults);
        let (mut allow, mut awaits) = (true, true);
        for (side, end) in [(&egress, &src), (&ingress, &dst)] {
            if end.local() {
                let a = if side.present != 0 { side.allow != 0 } else { Self::default_for(end, defaults) };
                allow &= a;
                awaits &= a || side.awaits != 0;
            }
        }
        PacketVerdict {
            allow: allow as u8,
            reason: PACKET_POLICY,
            ct_state: 0,
            http: if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE },
            egress,
            ingress,
        }
    }

    /// The side records `want`ed of a flow (egress, ingress), and whether a walked side read
    /// anything outside the memo key.
    fn side_records(&self, flow: &Flow, defaults: Defaults, want: [bool; 2]) -> ([SideVerdict; 2], bool) {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = Ctx::new(self, flow, None, &src, &dst, Path::Compiled);
        let mut out = [SideVerdict::default(); 2];
        if want[0] {
            out[0] = ctx.side_record(&src, Direction::Egress, defaults);
        }
        if want[1] {
            out[1] = ctx.side_record(&dst, Direction::Ingress, defaults);
        }
        (out, src.uncacheable.get())
    }

    fn evaluate_flow_by(&self, flow: &Flow, request: Option<&Request>, defaults: Defaults, path: Path) -> (Verdict, bool) {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = Ctx::new(self, flow, request, &src, &dst, path);
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

/// How a side is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// By its compiled program (walked where the program is not compiled).
    Compiled,
    /// By walking the rules (the baseline).
    Walk,
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
    path: Path,
}

/// A side decision without its Log trail (which the compiled path writes elsewhere).
struct Decided {
    allow: bool,
    tier: Option<u32>,
    source: Option<Source>,
    rule: Option<u32>,
    reason: Reason,
}

/// Counts the Log rules passed (batch records keep only the count).
#[derive(Default)]
struct LogCount(usize);

impl LogSink for LogCount {
    #[inline]
    fn log(&mut self, _: Option<u32>, _: Source, _: u32) {
        self.0 += 1;
    }
}

impl LogSink for Vec<LogEntry> {
    fn log(&mut self, tier: Option<u32>, source: Source, rule: u32) {
        self.push(LogEntry { tier, source, rule });
    }
}

/// One end of a flow as a compiled lookup reads it.
#[derive(Clone, Copy)]
struct EndView<'s> {
    ident: Option<&'s IdRec>,
    /// The address's class, when known (else worked out from the address if needed).
    class: Option<u32>,
    addr: Option<Addr>,
}

/// What a compiled lookup reads of the snapshot for one side: the ends' identity set bitmaps
/// and those of the network sets holding their addresses, relative peers in the subject's
/// namespace (`ns`), named ports.
struct Lean<'s, 'e> {
    s: &'s Snapshot,
    ends: &'e [EndView<'s>; 2],
    protocol: u8,
    ports: [Option<u16>; 2],
    ns: u32,
}

impl<'s> Lean<'s, '_> {
    #[inline]
    fn netsets(&self, end: usize) -> &'s [u32] {
        let e = &self.ends[end];
        match e.addr {
            Some(a) => self.s.class_netsets(e.class.unwrap_or_else(|| self.s.classes.class_of(a))),
            None => &[],
        }
    }
}

impl Probe for Lean<'_, '_> {
    #[inline]
    fn identity_bits(&self, end: usize) -> &[u64] {
        self.ends[end].ident.map_or(&[], |r| &r.members[..])
    }

    #[inline]
    fn netset_bits(&self, end: usize, f: &mut dyn FnMut(&[u64])) {
        if self.s.netsets.is_empty() {
            return;
        }
        for &n in self.netsets(end) {
            if let Some(r) = self.s.identities.get(n) {
                f(&r.members);
            }
        }
    }

    fn relative_in(&self, end: usize, rid: u32, netsets: bool) -> bool {
        let Some(&set) = self.s.relative.get(&(rid, self.ns)) else { return false };
        if self.ends[end].ident.is_some_and(|r| r.in_set(set)) {
            return true;
        }
        netsets
            && !self.s.netsets.is_empty()
            && self.netsets(end).iter().any(|&n| self.s.identities.get(n).is_some_and(|r| r.in_set(set)))
    }

    fn ports_match(&self, end: usize, ports: &[PortMatch], not_ports: &[PortMatch]) -> bool {
        let port = self.ports[end];
        let owner = self.ends[end].ident;
        (ports.is_empty() || ports.iter().any(|p| p.matches(self.protocol, port, owner)))
            && !not_ports.iter().any(|p| p.matches(self.protocol, port, owner))
    }
}

/// A side's batch record from its decision, the Log rules it passed and whether an `http` rule
/// awaits the request.
#[inline]
fn side_verdict(decided: Option<Decided>, logs: usize, awaits: bool) -> SideVerdict {
    let Some(x) = decided else { return SideVerdict::default() };
    let (source_kind, source) = match x.source {
        None => (0, -1),
        Some(Source::Policy(i)) => (1, i as i32),
        Some(Source::Profile(i)) => (2, i as i32),
    };
    SideVerdict {
        present: 1,
        allow: x.allow as u8,
        reason: x.reason as u8,
        source_kind,
        tier: x.tier.map_or(-1, |t| t as i32),
        source,
        rule: x.rule.map_or(-1, |r| r as i32),
        logs: logs.min(u8::MAX as usize) as u8,
        awaits: (!x.allow && awaits) as u8,
        reserved: [0; 2],
    }
}

impl<'a, 's> Ctx<'a, 's> {
    fn new(s: &'s Snapshot, flow: &'a Flow, request: Option<&'a Request>, src: &'a End<'s>, dst: &'a End<'s>, path: Path) -> Self {
        Ctx {
            s,
            flow,
            request,
            awaits: Cell::new(false),
            src,
            dst,
            version: src.addr.or(dst.addr).map(|a| a.version()),
            path,
        }
    }
}

impl<'s> Ctx<'_, 's> {
    fn side(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> Option<Decision> {
        self.awaits.set(false);
        let mut logs = Vec::new();
        let mut decision = match self.compiled_side(end, d, defaults, &mut logs) {
            Ok(decided) => decided.map(|x| Decision {
                allow: x.allow,
                tier: x.tier,
                source: x.source,
                rule: x.rule,
                reason: x.reason,
                logs,
                awaits_request: false,
            }),
            Err(_) => self.walk(end, d, defaults),
        };
        if let Some(dec) = decision.as_mut() {
            dec.awaits_request = !dec.allow && self.awaits.get();
        }
        decision
    }

    /// One side's batch record: as [`Ctx::side`], without building the Log trail.
    #[inline]
    fn side_record(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> SideVerdict {
        self.awaits.set(false);
        let mut logs = LogCount::default();
        match self.compiled_side(end, d, defaults, &mut logs) {
            Ok(decided) => side_verdict(decided, logs.0, self.awaits.get()),
            Err(_) => {
                let mut decision = self.walk(end, d, defaults);
                if let Some(dec) = decision.as_mut() {
                    dec.awaits_request = !dec.allow && self.awaits.get();
                }
                SideVerdict::from(&decision)
            }
        }
    }

    /// A side decided by its compiled program and profiles; Err when they are walked instead
    /// (not compiled, a request to judge, or the walk asked for).
    #[inline]
    fn compiled_side<L: LogSink>(&self, end: &End<'s>, d: Direction, defaults: Defaults, logs: &mut L) -> Result<Option<Decided>, ()> {
        if self.path == Path::Walk || self.request.is_some() {
            return Err(());
        }
        if !end.local() {
            return Ok(None);
        }
        let Some(subject) = end.ident else { return Ok(None) };
        let f = self.flow;
        let key = Key {
            version: self.version,
            protocol: f.protocol,
            ports: [f.sport, f.dport],
            icmp_type: f.icmp_type,
            icmp_code: f.icmp_code,
            addrs: [self.src.addr, self.dst.addr],
        };
        let ends = [self.src, self.dst].map(|e| EndView { ident: e.ident, class: e.class, addr: e.addr });
        let lean = Lean { s: self.s, ends: &ends, protocol: f.protocol, ports: [f.sport, f.dport], ns: subject.ns };
        let host = end.ep.is_some_and(|(_, e)| e.kind == Kind::Host);
        let mut awaits = false;
        let out = self.s.compiled_decision(d, subject, host, &lean, &key, defaults, logs, &mut awaits)?;
        self.awaits.set(awaits);
        Ok(out)
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
        self.netsets_of(end).iter().any(|&n| set.contains(n))
    }

    /// The network sets (by identity) holding the end's address.
    #[inline]
    fn netsets_of(&self, end: &End<'s>) -> &'s [u32] {
        end.netsets.get_or_init(|| match end.addr {
            Some(a) => self.s.class_netsets(end.class.unwrap_or_else(|| self.s.classes.class_of(a))),
            None => &[],
        })
    }

    #[inline]
    fn ports_match(&self, m: &CEntity, source: bool) -> bool {
        self.ports_of(source, &m.ports, &m.not_ports)
    }

    /// Whether the port of one end (`source`: the source) matches `ports` and none of
    /// `not_ports`, named ports resolved against that end's endpoint.
    #[inline]
    fn ports_of(&self, source: bool, ports: &[PortMatch], not_ports: &[PortMatch]) -> bool {
        if ports.is_empty() && not_ports.is_empty() {
            return true;
        }
        let f = self.flow;
        let port = if source { f.sport } else { f.dport };
        let owner = self.end(source).ident;
        if !ports.is_empty() && !ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        if not_ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
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
