//! Cluster-scale engine benchmark (issue 11): the identity engine's build time, memory,
//! decisions/s and change-in-force latency, each beside its baseline in the same run — walking
//! the rules for decisions, a full rebuild for changes.
//!
//! cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench engine
//!
//! Workload: `pyclassify_core::engine::workload::policy_workload` (10k pods in 100 namespaces,
//! 1k policies: NetworkPolicy, Calico `security` tier with Log/Pass, ANP/BANP) unless
//! `ENGINE_SPEC=path.json` names a whole-world spec written by `pyclassify.engine.engine_spec`.
//! `ENGINE_PODS`, `ENGINE_NAMESPACES`, `ENGINE_POLICIES` resize the generated workload;
//! `ENGINE_CHANGES` sets how many changes of each kind are timed (default 200).
//! `ENGINE_HEADERS=path.bin` adds decoded headers of a real capture (64-byte records as
//! `pyclassify.batch.HEADER_DTYPE` writes them, e.g. `bench/cluster.py`'s capture) to the
//! random pod pairs every run judges (`ENGINE_PACKETS` of them, default 1M).
//! `ENGINE_COMPILE=eager` times the changes with the programs they make compiled before the
//! change is in force (by default: on first use).
//!
//! `ENGINE_ONLY=memo|compiled|walk` judges the random pairs (or `ENGINE_HEADERS`' headers) one way only, `ENGINE_ROUNDS` times
//! (default 1), and stops: for instruction counts under callgrind (rounds 2 minus rounds 1).
//!
//! Decisions are judged four ways on the same headers: through the decision memo with the
//! compiled programs behind it (the engine's path), the compiled programs alone (a cold memo;
//! past `GROUPED_FROM` addresses a batch's lookups go in groups, their memory fetched ahead),
//! the same a packet at a time, and walking each packet's rules.

use std::time::{Duration, Instant};

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::spec::{Delta, EndpointSpec, NamespaceSpec, PolicySpec, Spec};
use pyclassify_core::engine::workload::{
    flow_header, policy_workload, workload_flows, workload_pod_ip, Rng, WorkloadShape,
};
use pyclassify_core::engine::{Addr, Compile, Defaults, Flow, FlowEnd, Judge, Model, PacketVerdict, Snapshot};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A real capture's decoded headers, as `ENGINE_HEADERS` names them.
fn read_headers(path: &str) -> Vec<PacketHeader> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let size = std::mem::size_of::<PacketHeader>();
    assert!(raw.len() % size == 0, "{path}: not a whole number of {size}-byte headers");
    raw.chunks_exact(size)
        // SAFETY: PacketHeader is a plain repr(C) record of integers; any bytes are a value.
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const PacketHeader) })
        .collect()
}

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let v = f();
    (t.elapsed(), v)
}

/// Decisions/s of `judge` over `headers` in batches of 256, best of `rounds`, and the records.
fn rate(
    headers: &[PacketHeader],
    rounds: usize,
    judge: impl Fn(&[PacketHeader], &mut [PacketVerdict]),
) -> (f64, Vec<PacketVerdict>) {
    let mut out = vec![PacketVerdict::default(); headers.len()];
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let (t, ()) = timed(|| {
            for (h, o) in headers.chunks(256).zip(out.chunks_mut(256)) {
                judge(h, o);
            }
        });
        best = best.min(t);
    }
    (headers.len() as f64 / best.as_secs_f64(), out)
}

fn pps<J: Judge>(engine: &J, headers: &[PacketHeader]) -> (f64, Vec<PacketVerdict>) {
    let d = Defaults::default();
    rate(headers, 3, |h, o| engine.classify_detailed(h, o, d))
}

