//! Fixed workloads of the core's hot paths for the instruction-count gate (`bench/instructions.py`).
//!
//! `instruction_workloads WORKLOAD`, one of:
//!
//! - `classifier`: TupleMerge over ClassBench `acl1_1000` and `fw1_1000`, their first 20,000
//!   trace headers each, classified in `gate_classifier`;
//! - `decisions`: the engine on the seeded policy workload (1,000 pods, 20 namespaces, 100
//!   policies), 20,000 seeded pod pairs judged through the memo and the compiled programs
//!   (`classify_detailed`, the engine's path) in `gate_decisions`;
//! - `manifest`: the bundled `examples/demo/*.yaml` read 20 times over by the manifest reader into
//!   values, in `gate_manifest`.
//!
//! Building the inputs is outside the counted function; callgrind counts only `gate_*` and what it
//! calls (`--toggle-collect`). Each prints a checksum of its results, so the work cannot be
//! optimized away and a changed result shows.

use std::path::Path;

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::classbench;
use pyclassify_core::classifier::{Classifier, PacketKey, TupleMerge};
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::workload::{flow_header, policy_workload, workload_flows, WorkloadShape};
use pyclassify_core::engine::{Defaults, Judge, Model, PacketVerdict, Snapshot};
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
    let sets: Vec<(TupleMerge, Vec<PacketKey>)> = ["acl1_1000", "fw1_1000"]
        .iter()
        .map(|name| {
            let rules = classbench::load_rules(&dir.join(format!("{name}.rules.gz"))).unwrap_or_else(|e| panic!("{name}: {e}"));
            let trace = classbench::load_trace(&dir.join(format!("{name}.trace.gz"))).unwrap_or_else(|e| panic!("{name}: {e}"));
            let keys = trace.iter().take(HEADERS).map(|e| e.key).collect();
            (TupleMerge::build(&rules).expect("ClassBench rules are valid"), keys)
        })
        .collect();
    gate_classifier(&sets)
}

fn decisions() -> u64 {
    let shape = WorkloadShape { pods: 1_000, namespaces: 20, policies: 100, seed: 1 };
    let spec: Spec = serde_json::from_value(policy_workload(shape)).expect("the workload is a spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("the workload builds");
    let snap = model.snapshot();
    let headers: Vec<PacketHeader> = workload_flows(shape, HEADERS, 7).iter().map(flow_header).collect();
    let mut out = vec![PacketVerdict::default(); headers.len()];
    gate_decisions(&snap, &headers, &mut out)
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
        other => {
            eprintln!("unknown workload {other:?}: classifier, decisions or manifest");
            std::process::exit(2)
        }
    };
    println!("{workload}: checksum {sum:016x}");
}
