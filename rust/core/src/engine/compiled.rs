//! Decisions compiled, not walked: a program (the tiers, policies and rules that apply to an
//! identity in one direction) or a profile list, compiled into a first-match classifier over the
//! flow's fields whose first match is what the rule walk (`snapshot::walk`) answers — the
//! deciding tier, policy or profile and rule, the Log rules passed and whether an `http` rule
//! awaits the connection's request. One concept in one file: the compiled layout, the compiler
//! that writes it and the lookup that reads it change together.
//!
//! **Alternatives.** A rule matches when one of its source peers and one of its destination
//! peers match (an empty list: anything). Each rule is expanded into alternatives, one per
//! (source peer, destination peer) pair, in the order the walk tries them: the first matching
//! alternative of a rule names the first matching source and destination peer, which is what
//! the walk's fail-closed `Pass` reads. Each alternative is a conjunction over dimensions that
//! do not depend on each other, so a lookup is the bit-vector scheme of Lakshman and Stiliadis
//! ("High-speed policy-based packet forwarding using efficient multi-dimensional range
//! matching", SIGCOMM 1998): every dimension maps the flow's value to an atom (a range of
//! values no alternative tells apart), every atom has a precomputed row of bits, one per
//! alternative; the rows are ANDed and the set bits, in evaluation order, are the candidates.
//! The scheme's parts (rows, a port's and an address's atom, the first set bit) are the
//! classifier module's (`classifier::rows`); ClassBench's sets are measured on them too
//! (`classifier::BitVector`).
//!
//! Dimensions held in rows (computed once here, nothing of them read at lookup but the row):
//!
//! - the IP version (`ipVersion`);
//! - the protocol (`protocols`, `notProtocols`, an `http` rule's TCP), one table per protocol
//!   a rule names, one for every other;
//! - ICMP type × code (`icmp`, `notIcmp`), for ICMP and ICMPv6;
//! - each end's port (`ports`, `notPorts` with numbers): atoms between the range boundaries;
//! - each end's address (`nets`, `notNets`, node addresses): the atom of an address is the
//!   longest of the program's own prefixes that holds it (the prefixes holding an address form a
//!   chain, so the longest decides every containment test), found by a scan of few prefixes or
//!   a binary search over the intervals many cut the addresses into.
//!
//! The identity dimension is exact match on a set (a peer's selector resolved to the identities
//! it matches, Cilium's selector cache). Which sets hold an identity changes without the policy
//! changing, so it is not compiled in: each identity carries the bitmap of the sets holding it
//! (`IdRec::members`, the identity sets transposed, kept by the model per change), and a lookup
//! builds the identity row from it — for each set the program's peers name, one bit test and,
//! when it holds, an OR of the alternatives naming it (and the same for the network sets
//! holding the address, and `notSelector` sets). A pod or namespace change recompiles nothing.
//!
//! Checked per candidate, in order, the rare rest: relative peers (resolved in the subject's
//! namespace) and named ports (which port a name is depends on the endpoint).
//!
//! **Layout.** A compiled program is a small head and one allocation read in lookup order: the
//! rows, then the protocol tables, port bounds, label sets and alternatives as `u32` records,
//! checked once when packed so that a lookup reads them without bounds checks. A tier's end is
//! an alternative of its own that matches anything, so a lookup is one first-match loop over
//! the candidates, returning the deciding alternative's verdict record. A dimension no
//! remaining candidate can fail is not looked up: each end's address (a row of the alternatives
//! with an address condition on that end) and each end's identity (a row of those naming a set).
//! Most rules name their peers by selector or by address, not both.
//!
//! What cannot be compiled exactly is not: a Calico `services` match (it reads which endpoints
//! back a Service) and `domains` (addresses learned from DNS answers while running). A program
//! with one of them is walked rule by rule, for the identities it applies to only
//! ([`Walked`]). So is a program whose rows would take more than [`MEMORY_BOUND`] bytes (many
//! rules times many distinct prefixes or port ranges): it never exhausts memory or time.

use super::net::mask;
use super::records::SideVerdict;
use super::rules::{CEntity, CRule, IcmpMatch, LabelCond, PortMatch};
use super::snapshot::Snapshot;
use super::{
    Action, Addr, Direction, Net, Reason, Source, PROTO_ICMP, PROTO_ICMPV6, PROTO_SCTP, PROTO_TCP, PROTO_UDP,
    PROTO_UDPLITE,
};
use crate::classifier::rows::{next_bit, row_words, Bits, PrefixAtoms, RowSet};
use crate::classifier::Prefix;
use crate::prefetch::{prefetch, prefetch_ref};

/// The bytes of rows above which a program is walked instead (per program and direction).
pub const MEMORY_BOUND: usize = 16 << 20;

/// Why a program is walked rule by rule instead of compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Walked {
    /// A rule peer with a Calico `services` match.
    Services,
    /// A rule peer with `domains` (learned while running).
    Domains,
    /// Its rows would exceed [`MEMORY_BOUND`] (the bytes they would take).
    Bound(usize),
}

impl Walked {
    /// The label of the reason (metrics, `check`).
    pub fn reason(&self) -> &'static str {
        match self {
            Walked::Services => "services",
            Walked::Domains => "domains",
            Walked::Bound(_) => "memory",
        }
    }
}

/// How a snapshot's programs are decided (`Snapshot::compile_stats`): programs and profile
/// lists of local identities, per direction, counted once each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Local identities, and those with a side walked.
    pub identities: usize,
    pub walked_identities: usize,
    pub programs: usize,
    pub compiled: usize,
    /// Left to first use, not used yet.
    pub not_compiled: usize,
    pub walked_services: usize,
    pub walked_domains: usize,
    pub walked_memory: usize,
    /// Bytes the compiled ones hold, and their alternatives.
    pub bytes: usize,
    pub alternatives: usize,
}

/// What one alternative does when it is the first to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AltKind {
    Allow,
    Deny,
    /// Ends the tier (a profile: the profile).
    Pass,
    /// Recorded; evaluation goes on after the rule.
    Log,
    /// A `Pass` through a peer the engine could not resolve: denies (fail closed).
    PassDenied,
    /// An `http` rule: without the connection's request it matches nothing, and the decision
    /// awaits the request; evaluation goes on after the rule.
    Await,
    /// The end of a tier whose default action is not `Pass`: an alternative after the tier's
    /// own that every flow matches, so that the tier's default is the first match when no rule
    /// of the tier decided (and a `Pass` jumps past it).
    EndAllow,
    EndDeny,
}

#[derive(Clone, Debug)]
struct Alt {
    kind: AltKind,
    /// Where evaluation goes on after it: the first alternative of the next rule (a Log or
    /// `http` rule is passed once), or for a `Pass` the first of the next stage.
    next_rule: u32,
    /// Its tier (None: a profile).
    tier: Option<u32>,
    source: Source,
    rule: u32,
    /// Per end (source, destination): the index of its checks in `Compiled::checks`, or
    /// `NO_CHECK`.
    checks: [u32; 2],
}

