//! Flow records judged with each distinct decision made once, and summed as they go.
//!
//! A record's verdict under a snapshot depends on its addresses, protocol, ICMP type and code,
//! destination port and the class of its source port (the snapshot's port boundaries: ports
//! between two boundaries are judged alike, the decision memo's own rule), and on nothing else
//! while the snapshot has no DNS-learned addresses (those depend on the time). Records are
//! keyed by exactly that; a key seen for the first time is judged under every snapshot (the
//! old and new policy sets of a `diff`), and the records of a key add their counts to it. So
//! ten million records of fifty thousand connections cost fifty thousand decisions per policy
//! set, each exact: a key's records would each have been given its verdict.
//!
//! A record to a Service's virtual address and port is judged as kube-proxy delivers it: once
//! per backend, allowed only when every backend allows it (the first that denies speaks for
//! it), denied when the Service has no backend; replay's rule for packets
//! (`pyclassify.services`).
//!
//! Memory is bounded: past [`CACHE_CAP`] keys, what the keys summed is folded into the totals
//! (and, for two snapshots, the keys whose verdict differs are kept aside) and the keys start
//! over.

use std::collections::HashMap;
use std::sync::Arc;

use super::keytable::{KeyTable, TableKey};
use super::tally::{DecisionKey, Measures, Tally};
use super::{FlowCounts, REPORTED_ALLOW, REPORTED_AT_CONNECTION, REPORTED_AT_EGRESS, REPORTED_DENY};
use crate::batch::{PacketHeader, FLAG_HAS_PORTS};
use crate::engine::cow::FastMap;
use crate::engine::judge::flow_of_header;
use crate::engine::{Addr, Defaults, Judge, PacketVerdict, SideVerdict, Snapshot, Source};
use crate::flows::ServiceIndex;
use crate::prefetch::prefetch_ref;

/// Keys kept before what they summed is folded and they start over.
pub const CACHE_CAP: usize = 1 << 20;
/// Examples kept per kind (records shown in summaries) and per key (a diff's changes).
pub const EXAMPLES: usize = 5;
pub const KEY_EXAMPLES: usize = 3;

/// What a record is judged by (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    src: [u8; 16],
    dst: [u8; 16],
    sport_class: u32,
    dport: u16,
    icmp: u16,
    version: u8,
    protocol: u8,
    flags: u8,
}

impl TableKey for Key {
    #[inline]
    fn hash64(&self) -> u64 {
        // three words (the addresses' low halves hold IPv4 whole, then ports, protocol,
        // flags), multiplied and folded so that every bit reaches both halves of the hash
        let word = |a: &[u8; 16]| {
            u64::from_be_bytes(a[8..].try_into().expect("8"))
                ^ u64::from_be_bytes(a[..8].try_into().expect("8")).rotate_left(17)
        };
        let ports = (self.sport_class as u64) << 32
            | (self.dport as u64) << 16
            | self.icmp as u64
                ^ ((self.protocol as u64) << 56 | (self.flags as u64) << 48 | (self.version as u64) << 40);
        let mut h = word(&self.src).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (h ^ h >> 29 ^ word(&self.dst)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ h >> 31 ^ ports).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ h >> 32
    }
}

/// A Log rule one side passed: (direction 0 egress / 1 ingress, tier, source kind, source, rule).
pub type LogKey = (u8, i32, u8, i32, i32);

/// One key: its verdict under each snapshot and what its records counted.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The first record's header (as recorded: a Service's address stays).
    pub header: PacketHeader,
    pub verdicts: [PacketVerdict; 2],
    /// Neither end is an endpoint of the first snapshot's inventory.
    pub outside: bool,
    /// The Service entry the record was judged through, or -1.
    pub service: i64,
    /// The Log rules the first snapshot's sides passed before deciding.
    pub logs: Vec<LogKey>,
    /// What its records counted, and their time range (filled when folded).
    pub sums: Measures,
    pub first_ns: u64,
    pub last_ns: u64,
    /// (file, position) of the first records.
    pub examples: Vec<(u32, u64)>,
    /// The first snapshot's deciding rule per direction, as its number in the judge's
    /// `rules` (`NO_RULE`: no policy at that end): folding adds to it without hashing.
    rules: [u32; 2],
}

