//! Conntrack benchmarks: inserts and lookups per second at 10k, 100k and 1M flows, and
//! revalidation of every tracked flow, each beside baselines measured in the same run.
//!
//! Run: `cargo bench --manifest-path rust/Cargo.toml --bench conntrack` (optionally followed by
//! `-- SIZE...` to pick flow counts, e.g. `-- 10000` for a quick run or under callgrind:
//! `valgrind --tool=callgrind target/release/deps/conntrack-* 10000`).
//!
//! Contenders, all over the same pre-built header arrays:
//! - `ours`: `ConnTrack` as shipped (hashbrown `HashTable<u32>` + slab, canonical key so one
//!   probe per packet, SipHash-1-3 with random keys).
//! - `fxhash`: the same table with FxHash (unkeyed, collidable by a sender): what the keyed
//!   hash costs.
//! - `baseline`: the obvious conntrack: `std::collections::HashMap<FlowKey, Entry>` with its
//!   default SipHash, keyed by the packet's own direction, so a reply costs a missed probe and a
//!   second probe with the reversed key.
//!
//! Figures are best-of-3 wall times on a shared machine: read ratios, not absolutes.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::time::Instant;

use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS};
use pyclassify_core::conntrack::{ConnTrack, CtConfig, CtState, FlowKey, TCP_ACK, TCP_SYN};

/// FxHash (rustc's hasher), for the hash-cost comparison only.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap());
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
type FxBuild = BuildHasherDefault<FxHasher>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn v4(a: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&a.to_be_bytes());
    out
}

/// `n` distinct client->server TCP flows: (SYN, SYN-ACK, ACK from client, ACK from server).
struct Workload {
    syn: Vec<PacketHeader>,
    synack: Vec<PacketHeader>,
    ack: Vec<PacketHeader>,
    /// Lookup traffic: random flows, both directions.
    traffic: Vec<PacketHeader>,
}

fn workload(n: usize, lookups: usize, seed: u64) -> Workload {
    let mut rng = Rng(seed | 1);
    let mut syn = Vec::with_capacity(n);
    let mut synack = Vec::with_capacity(n);
    let mut ack = Vec::with_capacity(n);
    let mut rev_ack = Vec::with_capacity(n);
    for i in 0..n {
        // Distinct clients in 10.0.0.0/8 (spread by a bijective multiply), 1000 servers.
        let client = 0x0a00_0000 | ((i as u32).wrapping_mul(2_654_435_761) & 0x00ff_ffff);
        let server = 0xac10_0000 | (rng.next() % 1000) as u32;
        let sport = 1024 + (rng.next() % 60000) as u16;
        let dport = [80u16, 443, 8080, 5432, 6379][(rng.next() % 5) as usize];
        let fwd = PacketHeader {
            ts_ns: 1,
            src_addr: v4(client),
            dst_addr: v4(server),
            sport,
            dport,
            ip_version: 4,
            protocol: 6,
            flags: FLAG_HAS_PORTS,
            tcp_flags: TCP_SYN,
            ..Default::default()
        };
        let rev = PacketHeader {
            src_addr: fwd.dst_addr,
            dst_addr: fwd.src_addr,
            sport: dport,
            dport: sport,
            tcp_flags: TCP_SYN | TCP_ACK,
            ..fwd
        };
        syn.push(fwd);
        synack.push(rev);
        ack.push(PacketHeader { tcp_flags: TCP_ACK, ..fwd });
        rev_ack.push(PacketHeader { tcp_flags: TCP_ACK, ..rev });
    }
    let traffic = (0..lookups)
        .map(|_| {
            let i = (rng.next() % n as u64) as usize;
            if rng.next() & 1 == 0 {
                ack[i]
            } else {
                rev_ack[i]
            }
        })
        .collect();
    Workload { syn, synack, ack, traffic }
}

fn cfg(n: usize) -> CtConfig {
    // CT_SWEEP overrides the per-packet sweep budget (to measure its cost).
    let sweep = std::env::var("CT_SWEEP").ok().and_then(|v| v.parse().ok());
    CtConfig {
        max_entries: n * 2,
        sweep_per_packet: sweep.unwrap_or(CtConfig::default().sweep_per_packet),
        ..CtConfig::default()
    }
}

/// Inserts every flow (SYN tracked + confirmed); returns the table.
fn insert_all<S: BuildHasher>(ct: &mut ConnTrack<S>, w: &Workload) {
    for h in &w.syn {
        if let CtState::New(f) = ct.track(h, 1) {
            ct.confirm(&f, 1).expect("room");
        }
    }
}

fn establish<S: BuildHasher>(ct: &mut ConnTrack<S>, w: &Workload) {
    for h in w.synack.iter().chain(&w.ack) {
        black_box(ct.track(h, 2));
    }
}

fn lookups<S: BuildHasher>(ct: &mut ConnTrack<S>, w: &Workload) -> usize {
    let mut allowed = 0;
    for h in &w.traffic {
        allowed += usize::from(ct.track(h, 3).allows());
    }
    allowed
}

/// The obvious conntrack, as a baseline.
#[derive(Clone, Copy)]
struct NaiveEntry {
    state: u8,
    seen_reply: bool,
    packets: [u64; 2],
    expires: u64,
}