const NO_CHECK: u32 = u32::MAX;

impl Alt {
    /// The side's batch record when this alternative decides (no Log count, no `awaits`): a
    /// rule's, a profile's (`tier` None) or a tier's end.
    fn record(&self) -> SideVerdict {
        let (reason, source_kind, source, rule) = match (self.kind, self.source) {
            (AltKind::EndAllow | AltKind::EndDeny, _) => (Reason::EndOfTier, 0, -1, -1),
            (_, Source::Policy(i)) => (Reason::Rule, 1, i as i32, self.rule as i32),
            (_, Source::Profile(i)) => (Reason::Profile, 2, i as i32, self.rule as i32),
        };
        let reason = if self.tier.is_none() && reason == Reason::Rule { Reason::Profile } else { reason };
        SideVerdict {
            present: 1,
            allow: matches!(self.kind, AltKind::Allow | AltKind::EndAllow) as u8,
            reason: reason as u8,
            source_kind,
            tier: self.tier.map_or(-1, |t| t as i32),
            source,
            rule,
            ..SideVerdict::default()
        }
    }
}

/// What is checked of one peer of a candidate at lookup.
#[derive(Clone, Debug)]
struct Check {
    /// A label condition relative to the subject's namespace (ANP `sameLabels`, `related`):
    /// (relative id, with the network sets holding the address).
    relative: Option<(u32, bool)>,
    /// Ports with names among them: checked at lookup against the end's endpoint.
    ports: Option<Box<(Vec<PortMatch>, Vec<PortMatch>)>>,
}

/// One identity set the peers at one end name, and the rows of the alternatives naming it.
#[derive(Clone, Debug)]
struct LabelSet {
    set: u32,
    /// Alternatives whose peer is in the set when the identity is (`NO_ROW`: none, the set is
    /// only a `notSelector`'s).
    hit: u32,
    /// ... when a network set holding the address is (`NO_ROW`: none may).
    via_netsets: u32,
    /// Alternatives whose `notSelector` is the set (`NO_ROW`: none).
    not: u32,
}

const NO_ROW: u32 = u32::MAX;

/// The identity dimension at one end.
#[derive(Clone, Debug, Default)]
struct EndLabels {
    /// Alternatives with no label condition at this end (or one checked per candidate).
    always: u32,
    /// Alternatives the end's identity can rule out: without one among the candidates, the
    /// dimension is not read.
    dep: u32,
    sets: Vec<LabelSet>,
    /// Whether any set is tested with the network sets holding the address.
    netsets: bool,
}

/// One end's port atoms (for one protocol): row 0 for no port, then one per interval between
/// consecutive `bounds`.
#[derive(Clone, Debug, Default)]
struct PortAtoms {
    rows: Vec<u32>,
}

#[derive(Clone, Debug)]
struct IcmpAtoms {
    types: Vec<u8>,
    codes: Vec<u8>,
    /// (types + 2) x (codes + 2): none, each value named, any other.
    rows: Vec<u32>,
}

#[derive(Clone, Debug)]
struct ProtoRows {
    base: u32,
    /// [source port, destination port]
    ports: [PortAtoms; 2],
    icmp: Option<IcmpAtoms>,
}

/// A program or profile list, compiled (see the module's text), packed for its lookup: the
/// few fields every lookup reads first inline (they live in the program's own allocation), and
/// everything else in one allocation, `data`, in the order a lookup reads it — the rows, then
/// the records of the protocol tables, port boundaries and port atoms, ICMP atoms, the
/// identity dimension and the alternatives (`Layout`). One program is then a few
/// consecutive cache lines that a batch asks for with one hint ([`Compiled::prefetch`]), not a
/// dozen allocations, each a miss of its own (the layout rule of DPDK's `rte_acl` run-time
/// tables: built apart, read as one flat block).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// Words of a row.
    words: u32,
    /// Alternatives.
    n: u32,
    /// Rows for IPv4, IPv6, no address.
    version: [u32; 3],
    /// `u32` offsets into `data` (see `Layout`).
    tables: u32,
    bounds: [(u32, u32); 2],
    /// Per end: the offset of its identity record, or `NONE` when no peer at it has a label
    /// condition.
    labels: [u32; 2],
    alts: u32,
    /// The table of each protocol.
    proto_index: [u8; 256],
    /// Words of `data` that are rows (the records follow).
    rows_len: usize,
    data: Box<[u64]>,
    /// [source end, destination end]
    addrs: [PrefixAtoms; 2],
    /// Per end with address atoms: the row of the alternatives some atom fails (`NONE`: no
    /// atoms).
    addr_dep: [u32; 2],
    /// Per alternative with checks (`ALT_CHECKED`): the index of its checks per end in
    /// `checks`, or `NO_CHECK`; empty when none has any.
    alt_checks: Box<[[u32; 2]]>,
    checks: Vec<Check>,
}

/// The records of `Compiled::data` after its rows, in `u32`s (offsets are in `u32`s from the
/// start of `data`):
///
/// - a protocol table, `TABLE` long: its base row, per end (source, destination) the offset
///   and count of its port atoms' rows (count 0: the end's ports fold into the base row), and
///   the offset of its ICMP record or `NONE`;
/// - an ICMP record: the counts of types and codes, the types, the codes, then a row per
///   (type atom, code atom), `(types + 2) x (codes + 2)`;
/// - an end's port boundaries, one per `u32`;
/// - an end's identity record: its `always` row, whether any set is tested through the
///   network sets holding the address, the number of sets, the row of the alternatives the
///   identity can rule out (`EndLabels::dep`), then per set `LABEL_SET` words: the
///   set, its `hit`, `via_netsets` and `not` rows (`NONE`: none);
/// - an alternative, `ALT` long: its kind (with `ALT_CHECKED`), where evaluation goes on after
///   it (`Alt::next_rule`), then the first 16 bytes of the side's batch record when it decides
///   (`SideVerdict`: presence, verdict, reason and source kind; tier; source; rule), which a
///   lookup hands back as they are, its Log count and `awaits` added.
struct Layout;

impl Layout {
    const TABLE: usize = 6;
    const LABEL_SET: usize = 4;
    const ALT: usize = 6;
}

/// The packed tables of one program as its lookup reads them, without bounds checks: every
/// offset, count and row number in them was checked when the program was packed
/// (`Compiled::validate`), and a program is never changed after.
struct View<'a> {
    u: &'a [u32],
    rows: &'a [u64],
    /// Words of a row.
    w: usize,
}

