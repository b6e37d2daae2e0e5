//! What DNS has taught: (name, address) facts, each valid in a window of time.
//!
//! A fact learned at `t` from an answer with TTL `ttl` is valid in `[t, t + ttl + grace]`
//! (nanoseconds; `grace` a store-wide number of seconds, the slack Calico calls
//! `DNSExtraTTL`). Lookups are by address: a hash map from address to the few facts about it
//! (name id and window), names interned once however many addresses they have. IPv4-mapped IPv6
//! addresses are kept as IPv4, so both spellings find the same facts.
//!
//! **Bounded.** At most `capacity` facts: when a new fact arrives in a full store, the stored fact
//! that expires first is evicted (counted in [`DomainFactsStats::evicted`]); the newcomer is always
//! kept, being the answer a client is about to use. A flood of answers therefore costs old facts,
//! never memory.
//!
//! **Shared.** All methods take `&self` (an internal `RwLock`): share the store by `Arc` between
//! the engine snapshots that read it and the loops that feed it. [`DomainFacts::generation`]
//! changes on every change, for callers that cache decisions.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::message::{parse_response, parse_tcp_payload_partial, Answer, DnsError};
use super::pattern::DomainPattern;

const NS_PER_S: u64 = 1_000_000_000;

/// Counters of a [`DomainFacts`] store since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DomainFactsStats {
    /// Facts learned that were not known.
    pub learned: u64,
    /// Facts learned again while known (the later window kept).
    pub refreshed: u64,
    /// Facts dropped to make room for a new one.
    pub evicted: u64,
    /// Facts dropped by [`DomainFacts::expire`].
    pub expired: u64,
}

impl DomainFactsStats {
    /// The counters as (name, value), in a fixed order.
    pub fn items(&self) -> [(&'static str, u64); 4] {
        [("learned", self.learned), ("refreshed", self.refreshed), ("evicted", self.evicted), ("expired", self.expired)]
    }
}

#[derive(Debug, Clone, Copy)]
struct Fact {
    name: usize,
    learned_at: u64,
    expiry: u64,
}

impl Fact {
    fn valid_at(&self, now_ns: Option<u64>) -> bool {
        now_ns.is_none_or(|now| self.learned_at <= now && now <= self.expiry)
    }
}

/// Interned names with reference counts (one per fact naming them).
#[derive(Default)]
struct Names {
    ids: HashMap<Arc<str>, usize>,
    slots: Vec<Option<(Arc<str>, usize)>>,
    free: Vec<usize>,
}

impl Names {
    fn lookup(&self, name: &str) -> Option<usize> {
        self.ids.get(name).copied()
    }

    fn text(&self, id: usize) -> Option<&str> {
        match self.slots.get(id) {
            Some(Some((text, _))) => Some(text),
            _ => None,
        }
    }