/// Random pod pairs of a spec (some outside addresses), TCP/UDP to ports its policies name
/// and to any port, ICMP echo: almost every packet a new combination for the memo.
fn random_pairs(spec: &Spec, n: usize, seed: u64) -> Vec<PacketHeader> {
    let addrs: Vec<Addr> = spec
        .endpoints
        .iter()
        .filter(|e| e.kind == "pod")
        .filter_map(|e| e.ips.first())
        .filter_map(|a| Addr::parse(a).ok())
        .collect();
    let outside: Vec<Addr> = ["8.8.8.8", "192.168.7.1", "100.64.3.9", "172.16.1.9"]
        .iter()
        .map(|a| Addr::parse(a).expect("literal"))
        .collect();
    let r = &mut Rng::new(seed);
    (0..n)
        .map(|_| {
            let pick = |r: &mut Rng| if r.chance(5) { *r.pick(&outside) } else { *r.pick(&addrs) };
            let (s, d) = (pick(r), pick(r));
            let protocol = *r.pick(&[6u8, 6, 6, 6, 6, 6, 17, 17, 1]);
            let dport = if r.chance(50) {
                *r.pick(&[53u16, 80, 443, 5432, 6379, 8080, 8443, 9090, 9100, 22])
            } else {
                1 + r.below(65535) as u16
            };
            let icmp = protocol == 1;
            flow_header(&Flow {
                src: FlowEnd { addr: Some(s), endpoint: None },
                dst: FlowEnd { addr: Some(d), endpoint: None },
                protocol,
                sport: (!icmp).then(|| 32_768 + r.below(28_000) as u16),
                dport: (!icmp).then_some(dport),
                icmp_type: icmp.then_some(8),
                icmp_code: icmp.then_some(0),
                ts_ns: None,
            })
        })
        .collect()
}