const NO_RULE: u32 = u32::MAX;

/// The deciding rules the keys' verdicts name, numbered, with what each summed since the last
/// fold (added to the tally's `by_rule` then).
#[derive(Default)]
struct Rules {
    number: FastMap<DecisionKey, u32>,
    keys: Vec<DecisionKey>,
    sums: Vec<Measures>,
}

impl Rules {
    fn of(&mut self, key: DecisionKey) -> u32 {
        let next = self.keys.len() as u32;
        let n = *self.number.entry(key).or_insert(next);
        if n == next {
            self.keys.push(key);
            self.sums.push(Measures::default());
        }
        n
    }

    /// What each rule summed, into `by_rule`; the sums start over.
    fn fold_into(&mut self, by_rule: &mut HashMap<DecisionKey, Measures>) {
        for (key, sums) in self.keys.iter().zip(self.sums.iter_mut()) {
            if sums[0] != 0 {
                add_all(by_rule.entry(*key).or_default(), sums);
                *sums = Measures::default();
            }
        }
    }
}

/// What each record of a key touches, kept beside the key in the table (records of many keys
/// come in no order: the table's bucket is the one line most of them reach); the rest of the
/// key's entry is read only when it is judged, for its first few records and when folded.
#[derive(Clone, Copy, Default)]
struct Hot {
    sums: Measures,
    first_ns: u64,
    last_ns: u64,
    /// Its entry's index.
    entry: u32,
    /// The first snapshot's verdict, and neither end in its inventory.
    allow: u8,
    outside: u8,
    /// Examples the entry holds.
    examples: u8,
    /// Its verdicts differ between two snapshots: only such an entry keeps examples (a
    /// diff's changes show them).
    flips: u8,
}

/// Why a record is shown as an example.
pub const EXAMPLE_UNPLACED: u8 = 0;
pub const EXAMPLE_OUTSIDE: u8 = 1;
pub const EXAMPLE_DISAGREES: u8 = 2;

/// A record kept as an example: why, its file, header, counts and verdict.
#[derive(Clone, Debug)]
pub struct Example {
    pub kind: u8,
    pub file: u32,
    pub header: PacketHeader,
    pub counts: FlowCounts,
    pub verdict: PacketVerdict,
}

/// The backends of Service entries (`ServiceIndex` order): (address, port) each; none: the
/// Service delivers nothing.
pub struct Services {
    pub index: ServiceIndex,
    pub backends: Vec<Vec<([u8; 16], u16)>>,
}

pub struct RecordJudge {
    snapshots: Vec<Arc<Snapshot>>,
    defaults: Defaults,
    services: Option<Arc<Services>>,
    /// The port boundaries of every snapshot, merged: a class of these is one of each's.
    bounds: Vec<u16>,
    /// Keys are kept (no snapshot reads a time).
    keyed: bool,
    /// Keys kept before folding ([`CACHE_CAP`] unless set).
    cap: usize,
    /// Find the Log rules of the first snapshot's decisions.
    want_logs: bool,
    /// `fold` keeps the keys (see `keeping_keys`).
    keep_keys: bool,
    /// With `keep_keys`: the keys touched since the last fold, by number.
    touched: Vec<u32>,
    rules: Rules,
    /// The keys, numbered as their entries (in order of arrival).
    keys: KeyTable<Key>,
    /// Each key's sums, by its number.
    hot: Vec<Hot>,
    /// A batch's keys and their hashes, computed before it is summed (to look ahead).
    batch_keys: Vec<(Key, u64)>,
    /// (entry, file, position) of each key's first records, in order, put in their entries
    /// when folded (written in order here, not to each entry as they come: no cache miss).
    key_examples: Vec<(u32, u32, u64)>,
    pub entries: Vec<Entry>,
    /// Records' sums when keys are not kept, one per entry.
    loose: Vec<Hot>,
    pub tally: Tally,
    /// Measures of records judged whose both ends are outside the inventory.
    pub outside: Measures,
    /// Measures per Log rule passed (first snapshot).
    pub logged: HashMap<LogKey, Measures>,
    /// Keys whose verdicts differ between the first two snapshots, folded aside.
    pub flipped: Vec<Entry>,
    pub examples: Vec<Example>,
    example_counts: [usize; 3],
    pub first_ns: u64,
    pub last_ns: u64,
    /// Distinct keys judged (each once per snapshot) and records judged.
    pub decisions: u64,
    pub judged: u64,
}