    /// The id of `name`, interned if new, with one more reference.
    fn acquire(&mut self, name: &str) -> usize {
        if let Some(id) = self.lookup(name) {
            if let Some(Some((_, refs))) = self.slots.get_mut(id) {
                *refs = refs.saturating_add(1);
            }
            return id;
        }
        let text: Arc<str> = Arc::from(name);
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(slot) = self.slots.get_mut(id) {
                    *slot = Some((text.clone(), 1));
                }
                id
            }
            None => {
                self.slots.push(Some((text.clone(), 1)));
                self.slots.len() - 1
            }
        };
        self.ids.insert(text, id);
        id
    }

    /// One reference fewer to `id`; the name is forgotten with its last reference.
    fn release(&mut self, id: usize) {
        let Some(slot) = self.slots.get_mut(id) else {
            return;
        };
        let last = match slot {
            Some((_, refs)) => {
                *refs = refs.saturating_sub(1);
                *refs == 0
            }
            None => false,
        };
        if last {
            if let Some((text, _)) = slot.take() {
                self.ids.remove(&text);
                self.free.push(id);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    by_addr: HashMap<IpAddr, Vec<Fact>>,
    /// (expiry, address, name id) of every fact: the eviction and expiry order.
    by_expiry: BTreeSet<(u64, IpAddr, usize)>,
    names: Names,
    len: usize,
    stats: DomainFactsStats,
}

impl Inner {
    /// Removes the fact (`addr`, `name`) whose expiry is `expiry` (from `by_expiry` too).
    fn remove(&mut self, expiry: u64, addr: IpAddr, name: usize) {
        self.by_expiry.remove(&(expiry, addr, name));
        let mut removed = false;
        if let Some(facts) = self.by_addr.get_mut(&addr) {
            if let Some(i) = facts.iter().position(|f| f.name == name) {
                facts.swap_remove(i);
                removed = true;
            }
            if facts.is_empty() {
                self.by_addr.remove(&addr);
            }
        }
        if removed {
            self.names.release(name);
            self.len = self.len.saturating_sub(1);
        }
    }
}

/// What has been learned: (name, addr) -> validity window `[learned_at_ns, learned_at_ns + ttl +
/// grace]`. Thread-safe; share it by `Arc`.
pub struct DomainFacts {
    capacity: usize,
    grace_s: u32,
    inner: RwLock<Inner>,
    generation: AtomicU64,
}

impl std::fmt::Debug for DomainFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainFacts")
            .field("capacity", &self.capacity)
            .field("grace_s", &self.grace_s)
            .field("len", &self.len())
            .finish()
    }
}

/// `name` as stored: ASCII lowercase, one trailing dot dropped.
fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

impl DomainFacts {
    /// A store of at most `capacity` (name, addr) facts (0 is taken as 1), each valid `grace_s`
    /// seconds beyond its TTL.
    pub fn new(capacity: usize, grace_s: u32) -> DomainFacts {
        DomainFacts {
            capacity: capacity.max(1),
            grace_s,
            inner: RwLock::new(Inner::default()),
            generation: AtomicU64::new(0),
        }
    }