/// One workload's decisions four ways, same headers, same run.
fn decisions(what: &str, snap: &Snapshot, headers: &[PacketHeader]) {
    let d = Defaults::default();
    let n = headers.len();
    let (h0, m0) = pyclassify_core::engine::classes::memo_counts();
    let (memo, out_memo) = pps(snap, headers);
    let (h1, m1) = pyclassify_core::engine::classes::memo_counts();
    let (compiled, out_compiled) = rate(headers, 3, |h, o| snap.classify_compiled(h, o, d));
    // The same lookups a packet at a time: nothing fetched ahead of the next one.
    let (single, out_single) = rate(headers, 3, |h, o| {
        for (h, o) in h.chunks(1).zip(o.chunks_mut(1)) {
            snap.classify_compiled(h, o, d);
        }
    });
    let (walk, out_walk) = rate(headers, 1, |h, o| {
        for (h, o) in h.iter().zip(o.iter_mut()) {
            *o = snap
                .header_verdict_walked(h, d)
                .map_or_else(|| PacketVerdict::undecodable(h), |v| PacketVerdict::judged(&v));
        }
    });
    assert!(
        out_memo == out_walk && out_compiled == out_walk && out_single == out_walk,
        "{what}: compiled and walked decisions differ"
    );
    let allowed = out_memo.iter().filter(|v| v.allow == 1).count();
    let (hits, misses) = (h1 - h0, m1 - m0);
    println!(
        "decisions, {what} (batch 256, {n} packets, {:.0} % allowed): memo + compiled {:.3} M/s ({:.0} ns, memo hit rate {:.1} %); \
         compiled alone {:.3} M/s ({:.0} ns), {:.2}x a packet at a time ({:.3} M/s, {:.0} ns); rule walk {:.3} M/s ({:.0} ns); \
         compiled alone {:.1}x the walk",
        100.0 * allowed as f64 / n as f64,
        memo / 1e6,
        1e9 / memo,
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        compiled / 1e6,
        1e9 / compiled,
        compiled / single,
        single / 1e6,
        1e9 / single,
        walk / 1e6,
        1e9 / walk,
        compiled / walk
    );
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn report(what: &str, mut times: Vec<Duration>, rebuild: Duration) {
    let p50 = percentile(&mut times, 0.5);
    let p99 = percentile(&mut times, 0.99);
    println!(
        "change in force, {what}: p50 {p50:.3} ms, p99 {p99:.3} ms over {} changes; full rebuild {:.1} ms ({:.0}x the p50)",
        times.len(),
        rebuild.as_secs_f64() * 1e3,
        rebuild.as_secs_f64() * 1e3 / p50.max(1e-9)
    );
}

fn main() {
    let shape = WorkloadShape {
        pods: env("ENGINE_PODS", 10_000),
        namespaces: env("ENGINE_NAMESPACES", 100),
        policies: env("ENGINE_POLICIES", 1_000),
        seed: 1,
    };
    let text = match std::env::var("ENGINE_SPEC") {
        Ok(path) => std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")),
        Err(_) => policy_workload(shape).to_string(),
    };
    let spec: Spec = serde_json::from_str(&text).expect("spec parses");
    let endpoints = spec.endpoints.clone();
    let namespaces: Vec<NamespaceSpec> =
        spec.namespaces.iter().map(|(n, l)| NamespaceSpec { name: n.clone(), labels: l.clone() }).collect();
    println!(
        "engine workload: {} endpoints in {} namespaces, {} policies, {} rules",
        spec.endpoints.len(),
        spec.namespaces.len(),
        spec.policies.len(),
        spec.policies.iter().map(|p| p.ingress.len() + p.egress.len()).sum::<usize>()
    );

    // --- build time and memory ---
    let delta = serde_json::from_str::<Spec>(&text).expect("spec").into_delta();
    // Compiled on first use instead: the build alone, then every program compiled.
    let (t_lazy, lazy) = timed(|| {
        let mut m = Model::new();
        m.set_compile(Compile::OnFirstUse);
        m.apply(delta.clone()).expect("model builds");
        m
    });
    let lazy_snap = lazy.snapshot();
    let (t_compile, ()) = timed(|| lazy_snap.compile_all());
    drop((lazy_snap, lazy));
    let rss1 = rss_kib("VmRSS:");
    let (t_build, mut model) = timed(|| {
        let mut m = Model::new();
        m.apply(delta.clone()).expect("model builds");
        m
    });
    let rss_model = rss_kib("VmRSS:").saturating_sub(rss1);
    // The changes below: the programs a change makes compiled on first use (the default), or
    // before the change is in force (`ENGINE_COMPILE=eager`).
    let eager_changes = std::env::var("ENGINE_COMPILE").is_ok_and(|v| v == "eager");
    if eager_changes {
        model.set_compile(Compile::Always);
    }
    let s = model.stats();
    let cs = model.snapshot().compile_stats();
    println!(
        "build: identity engine {:.3} s (programs compiled as made); \
         compiled on first use instead: build {:.3} s, then compiling every program {:.3} s",
        t_build.as_secs_f64(),
        t_lazy.as_secs_f64(),
        t_compile.as_secs_f64()
    );
    println!(
        "compiled programs: {} of {} (profile lists included, per direction), {:.2} MiB, {} alternatives; walked: {} for services, {} for domains, {} past the memory bound; {} of {} local identities walk a side",
        cs.compiled,
        cs.programs,
        cs.bytes as f64 / 1048576.0,
        cs.alternatives,
        cs.walked_services,
        cs.walked_domains,
        cs.walked_memory,
        cs.walked_identities,
        cs.identities
    );
    println!(
        "identities: {} for {} endpoints; {} interned selectors, {} programs, {:.2} MiB in identity sets",
        s.identities,
        s.endpoints,
        s.selectors,
        s.programs,
        s.set_bytes as f64 / 1048576.0
    );
    println!(
        "memory (RSS delta): identity engine {:.1} MiB; peak RSS {:.1} MiB",
        rss_model as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0
    );

    // --- decisions/s, every packet judged by policy ---
    let snap = model.snapshot();
    if let Ok(only) = std::env::var("ENGINE_ONLY") {
        // One path only, `ENGINE_ROUNDS` passes over the pairs, nothing timed: run under
        // callgrind at 1 and 2 rounds, the difference is one pass's instructions.
        let packets = env("ENGINE_PACKETS", 1 << 20);
        let pairs: Vec<PacketHeader> = if let Ok(path) = std::env::var("ENGINE_HEADERS") {
            read_headers(&path)
        } else if std::env::var("ENGINE_SPEC").is_ok() {
            random_pairs(&spec, packets, 7)
        } else {
            workload_flows(shape, packets, 7).iter().map(flow_header).collect()
        };
        let d = Defaults::default();
        let mut out = vec![PacketVerdict::default(); pairs.len()];
        let mut allowed = 0;
        for _ in 0..env("ENGINE_ROUNDS", 1) {
            for (h, o) in pairs.chunks(256).zip(out.chunks_mut(256)) {
                match only.as_str() {
                    "memo" => snap.classify_detailed(h, o, d),
                    "compiled" => snap.classify_compiled(h, o, d),
                    "walk" => {
                        for (h, o) in h.iter().zip(o.iter_mut()) {
                            *o = snap
                                .header_verdict_walked(h, d)
                                .map_or_else(|| PacketVerdict::undecodable(h), |v| PacketVerdict::judged(&v));
                        }
                    }
                    "none" => {}
                    other => panic!("ENGINE_ONLY={other}: memo, compiled, walk or none"),
                }
            }
            allowed += out.iter().filter(|v| v.allow == 1).count();
        }
        println!("{only}: {} packets, {allowed} allowed", pairs.len());
        return;
    }
    if let Ok(path) = std::env::var("ENGINE_HEADERS") {
        decisions("real capture", &snap, &read_headers(&path));
    }
    let packets = env("ENGINE_PACKETS", 1 << 20);
    let pairs = if std::env::var("ENGINE_SPEC").is_ok() {
        random_pairs(&spec, packets, 7)
    } else {
        workload_flows(shape, packets, 7).iter().map(flow_header).collect()
    };
    decisions("random pod pairs", &snap, &pairs);
    drop(snap);

    // --- changes in force: apply one delta and take the snapshot, beside a full rebuild ---
    let changes = env("ENGINE_CHANGES", 200);
    println!(
        "changes in force, the programs they make compiled {}",
        if eager_changes { "before" } else { "on first use" }
    );
    let (rebuild, _) = timed(|| {
        let mut m = Model::new();
        m.apply(delta.clone()).expect("rebuilds");
        m.snapshot()
    });
    let mut r = Rng::new(99);
    let apply = |model: &mut Model, d: Delta| -> Duration {
        let (t, _) = timed(|| {
            model.apply(d).expect("delta applies");
            model.snapshot()
        });
        t
    };
    let next_id = endpoints.len() as u32;
    let mut times = Vec::new();
    for i in 0..changes {
        let mut e: EndpointSpec = endpoints[r.below(endpoints.len())].clone();
        e.id = next_id + i as u32;
        e.ips = vec![workload_pod_ip(endpoints.len() + i)];
        times.push(apply(&mut model, Delta { endpoints: vec![e], ..Delta::default() }));
    }
    report("pod added", times, rebuild);
    let mut times = Vec::new();
    for i in 0..changes {
        let id = r.below(endpoints.len());
        let mut e: EndpointSpec = endpoints[id].clone();
        e.id = id as u32;
        e.labels.get_or_insert_with(Default::default).insert("app".into(), format!("app{}", (i + r.below(10)) % 10));
        times.push(apply(&mut model, Delta { endpoints: vec![e], ..Delta::default() }));
    }
    report("pod relabelled", times, rebuild);
    let mut times = Vec::new();
    for i in 0..changes {
        let mut ns = namespaces[r.below(namespaces.len())].clone();
        ns.labels.insert("team".into(), format!("team{}", i % 10));
        times.push(apply(&mut model, Delta { namespaces: vec![ns], ..Delta::default() }));
    }
    report("namespace relabelled", times, rebuild);
    let policies: Vec<PolicySpec> = delta.policies.clone();
    let mut times = Vec::new();
    for _ in 0..changes {
        let i = r.below(policies.len());
        let mut p = policies[i].clone();
        let donor = &policies[r.below(policies.len())];
        p.ingress = donor.ingress.clone();
        times.push(apply(&mut model, Delta { policies: vec![p], ..Delta::default() }));
    }
    report("policy changed", times, rebuild);
}
