//! TupleMerge: tuple-space search with merged (relaxed) tuples.
//!
//! A *tuple* says how many leading bits of each field a table hashes on: source and destination
//! prefix length, source and destination port prefix length (the bits `lo` and `hi` of a range
//! share), and whether the protocol is exact. A rule fits a table when it fixes at least the
//! table's bits in every field; it is stored in the bucket keyed by those bits. A packet is looked
//! up in a table by masking its own fields the same way, and the bucket's rules (a few, sorted by
//! rank) are then checked in full ([`Entry::matches`]), so hashing only narrows, never decides.
//!
//! Tables are kept sorted by the best (lowest) rank they hold. A lookup first asks the pruning
//! index (`super::pruning`, the pruned tuple space search of Srinivasan, Suri and Varghese) which
//! tables could hold a match at all (on the ClassBench 10k and 100k sets a lookup probes 1.0–1.2
//! tables on average, where it visited 5–30 before the index). It probes those, lowest uid first
//! (uids are renumbered in best-rank order whenever the index is built, so this is best rank
//! first until updates reorder them), and skips without a probe a table whose best rank cannot
//! beat the match already found.
//!
//! Updates never rebuild: an insert puts the rule in the most specific table it fits (or a new
//! table with a *relaxed* tuple, so that later rules with slightly different prefix lengths share
//! it); when a bucket grows past the collision limit the colliding rules that can be told apart
//! move to a more specific table. A removal deletes the rule from its bucket. A table's best rank
//! may go stale after removals; it stays a lower bound (the search remains exact, just stops a
//! little later) and is recomputed once enough removals accumulate.

use super::pruning::{self, Candidates, Extent, Pruning};
use super::{ClassRule, Classifier, ClassifierError, Entry, Match, PacketKey};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Tuning of [`TupleMerge`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TupleMergeConfig {
    /// A bucket holding more rules than this is split if its rules can be told apart.
    pub collision_limit: usize,
    /// New tables round IPv4 prefix lengths down to a multiple of this (1 = no relaxation).
    /// 16 measured best on ClassBench acl1/fw1/ipc1 10k (examples in bench/README.md).
    pub v4_step: u8,
    /// The same for IPv6 (non-mapped) prefix lengths.
    pub v6_step: u8,
    /// Whether lookups go through the pruning index.
    pub pruning: PruningMode,
}

/// When [`TupleMerge`] prunes tables before probing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PruningMode {
    /// When lookups of points inside sampled rules visit on average at least
    /// [`PRUNE_FROM_VISITS`] tables without it, decided each time the index is built. The index
    /// costs a lookup five reads of its own, which miss the cache once it is large: on ClassBench
    /// acl1 (5–6 tables visited) it made lookups at 100k rules 0.6× as fast; on fw1 and ipc1
    /// (23–30 tables visited) it cut a lookup's instructions to a quarter.
    Auto,
    Always,
    Never,
}

/// Tables visited without pruning, on average, from which `PruningMode::Auto` prunes.
pub const PRUNE_FROM_VISITS: f64 = 10.0;

/// Rules sampled (evenly) to decide `PruningMode::Auto`.
const PRUNE_SAMPLE: usize = 1024;

impl Default for TupleMergeConfig {
    fn default() -> Self {
        TupleMergeConfig { collision_limit: 8, v4_step: 16, v6_step: 16, pruning: PruningMode::Auto }
    }
}

/// How many leading bits of each field a table hashes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tuple {
    sl: u8,
    dl: u8,
    spl: u8,
    dpl: u8,
    proto: bool,
}

impl Tuple {
    fn of_entry(e: &Entry) -> Tuple {
        Tuple {
            sl: 128 - e.src_shift,
            dl: 128 - e.dst_shift,
            spl: (e.sport_lo ^ e.sport_lo.wrapping_add(e.sport_span)).leading_zeros() as u8,
            dpl: (e.dport_lo ^ e.dport_lo.wrapping_add(e.dport_span)).leading_zeros() as u8,
            proto: e.proto_mask != 0,
        }
    }

    /// Whether a rule with tuple `r` can be stored in a table with tuple `self`.
    fn admits(&self, r: &Tuple) -> bool {
        self.sl <= r.sl && self.dl <= r.dl && self.spl <= r.spl && self.dpl <= r.dpl && (!self.proto || r.proto)
    }

