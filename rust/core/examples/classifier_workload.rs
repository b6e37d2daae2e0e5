//! A fixed classification workload for instruction counting (`bench/callgrind.sh`).
//!
//! `classifier_workload RULESET [HEADERS]`: loads `RULESET.rules.gz` (and its trace, or headers
//! generated from the rules) from the ClassBench folder, builds a TupleMerge (or, with
//! `CLASSIFIER=bitvector`, the bit-vector classifier the engine's programs are built like), and
//! classifies the first HEADERS headers (default 100000) in `classify_workload`, the one function
//! callgrind counts.
//! Prints a checksum of the matched ids so the work cannot be optimized away and runs can be
//! compared.

use pyclassify_core::classbench;
use pyclassify_core::classifier::{BitVector, Classifier, PacketKey, TupleMerge};
use std::path::Path;

#[inline(never)]
fn classify_workload<C: Classifier>(c: &C, keys: &[PacketKey]) -> u64 {
    let mut acc = 0u64;
    for k in keys {
        acc = acc.wrapping_mul(31).wrapping_add(c.classify(k).map_or(0, |m| m.id as u64 + 1));
    }
    acc
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "acl1_10000".to_string());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let Some(dir) = classbench::find_data_dir(Path::new(env!("CARGO_MANIFEST_DIR"))) else {
        eprintln!("no shared/classbench folder beside the repository (set PYCLASSIFY_CLASSBENCH)");
        std::process::exit(2);
    };
    let rules = classbench::load_rules(&dir.join(format!("{name}.rules.gz"))).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let tp = dir.join(format!("{name}.trace.gz"));
    let keys: Vec<PacketKey> = if tp.exists() {
        match classbench::load_trace(&tp) {
            Ok(t) => t.iter().take(n).map(|e| e.key).collect(),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    } else {
        classbench::headers_from_rules(&rules, n, 1)
    };
    if std::env::var("CLASSIFIER").as_deref() == Ok("bitvector") {
        let bv = BitVector::build(&rules).unwrap_or_else(|e| {
            eprintln!("{name}: {e}");
            std::process::exit(1)
        });
        let sum = classify_workload(&bv, &keys);
        println!("{name}: {} rules, {} headers, bit-vector, checksum {sum:016x}", rules.len(), keys.len());
        return;
    }
    let tm = TupleMerge::build(&rules).expect("ClassBench rules are valid");
    let sum = classify_workload(&tm, &keys);
    println!(
        "{name}: {} rules, {} headers, {} tables, checksum {sum:016x}",
        rules.len(),
        keys.len(),
        tm.stats().tables
    );
}