impl View<'_> {
    #[inline(always)]
    fn u(&self, i: usize) -> u32 {
        debug_assert!(i < self.u.len());
        // SAFETY: `i` is an offset `validate` checked against the data's length.
        unsafe { *self.u.get_unchecked(i) }
    }

    #[inline(always)]
    fn row(&self, r: u32) -> &[u64] {
        let at = r as usize * self.w;
        debug_assert!(at + self.w <= self.rows.len());
        // SAFETY: `r` is a row number `validate` checked against the rows.
        unsafe { self.rows.get_unchecked(at..at + self.w) }
    }

    /// Whether `m` and row `r` share a bit.
    #[inline(always)]
    fn meets(&self, m: &[u64], r: u32) -> bool {
        m.iter().zip(self.row(r)).any(|(x, y)| x & y != 0)
    }

    #[inline(always)]
    fn and(&self, m: &mut [u64], r: u32) {
        for (x, y) in m.iter_mut().zip(self.row(r)) {
            *x &= y;
        }
    }
}

const NONE: u32 = u32::MAX;
/// Words of an identity record before its sets.
const LABELS_HEAD: usize = 4;
/// An alternative's kind word: the kind in the low bits, and whether it has checks.
const ALT_CHECKED: u32 = 1 << 8;

impl AltKind {
    const ALL: [AltKind; 8] = [
        AltKind::Allow,
        AltKind::Deny,
        AltKind::Pass,
        AltKind::Log,
        AltKind::PassDenied,
        AltKind::Await,
        AltKind::EndAllow,
        AltKind::EndDeny,
    ];

    fn code(self) -> u32 {
        AltKind::ALL.iter().position(|&k| k == self).expect("a kind") as u32
    }
}

const KIND_PASS: u32 = 2;
const KIND_LOG: u32 = 3;
const KIND_AWAIT: u32 = 5;

/// What a compile made, before it is packed.
struct Parts {
    words: usize,
    rows: Vec<u64>,
    alts: Vec<Alt>,
    version: [u32; 3],
    proto_index: Box<[u8; 256]>,
    protos: Vec<ProtoRows>,
    addrs: [PrefixAtoms; 2],
    addr_dep: [u32; 2],
    bounds: [Vec<u16>; 2],
    checks: Vec<Check>,
    labels: [Option<EndLabels>; 2],
}

impl Compiled {
    /// Packs what a compile made into the lookup's layout.
    fn pack(p: Parts) -> Compiled {
        debug_assert!(p.rows.len() % p.words == 0);
        // Records are written after the rows, at u32 offsets from the start of `data`.
        let base = p.rows.len() * 2;
        let mut rec: Vec<u32> = Vec::new();
        let at = |rec: &Vec<u32>| (base + rec.len()) as u32;
        let tables = at(&rec);
        rec.resize(p.protos.len() * Layout::TABLE, 0);
        for (ti, t) in p.protos.iter().enumerate() {
            let mut words = [t.base, 0, 0, 0, 0, NONE];
            for end in 0..2 {
                if !t.ports[end].rows.is_empty() {
                    words[1 + 2 * end] = at(&rec);
                    words[2 + 2 * end] = t.ports[end].rows.len() as u32;
                    rec.extend_from_slice(&t.ports[end].rows);
                }
            }
            if let Some(ic) = &t.icmp {
                words[5] = at(&rec);
                rec.push(ic.types.len() as u32);
                rec.push(ic.codes.len() as u32);
                rec.extend(ic.types.iter().map(|&x| x as u32));
                rec.extend(ic.codes.iter().map(|&x| x as u32));
                rec.extend_from_slice(&ic.rows);
            }
            rec[ti * Layout::TABLE..(ti + 1) * Layout::TABLE].copy_from_slice(&words);
        }
        let mut bounds = [(0, 0); 2];
        for (slot, ends) in bounds.iter_mut().zip(&p.bounds) {
            *slot = (at(&rec), ends.len() as u32);
            rec.extend(ends.iter().map(|&b| b as u32));
        }
        let mut labels = [NONE; 2];
        for (slot, l) in labels.iter_mut().zip(&p.labels) {
            let Some(l) = l else { continue };
            *slot = at(&rec);
            rec.extend([l.always, l.netsets as u32, l.sets.len() as u32, l.dep]);
            for s in &l.sets {
                rec.extend([s.set, s.hit, s.via_netsets, s.not]);
            }
        }
        let alts = at(&rec);
        let checked = p.alts.iter().any(|a| a.checks != [NO_CHECK; 2]);
        for a in &p.alts {
            let kind = a.kind.code() | if a.checks != [NO_CHECK; 2] { ALT_CHECKED } else { 0 };
            let v = a.record();
            let head = u32::from_le_bytes([v.present, v.allow, v.reason, v.source_kind]);
            rec.extend([kind, a.next_rule, head, v.tier as u32, v.source as u32, v.rule as u32]);
        }
        let alt_checks: Box<[[u32; 2]]> =
            if checked { p.alts.iter().map(|a| a.checks).collect() } else { Box::new([]) };
        if rec.len() % 2 == 1 {
            rec.push(0);
        }
        let rows_len = p.rows.len();
        let mut data = p.rows;
        data.reserve_exact(rec.len() / 2);
        data.extend(rec.chunks_exact(2).map(|w| w[0] as u64 | (w[1] as u64) << 32));
        let compiled = Compiled {
            words: p.words as u32,
            n: p.alts.len() as u32,
            version: p.version,
            tables,
            bounds,
            labels,
            alts,
            proto_index: *p.proto_index,
            rows_len,
            data: data.into_boxed_slice(),
            addrs: p.addrs,
            addr_dep: p.addr_dep,
            alt_checks,
            checks: p.checks,
        };
        compiled.validate();
        compiled
    }

    /// `data` as `u32`s (little-endian halves of its words, as `pack` wrote them).
    #[inline(always)]
    fn u32s(&self) -> &[u32] {
        // SAFETY: a `[u64]` is a valid, suitably aligned `[u32]` of twice the length, and
        // every bit pattern is a `u32`.
        let words: &[u32] =
            unsafe { std::slice::from_raw_parts(self.data.as_ptr() as *const u32, self.data.len() * 2) };
        #[cfg(target_endian = "big")]
        compile_error!("Compiled::u32s reads the halves of its words little-endian");
        words
    }
}

/// How a compiled lookup reads what changes without the policy changing (implemented by the
/// snapshot's flow context). Ends: 0 the source, 1 the destination.
pub(crate) trait Probe {
    /// The set bitmap of the end's endpoint identity (empty: none).
    fn identity_bits(&self, end: usize) -> &[u64];
    /// Calls `f` with the set bitmap of each network set holding the end's address.
    fn netset_bits(&self, end: usize, f: impl FnMut(&[u64]));
    /// Whether the end is in a relative peer's set for the subject's namespace (its identity,
    /// or with `netsets` a network set holding its address).
    fn relative_in(&self, end: usize, rid: u32, netsets: bool) -> bool;
    /// Whether end `end`'s port matches `ports` and none of `not_ports` (names resolved against
    /// its endpoint).
    fn ports_match(&self, end: usize, ports: &[PortMatch], not_ports: &[PortMatch]) -> bool;
}

