//! The ClassBench side of `bench/test_bench_rte_acl.py`: a classifier built from a ClassBench
//! ruleset and run over its trace, as `bench/peers/rte_acl_bench.c` runs DPDK's `rte_acl`.
//!
//! ```text
//! classbench RULES TRACE IDS ROUNDS SAMPLE LINEAR_IDS [tuplemerge|bitvector]
//! classbench trace RULES COUNT SEED OUT
//! ```
//!
//! The classifier is TupleMerge, or the bit-vector classifier the engine's compiled programs
//! are (`bitvector`); a set the latter refuses for its size prints `{"rules", "refused"}`.
//!
//! The second form writes a trace for a ruleset published without one (fw1 and ipc1 at 100k):
//! COUNT headers of `classbench::headers_from_rules` (each a point inside a rule chosen by a
//! seeded sequence), in ClassBench's trace format (rule number 0: not known).
//!
//! RULES and TRACE are ClassBench files (`.gz` read as gzip). Rule i gets id = priority = i.
//! One untimed pass warms the caches, then ROUNDS timed passes over the whole trace; IDS gets
//! each header's first matching rule (int32 little-endian, -1: none), LINEAR_IDS the linear
//! first-match scan's answers for the first SAMPLE headers (the truth both classifiers are held
//! to). Prints one JSON object: rules, headers, build_s (reading the ruleset included), bytes
//! (the capacities of the classifier's structures), median_s, best_s.

use std::hint::black_box;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use pyclassify_core::classbench;
use pyclassify_core::classifier::{BitVector, Classifier, ClassifierError, LinearScan, PacketKey, TupleMerge};

fn write_ids(path: &str, ids: &[i32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(path, bytes)
}

fn classify_all(c: &dyn Classifier, keys: &[PacketKey], out: &mut [i32]) {
    for (k, o) in keys.iter().zip(out.iter_mut()) {
        *o = c.classify(k).map_or(-1, |m| m.id as i32);
    }
}

fn write_trace(args: &[String]) -> Result<(), String> {
    let [rules_path, count, seed, out] = args else {
        return Err("usage: classbench trace RULES COUNT SEED OUT".into());
    };
    let count: usize = count.parse().map_err(|e| format!("COUNT {count:?}: {e}"))?;
    let seed: u64 = seed.parse().map_err(|e| format!("SEED {seed:?}: {e}"))?;
    let rules = classbench::load_rules(Path::new(rules_path)).map_err(|e| format!("{rules_path}: {e}"))?;
    let mut text = String::with_capacity(count * 48);
    for k in classbench::headers_from_rules(&rules, count, seed) {
        let v4 = |a: u128| (a & 0xffff_ffff) as u32;
        text.push_str(&format!("{}\t{}\t{}\t{}\t{}\t0\t0\n", v4(k.src), v4(k.dst), k.sport, k.dport, k.proto));
    }
    std::fs::write(out, text).map_err(|e| format!("{out}: {e}"))
}

fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("trace") {
        return write_trace(&args[1..]);
    }
    let (args, method) = match args {
        [a @ .., m] if args.len() == 7 => (a, m.as_str()),
        a => (a, "tuplemerge"),
    };
    let [rules_path, trace_path, ids_path, rounds, sample, linear_path] = args else {
        return Err("usage: classbench RULES TRACE IDS ROUNDS SAMPLE LINEAR_IDS [tuplemerge|bitvector]".into());
    };
    let rounds: usize = rounds.parse().map_err(|e| format!("ROUNDS {rounds:?}: {e}"))?;
    let sample: usize = sample.parse().map_err(|e| format!("SAMPLE {sample:?}: {e}"))?;

    let t = Instant::now();
    let rules = classbench::load_rules(Path::new(rules_path)).map_err(|e| format!("{rules_path}: {e}"))?;
    let fast: Box<dyn Classifier> = match method {
        "tuplemerge" => Box::new(TupleMerge::build(&rules).map_err(|e| format!("{rules_path}: {e}"))?),
        "bitvector" => match BitVector::build(&rules) {
            Ok(c) => Box::new(c),
            Err(e @ ClassifierError::TooLarge { .. }) => {
                println!("{}", serde_json::json!({"rules": rules.len(), "refused": e.to_string()}));
                return Ok(());
            }
            Err(e) => return Err(format!("{rules_path}: {e}")),
        },
        m => return Err(format!("unknown classifier {m:?}: tuplemerge or bitvector")),
    };
    let build_s = t.elapsed().as_secs_f64();

    let trace = classbench::load_trace(Path::new(trace_path)).map_err(|e| format!("{trace_path}: {e}"))?;
    let keys: Vec<PacketKey> = trace.iter().map(|e| e.key).collect();
    let mut ids = vec![0i32; keys.len()];
    classify_all(fast.as_ref(), &keys, &mut ids); // warm
    let mut secs = Vec::with_capacity(rounds);
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        classify_all(fast.as_ref(), black_box(&keys), &mut ids);
        secs.push(t.elapsed().as_secs_f64());
        black_box(&ids);
    }
    secs.sort_by(f64::total_cmp);
    let median_s = if secs.len() % 2 == 1 {
        secs[secs.len() / 2]
    } else {
        (secs[secs.len() / 2 - 1] + secs[secs.len() / 2]) / 2.0
    };

    let linear = LinearScan::build(&rules).map_err(|e| format!("{rules_path}: {e}"))?;
    let n = sample.min(keys.len());
    let mut want = vec![0i32; n];
    classify_all(&linear, &keys[..n], &mut want);

    write_ids(ids_path, &ids).map_err(|e| format!("{ids_path}: {e}"))?;
    write_ids(linear_path, &want).map_err(|e| format!("{linear_path}: {e}"))?;
    println!(
        "{}",
        serde_json::json!({
            "rules": fast.len(),
            "headers": keys.len(),
            "build_s": build_s,
            "bytes": fast.memory_bytes(),
            "median_s": median_s,
            "best_s": secs[0],
        })
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("classbench: {e}");
            ExitCode::FAILURE
        }
    }
}