fn add(m: &mut Measures, c: &FlowCounts) {
    m[0] += 1;
    m[1] += c.flows;
    m[2] += c.packets;
    m[3] += c.bytes;
}

fn add_all(m: &mut Measures, by: &Measures) {
    for i in 0..4 {
        m[i] += by[i];
    }
}

/// Adds a record's counts to its key's sums: (its entry, the verdict allowed, neither end in
/// the inventory, the record is one of the first few of a key whose verdicts flip).
#[inline]
fn touch(hot: &mut Hot, c: &FlowCounts) -> (usize, u8, bool, bool) {
    add(&mut hot.sums, c);
    if c.first_ns != 0 && (hot.first_ns == 0 || c.first_ns < hot.first_ns) {
        hot.first_ns = c.first_ns;
    }
    hot.last_ns = hot.last_ns.max(c.last_ns);
    let example = hot.flips != 0 && (hot.examples as usize) < KEY_EXAMPLES;
    hot.examples += example as u8;
    (hot.entry as usize, hot.allow, hot.outside != 0, example)
}

/// Adds one key's sums to the totals; whether its verdicts differ between two snapshots.
fn fold_entry(
    tally: &mut Tally,
    rules: &mut Rules,
    outside: &mut Measures,
    logged: &mut HashMap<LogKey, Measures>,
    two: bool,
    e: &Entry,
) -> bool {
    let v = &e.verdicts[0];
    add_all(if v.allow != 0 { &mut tally.allowed } else { &mut tally.denied }, &e.sums);
    for (d, &rule) in e.rules.iter().enumerate() {
        if rule == NO_RULE {
            add_all(&mut tally.no_policy[d], &e.sums);
        } else {
            add_all(&mut rules.sums[rule as usize], &e.sums);
        }
    }
    if e.outside {
        add_all(outside, &e.sums);
    }
    for log in &e.logs {
        add_all(logged.entry(*log).or_default(), &e.sums);
    }
    two && e.verdicts[0].allow != e.verdicts[1].allow
}

fn side_key(direction: u8, s: &SideVerdict) -> DecisionKey {
    (direction, s.tier, s.source_kind, s.source, s.rule, s.reason, s.allow)
}

impl RecordJudge {
    /// A judge of records under one snapshot (replay, usage) or two (a diff's old and new);
    /// `want_logs`: find the Log rules the first one's decisions passed.
    pub fn new(
        snapshots: Vec<Arc<Snapshot>>,
        defaults: Defaults,
        services: Option<Arc<Services>>,
        want_logs: bool,
    ) -> Self {
        assert!(!snapshots.is_empty() && snapshots.len() <= 2, "one or two snapshots");
        // Addresses learned from DNS are valid for a time: a snapshot that holds some judges
        // each record alone, at its own time.
        let time_dependent = snapshots.iter().any(|s| s.domain_facts.as_ref().is_some_and(|f| !f.is_empty()));
        let mut bounds: Vec<u16> = snapshots.iter().flat_map(|s| s.port_bounds().iter().copied()).collect();
        bounds.sort_unstable();
        bounds.dedup();
        RecordJudge {
            snapshots,
            defaults,
            services,
            bounds,
            keyed: !time_dependent,
            cap: CACHE_CAP,
            want_logs,
            keep_keys: false,
            touched: Vec::new(),
            rules: Rules::default(),
            keys: KeyTable::default(),
            hot: Vec::new(),
            batch_keys: Vec::new(),
            key_examples: Vec::new(),
            entries: Vec::new(),
            loose: Vec::new(),
            tally: Tally::default(),
            outside: Measures::default(),
            logged: HashMap::new(),
            flipped: Vec::new(),
            examples: Vec::new(),
            example_counts: [0; 3],
            first_ns: 0,
            last_ns: 0,
            decisions: 0,
            judged: 0,
        }
    }