#[inline]
fn bit(bits: &[u64], i: u32) -> bool {
    bits.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

/// The flow's fields a compiled lookup reads from rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    pub version: Option<u8>,
    pub protocol: u8,
    pub ports: [Option<u16>; 2],
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    pub addrs: [Option<Addr>; 2],
}

/// Where the Log rules passed go.
pub(crate) trait LogSink {
    fn log(&mut self, tier: Option<u32>, source: Source, rule: u32);
}

const PORT_PROTOS: [u8; 4] = [PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_UDPLITE];

/// One peer of an alternative at one end: an entity, or anything (the rule lists none).
type Peer<'a> = Option<&'a CEntity>;

/// A rule's peers at one end as alternatives: each entity, or anything when it lists none.
fn peers(v: &[CEntity]) -> Vec<Peer<'_>> {
    if v.is_empty() {
        vec![None]
    } else {
        v.iter().map(Some).collect()
    }
}

/// An alternative while compiling.
struct Draft<'a> {
    rule: &'a CRule,
    peers: [Peer<'a>; 2],
}

/// Whether an alternative's peer at `end` has a `notSelector` held in rows.
fn dr_not(dr: &Draft<'_>, end: usize) -> bool {
    dr.peers[end].is_some_and(|e| !e.unresolvable && e.not_labels.is_some())
}

fn has_named(e: &CEntity) -> bool {
    e.ports.iter().chain(&e.not_ports).any(|p| matches!(p, PortMatch::Named { .. }))
}

/// The walk's `ports_match` for a peer without named ports, at each of `reps` (no port, then
/// ascending ports): each range marks the run of representatives it covers, so a peer of
/// thousands of ranges costs thousands of steps, not thousands per representative.
fn port_marks(e: &CEntity, protocol: u8, reps: &[Option<u16>]) -> Vec<bool> {
    let none: Option<&super::snapshot::IdRec> = None;
    // Representatives 1.. are ports, ascending.
    let ported = &reps[1..];
    let marks = |list: &[PortMatch]| -> Vec<bool> {
        let mut diff = vec![0i32; reps.len() + 1];
        for m in list {
            match m {
                PortMatch::Range { first, last, .. } => {
                    if first > last || !m.matches(protocol, Some(*first), none) {
                        continue; // empty, another protocol, or one without ports
                    }
                    let lo = ported.partition_point(|&x| x < Some(*first));
                    let hi = ported.partition_point(|&x| x <= Some(*last));
                    diff[1 + lo] += 1;
                    diff[1 + hi] -= 1;
                }
                _ => {
                    for (i, &port) in reps.iter().enumerate() {
                        if m.matches(protocol, port, none) {
                            diff[i] += 1;
                            diff[i + 1] -= 1;
                        }
                    }
                }
            }
        }
        let mut run = 0;
        diff[..reps.len()]
            .iter()
            .map(|d| {
                run += d;
                run > 0
            })
            .collect()
    };
    let pos = if e.ports.is_empty() { vec![true; reps.len()] } else { marks(&e.ports) };
    let neg = marks(&e.not_ports);
    pos.into_iter().zip(neg).map(|(p, n)| p && !n).collect()
}

