//! Fixed workloads of the core's hot paths for the instruction-count gate (`bench/instructions.py`).
//!
//! `instruction_workloads WORKLOAD`, one of:
//!
//! - `classifier`: TupleMerge over ClassBench `acl1_1000` and `fw1_1000` (pruning as chosen) and
//!   `ipc1_1000` (pruning always), their first 20,000 trace headers each, classified in
//!   `gate_classifier`;
//! - `decisions`: the engine on the seeded policy workload (1,000 pods, 20 namespaces, 100
//!   policies), 20,000 seeded pod pairs judged through the memo and the compiled programs
//!   (`classify_detailed`, the engine's path) in `gate_decisions`;
//! - `manifest`: the bundled `examples/demo/*.yaml` read 20 times over by the manifest reader into
//!   values, in `gate_manifest`;
//! - `replay`: replay's inner loop, one lane with its connection tracker (`judge_lanes`, as
//!   `replay` calls it per batch), over 4,000 of the workload's flows as TCP connections (SYN,
//!   SYN-ACK, ACK, a request and its reply, FIN both ways: 28,000 packets in batches of 1,024)
//!   in `gate_replay`.
//!
//! Building the inputs is outside the counted function; callgrind counts only `gate_*` and what it
//! calls (`--toggle-collect`). Each prints a checksum of its results, so the work cannot be
//! optimized away and a changed result shows.

use std::path::Path;

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::classbench;
use pyclassify_core::classifier::{Classifier, PacketKey, PruningMode, TupleMerge, TupleMergeConfig};
use pyclassify_core::conntrack::{reversed_header, ConnTrack, CtConfig};
use pyclassify_core::engine::lanes::{judge_lanes, Lane};
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::workload::{flow_header, policy_workload, workload_flows, WorkloadShape};
use pyclassify_core::engine::{Defaults, Judge, Model, PacketVerdict, Snapshot};
use pyclassify_core::http::HttpConns;
use pyclassify_core::manifest::{ManifestStream, Record, ValueBuilder};

const HEADERS: usize = 20_000;

#[inline(never)]
fn gate_classifier(sets: &[(TupleMerge, Vec<PacketKey>)]) -> u64 {
    let mut acc = 0u64;
    for (c, keys) in sets {
        for k in keys {
            acc = acc.wrapping_mul(31).wrapping_add(c.classify(k).map_or(0, |m| m.id as u64 + 1));
        }
    }
    acc
}

#[inline(never)]
fn gate_decisions(snap: &Snapshot, headers: &[PacketHeader], out: &mut [PacketVerdict]) -> u64 {
    let d = Defaults::default();
    for (h, o) in headers.chunks(256).zip(out.chunks_mut(256)) {
        snap.classify_detailed(h, o, d);
    }
    out.iter().fold(0u64, |acc, v| acc.wrapping_mul(3).wrapping_add(v.allow as u64))
}

#[inline(never)]
fn gate_replay(snap: &Snapshot, packets: &[PacketHeader], out: &mut [PacketVerdict]) -> u64 {
    let mut ct = ConnTrack::new(CtConfig::default()).expect("the default tracker");
    let mut http = HttpConns::default();
    let d = Defaults::default();
    for (at, (h, o)) in packets.chunks(1024).zip(out.chunks_mut(1024)).enumerate() {
        let first = (at * 1024) as i64;
        let rows: Vec<i64> = (first..first + h.len() as i64).collect();
        let mut lane = Lane {
            engine: snap,
            rows: &rows,
            headers: h,
            quotes: None,
            segments: None,
            tracker: Some((&mut ct, &mut http)),
            out: o,
        };
        judge_lanes(std::slice::from_mut(&mut lane), h, &[], snap, d);
    }
    out.iter().fold(0u64, |acc, v| acc.wrapping_mul(3).wrapping_add(v.allow as u64))
}

#[inline(never)]
fn gate_manifest(text: &str) -> u64 {
    let mut stream = ManifestStream::new(text, 0, ValueBuilder);
    let mut acc = 0u64;
    while let Some(record) = stream.next_record() {
        acc = acc.wrapping_mul(31).wrapping_add(match record {
            Record::Document { line, .. } => u64::from(line),
            _ => 1,
        });
    }
    acc
}