    /// Most facts kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Seconds each fact stays valid beyond its TTL.
    pub fn grace_s(&self) -> u32 {
        self.grace_s
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Learns one fact: `name` (case and a trailing dot ignored; empty: nothing learned) resolves
    /// to `addr` for `ttl` seconds from `now_ns`. A (name, addr) already known gets the later
    /// window: the union of the two when they overlap (a refresh before expiry extends the fact,
    /// which stays valid all along), else the one that ends later. When full, the stored fact that
    /// expires first is evicted (counted). Returns whether the fact was new.
    pub fn learn(&self, name: &str, addr: IpAddr, ttl: u32, now_ns: u64) -> bool {
        let name = normalize(name);
        if name.is_empty() {
            return false;
        }
        let mut inner = self.write();
        self.learn_locked(&mut inner, &name, addr.to_canonical(), ttl, now_ns)
    }

    /// Learns what one DNS response teaches, at `now_ns`: `payload` is a UDP payload (one
    /// message) or, with `tcp`, a TCP payload of length-prefixed messages (the complete messages
    /// before an error are learned). Returns (new facts, the error that stopped decoding).
    pub fn learn_payload(&self, payload: &[u8], now_ns: u64, tcp: bool) -> (usize, Option<DnsError>) {
        let (answers, error) = if tcp {
            parse_tcp_payload_partial(payload)
        } else {
            match parse_response(payload) {
                Ok(answers) => (answers, None),
                Err(e) => (Vec::new(), Some(e)),
            }
        };
        (self.learn_answers(&answers, now_ns), error)
    }

    /// Learns every answer (as [`DomainFacts::learn`], under one lock); returns how many were new.
    pub fn learn_answers(&self, answers: &[Answer], now_ns: u64) -> usize {
        if answers.is_empty() {
            return 0;
        }
        let mut inner = self.write();
        let mut new = 0;
        for a in answers {
            let name = normalize(&a.name);
            if !name.is_empty() && self.learn_locked(&mut inner, &name, a.addr.to_canonical(), a.ttl, now_ns) {
                new += 1;
            }
        }
        new
    }

    /// `name` normalized and not empty, `addr` canonical.
    fn learn_locked(&self, inner: &mut Inner, name: &str, addr: IpAddr, ttl: u32, now: u64) -> bool {
        let life = (u64::from(ttl) + u64::from(self.grace_s)).saturating_mul(NS_PER_S);
        let expiry = now.saturating_add(life);
        if let Some(id) = inner.names.lookup(name) {
            let known = inner.by_addr.get_mut(&addr).and_then(|facts| facts.iter_mut().find(|f| f.name == id));
            if let Some(fact) = known {
                let old = *fact;
                let (learned_at, until) = if now <= old.expiry && expiry >= old.learned_at {
                    // Overlapping windows: their union (valid all along).
                    (old.learned_at.min(now), old.expiry.max(expiry))
                } else if expiry > old.expiry {
                    (now, expiry) // disjoint and later
                } else {
                    (old.learned_at, old.expiry) // disjoint and earlier
                };
                if (learned_at, until) != (old.learned_at, old.expiry) {
                    fact.learned_at = learned_at;
                    fact.expiry = until;
                    if until != old.expiry {
                        inner.by_expiry.remove(&(old.expiry, addr, id));
                        inner.by_expiry.insert((until, addr, id));
                    }
                    self.bump();
                }
                inner.stats.refreshed = inner.stats.refreshed.saturating_add(1);
                return false;
            }
        }
        while inner.len >= self.capacity {
            let Some((first_expiry, first_addr, first_name)) = inner.by_expiry.pop_first() else {
                break;
            };
            inner.remove(first_expiry, first_addr, first_name);
            inner.stats.evicted = inner.stats.evicted.saturating_add(1);
        }
        let id = inner.names.acquire(name);
        inner.by_addr.entry(addr).or_default().push(Fact { name: id, learned_at: now, expiry });
        inner.by_expiry.insert((expiry, addr, id));
        inner.len += 1;
        inner.stats.learned = inner.stats.learned.saturating_add(1);
        self.bump();
        true
    }

    /// Whether any name learned for `addr` and valid at `now_ns` (learned_at <= now <= expiry)
    /// matches any pattern. `now_ns = None`: valid at any time (offline answers given by a person).
    pub fn matches(&self, addr: IpAddr, now_ns: Option<u64>, patterns: &[DomainPattern]) -> bool {
        if patterns.is_empty() {
            return false;
        }
        let inner = self.read();
        let Some(facts) = inner.by_addr.get(&addr.to_canonical()) else {
            return false;
        };
        facts
            .iter()
            .filter(|f| f.valid_at(now_ns))
            .any(|f| inner.names.text(f.name).is_some_and(|name| patterns.iter().any(|p| p.matches(name))))
    }

    /// The names valid for `addr` at `now_ns` (None: at any time), sorted, deduplicated.
    pub fn names_at(&self, addr: IpAddr, now_ns: Option<u64>) -> Vec<String> {
        let inner = self.read();
        let mut names: Vec<String> = inner
            .by_addr
            .get(&addr.to_canonical())
            .map(|facts| {
                facts
                    .iter()
                    .filter(|f| f.valid_at(now_ns))
                    .filter_map(|f| inner.names.text(f.name).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Drops every fact that expired before `now_ns`; returns how many.
    pub fn expire(&self, now_ns: u64) -> usize {
        let mut inner = self.write();
        let mut dropped = 0usize;
        while let Some(&(expiry, addr, name)) = inner.by_expiry.first() {
            if expiry >= now_ns {
                break;
            }
            inner.remove(expiry, addr, name);
            dropped += 1;
        }
        if dropped > 0 {
            inner.stats.expired = inner.stats.expired.saturating_add(dropped as u64);
            self.bump();
        }
        dropped
    }

    /// How many facts are stored (expired ones included until [`DomainFacts::expire`] or
    /// eviction drops them).
    pub fn len(&self) -> usize {
        self.read().len
    }

    /// Whether no fact is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters since the store was made.
    pub fn stats(&self) -> DomainFactsStats {
        self.read().stats
    }

    /// A counter bumped on every change (lets callers invalidate caches).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}