/// Whether every address of an atom (the addresses whose longest program prefix is `p`; None:
/// no prefix holds them) passes a peer's address conditions.
fn addr_ok(e: &CEntity, p: Option<Net>) -> bool {
    let holds = |n: &Net| p.is_some_and(|p| n.v6 == p.v6 && n.len <= p.len && p.bits & mask(n.len) == n.bits);
    if !e.nets.is_empty() && !e.nets.0.iter().any(holds) {
        return false;
    }
    if e.not_nets.0.iter().any(holds) {
        return false;
    }
    if let Some(nodes) = &e.node_addrs {
        match p {
            Some(p) if p.len == 128 => {
                if !nodes.contains(&Addr { bits: p.bits, v6: p.v6 }) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

fn icmp_ok(m: &Option<IcmpMatch>, not: &Option<IcmpMatch>, protocol: u8, t: Option<u8>, c: Option<u8>) -> bool {
    m.as_ref().is_none_or(|m| m.matches(protocol, t, c)) && !not.as_ref().is_some_and(|m| m.matches(protocol, t, c))
}

/// A stage to compile: a tier's policies (with its index and default) or one profile.
pub(crate) enum StageRef<'a> {
    Tier { tier: u32, default: Action, policies: &'a [u32] },
    Profile(u32),
}

impl Compiled {
    /// Compiles the stages of one direction against the rules the snapshot holds.
    pub(crate) fn build(snap: &Snapshot, d: Direction, stages: &[StageRef<'_>]) -> Result<Compiled, Walked> {
        // --- the alternatives, in evaluation order ---
        let mut drafts: Vec<Draft<'_>> = Vec::new();
        let mut alts: Vec<Alt> = Vec::new();
        let mut rule_lists: Vec<(Source, &[CRule])> = Vec::new();
        // The rule of a tier's end: no condition, so that every flow matches it.
        let any = CRule {
            action: Action::Allow,
            ip_version: None,
            protocols: None,
            not_protocols: Default::default(),
            icmp: None,
            not_icmp: None,
            sources: Vec::new(),
            destinations: Vec::new(),
            http: None,
        };
        for st in stages {
            let start = alts.len();
            rule_lists.clear();
            let tier = match st {
                StageRef::Tier { tier, default, policies } => {
                    for &pid in policies.iter() {
                        if let Some(r) = snap.policies.get(pid) {
                            rule_lists.push((Source::Policy(pid), r.get(d)));
                        }
                    }
                    Some((*tier, *default))
                }
                StageRef::Profile(pi) => {
                    if let Some(r) = snap.profiles.get(*pi) {
                        rule_lists.push((Source::Profile(*pi), r.get(d)));
                    }
                    None
                }
            };
            for &(source, rules) in &rule_lists {
                for (ri, rule) in rules.iter().enumerate() {
                    for e in rule.sources.iter().chain(&rule.destinations) {
                        if e.service.is_some() {
                            return Err(Walked::Services);
                        }
                        if e.domains.is_some() {
                            return Err(Walked::Domains);
                        }
                    }
                    let first = alts.len();
                    let never = |e: &CEntity| e.unresolvable && matches!(rule.action, Action::Allow | Action::Log);
                    for s in peers(&rule.sources) {
                        for t in peers(&rule.destinations) {
                            if s.is_some_and(never) || t.is_some_and(never) {
                                continue;
                            }
                            let unresolvable = s.is_some_and(|e| e.unresolvable) || t.is_some_and(|e| e.unresolvable);
                            let kind = match rule.action {
                                Action::Pass if unresolvable => AltKind::PassDenied,
                                _ if rule.http.is_some() => AltKind::Await,
                                Action::Allow => AltKind::Allow,
                                Action::Deny => AltKind::Deny,
                                Action::Pass => AltKind::Pass,
                                Action::Log => AltKind::Log,
                            };
                            alts.push(Alt {
                                kind,
                                next_rule: 0,
                                tier: tier.map(|t| t.0),
                                source,
                                rule: ri as u32,
                                checks: [NO_CHECK; 2],
                            });
                            drafts.push(Draft { rule, peers: [s, t] });
                        }
                    }
                    let next = alts.len() as u32;
                    for a in &mut alts[first..] {
                        a.next_rule = next;
                    }
                }
            }
            if let Some((t, default)) = tier {
                if default != Action::Pass {
                    let kind = if default == Action::Allow { AltKind::EndAllow } else { AltKind::EndDeny };
                    let next_rule = alts.len() as u32 + 1;
                    let source = Source::Policy(NONE);
                    alts.push(Alt { kind, next_rule, tier: Some(t), source, rule: NONE, checks: [NO_CHECK; 2] });
                    drafts.push(Draft { rule: &any, peers: [None, None] });
                }
            }
            // A `Pass` ends the stage: evaluation goes on with the next one.
            let end = alts.len() as u32;
            for a in &mut alts[start..] {
                if a.kind == AltKind::Pass {
                    a.next_rule = end;
                }
            }
        }
        let n = alts.len();
        let words = row_words(n);

        // --- the atoms of each dimension ---
        let mut protos: Vec<u8> = vec![PROTO_ICMP, PROTO_ICMPV6];
        protos.extend(PORT_PROTOS);
        let mut types: Vec<u8> = Vec::new();
        let mut codes: Vec<u8> = Vec::new();
        let mut prefixes: [Vec<Net>; 2] = [Vec::new(), Vec::new()];
        let mut bounds: [Vec<u16>; 2] = [Vec::new(), Vec::new()];
        let mut label_sets: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
        for dr in &drafts {
            let r = dr.rule;
            if let Some(ps) = &r.protocols {
                protos.extend(ps.iter());
            }
            protos.extend(r.not_protocols.iter());
            for m in [&r.icmp, &r.not_icmp].into_iter().flatten() {
                types.extend(m.icmp_type);
                codes.extend(m.code);
            }
            for (end, peer) in dr.peers.iter().enumerate() {
                let Some(e) = peer else { continue };
                for p in e.ports.iter().chain(&e.not_ports) {
                    protos.extend(p.protocol());
                    if let PortMatch::Range { first, last, .. } = p {
                        bounds[end].push(*first);
                        if let Some(b) = last.checked_add(1) {
                            bounds[end].push(b);
                        }
                    }
                }
                if e.unresolvable {
                    continue;
                }
                if let LabelCond::Set(id) = e.labels {
                    label_sets[end].push(id);
                }
                label_sets[end].extend(e.not_labels);
                prefixes[end].extend(e.nets.0.iter().chain(&e.not_nets.0).copied());
                if let Some(nodes) = &e.node_addrs {
                    prefixes[end].extend(nodes.iter().map(|a| Net { bits: a.bits, len: 128, v6: a.v6 }));
                }
            }
        }
        for v in [&mut protos, &mut types, &mut codes] {
            v.sort_unstable();
            v.dedup();
        }
        for b in &mut bounds {
            b.sort_unstable();
            b.dedup();
        }
        for l in &mut label_sets {
            l.sort_unstable();
            l.dedup();
        }
        for p in &mut prefixes {
            p.sort_by(|a, b| b.len.cmp(&a.len).then(a.v6.cmp(&b.v6)).then(a.bits.cmp(&b.bits)));
            p.dedup();
        }
        // Every protocol not named behaves alike: one table, read with one of them.
        let other = (0..=255u8).find(|p| protos.binary_search(p).is_err());
        let mut tables: Vec<u8> = protos.clone();
        tables.extend(other);

        // --- the memory bound, before any row is built ---
        // A table has port rows at an end only where a port condition there can name its
        // protocol (one of no protocol names them all); elsewhere they fold into its base row.
        let mut port_protos: [Vec<Option<u8>>; 2] = [Vec::new(), Vec::new()];
        for dr in &drafts {
            for (end, peer) in dr.peers.iter().enumerate() {
                if let Some(e) = peer {
                    port_protos[end].extend(e.ports.iter().chain(&e.not_ports).map(|p| p.protocol()));
                }
            }
        }
        for v in &mut port_protos {
            v.sort_unstable();
            v.dedup();
        }
        let port_rows = |end: usize, p: u8| -> usize {
            let named = port_protos[end].first() == Some(&None) || port_protos[end].binary_search(&Some(p)).is_ok();
            if named {
                bounds[end].len() + 2
            } else {
                0
            }
        };
        let icmp_rows = (types.len() + 2) * (codes.len() + 2);
        let row_count = 3
            + tables.iter().map(|&p| 1 + port_rows(0, p) + port_rows(1, p)).sum::<usize>()
            + 2 * icmp_rows
            + prefixes[0].len()
            + prefixes[1].len()
            + 3 * (label_sets[0].len() + label_sets[1].len())
            + 4;
        let bytes = row_count * words * 8;
        if bytes > MEMORY_BOUND {
            return Err(Walked::Bound(bytes));
        }

        // --- rows ---
        let mut rs = RowSet::new(words);
        let ones = rs.build(n, |_| true);
        let version = [Some(4u8), Some(6), None].map(|v| {
            rs.build(n, |i| {
                let want = drafts[i].rule.ip_version;
                want.is_none() || v.is_none() || want == v
            })
        });
        let mut proto_index = Box::new([0u8; 256]);
        let mut named = [false; 256];
        for &p in &protos {
            named[p as usize] = true;
        }
        // Per end, the alternatives whose peer there has port conditions held in rows (named
        // ports are checked per candidate); the others pass every port.
        let port_conds: [Vec<(usize, &CEntity)>; 2] = [0, 1].map(|end| {
            drafts
                .iter()
                .enumerate()
                .filter_map(|(i, dr)| dr.peers[end].map(|e| (i, e)))
                .filter(|(_, e)| !has_named(e) && (!e.ports.is_empty() || !e.not_ports.is_empty()))
                .collect()
        });
        let port_reps: [Vec<Option<u16>>; 2] = [0, 1].map(|end| {
            std::iter::once(None).chain(std::iter::once(Some(0))).chain(bounds[end].iter().map(|&b| Some(b))).collect()
        });
        let icmp_alts: Vec<usize> =
            (0..n).filter(|&i| drafts[i].rule.icmp.is_some() || drafts[i].rule.not_icmp.is_some()).collect();
        let mut bits = vec![0u64; words];
        let mut proto_rows = Vec::with_capacity(tables.len());
        for (ti, &p) in tables.iter().enumerate() {
            let icmp_proto = matches!(p, PROTO_ICMP | PROTO_ICMPV6);
            let mut base_bits = vec![0u64; words];
            for (i, dr) in drafts.iter().enumerate() {
                let r = dr.rule;
                let ok = r.protocols.as_ref().is_none_or(|s| s.contains(p))
                    && !r.not_protocols.contains(p)
                    && (icmp_proto || icmp_ok(&r.icmp, &r.not_icmp, p, None, None))
                    && (alts[i].kind != AltKind::Await || p == PROTO_TCP);
                if ok {
                    base_bits[i / 64] |= 1 << (i % 64);
                }
            }
            // Port rows: one per interval, and one for no port; a dimension whose rows are all
            // alike is folded into the base row.
            let mut ports: [PortAtoms; 2] = [PortAtoms::default(), PortAtoms::default()];
            for end in 0..2 {
                if port_conds[end].is_empty() {
                    continue;
                }
                let reps = &port_reps[end];
                let mut rows: Vec<Vec<u64>> = vec![rs.row(ones).to_vec(); reps.len()];
                for &(i, e) in &port_conds[end] {
                    for (row, ok) in rows.iter_mut().zip(port_marks(e, p, reps)) {
                        if !ok {
                            row[i / 64] &= !(1 << (i % 64));
                        }
                    }
                }
                if rows.iter().all(|r| *r == rows[0]) {
                    for (b, r) in base_bits.iter_mut().zip(&rows[0]) {
                        *b &= r;
                    }
                } else {
                    ports[end].rows = rows.iter().map(|r| rs.add(r)).collect();
                }
            }
            let icmp = (icmp_proto && !icmp_alts.is_empty()).then(|| {
                let type_reps: Vec<Option<u8>> = std::iter::once(None)
                    .chain(types.iter().map(|&t| Some(t)))
                    .chain(std::iter::once((0..=255u8).find(|t| types.binary_search(t).is_err())))
                    .collect();
                let code_reps: Vec<Option<u8>> = std::iter::once(None)
                    .chain(codes.iter().map(|&c| Some(c)))
                    .chain(std::iter::once((0..=255u8).find(|c| codes.binary_search(c).is_err())))
                    .collect();
                let mut rows = Vec::with_capacity(type_reps.len() * code_reps.len());
                for &t in &type_reps {
                    for &c in &code_reps {
                        bits.copy_from_slice(rs.row(ones));
                        for &i in &icmp_alts {
                            if !icmp_ok(&drafts[i].rule.icmp, &drafts[i].rule.not_icmp, p, t, c) {
                                bits[i / 64] &= !(1 << (i % 64));
                            }
                        }
                        rows.push(rs.add(&bits));
                    }
                }
                IcmpAtoms { types: types.clone(), codes: codes.clone(), rows }
            });
            let base = rs.add(&base_bits);
            if Some(p) == other {
                for q in 0..256 {
                    if !named[q] {
                        proto_index[q] = ti as u8;
                    }
                }
            } else {
                proto_index[p as usize] = ti as u8;
            }
            proto_rows.push(ProtoRows { base, ports, icmp });
        }
        debug_assert!(tables.len() <= 256);

        let mut addrs: [PrefixAtoms; 2] = [PrefixAtoms::default(), PrefixAtoms::default()];
        let mut addr_dep = [NONE; 2];
        for end in 0..2 {
            let atoms: Vec<Option<Net>> = std::iter::once(None).chain(prefixes[end].iter().map(|&p| Some(p))).collect();
            let rows: Vec<u32> = atoms
                .iter()
                .map(|&p| {
                    rs.build(n, |i| match drafts[i].peers[end] {
                        None => true,
                        Some(e) if e.unresolvable => true,
                        Some(e) => addr_ok(e, p),
                    })
                })
                .collect();
            // Every atom passing everything: no address to look up at this end.
            if rows.iter().any(|&r| r != ones) {
                // The alternatives some atom fails: without one of them among the candidates
                // the address need not be looked up.
                let mut dep = vec![0u64; words];
                for &r in &rows {
                    for (d, x) in dep.iter_mut().zip(rs.row(r)) {
                        *d |= !x;
                    }
                }
                for (d, x) in dep.iter_mut().zip(rs.row(ones)) {
                    *d &= x;
                }
                addr_dep[end] = rs.add(&dep);
                let prefixes: Vec<(bool, Prefix)> =
                    prefixes[end].iter().map(|p| (p.v6, Prefix { addr: p.bits, len: p.len })).collect();
                addrs[end] = PrefixAtoms::new(&prefixes, rows);
            }
        }

        // --- the identity dimension, and the checks made per candidate ---
        let mut checks: Vec<Check> = Vec::new();
        let mut labels: [Option<EndLabels>; 2] = [None, None];
        for (end, end_labels) in labels.iter_mut().enumerate() {
            // Per set: (set, hit, via network sets, not) alternatives.
            type SetAlts = (u32, Vec<usize>, Vec<usize>, Vec<usize>);
            let mut sets: Vec<SetAlts> = Vec::new();
            let slot = |sets: &mut Vec<SetAlts>, id: u32| -> usize {
                match sets.iter().position(|s| s.0 == id) {
                    Some(i) => i,
                    None => {
                        sets.push((id, Vec::new(), Vec::new(), Vec::new()));
                        sets.len() - 1
                    }
                }
            };
            let mut always = vec![true; n];
            for (i, dr) in drafts.iter().enumerate() {
                let Some(e) = dr.peers[end] else { continue };
                if e.unresolvable {
                    continue;
                }
                match e.labels {
                    LabelCond::None | LabelCond::Relative(_) => {}
                    LabelCond::Set(id) => {
                        always[i] = false;
                        let k = slot(&mut sets, id);
                        sets[k].1.push(i);
                        if e.netsets {
                            sets[k].2.push(i);
                        }
                    }
                }
                if let Some(id) = e.not_labels {
                    let k = slot(&mut sets, id);
                    sets[k].3.push(i);
                }
            }
            if !sets.is_empty() {
                let mut row =
                    |alts: &[usize]| if alts.is_empty() { NO_ROW } else { rs.build(n, |i| alts.contains(&i)) };
                let sets: Vec<LabelSet> = sets
                    .iter()
                    .map(|(id, hit, via, not)| LabelSet {
                        set: *id,
                        hit: row(hit),
                        via_netsets: row(via),
                        not: row(not),
                    })
                    .collect();
                let netsets = sets.iter().any(|s| s.via_netsets != NO_ROW || s.not != NO_ROW);
                // The alternatives the identity can rule out: a label condition, or a
                // `notSelector`.
                let nots: Vec<bool> = (0..n).map(|i| dr_not(&drafts[i], end)).collect();
                let dep = rs.build(n, |i| !always[i] || nots[i]);
                *end_labels = Some(EndLabels { always: rs.build(n, |i| always[i]), dep, sets, netsets });
            }
        }
        for (i, dr) in drafts.iter().enumerate() {
            for end in 0..2 {
                let Some(e) = dr.peers[end] else { continue };
                let ports = has_named(e).then(|| Box::new((e.ports.clone(), e.not_ports.clone())));
                let relative = match e.labels {
                    LabelCond::Relative(rid) if !e.unresolvable => Some((rid, e.netsets)),
                    _ => None,
                };
                if relative.is_none() && ports.is_none() {
                    continue;
                }
                alts[i].checks[end] = checks.len() as u32;
                checks.push(Check { relative, ports });
            }
        }
        Ok(Compiled::pack(Parts {
            words,
            rows: rs.finish(),
            alts,
            version,
            proto_index,
            protos: proto_rows,
            addrs,
            addr_dep,
            bounds,
            checks,
            labels,
        }))
    }

    /// Bytes held (the packed tables, atoms, checks).
    pub fn memory_bytes(&self) -> usize {
        self.data.len() * 8
            + self.alt_checks.len() * 8
            + self.checks.capacity() * std::mem::size_of::<Check>()
            + self.addrs.iter().map(|a| a.memory_bytes()).sum::<usize>()
            + std::mem::size_of::<Compiled>()
    }

    /// Alternatives (rules expanded by peer pairs).
    pub fn alternatives(&self) -> usize {
        self.n as usize
    }

    /// The packed tables as a lookup reads them.
    #[inline(always)]
    fn view(&self) -> View<'_> {
        View { u: self.u32s(), rows: &self.data, w: self.words as usize }
    }

    /// Checks what the lookup reads without bounds checks (`View`): every offset and count of
    /// the records in `data`, every row they name. `pack` runs it on every program it makes: a
    /// failure is a bug of the compiler, and stops it there.
    fn validate(&self) {
        let v = self.view();
        let (len, w) = (v.u.len(), v.w);
        let nrows = self.rows_len / w;
        let row_ok = |r: u32| (r as usize) < nrows;
        let span = |at: usize, n: usize| at.checked_add(n).is_some_and(|e| e <= len);
        let tables = self.proto_index.iter().map(|&t| t as usize).max().unwrap_or(0) + 1;
        assert!(span(self.tables as usize, tables * Layout::TABLE), "tables past the data");
        assert!(self.version.iter().all(|&r| row_ok(r)), "a version row past the rows");
        for end in 0..2 {
            let (bo, bn) = self.bounds[end];
            assert!(span(bo as usize, bn as usize), "port bounds past the data");
            assert!(self.addrs[end].rows.iter().all(|&r| row_ok(r)), "an address row past the rows");
            assert!(self.addrs[end].rows.is_empty() || row_ok(self.addr_dep[end]), "an address row past the rows");
        }
        for t in 0..tables {
            let t = &v.u[self.tables as usize + t * Layout::TABLE..][..Layout::TABLE];
            assert!(row_ok(t[0]), "a base row past the rows");
            for end in 0..2 {
                let (at, n) = (t[1 + 2 * end] as usize, t[2 + 2 * end] as usize);
                if n != 0 {
                    assert!(n == self.bounds[end].1 as usize + 2 && span(at, n), "port atoms do not fit the bounds");
                    assert!(v.u[at..at + n].iter().all(|&r| row_ok(r)), "a port row past the rows");
                }
            }
            if t[5] != NONE {
                let ic = t[5] as usize;
                assert!(span(ic, 2), "an ICMP record past the data");
                let (nt, nc) = (v.u[ic] as usize, v.u[ic + 1] as usize);
                let n = (nt + 2) * (nc + 2);
                assert!(span(ic + 2, nt + nc + n), "an ICMP record past the data");
                assert!(v.u[ic + 2 + nt + nc..][..n].iter().all(|&r| row_ok(r)), "an ICMP row past the rows");
            }
        }
        for &at in &self.labels {
            if at == NONE {
                continue;
            }
            let at = at as usize;
            assert!(span(at, LABELS_HEAD), "an identity record past the data");
            let k = v.u[at + 2] as usize;
            assert!(
                span(at + LABELS_HEAD, k * Layout::LABEL_SET) && row_ok(v.u[at]) && row_ok(v.u[at + 3]),
                "an identity record past the data"
            );
            for s in v.u[at + LABELS_HEAD..][..k * Layout::LABEL_SET].chunks_exact(Layout::LABEL_SET) {
                assert!(s[1..].iter().all(|&r| r == NONE || row_ok(r)), "a set's row past the rows");
            }
        }
        let n = self.n as usize;
        assert!(span(self.alts as usize, n * Layout::ALT), "alternatives past the data");
        for a in v.u[self.alts as usize..][..n * Layout::ALT].chunks_exact(Layout::ALT) {
            assert!(a[1] as usize <= n, "an alternative goes on past the last");
            assert!(a[0] & ALT_CHECKED == 0 || self.alt_checks.len() == n, "checks missing");
        }
    }

    /// The candidates of a flow: the AND of one row per dimension.
    #[inline(always)]
    fn candidates(&self, v: &View<'_>, k: &Key, m: &mut [u64]) {
        let t = self.tables as usize + Layout::TABLE * self.proto_index[k.protocol as usize] as usize;
        let version = self.version[match k.version {
            Some(4) => 0,
            Some(6) => 1,
            _ => 2,
        }];
        for ((x, a), b) in m.iter_mut().zip(v.row(v.u(t))).zip(v.row(version)) {
            *x = a & b;
        }
        for end in 0..2 {
            let n = v.u(t + 2 + 2 * end) as usize;
            if n != 0 {
                let (bo, bn) = self.bounds[end];
                let atom = match k.ports[end] {
                    None => 0,
                    Some(p) => {
                        // The intervals' starts, ascending: the atom is 1 + how many are <= p.
                        let (mut lo, mut len) = (0usize, bn as usize);
                        while len > 0 {
                            let half = len / 2;
                            if v.u(bo as usize + lo + half) <= p as u32 {
                                lo += half + 1;
                                len -= half + 1;
                            } else {
                                len = half;
                            }
                        }
                        1 + lo
                    }
                };
                v.and(m, v.u(v.u(t + 1 + 2 * end) as usize + atom));
            }
        }
        let ic = v.u(t + 5);
        if ic != NONE {
            let ic = ic as usize;
            let (nt, nc) = (v.u(ic) as usize, v.u(ic + 1) as usize);
            let atom = |at: usize, n: usize, x: Option<u8>| match x {
                None => 0,
                Some(x) => (0..n).find(|&i| v.u(at + i) == x as u32).map_or(n + 1, |i| i + 1),
            };
            let (ta, ca) = (atom(ic + 2, nt, k.icmp_type), atom(ic + 2 + nt, nc, k.icmp_code));
            v.and(m, v.u(ic + 2 + nt + nc + ta * (nc + 2) + ca));
        }
        // Last, and only when a candidate left can fail it: an address's atom.
        for end in 0..2 {
            let aa = &self.addrs[end];
            if !aa.rows.is_empty() && v.meets(m, self.addr_dep[end]) {
                v.and(m, aa.rows[k.addrs[end].map_or(0, |a| aa.atom(a.v6, a.bits))]);
            }
        }
    }

    /// ANDs into `m` the identity dimension of one end (its record at `at`): the alternatives
    /// whose label conditions the end's identity (or a network set holding its address) meets.
    #[inline(always)]
    fn labels<B: Bits, P: Probe>(&self, v: &View<'_>, end: usize, at: usize, probe: &P, m: &mut [u64]) {
        let mut ok_buf = B::zeroed(v.w);
        let mut not_buf = B::zeroed(v.w);
        let (ok, not) = (ok_buf.words_mut(), not_buf.words_mut());
        ok.copy_from_slice(v.row(v.u(at)));
        let sets = v.u(at + 2) as usize;
        let or = |into: &mut [u64], r: u32| {
            if r != NONE {
                for (x, y) in into.iter_mut().zip(v.row(r)) {
                    *x |= y;
                }
            }
        };
        let ids = probe.identity_bits(end);
        if !ids.is_empty() {
            for i in 0..sets {
                let s = at + LABELS_HEAD + i * Layout::LABEL_SET;
                if bit(ids, v.u(s)) {
                    or(ok, v.u(s + 1));
                    or(not, v.u(s + 3));
                }
            }
        }
        if v.u(at + 1) != 0 {
            probe.netset_bits(end, |bits: &[u64]| {
                for i in 0..sets {
                    let s = at + LABELS_HEAD + i * Layout::LABEL_SET;
                    if bit(bits, v.u(s)) {
                        or(ok, v.u(s + 2));
                        or(not, v.u(s + 3));
                    }
                }
            });
        }
        for ((x, o), n) in m.iter_mut().zip(ok.iter()).zip(not.iter()) {
            *x &= o & !n;
        }
    }

    /// Hint: asks for the lines a lookup of `protocol` reads first, ahead of it: the
    /// protocol's table, the first rows, the port bounds and atoms, the identity records and
    /// the first alternatives (`Snapshot::flow_records`).
    #[inline(always)]
    pub(crate) fn prefetch(&self, protocol: u8) {
        let base = self.data.as_ptr() as *const u32;
        let at = |i: u32| prefetch(base.wrapping_add(i as usize));
        prefetch_ref(&self.proto_index[protocol as usize]);
        let t = self.tables + Layout::TABLE as u32 * self.proto_index[protocol as usize] as u32;
        at(t);
        at(0);
        at(16);
        at(self.bounds[1].0);
        at(self.bounds[1].0 + 16);
        for l in self.labels {
            if l != NONE {
                at(l);
            }
        }
        at(self.alts);
        for a in &self.addrs {
            if !a.rows.is_empty() {
                a.prefetch();
            }
        }
    }

    /// The first match of a flow: the deciding alternative's batch record (its Log count and
    /// `awaits` left to the caller), None when every stage passed; the Log rules passed go
    /// into `logs`, and whether an `http` rule was reached into `awaits`.
    #[inline]
    pub(crate) fn decide<P: Probe, L: LogSink>(
        &self,
        k: &Key,
        probe: &P,
        logs: &mut L,
        awaits: &mut bool,
    ) -> Option<SideVerdict> {
        match self.words {
            1 => self.decide_in::<[u64; 1], P, L>(k, probe, logs, awaits),
            2 => self.decide_in::<[u64; 2], P, L>(k, probe, logs, awaits),
            4 => self.decide_in::<[u64; 4], P, L>(k, probe, logs, awaits),
            8 => self.decide_in::<[u64; 8], P, L>(k, probe, logs, awaits),
            _ => self.decide_in::<Vec<u64>, P, L>(k, probe, logs, awaits),
        }
    }

    #[inline(always)]
    fn decide_in<B: Bits, P: Probe, L: LogSink>(
        &self,
        k: &Key,
        probe: &P,
        logs: &mut L,
        awaits: &mut bool,
    ) -> Option<SideVerdict> {
        let v = self.view();
        let mut buf = B::zeroed(v.w);
        self.candidates(&v, k, buf.words_mut());
        for end in 0..2 {
            let at = self.labels[end];
            if at != NONE && v.meets(buf.words(), v.u(at as usize + 3)) {
                self.labels::<B, P>(&v, end, at as usize, probe, buf.words_mut());
            }
        }
        let m = buf.words();
        let n = self.n as usize;
        let alts = &v.u[self.alts as usize..self.alts as usize + n * Layout::ALT];
        let mut i = 0;
        while let Some(c) = next_bit(m, i, n) {
            let alt: &[u32; Layout::ALT] = alts[c * Layout::ALT..][..Layout::ALT].try_into().expect("an alternative");
            let kind = alt[0];
            if kind & ALT_CHECKED != 0 && !self.check(c, probe) {
                i = c + 1;
                continue;
            }
            match kind & !ALT_CHECKED {
                KIND_LOG => {
                    let [_, _, head, tier, source, rule] = *alt;
                    let source = if head >> 24 == 2 { Source::Profile(source) } else { Source::Policy(source) };
                    logs.log((tier != NONE).then_some(tier), source, rule);
                }
                KIND_AWAIT => *awaits = true,
                KIND_PASS => {}
                _ => {
                    let [present, allow, reason, source_kind] = alt[2].to_le_bytes();
                    return Some(SideVerdict {
                        present,
                        allow,
                        reason,
                        source_kind,
                        tier: alt[3] as i32,
                        source: alt[4] as i32,
                        rule: alt[5] as i32,
                        ..SideVerdict::default()
                    });
                }
            }
            i = alt[1] as usize;
        }
        None
    }

    #[inline]
    fn check<P: Probe>(&self, alt: usize, probe: &P) -> bool {
        for end in 0..2 {
            let ci = self.alt_checks[alt][end];
            if ci == NO_CHECK {
                continue;
            }
            let c = &self.checks[ci as usize];
            if let Some((rid, netsets)) = c.relative {
                if !probe.relative_in(end, rid, netsets) {
                    return false;
                }
            }
            if let Some(p) = &c.ports {
                if !probe.ports_match(end, &p.0, &p.1) {
                    return false;
                }
            }
        }
        true
    }
}