    fn specificity(&self) -> u32 {
        self.sl as u32 + self.dl as u32 + self.spl as u32 + self.dpl as u32 + 8 * self.proto as u32
    }

    fn relax(&self, cfg: &TupleMergeConfig) -> Tuple {
        let addr = |l: u8| {
            if l >= 96 {
                let v4 = l - 96;
                96 + v4 - v4 % cfg.v4_step.max(1)
            } else {
                l - l % cfg.v6_step.max(1)
            }
        };
        // Ports: exact or nothing (a range's shared leading bits rarely tell rules apart, and
        // every distinct port length would be one more table to visit).
        let port = |l: u8| if l == 16 { 16 } else { 0 };
        Tuple { sl: addr(self.sl), dl: addr(self.dl), spl: port(self.spl), dpl: port(self.dpl), ..*self }
    }

    fn max(&self, o: &Tuple) -> Tuple {
        Tuple {
            sl: self.sl.max(o.sl),
            dl: self.dl.max(o.dl),
            spl: self.spl.max(o.spl),
            dpl: self.dpl.max(o.dpl),
            proto: self.proto || o.proto,
        }
    }
}

/// The buckets' keys are already well-mixed 64-bit hashes: hash them as themselves.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by the u64/u32 keys below; a plain FNV-1a keeps it correct if ever used.
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
    fn write_u32(&mut self, x: u32) {
        // Rule ids: spread them over the high bits too (SwissTable uses the top 7 bits).
        self.0 = fold(x as u64 ^ K1, K2);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

const K1: u64 = 0x243f_6a88_85a3_08d3;
const K2: u64 = 0x1319_8a2e_0370_7344;
const K3: u64 = 0xa409_3822_299f_31d0;

/// Folded multiply: the full 128-bit product, halves xored. Fast and well mixed.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Hash of the masked fields. Not keyed: rules, not packets, decide what shares a bucket, and
/// every rule of a bucket is checked in full, so a collision costs time, never a wrong answer.
#[inline(always)]
fn mix(s: u128, d: u128, ports_proto: u64) -> u64 {
    let a = (s as u64) ^ ((s >> 64) as u64).rotate_left(29);
    let b = (d as u64) ^ ((d >> 64) as u64).rotate_left(29);
    fold(fold(a ^ K1, b ^ K2) ^ ports_proto, K3)
}

/// A bucket's entries in rank order (`all`), with a copy of the first beside the table's slot:
/// a lookup's usual answer (or reason to skip the bucket) without a second dependent miss.
struct Bucket {
    first: Entry,
    all: Vec<Entry>,
}

impl Bucket {
    /// After `all` changed (never empty here).
    #[inline]
    fn refresh(&mut self) {
        self.first = self.all[0];
    }
}

struct Table {
    smask: u128,
    dmask: u128,
    spmask: u16,
    dpmask: u16,
    pmask: u8,
    /// Lowest rank in the table, or lower (stale after removals): a lower bound.
    min_rank: u64,
    buckets: Map<u64, Bucket>,
    tuple: Tuple,
    uid: u32,
    count: u32,
    /// Removals since `min_rank` was last exact.
    stale: u32,
}

impl Table {
    fn new(tuple: Tuple, uid: u32) -> Table {
        let pm = |l: u8| {
            if l == 0 {
                0
            } else {
                u16::MAX << (16 - l as u32)
            }
        };
        Table {
            smask: super::Prefix::mask(tuple.sl),
            dmask: super::Prefix::mask(tuple.dl),
            spmask: pm(tuple.spl),
            dpmask: pm(tuple.dpl),
            pmask: if tuple.proto { 0xff } else { 0 },
            min_rank: u64::MAX,
            buckets: Map::default(),
            tuple,
            uid,
            count: 0,
            stale: 0,
        }
    }

    #[inline(always)]
    fn hash(&self, src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> u64 {
        let pp =
            ((sport & self.spmask) as u64) << 24 | ((dport & self.dpmask) as u64) << 8 | (proto & self.pmask) as u64;
        mix(src & self.smask, dst & self.dmask, pp)
    }

    #[inline(always)]
    fn key_hash(&self, k: &PacketKey) -> u64 {
        self.hash(k.src, k.dst, k.sport, k.dport, k.proto)
    }

    fn entry_hash(&self, e: &Entry) -> u64 {
        self.hash(e.src, e.dst, e.sport_lo, e.dport_lo, e.proto)
    }

    /// Inserts into its bucket in rank order; returns the bucket's hash and new length.
    fn put(&mut self, e: Entry) -> (u64, usize) {
        let h = self.entry_hash(&e);
        let b = self.buckets.entry(h).or_insert_with(|| Bucket { first: e, all: Vec::new() });
        let at = b.all.partition_point(|x| x.rank < e.rank);
        b.all.insert(at, e);
        b.refresh();
        self.count += 1;
        self.min_rank = self.min_rank.min(e.rank);
        (h, b.all.len())
    }

    fn refresh_min(&mut self) {
        self.min_rank = self.buckets.values().map(|b| b.first.rank).min().unwrap_or(u64::MAX);
        self.stale = 0;
    }

    /// The best of `best` and the rank of this table's first rule matching `k`.
    #[inline(always)]
    fn probe(&self, k: &PacketKey, mut best: u64) -> u64 {
        if self.min_rank >= best {
            return best;
        }
        if let Some(b) = self.buckets.get(&self.key_hash(k)) {
            if b.first.rank >= best {
                return best;
            }
            if b.first.matches(k) {
                return b.first.rank;
            }
            for e in &b.all[1..] {
                if e.rank >= best {
                    break;
                }
                if e.matches(k) {
                    best = e.rank;
                    break;
                }
            }
        }
        best
    }

    fn memory_bytes(&self) -> usize {
        let slot = core::mem::size_of::<(u64, Bucket)>() + 1;
        self.buckets.capacity() * slot
            + self.buckets.values().map(|b| b.all.capacity() * core::mem::size_of::<Entry>()).sum::<usize>()
    }
}

/// Where a rule lives: the table (by stable uid) and the bucket hash.
#[derive(Clone, Copy, Debug)]
struct Loc {
    uid: u32,
    hash: u64,
}

/// Shape of a [`TupleMerge`]: for reports and tuning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TupleMergeStats {
    pub rules: usize,
    pub tables: usize,
    pub buckets: usize,
    pub largest_bucket: usize,
    /// Atoms of the pruning index: source, destination, source port, destination port.
    pub atoms: [usize; 4],
    /// Whether lookups go through the pruning index.
    pub pruned: bool,
}

/// The fast classifier (see the module documentation).
pub struct TupleMerge {
    /// Sorted by `min_rank`.
    tables: Vec<Table>,
    /// Table uid -> index in `tables` (`u32::MAX` when free).
    pos: Vec<u32>,
    free_uids: Vec<u32>,
    by_tuple: HashMap<Tuple, u32>,
    rules: Map<u32, Loc>,
    cfg: TupleMergeConfig,
    /// The pruning index, when lookups go through it (see `PruningMode`).
    prune: Option<Pruning>,
    /// Updates since the index was last built (or decided against).
    updates: usize,
    /// Tables whose uid the pruning index does not track (past `pruning::TRACKED`).
    untracked: usize,
}

impl Default for TupleMerge {
    fn default() -> Self {
        TupleMerge::with_config(TupleMergeConfig::default())
    }
}

impl TupleMerge {
    /// An empty classifier with the given tuning.
    pub fn with_config(cfg: TupleMergeConfig) -> TupleMerge {
        TupleMerge {
            tables: Vec::new(),
            pos: Vec::new(),
            free_uids: Vec::new(),
            by_tuple: HashMap::new(),
            rules: Map::default(),
            cfg,
            prune: (cfg.pruning == PruningMode::Always).then(|| Pruning::build(&[])),
            updates: 0,
            untracked: 0,
        }
    }

    /// Builds from rules in any order (inserted in rank order); errors on a malformed rule or a
    /// duplicate id, and then nothing is built.
    pub fn build(rules: &[ClassRule]) -> Result<TupleMerge, ClassifierError> {
        TupleMerge::build_with(rules, TupleMergeConfig::default())
    }

    pub fn build_with(rules: &[ClassRule], cfg: TupleMergeConfig) -> Result<TupleMerge, ClassifierError> {
        let mut sorted: Vec<&ClassRule> = rules.iter().collect();
        for r in &sorted {
            r.validate()?;
        }
        sorted.sort_unstable_by_key(|r| r.rank());
        let mut tm = TupleMerge::with_config(cfg);
        tm.rules.reserve(rules.len());
        for r in sorted {
            tm.insert(*r)?;
        }
        tm.rebuild_pruning();
        Ok(tm)
    }

    /// Builds the pruning index again from the rules now held (every table clean). Tables are
    /// first renumbered in the order they are visited, so that a lookup taking its candidates'
    /// bits lowest first meets them in (about) that order.
    pub fn rebuild_pruning(&mut self) {
        self.resort();
        let mut new_uid = vec![u32::MAX; self.pos.len()];
        for (i, t) in self.tables.iter_mut().enumerate() {
            new_uid[t.uid as usize] = i as u32;
            t.uid = i as u32;
        }
        for uid in self.by_tuple.values_mut() {
            *uid = new_uid[*uid as usize];
        }
        for loc in self.rules.values_mut() {
            loc.uid = new_uid[loc.uid as usize];
        }
        self.pos = (0..self.tables.len() as u32).collect();
        self.free_uids.clear();
        self.untracked = self.tables.iter().filter(|t| t.uid >= pruning::TRACKED).count();
        self.updates = 0;
        let prune = match self.cfg.pruning {
            PruningMode::Always => true,
            PruningMode::Never => false,
            PruningMode::Auto => self.mean_visits_unpruned() >= PRUNE_FROM_VISITS,
        };
        if !prune {
            self.prune = None;
            return;
        }
        let extents: Vec<Extent> = self
            .tables
            .iter()
            .flat_map(|t| t.buckets.values().flat_map(|b| b.all.iter()).map(move |e| extent(t.uid, e)))
            .collect();
        self.prune = Some(Pruning::build(&extents));
    }

    /// Tables the scan without pruning visits, on average, looking up a point inside each of up
    /// to `PRUNE_SAMPLE` rules taken evenly (a rule's lowest corner).
    fn mean_visits_unpruned(&self) -> f64 {
        let entries: Vec<&Entry> =
            self.tables.iter().flat_map(|t| t.buckets.values().flat_map(|b| b.all.iter())).collect();
        if entries.is_empty() {
            return 0.0;
        }
        let step = entries.len().div_ceil(PRUNE_SAMPLE);
        let (mut visits, mut keys) = (0usize, 0usize);
        for e in entries.iter().step_by(step) {
            let k = PacketKey {
                src: e.src,
                dst: e.dst,
                sport: e.sport_lo,
                dport: e.dport_lo,
                proto: e.proto,
                icmp_type: e.icmp_type,
                icmp_code: e.icmp_code,
            };
            visits += self.scan(&k).1;
            keys += 1;
        }
        visits as f64 / keys as f64
    }

    /// The best rank without pruning (every table in best-rank order until none can beat the
    /// match found), and the tables visited.
    #[inline(always)]
    fn scan(&self, k: &PacketKey) -> (u64, usize) {
        let mut best = u64::MAX;
        let mut visited = 0;
        for t in &self.tables {
            if t.min_rank >= best {
                break;
            }
            visited += 1;
            best = t.probe(k, best);
        }
        (best, visited)
    }

    /// Counts an update; past eight times as many updates as rules (and at least 4096), the index
    /// is built again, dropping the bits removals left and the dirty tables (amortized: one build
    /// per that many updates).
    fn updated(&mut self) {
        self.updates += 1;
        if self.updates > (8 * self.rules.len()).max(4096) {
            self.rebuild_pruning();
        }
    }

    /// Adds one rule (no rebuild). Errors, changing nothing, on a malformed rule or a duplicate id.
    pub fn insert(&mut self, rule: ClassRule) -> Result<(), ClassifierError> {
        rule.validate()?;
        if self.rules.contains_key(&rule.id) {
            return Err(ClassifierError::DuplicateId(rule.id));
        }
        let e = Entry::new(&rule);
        let rt = Tuple::of_entry(&e);
        let mut best: Option<(u32, usize)> = None;
        for (i, t) in self.tables.iter().enumerate() {
            if t.tuple.admits(&rt) {
                let s = t.tuple.specificity();
                if best.is_none_or(|(bs, _)| s > bs) {
                    best = Some((s, i));
                }
            }
        }
        let i = match best {
            Some((_, i)) => i,
            None => self.table_for(rt.relax(&self.cfg)),
        };
        let (h, n) = self.put_at(i, e);
        if n > self.cfg.collision_limit {
            self.split(self.tables[self.position_of(e.rank as u32)].uid, h, rt);
        }
        self.updated();
        Ok(())
    }

    /// Removes the rule with this id (no rebuild); false if there is none.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(loc) = self.rules.remove(&id) else {
            return false;
        };
        let i = self.pos[loc.uid as usize] as usize;
        let t = &mut self.tables[i];
        let Some(b) = t.buckets.get_mut(&loc.hash) else {
            unreachable_inconsistent();
            return false;
        };
        let Some(j) = b.all.iter().position(|e| e.rank as u32 == id) else {
            unreachable_inconsistent();
            return false;
        };
        let rank = b.all.remove(j).rank;
        if b.all.is_empty() {
            t.buckets.remove(&loc.hash);
        } else {
            b.refresh();
        }
        t.count -= 1;
        if t.count == 0 {
            self.drop_table(i);
        } else if rank == t.min_rank {
            t.stale += 1;
            // Exact at once for small tables; otherwise amortized (a stale bound is still valid).
            if t.buckets.len() <= 64 || t.stale as usize * 8 >= t.buckets.len() {
                t.refresh_min();
                self.resort();
            }
        }
        self.updated();
        true
    }

    /// Shape figures (tables, buckets, largest bucket).
    pub fn stats(&self) -> TupleMergeStats {
        TupleMergeStats {
            rules: self.rules.len(),
            tables: self.tables.len(),
            buckets: self.tables.iter().map(|t| t.buckets.len()).sum(),
            largest_bucket: self.tables.iter().flat_map(|t| t.buckets.values()).map(|b| b.all.len()).max().unwrap_or(0),
            atoms: self.prune.as_ref().map_or([0; 4], Pruning::atoms),
            pruned: self.prune.is_some(),
        }
    }

    fn position_of(&self, id: u32) -> usize {
        self.pos[self.rules[&id].uid as usize] as usize
    }

    /// Index of the table with exactly this tuple, created if needed.
    fn table_for(&mut self, tuple: Tuple) -> usize {
        if let Some(&uid) = self.by_tuple.get(&tuple) {
            return self.pos[uid as usize] as usize;
        }
        let uid = match self.free_uids.pop() {
            Some(u) => u,
            None => {
                self.pos.push(u32::MAX);
                (self.pos.len() - 1) as u32
            }
        };
        self.by_tuple.insert(tuple, uid);
        self.untracked += (uid >= pruning::TRACKED) as usize;
        // An empty table has min_rank MAX: it belongs at the end.
        self.tables.push(Table::new(tuple, uid));
        self.pos[uid as usize] = (self.tables.len() - 1) as u32;
        self.tables.len() - 1
    }

    /// Puts the entry in table `i`, records its location, keeps the table order.
    fn put_at(&mut self, i: usize, e: Entry) -> (u64, usize) {
        let t = &mut self.tables[i];
        let before = t.min_rank;
        let (h, n) = t.put(e);
        let uid = t.uid;
        let moved = t.min_rank != before;
        if let Some(p) = &mut self.prune {
            p.insert(&extent(uid, &e));
        }
        self.rules.insert(e.rank as u32, Loc { uid, hash: h });
        if moved && (i > 0 && self.tables[i - 1].min_rank > self.tables[i].min_rank) {
            self.resort();
        }
        (h, n)
    }

    /// Moves out of an overfull bucket the rules that fit a more specific tuple.
    fn split(&mut self, uid: u32, h: u64, rt: Tuple) {
        let i = self.pos[uid as usize] as usize;
        let cur = self.tables[i].tuple;
        let mut nt = cur.max(&rt.relax(&self.cfg));
        if nt == cur {
            nt = rt;
        }
        if nt == cur {
            return; // the colliding rules fix the same bits: nothing can tell them apart
        }
        let Some(bucket) = self.tables[i].buckets.get_mut(&h) else {
            return;
        };
        let (moving, staying): (Vec<Entry>, Vec<Entry>) =
            bucket.all.drain(..).partition(|e| nt.admits(&Tuple::of_entry(e)));
        let t = &mut self.tables[i];
        t.count -= moving.len() as u32;
        if staying.is_empty() {
            t.buckets.remove(&h);
        } else {
            let b = t.buckets.get_mut(&h).expect("bucket just drained");
            b.all = staying;
            b.refresh();
        }
        if t.count == 0 {
            self.drop_table(i);
        }
        let j = self.table_for(nt);
        let target_uid = self.tables[j].uid;
        for e in moving {
            let j = self.pos[target_uid as usize] as usize;
            self.put_at(j, e);
        }
    }

    fn drop_table(&mut self, i: usize) {
        let t = self.tables.remove(i);
        self.by_tuple.remove(&t.tuple);
        self.untracked -= (t.uid >= pruning::TRACKED) as usize;
        self.pos[t.uid as usize] = u32::MAX;
        self.free_uids.push(t.uid);
        self.reindex();
    }

    fn resort(&mut self) {
        self.tables.sort_by_key(|t| t.min_rank);
        self.reindex();
    }

    fn reindex(&mut self) {
        for (i, t) in self.tables.iter().enumerate() {
            self.pos[t.uid as usize] = i as u32;
        }
    }

    /// Core of `classify`: best rank, `u64::MAX` when nothing matches. Only the tables the
    /// pruning index names are probed, lowest uid first (about best rank first); a table whose
    /// best rank cannot beat the match found is skipped without a probe.
    #[inline(always)]
    fn best_rank(&self, k: &PacketKey) -> u64 {
        let Some(prune) = &self.prune else {
            return self.scan(k).0;
        };
        let c: Candidates = prune.candidates(k.src, k.dst, k.sport, k.dport, k.proto);
        let mut best = u64::MAX;
        for (w, &word) in c.iter().enumerate() {
            let mut m = word;
            while m != 0 {
                let uid = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                // A dropped table's bit may linger (an index too wide is allowed): no table.
                let i = self.pos.get(uid).copied().unwrap_or(u32::MAX);
                if let Some(t) = self.tables.get(i as usize) {
                    best = t.probe(k, best);
                }
            }
        }
        if self.untracked > 0 {
            for t in self.tables.iter().filter(|t| t.uid >= pruning::TRACKED) {
                best = t.probe(k, best);
            }
        }
        best
    }
}