    /// The same judge folding every `cap` keys (at least one).
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap.max(1);
        self
    }

    fn key(&self, h: &PacketHeader) -> Key {
        let ported = h.flags & FLAG_HAS_PORTS != 0;
        let sport_class = if ported { self.bounds.partition_point(|&b| b <= h.sport) as u32 } else { u32::MAX };
        Key {
            src: h.src_addr,
            dst: h.dst_addr,
            sport_class,
            dport: if ported { h.dport } else { 0 },
            icmp: if matches!(h.protocol, 1 | 58) { (h.icmp_type as u16) << 8 | h.icmp_code as u16 } else { 0 },
            version: h.ip_version,
            protocol: h.protocol,
            flags: h.flags,
        }
    }

    /// One snapshot's verdict of `h`, through its Service's backends if it is to one; the
    /// header the verdict was reached for (a backend's) and the Service entry (-1: none).
    fn verdict(&self, snap: &Snapshot, h: &PacketHeader) -> (PacketVerdict, PacketHeader, i64) {
        let defaults = self.defaults;
        if let Some(services) = self.services.as_deref() {
            if h.flags & FLAG_HAS_PORTS != 0 {
                if let Some(entry) = services.index.entry_of(&h.dst_addr, h.protocol, h.dport) {
                    let backends = &services.backends[entry];
                    let Some(&(addr, port)) = backends.first() else {
                        // kube-proxy delivers nothing: denied, by no policy
                        return (PacketVerdict { allow: 0, ..Default::default() }, *h, entry as i64);
                    };
                    let at = |addr: [u8; 16], port: u16| PacketHeader { dst_addr: addr, dport: port, ..*h };
                    let first = at(addr, port);
                    let mut out = (snap.packet_verdict(&first, defaults), first);
                    for &(addr, port) in &backends[1..] {
                        if out.0.allow == 0 {
                            break;
                        }
                        let b = at(addr, port);
                        let v = snap.packet_verdict(&b, defaults);
                        if v.allow == 0 {
                            out = (v, b);
                        }
                    }
                    return (out.0, out.1, entry as i64);
                }
            }
        }
        (snap.packet_verdict(h, defaults), *h, -1)
    }

    /// The Log rules the sides of `judged` (judged as `h` under `snap`) passed.
    fn logs_of(&self, snap: &Snapshot, h: &PacketHeader, judged: &PacketVerdict) -> Vec<LogKey> {
        if judged.egress.logs == 0 && judged.ingress.logs == 0 {
            return Vec::new();
        }
        let Some(flow) = flow_of_header(h) else { return Vec::new() };
        let Ok(v) = snap.evaluate(&flow, self.defaults) else { return Vec::new() };
        let mut out = Vec::new();
        for (d, decision) in [(0u8, &v.egress), (1u8, &v.ingress)] {
            for log in decision.iter().flat_map(|d| d.logs.iter()) {
                let (kind, source) = match log.source {
                    Source::Policy(i) => (1u8, i as i32),
                    Source::Profile(i) => (2u8, i as i32),
                };
                out.push((d, log.tier.map_or(-1, |t| t as i32), kind, source, log.rule as i32));
            }
        }
        out
    }

    fn new_entry(&mut self, h: &PacketHeader) -> Entry {
        self.decisions += 1;
        let mut verdicts = [PacketVerdict::default(); 2];
        let mut logs = Vec::new();
        let mut service = -1;
        for (i, snap) in self.snapshots.iter().enumerate() {
            let (v, judged_as, entry) = self.verdict(snap, h);
            if i == 0 {
                service = entry;
                if self.want_logs {
                    logs = self.logs_of(snap, &judged_as, &v);
                }
            }
            verdicts[i] = v;
        }
        let s = &self.snapshots[0];
        let outside = s.owner_of(Addr::from_header(&h.src_addr, h.ip_version)).is_none()
            && s.owner_of(Addr::from_header(&h.dst_addr, h.ip_version)).is_none();
        let v = &verdicts[0];
        let mut rules = [NO_RULE; 2];
        for (d, side) in [&v.egress, &v.ingress].into_iter().enumerate() {
            if side.present == 1 {
                rules[d] = self.rules.of(side_key(d as u8, side));
            }
        }
        Entry {
            rules,
            header: *h,
            verdicts,
            outside,
            service,
            logs,
            sums: Measures::default(),
            first_ns: 0,
            last_ns: 0,
            examples: Vec::new(),
        }
    }

    fn example(&mut self, kind: u8, file: u32, h: &PacketHeader, c: &FlowCounts, v: &PacketVerdict) {
        if self.example_counts[kind as usize] < EXAMPLES {
            self.example_counts[kind as usize] += 1;
            self.examples.push(Example { kind, file, header: *h, counts: *c, verdict: *v });
        }
    }

    /// A new key's entry, judged now; its sums, pointing to it.
    fn push(&mut self, h: &PacketHeader) -> Hot {
        let e = self.new_entry(h);
        let hot = Hot {
            entry: self.entries.len() as u32,
            allow: e.verdicts[0].allow,
            outside: e.outside as u8,
            flips: (self.snapshots.len() == 2 && e.verdicts[0].allow != e.verdicts[1].allow) as u8,
            ..Default::default()
        };
        self.entries.push(e);
        hot
    }

    /// Judges and sums a batch of records of file `file` (`counts[i]` beside `headers[i]`);
    /// `ids` (if given) receives each record's entry index (`u32::MAX`: not placed, not
    /// judged), valid until the next call.
    pub fn add(&mut self, file: u32, headers: &[PacketHeader], counts: &[FlowCounts], mut ids: Option<&mut Vec<u32>>) {
        if let Some(ids) = ids.as_deref_mut() {
            ids.clear();
        }
        // Entries folded within this batch would leave `ids` pointing nowhere: fold before it
        // and not within it (the keys then exceed `cap` by at most the batch).
        let may_fold = ids.is_none();
        if !may_fold && self.entries.len() + headers.len() > self.cap {
            self.fold();
        }
        // Looking a key up waits for memory (keys come in no order): the keys of the records
        // a few places ahead are asked for first, their slot, then their sums.
        const SLOT_AHEAD: usize = 24;
        const SUMS_AHEAD: usize = 12;
        let mut batch_keys = std::mem::take(&mut self.batch_keys);
        batch_keys.clear();
        if self.keyed {
            batch_keys.extend(headers.iter().map(|h| {
                let k = self.key(h);
                (k, k.hash64())
            }));
        }
        for (n, (h, c)) in headers.iter().zip(counts).enumerate() {
            if let Some(&(_, ahead)) = batch_keys.get(n + SLOT_AHEAD) {
                self.keys.prefetch_slot(ahead);
            }
            if let Some(&(_, ahead)) = batch_keys.get(n + SUMS_AHEAD) {
                if let Some(i) = self.keys.peek(ahead) {
                    prefetch_ref(&self.hot[i]);
                }
            }
            add(&mut self.tally.totals, c);
            if c.last_ns > self.last_ns {
                self.last_ns = c.last_ns;
            }
            if c.first_ns != 0 && (self.first_ns == 0 || c.first_ns < self.first_ns) {
                self.first_ns = c.first_ns;
            }
            if c.has_src == 0 || c.has_dst == 0 {
                add(&mut self.tally.unplaced, c);
                self.example(EXAMPLE_UNPLACED, file, h, c, &PacketVerdict::default());
                if let Some(ids) = ids.as_deref_mut() {
                    ids.push(u32::MAX);
                }
                continue;
            }
            self.judged += 1;
            let (i, allow, outside, example) = if !self.keyed {
                let mut hot = self.push(h);
                let got = touch(&mut hot, c);
                self.loose.push(hot);
                got
            } else {
                if may_fold && self.entries.len() >= self.cap {
                    self.fold();
                }
                let (key, hash) = batch_keys[n];
                let (i, new) = self.keys.find_or_insert(&key, hash);
                if new {
                    let hot = self.push(h);
                    self.hot.push(hot);
                    if self.keep_keys {
                        self.touched.push(i as u32);
                    }
                } else if self.hot[i].sums[0] == 0 {
                    // a key kept from an earlier run: shown by this run's first record
                    let entry = self.hot[i].entry as usize;
                    self.entries[entry].header = *h;
                    self.touched.push(i as u32);
                }
                touch(&mut self.hot[i], c)
            };
            if example {
                self.key_examples.push((i as u32, file, c.position));
            }
            // A verdict the datapath gave at one end is held to the policy's at that end.
            let allow = match c.reported_at {
                REPORTED_AT_CONNECTION => allow,
                at => {
                    let v = &self.entries[i].verdicts[0];
                    let side = if at == REPORTED_AT_EGRESS { &v.egress } else { &v.ingress };
                    if side.present != 0 {
                        side.allow
                    } else {
                        allow
                    }
                }
            };
            self.tally.reported[(c.reported as usize).min(3)][(allow != 0) as usize] += 1;
            if outside && self.example_counts[EXAMPLE_OUTSIDE as usize] < EXAMPLES {
                let v = self.entries[i].verdicts[0];
                self.example(EXAMPLE_OUTSIDE, file, h, c, &v);
            }
            let disagrees = (c.reported == REPORTED_ALLOW && allow == 0) || (c.reported == REPORTED_DENY && allow != 0);
            if disagrees && self.example_counts[EXAMPLE_DISAGREES as usize] < EXAMPLES {
                let v = self.entries[i].verdicts[0];
                self.example(EXAMPLE_DISAGREES, file, h, c, &v);
            }
            if let Some(ids) = ids.as_deref_mut() {
                ids.push(i as u32);
            }
        }
        self.batch_keys = batch_keys;
        if !self.keyed {
            self.fold();
        }
    }

    /// Folds what every key summed into the totals (and keys whose verdicts differ between
    /// two snapshots aside), and starts the keys over; with `keep_keys` set and fewer than
    /// `cap` keys, the keys and their verdicts stay, the sums of those touched started over.
    pub fn fold(&mut self) {
        if self.keep_keys && self.keyed && self.entries.len() < self.cap {
            self.fold_keeping_keys();
            return;
        }
        for hot in self.hot.iter().chain(self.loose.iter()) {
            let e = &mut self.entries[hot.entry as usize];
            (e.sums, e.first_ns, e.last_ns) = (hot.sums, hot.first_ns, hot.last_ns);
        }
        self.loose.clear();
        for &(i, file, position) in &self.key_examples {
            self.entries[i as usize].examples.push((file, position));
        }
        self.key_examples.clear();
        let two = self.snapshots.len() == 2;
        for e in std::mem::take(&mut self.entries) {
            if e.sums[0] != 0
                && fold_entry(&mut self.tally, &mut self.rules, &mut self.outside, &mut self.logged, two, &e)
            {
                self.flipped.push(e);
            }
        }
        self.rules.fold_into(&mut self.tally.by_rule);
        self.keys.clear();
        self.hot.clear();
        self.touched.clear();
    }

    /// `fold` of a judge keeping its keys: only the keys touched since the last fold are
    /// visited (a run over one file costs its own keys, not every key kept).
    fn fold_keeping_keys(&mut self) {
        for &(i, file, position) in &self.key_examples {
            self.entries[i as usize].examples.push((file, position));
        }
        self.key_examples.clear();
        let two = self.snapshots.len() == 2;
        for &i in &self.touched {
            let (hot, e) = (&mut self.hot[i as usize], &mut self.entries[i as usize]);
            (e.sums, e.first_ns, e.last_ns) = (hot.sums, hot.first_ns, hot.last_ns);
            (hot.sums, hot.first_ns, hot.last_ns, hot.examples) = (Measures::default(), 0, 0, 0);
            if fold_entry(&mut self.tally, &mut self.rules, &mut self.outside, &mut self.logged, two, e) {
                self.flipped.push(e.clone());
            }
            (e.sums, e.first_ns, e.last_ns) = (Measures::default(), 0, 0);
            e.examples.clear();
        }
        self.rules.fold_into(&mut self.tally.by_rule);
        self.touched.clear();
    }

    /// Keeps the keys decided from one `fold` to the next (a worker judging file after file
    /// under one policy set decides each key once, its sums read and `restart`ed per file).
    pub fn keeping_keys(mut self) -> Self {
        self.keep_keys = true;
        self
    }

    /// Starts what is summed over (totals, by rule, examples, time range, counts of decisions
    /// and records), keeping the keys `fold` kept: call after reading a folded judge's sums.
    pub fn restart(&mut self) {
        self.fold();
        self.tally = Tally::default();
        self.outside = Measures::default();
        self.logged.clear();
        self.flipped.clear();
        self.examples.clear();
        self.example_counts = [0; 3];
        (self.first_ns, self.last_ns, self.decisions, self.judged) = (0, 0, 0, 0);
    }
}
