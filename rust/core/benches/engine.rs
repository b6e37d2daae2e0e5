//! Policy-shaped engine benchmark (issue 4, "policy-shaped workloads"): compile time, memory and
//! packets/s of the compiled classifier tables against the rule interpreter, in the same run.
//!
//! cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench engine
//!
//! Workload: `pyclassify_core::engine::workload::policy_workload` (10k pods in 100 namespaces,
//! 1k policies: NetworkPolicy, Calico `security` tier with Log/Pass, ANP/BANP) unless
//! `ENGINE_SPEC=path.json` names a spec written by `pyclassify.engine.engine_spec`.
//! `ENGINE_PODS`, `ENGINE_NAMESPACES`, `ENGINE_POLICIES` resize the generated workload.

use std::time::{Duration, Instant};

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::workload::{flow_header, policy_workload, workload_flows, WorkloadShape};
use pyclassify_core::engine::{Defaults, Engine, PacketVerdict};

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

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        last = Some(v);
    }
    (best, last.expect("runs >= 1"))
}

fn pps(engine: &Engine, headers: &[PacketHeader], compiled: bool) -> (f64, Vec<PacketVerdict>) {
    let mut out = vec![PacketVerdict::default(); headers.len()];
    let d = Defaults::default();
    let (t, ()) = best_of(3, || {
        for (h, o) in headers.chunks(256).zip(out.chunks_mut(256)) {
            engine.classify_detailed_with(h, o, d, compiled);
        }
    });
    (headers.len() as f64 / t.as_secs_f64(), out)
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
    println!(
        "engine workload: {} endpoints, {} policies, {} rules",
        spec.endpoints.len(),
        spec.policies.len(),
        spec.policies.iter().map(|p| p.ingress.len() + p.egress.len()).sum::<usize>()
    );

    // --- compile time and memory (interpreter tables alone = baseline) ---
    let rss0 = rss_kib("VmRSS:");
    let (t_interp, interp) = best_of(1, || Engine::build_with(&spec, false).expect("builds"));
    let rss_interp = rss_kib("VmRSS:").saturating_sub(rss0);
    drop(interp);
    let rss1 = rss_kib("VmRSS:");
    let (t_full, engine) = best_of(1, || Engine::build(&spec).expect("builds"));
    let rss_full = rss_kib("VmRSS:").saturating_sub(rss1);
    let s = engine.compiled_stats().expect("compiled");
    println!(
        "compile: interpreter tables {:.3} s, interpreter + compiled tables {:.3} s (compiling adds {:.3} s)",
        t_interp.as_secs_f64(),
        t_full.as_secs_f64(),
        (t_full.saturating_sub(t_interp)).as_secs_f64()
    );
    println!(
        "compiled: {} shared policy tables, {} shared sides for {} (endpoint, direction, family) programs, {} stages, {} entries ({} inexact), ~{:.1} MiB in tables",
        s.groups,
        s.sides,
        s.programs,
        s.stages,
        s.entries,
        s.inexact_entries,
        s.memory_bytes as f64 / 1048576.0
    );
    println!(
        "memory (RSS delta): interpreter engine {:.1} MiB, compiled engine {:.1} MiB; peak RSS {:.1} MiB",
        rss_interp as f64 / 1024.0,
        rss_full as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0
    );

    // --- packets/s through the batch path, batch 256 ---
    let n = env("ENGINE_PACKETS", 1 << 16);
    let headers: Vec<PacketHeader> = workload_flows(shape, n, 7).iter().map(flow_header).collect();
    let (fast, out_fast) = pps(&engine, &headers, true);
    let (slow, out_slow) = pps(&engine, &headers, false);
    assert!(out_fast == out_slow, "compiled and interpreted verdicts differ");
    let allowed = out_fast.iter().filter(|v| v.allow == 1).count();
    println!(
        "classify (batch 256, {} packets, {:.0} % allowed): compiled {:.3} Mpps ({:.0} ns/pkt), interpreter {:.3} Mpps ({:.0} ns/pkt), ratio {:.1}x",
        n,
        100.0 * allowed as f64 / n as f64,
        fast / 1e6,
        1e9 / fast,
        slow / 1e6,
        1e9 / slow,
        fast / slow
    );

    // --- updates: rebuild beside and swap (no incremental path yet) ---
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("spec parses");
    value["endpoints"][0]["labels"]["app"] = serde_json::json!("relabelled");
    let relabel: Spec = serde_json::from_value(value.clone()).expect("spec");
    let (t_pod, _) = best_of(1, || Engine::build(&relabel).expect("builds"));
    if let Some(p) = value["policies"].as_array_mut().and_then(|p| p.get_mut(0)) {
        p["subject"]["selector"] = serde_json::json!("app == 'app1'");
    }
    let repolicy: Spec = serde_json::from_value(value).expect("spec");
    let (t_pol, _) = best_of(1, || Engine::build(&repolicy).expect("builds"));
    println!(
        "updates (full rebuild beside the running engine, then swap): one pod's labels {:.3} s, one policy {:.3} s",
        t_pod.as_secs_f64(),
        t_pol.as_secs_f64()
    );
}