/// What the pruning index reads of a rule in table `uid`.
fn extent(uid: u32, e: &Entry) -> Extent {
    Extent {
        uid,
        src: pruning::v4_range(e.src, e.src_shift),
        dst: pruning::v4_range(e.dst, e.dst_shift),
        sport: (e.sport_lo, e.sport_lo.wrapping_add(e.sport_span)),
        dport: (e.dport_lo, e.dport_lo.wrapping_add(e.dport_span)),
        proto: (e.proto_mask != 0).then_some(e.proto),
    }
}

/// An index/bucket disagreement is a bug; in debug builds it fails loudly, in release the
/// operation reports "not found" rather than panicking across into Python.
#[inline]
fn unreachable_inconsistent() {
    debug_assert!(false, "TupleMerge index out of sync with its tables");
}

impl Classifier for TupleMerge {
    fn classify(&self, key: &PacketKey) -> Option<Match> {
        let r = self.best_rank(key);
        (r != u64::MAX).then(|| Match::from_rank(r))
    }

    fn classify_batch(&self, keys: &[PacketKey], out: &mut [Option<Match>]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            let r = self.best_rank(k);
            *o = (r != u64::MAX).then(|| Match::from_rank(r));
        }
    }

    fn matches_below(&self, key: &PacketKey, below: u32, out: &mut Vec<Match>) {
        let limit = (below as u64) << 32;
        let start = out.len();
        for t in &self.tables {
            if t.min_rank >= limit {
                break;
            }
            if let Some(b) = t.buckets.get(&t.key_hash(key)) {
                out.extend(
                    b.all
                        .iter()
                        .take_while(|e| e.rank < limit)
                        .filter(|e| e.matches(key))
                        .map(|e| Match::from_rank(e.rank)),
                );
            }
        }
        out[start..].sort_unstable_by_key(|m| ((m.priority as u64) << 32) | m.id as u64);
    }

    fn len(&self) -> usize {
        self.rules.len()
    }

    fn memory_bytes(&self) -> usize {
        self.tables.capacity() * core::mem::size_of::<Table>()
            + self.tables.iter().map(Table::memory_bytes).sum::<usize>()
            + self.pos.capacity() * 4
            + self.free_uids.capacity() * 4
            + self.by_tuple.capacity() * (core::mem::size_of::<(Tuple, u32)>() + 1)
            + self.rules.capacity() * (core::mem::size_of::<(u32, Loc)>() + 1)
            + self.prune.as_ref().map_or(0, Pruning::bytes)
    }
}
