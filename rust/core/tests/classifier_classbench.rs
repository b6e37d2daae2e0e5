//! The fast classifier against the linear-scan oracle on ClassBench rulesets and every header of
//! their traces. Needs `../shared/classbench` (beside the repository; or `$PYCLASSIFY_CLASSBENCH`):
//! without it these tests print why and pass without checking anything, unless
//! `PYCLASSIFY_REQUIRE_SHARED` is set (CI, `.ci/run`): then they fail.
//!
//! The 10k/100k cases are ignored in debug builds (too slow unoptimized); the test script runs
//! `cargo test --release`, where they run.

use pyclassify_core::classbench::{self, TraceEntry};
use pyclassify_core::classifier::{ClassRule, Classifier, LinearScan, Match, PacketKey, TupleMerge};
use std::path::{Path, PathBuf};

/// Whether `../shared` must be there (CI): a missing folder fails instead of skipping.
fn shared_required() -> bool {
    std::env::var("PYCLASSIFY_REQUIRE_SHARED").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn data_dir() -> Option<PathBuf> {
    let d = classbench::find_data_dir(Path::new(env!("CARGO_MANIFEST_DIR")));
    if d.is_none() {
        let why = "no shared/classbench folder beside the repository (set PYCLASSIFY_CLASSBENCH)";
        assert!(!shared_required(), "{why}, and PYCLASSIFY_REQUIRE_SHARED says it must be there");
        eprintln!("SKIP: {why}");
    }
    d
}

fn load(name: &str) -> Option<(Vec<ClassRule>, Option<Vec<TraceEntry>>)> {
    let d = data_dir()?;
    let rules = classbench::load_rules(&d.join(format!("{name}.rules.gz"))).expect("ruleset parses");
    let tp = d.join(format!("{name}.trace.gz"));
    let trace = tp.exists().then(|| classbench::load_trace(&tp).expect("trace parses"));
    Some((rules, trace))
}

/// Every key: classify, classify_batch and matches_below agree with the oracle.
fn check_agreement(name: &str, keys: &[PacketKey]) {
    let Some((rules, _)) = load(name) else { return };
    let lin = LinearScan::build(&rules).unwrap();
    let tm = TupleMerge::build(&rules).unwrap();
    assert_eq!(tm.len(), rules.len());
    let mut batch = vec![None; keys.len()];
    tm.classify_batch(keys, &mut batch);
    let mut matched = 0;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (i, k) in keys.iter().enumerate() {
        let want = lin.classify(k);
        assert_eq!(tm.classify(k), want, "{name}: header {i} {k:?}");
        assert_eq!(batch[i], want, "{name}: batch header {i}");
        matched += want.is_some() as usize;
        if i % 97 == 0 {
            // All matches passed on the way to (and including) the winner, and a bit further.
            let below = want.map_or(u32::MAX, |m: Match| m.priority.saturating_add(50));
            a.clear();
            b.clear();
            lin.matches_below(k, below, &mut a);
            tm.matches_below(k, below, &mut b);
            assert_eq!(a, b, "{name}: matches_below header {i}");
        }
    }
    // The trace is derived from the rules: almost every header matches something.
    assert!(matched * 10 >= keys.len() * 9, "{name}: only {matched}/{} headers matched", keys.len());
}

fn check_trace(name: &str, limit: usize) {
    let Some((_, trace)) = load(name) else { return };
    let trace = trace.expect("this ruleset has a trace");
    let keys: Vec<PacketKey> = trace.iter().take(limit).map(|t| t.key).collect();
    check_agreement(name, &keys);
}

#[test]
fn acl1_1k_trace() {
    check_trace("acl1_1000", usize::MAX);
}

#[test]
fn fw1_1k_trace() {
    check_trace("fw1_1000", usize::MAX);
}

#[test]
fn ipc1_1k_trace() {
    check_trace("ipc1_1000", usize::MAX);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimized: runs under cargo test --release")]
fn acl1_10k_trace() {
    check_trace("acl1_10000", usize::MAX);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimized: runs under cargo test --release")]
fn fw1_10k_trace() {
    check_trace("fw1_10000", usize::MAX);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimized: runs under cargo test --release")]
fn ipc1_10k_trace() {
    check_trace("ipc1_10000", usize::MAX);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimized: runs under cargo test --release")]
fn acl1_100k_trace_prefix() {
    // The linear oracle costs ~100k rule checks per miss: the first 20k headers are enough.
    check_trace("acl1_100000", 20_000);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimized: runs under cargo test --release")]
fn fw1_ipc1_100k_generated_headers() {
    for name in ["fw1_100000", "ipc1_100000"] {
        let Some((rules, _)) = load(name) else { return };
        let keys = classbench::headers_from_rules(&rules, 5_000, 7);
        check_agreement(name, &keys);
    }
}

/// Built by inserts in shuffled order, then half removed and re-inserted: still the oracle's
/// answers on the whole trace.
#[test]
fn incremental_updates_on_acl1_and_fw1_1k() {
    for name in ["acl1_1000", "fw1_1000", "ipc1_1000"] {
        let Some((rules, trace)) = load(name) else {
            return;
        };
        let keys: Vec<PacketKey> = trace.unwrap().iter().map(|t| t.key).collect();
        // Not in priority order: odd positions backwards, then even positions.
        let mut order: Vec<ClassRule> = rules.iter().skip(1).step_by(2).rev().copied().collect();
        order.extend(rules.iter().step_by(2).copied());
        let mut tm = TupleMerge::default();
        for r in &order {
            tm.insert(*r).unwrap();
        }
        let mut lin = LinearScan::build(&rules).unwrap();
        for k in &keys {
            assert_eq!(tm.classify(k), lin.classify(k), "{name} after inserts");
        }
        for r in rules.iter().filter(|r| r.id % 3 == 0) {
            assert!(tm.remove(r.id));
            assert!(lin.remove(r.id));
        }
        assert!(!tm.remove(u32::MAX));
        for k in &keys {
            assert_eq!(tm.classify(k), lin.classify(k), "{name} after removes");
        }
        for r in rules.iter().filter(|r| r.id % 3 == 0) {
            tm.insert(*r).unwrap();
        }
        let lin = LinearScan::build(&rules).unwrap();
        for k in &keys {
            assert_eq!(tm.classify(k), lin.classify(k), "{name} after re-inserts");
        }
        assert_eq!(tm.len(), rules.len());
    }
}
