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
use super::compiled::{CompileStats, Compiled, Key, LogSink, Probe, StageRef, Walked};
use super::cow::{ChunkVec, FastMap, ShardedMap};
use super::flow_cache::ExactKey;
use super::idset::IdSet;
use super::judge::{flow_of_header, Judge};
use super::records::{PacketVerdict, SideVerdict, HTTP_AWAITS, HTTP_NONE, PACKET_POLICY};
use super::rules::{CEntity, CRule, CRules, LabelCond, NamedPorts, PortMatch};
use super::spec::TargetPort;
use super::{
    Action, Addr, Decision, Defaults, Direction, EngineError, Flow, FlowEnd, Kind, LogEntry, Net, Reason, Source,
    Verdict, PROTO_TCP,
};
use crate::batch::PacketHeader;

mod batch;
mod decide;
mod tables;
mod walk;

use decide::*;
pub use tables::*;
use walk::*;

/// The namespace id of cluster-scoped identities.
pub const NO_NAMESPACE: u32 = u32::MAX;
/// The peer identity of an address no endpoint owns, in memo keys.
const OUTSIDE: u32 = u32::MAX;

/// The addresses from which a snapshot's compiled lookups of a batch (the memo left out for not
/// hitting, or `classify_compiled`) go in groups (`Snapshot::flow_records`). Below it the
/// tables a lookup reads stay in cache and the stages only add instructions: random pod pairs
/// through Python, grouped against a lookup at a time, 0.86-1.02x at 1,000 pods and
/// 1.08-1.41x at 10,000 (bench/README.md).
pub const GROUPED_FROM: usize = 4096;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A process-wide unique id for a snapshot handed out (the decision memo is per snapshot).
pub(crate) fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, AtomicOrdering::Relaxed)
}

/// What an address resolves to, by address.
pub(crate) type AddrMap = ShardedMap<Addr, AddrRec>;

/// An immutable engine state. Cloning shares every table.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub(crate) addrs: AddrMap,
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
    pub(crate) services: Arc<FastMap<ServiceName, Arc<ServiceRec>>>,
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
        Ok(ident.programs[d as usize]
            .stages
            .iter()
            .find(|s| s.tier == tier)
            .map_or_else(Vec::new, |s| s.policies.clone()))
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
        self.flow_records(headers, out, defaults);
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
                Some(e) if self.endpoints.get(e).is_none() => {
                    return Err(EngineError::Flow(format!("no endpoint {e}")))
                }
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
    pub fn evaluate_request(
        &self,
        flow: &Flow,
        request: Option<&Request>,
        defaults: Defaults,
    ) -> Result<Verdict, EngineError> {
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
            let mut i = 0;
            while i < headers.len() {
                // While the memo is left out (it was not hitting), a run of packets goes to
                // the compiled programs as a group.
                let left_out = memo.leave_out(headers.len() - i);
                if left_out > 0 {
                    self.flow_records(&headers[i..i + left_out], &mut out[i..i + left_out], defaults);
                    i += left_out;
                } else {
                    out[i] = self.memo_verdict(memo, &headers[i], defaults);
                    i += 1;
                }
            }
        })
    }

    fn packet_verdict(&self, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        with_memo(self.uid, |memo| self.memo_verdict(memo, h, defaults))
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
