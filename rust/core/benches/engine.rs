//! Cluster-scale engine benchmark (issue 11): the identity engine's build time, memory,
//! decisions/s and change-in-force latency, each beside its baseline in the same run — the
//! whole-world oracle interpreter for build and decisions, a full rebuild for changes.
//!
//! cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench engine
//!
//! Workload: `pyclassify_core::engine::workload::policy_workload` (10k pods in 100 namespaces,
//! 1k policies: NetworkPolicy, Calico `security` tier with Log/Pass, ANP/BANP) unless
//! `ENGINE_SPEC=path.json` names a whole-world spec written by `pyclassify.engine.engine_spec`.
//! `ENGINE_PODS`, `ENGINE_NAMESPACES`, `ENGINE_POLICIES` resize the generated workload;
//! `ENGINE_CHANGES` sets how many changes of each kind are timed (default 200).
//! `ENGINE_HEADERS=path.bin` replays decoded headers of a real capture (64-byte records as
//! `pyclassify.batch.HEADER_DTYPE` writes them, e.g. `bench/cluster.py`'s capture) instead of
//! the generated workload's random pod pairs.

use std::time::{Duration, Instant};

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::oracle::Oracle;
use pyclassify_core::engine::spec::{Delta, EndpointSpec, NamespaceSpec, PolicySpec, Spec};
use pyclassify_core::engine::workload::{flow_header, policy_workload, workload_flows, workload_pod_ip, Rng, WorkloadShape};
use pyclassify_core::engine::{Defaults, Judge, Model, PacketVerdict};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
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

fn pps<J: Judge>(engine: &J, headers: &[PacketHeader]) -> (f64, Vec<PacketVerdict>) {
    let mut out = vec![PacketVerdict::default(); headers.len()];
    let d = Defaults::default();
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let (t, ()) = timed(|| {
            for (h, o) in headers.chunks(256).zip(out.chunks_mut(256)) {
                engine.classify_detailed(h, o, d);
            }
        });
        best = best.min(t);
    }
    (headers.len() as f64 / best.as_secs_f64(), out)
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

    // --- build time and memory, beside the whole-world interpreter ---
    let rss0 = rss_kib("VmRSS:");
    let (t_oracle, oracle) = timed(|| Oracle::build(&spec).expect("oracle builds"));
    let rss_oracle = rss_kib("VmRSS:").saturating_sub(rss0);
    let delta = serde_json::from_str::<Spec>(&text).expect("spec").into_delta();
    let rss1 = rss_kib("VmRSS:");
    let (t_build, mut model) = timed(|| {
        let mut m = Model::new();
        m.apply(delta.clone()).expect("model builds");
        m
    });
    let rss_model = rss_kib("VmRSS:").saturating_sub(rss1);
    let s = model.stats();
    println!(
        "build: identity engine {:.3} s, whole-world interpreter {:.3} s (ratio {:.1}x)",
        t_build.as_secs_f64(),
        t_oracle.as_secs_f64(),
        t_oracle.as_secs_f64() / t_build.as_secs_f64()
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
        "memory (RSS delta): identity engine {:.1} MiB, interpreter {:.1} MiB; peak RSS {:.1} MiB",
        rss_model as f64 / 1024.0,
        rss_oracle as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0
    );

    // --- decisions/s, every packet judged by policy ---
    let headers: Vec<PacketHeader> = match std::env::var("ENGINE_HEADERS") {
        Ok(path) => {
            let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let size = std::mem::size_of::<PacketHeader>();
            assert!(raw.len() % size == 0, "{path}: not a whole number of {size}-byte headers");
            raw.chunks_exact(size)
                // SAFETY: PacketHeader is a plain repr(C) record of integers; any bytes are a value.
                .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const PacketHeader) })
                .collect()
        }
        Err(_) => workload_flows(shape, env("ENGINE_PACKETS", 1 << 17), 7).iter().map(flow_header).collect(),
    };
    let n = headers.len();
    let snap = model.snapshot();
    let (fast, out_fast) = pps(&*snap, &headers);
    let (hits, misses) = pyclassify_core::engine::classes::memo_counts();
    let sample = &headers[..headers.len().min(1 << 14)];
    let (slow, out_slow) = pps(&oracle, sample);
    assert!(out_fast[..sample.len()] == out_slow[..], "identity engine and interpreter differ");
    let allowed = out_fast.iter().filter(|v| v.allow == 1).count();
    println!(
        "decisions (batch 256, {n} packets, {:.0} % allowed, memo hit rate {:.1} %): identity engine {:.3} M/s ({:.0} ns each), interpreter {:.3} M/s ({:.0} ns), ratio {:.1}x",
        100.0 * allowed as f64 / n as f64,
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        fast / 1e6,
        1e9 / fast,
        slow / 1e6,
        1e9 / slow,
        fast / slow
    );
    drop(oracle);

    // --- changes in force: apply one delta and take the snapshot, beside a full rebuild ---
    let changes = env("ENGINE_CHANGES", 200);
    let (rebuild, _) = timed(|| {
        let mut m = Model::new();
        m.apply(delta.clone()).expect("rebuilds");
        m.snapshot()
    });
    let mut r = Rng::new(99);
    let mut apply = |model: &mut Model, d: Delta| -> Duration {
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