fn key_of(h: &PacketHeader) -> FlowKey {
    FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol)
}

fn naive_track(map: &mut HashMap<FlowKey, NaiveEntry>, h: &PacketHeader, now: u64) -> bool {
    let k = key_of(h);
    if let Some(e) = map.get_mut(&k) {
        e.packets[0] += 1;
        e.expires = now + 7_440_000_000_000;
        return true;
    }
    if let Some(e) = map.get_mut(&k.reversed()) {
        e.packets[1] += 1;
        e.seen_reply = true;
        e.state = 2;
        e.expires = now + 7_440_000_000_000;
        return true;
    }
    false
}

fn naive_insert_all(map: &mut HashMap<FlowKey, NaiveEntry>, w: &Workload) {
    for h in &w.syn {
        if !naive_track(map, h, 1) {
            map.insert(key_of(h), NaiveEntry { state: 0, seen_reply: false, packets: [1, 0], expires: 121 });
        }
    }
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> (f64, T)) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let (secs, out) = f();
        black_box(out);
        best = best.min(secs);
    }
    best
}

fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed().as_secs_f64(), out)
}

fn line(what: &str, n: usize, ops: usize, ours: f64, fx: f64, base: f64) {
    let rate = |s: f64| ops as f64 / s / 1e6;
    println!(
        "conntrack {what:<8} flows={n:>8}  ours {:7.2} Mops/s ({:6.1} ns/op)  fxhash {:7.2} Mops/s  \
         baseline(std HashMap, 2 probes) {:7.2} Mops/s  ours/baseline {:5.2}x  ours/fxhash {:4.2}x",
        rate(ours),
        ours * 1e9 / ops as f64,
        rate(fx),
        rate(base),
        base / ours,
        fx / ours,
    );
}

fn main() {
    let sizes: Vec<usize> = {
        let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        if args.is_empty() {
            vec![10_000, 100_000, 1_000_000]
        } else {
            args
        }
    };
    println!(
        "# conntrack benchmark: best of 3, {} logical CPUs, single thread",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for &n in &sizes {
        let w = workload(n, 2_000_000.max(n), 0x9e37_79b9 ^ n as u64);

        // Inserts: a fresh table each repetition.
        let ins_ours = best_of(3, || {
            let mut ct = ConnTrack::new(cfg(n)).unwrap();
            timed(|| insert_all(&mut ct, &w))
        });
        let ins_fx = best_of(3, || {
            let mut ct = ConnTrack::with_hasher(cfg(n), FxBuild::default()).unwrap();
            timed(|| insert_all(&mut ct, &w))
        });
        let ins_base = best_of(3, || {
            let mut map = HashMap::new();
            timed(|| naive_insert_all(&mut map, &w))
        });
        line("insert", n, n, ins_ours, ins_fx, ins_base);

        // Lookups: established connections, random flows, both directions.
        let mut ours = ConnTrack::new(cfg(n)).unwrap();
        insert_all(&mut ours, &w);
        establish(&mut ours, &w);
        let mut fx = ConnTrack::with_hasher(cfg(n), FxBuild::default()).unwrap();
        insert_all(&mut fx, &w);
        establish(&mut fx, &w);
        let mut base = HashMap::new();
        naive_insert_all(&mut base, &w);
        let lk_ours = best_of(3, || timed(|| lookups(&mut ours, &w)));
        let lk_fx = best_of(3, || timed(|| lookups(&mut fx, &w)));
        let lk_base = best_of(3, || timed(|| w.traffic.iter().filter(|h| naive_track(&mut base, h, 3)).count()));
        assert_eq!(lookups(&mut ours, &w), w.traffic.len(), "every lookup must hit");
        line("lookup", n, w.traffic.len(), lk_ours, lk_fx, lk_base);

        // Revalidation: re-judge every flow; a judge that keeps all (the cost of a policy swap
        // that revokes nothing) then one that revokes the flows to port 5432 (~20%).
        let judge_all = |k: &FlowKey| black_box(k.dport) != 0;
        let rv_ours = best_of(3, || timed(|| ours.revalidate(3, judge_all).len()));
        let rv_fx = best_of(3, || timed(|| fx.revalidate(3, judge_all).len()));
        let rv_base = best_of(3, || {
            timed(|| {
                let mut revoked = Vec::new();
                base.retain(|k, _| {
                    let keep = judge_all(k);
                    if !keep {
                        revoked.push(*k);
                    }
                    keep
                });
                revoked.len()
            })
        });
        line("reval", n, n, rv_ours, rv_fx, rv_base);
        let deny = |k: &FlowKey| k.dport != 5432;
        let (t_ours, revoked) = timed(|| ours.revalidate(3, deny).len());
        let (t_base, revoked_base) = timed(|| {
            let before = base.len();
            base.retain(|k, _| deny(k));
            before - base.len()
        });
        assert_eq!(revoked, revoked_base, "ours and baseline must revoke the same flows");
        println!(
            "conntrack revoke   flows={n:>8}  revoked {revoked} in {:.2} ms (ours), {:.2} ms (baseline retain)  ours/baseline {:5.2}x",
            t_ours * 1e3,
            t_base * 1e3,
            t_base / t_ours
        );
    }
}