fn classifier() -> u64 {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(dir) = classbench::find_data_dir(root) else {
        eprintln!("no shared/classbench folder beside the repository (set PYCLASSIFY_CLASSBENCH)");
        std::process::exit(2);
    };
    let sets: Vec<(TupleMerge, Vec<PacketKey>)> =
        [("acl1_1000", PruningMode::Auto), ("fw1_1000", PruningMode::Auto), ("ipc1_1000", PruningMode::Always)]
            .iter()
            .map(|&(name, pruning)| {
                let rules = classbench::load_rules(&dir.join(format!("{name}.rules.gz")))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let trace = classbench::load_trace(&dir.join(format!("{name}.trace.gz")))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let keys = trace.iter().take(HEADERS).map(|e| e.key).collect();
                let cfg = TupleMergeConfig { pruning, ..TupleMergeConfig::default() };
                (TupleMerge::build_with(&rules, cfg).expect("ClassBench rules are valid"), keys)
            })
            .collect();
    gate_classifier(&sets)
}

fn decisions() -> u64 {
    let shape = WorkloadShape { pods: 1_000, namespaces: 20, policies: 100, seed: 1 };
    let snap = workload_snapshot(shape);
    let headers: Vec<PacketHeader> = workload_flows(shape, HEADERS, 7).iter().map(flow_header).collect();
    let mut out = vec![PacketVerdict::default(); headers.len()];
    gate_decisions(&snap, &headers, &mut out)
}

/// The workload's model and its snapshot (the policies and pods of `decisions`).
fn workload_snapshot(shape: WorkloadShape) -> std::sync::Arc<Snapshot> {
    let spec: Spec = serde_json::from_value(policy_workload(shape)).expect("the workload is a spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("the workload builds");
    model.snapshot()
}

fn replay() -> u64 {
    const SYN: u8 = 2;
    const ACK: u8 = 16;
    const FIN: u8 = 1;
    const PSH: u8 = 8;
    let shape = WorkloadShape { pods: 1_000, namespaces: 20, policies: 100, seed: 1 };
    let snap = workload_snapshot(shape);
    let mut packets = Vec::new();
    let mut ts = 1_767_225_600_000_000_000u64;
    for (i, flow) in workload_flows(shape, 4_000, 11).iter().enumerate() {
        let mut h = flow_header(flow);
        h.protocol = 6; // every flow a TCP connection, from an ephemeral port
        h.sport = 32768 + (i % 28_000) as u16;
        h.flags |= pyclassify_core::batch::FLAG_HAS_PORTS;
        if h.dport == 0 {
            h.dport = 80;
        }
        let r = reversed_header(&h);
        for (mut p, flags) in
            [(h, SYN), (r, SYN | ACK), (h, ACK), (h, PSH | ACK), (r, PSH | ACK), (h, FIN | ACK), (r, FIN | ACK)]
        {
            ts += 1_000;
            p.ts_ns = ts;
            p.tcp_flags = flags;
            packets.push(p);
        }
    }
    let mut out = vec![PacketVerdict::default(); packets.len()];
    let sum = gate_replay(&snap, &packets, &mut out);
    let allowed = out.iter().filter(|v| v.allow != 0).count();
    eprintln!("replay: {allowed} of {} packets allowed", out.len());
    sum
}

fn manifest() -> u64 {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo");
    let mut files: Vec<_> = std::fs::read_dir(&demo)
        .unwrap_or_else(|e| panic!("{}: {e}", demo.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let one: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())) + "\n---\n")
        .collect();
    gate_manifest(&one.repeat(20))
}

fn main() {
    let workload = std::env::args().nth(1).unwrap_or_default();
    let sum = match workload.as_str() {
        "classifier" => classifier(),
        "decisions" => decisions(),
        "manifest" => manifest(),
        "replay" => replay(),
        other => {
            eprintln!("unknown workload {other:?}: classifier, decisions, manifest or replay");
            std::process::exit(2)
        }
    };
    println!("{workload}: checksum {sum:016x}");
}
