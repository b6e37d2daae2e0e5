//! Classifier benchmark on ClassBench (acl1/fw1/ipc1 at 1k/10k/100k rules).
//!
//! `cargo bench --manifest-path rust/Cargo.toml -p pyclassify-core --bench classifier [-- FILTER...]`
//!
//! A plain `harness = false` binary: for every ruleset it prints absolute figures (Mpps, ns per
//! packet at batch sizes 1, 16 and 256; build time; bytes per rule; updates per second) and the
//! ratio against the linear first-match scan measured in the same run. Before timing anything it
//! checks the fast classifier against the linear scan on the headers (all of them up to 10k rules,
//! a deterministic sample at 100k) and aborts on any disagreement.
//!
//! Rulesets without a trace (fw1/ipc1 at 100k) are timed on headers generated from the rules
//! (`classbench::headers_from_rules`, fixed seed), flagged `gen` in the output.
//!
//! Environment: `PYCLASSIFY_CLASSBENCH` = data folder (default: `shared/classbench` beside the
//! repository); `BENCH_SECONDS` = minimum time per measurement (default 0.25); `BENCH_RUNS` =
//! repetitions, the median is reported (default 5).

use pyclassify_core::classbench;
use pyclassify_core::classifier::{ClassRule, Classifier, LinearScan, Match, PacketKey, TupleMerge};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Median over `runs` of the seconds per call of `f`, each run repeating `f` for at least `min`.
fn median_secs(runs: usize, min: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let mut n = 0u64;
            while t.elapsed() < min || n == 0 {
                f();
                n += 1;
            }
            t.elapsed().as_secs_f64() / n as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per packet classifying `keys` in batches of `batch` (1 = `classify` per key).
fn time_classify(c: &dyn Classifier, keys: &[PacketKey], batch: usize, runs: usize, min: Duration) -> f64 {
    let mut out = vec![None::<Match>; batch.max(1)];
    let per_pass = median_secs(runs, min, || {
        if batch <= 1 {
            let mut acc = 0u64;
            for k in keys {
                if let Some(m) = c.classify(black_box(k)) {
                    acc = acc.wrapping_add(m.id as u64);
                }
            }
            black_box(acc);
        } else {
            for chunk in keys.chunks(batch) {
                c.classify_batch(black_box(chunk), &mut out[..chunk.len()]);
                black_box(&out);
            }
        }
    });
    per_pass / keys.len() as f64
}

/// Updates per second: each step removes one rule and inserts it back (2 updates), through
/// `reinsert`; `per_round` steps between clock reads (fewer for the slow linear scan).
fn time_updates(rules: &[ClassRule], min: Duration, per_round: u64, mut reinsert: impl FnMut(&ClassRule)) -> f64 {
    // A fixed stride through the ruleset so updates touch all tables, not one hot bucket.
    let n = rules.len();
    let stride = (7919 % n.max(1)).max(1);
    let mut i = 0usize;
    let t = Instant::now();
    let mut ops = 0u64;
    while t.elapsed() < min || ops == 0 {
        for _ in 0..per_round {
            reinsert(&rules[i]);
            i = (i + stride) % n;
        }
        ops += 2 * per_round;
    }
    ops as f64 / t.elapsed().as_secs_f64()
}

fn mpps(secs_per_pkt: f64) -> f64 {
    1e-6 / secs_per_pkt
}

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let Some(dir) = classbench::find_data_dir(Path::new(env!("CARGO_MANIFEST_DIR"))) else {
        eprintln!("SKIP: no shared/classbench folder beside the repository (set PYCLASSIFY_CLASSBENCH)");
        return;
    };
    let min = Duration::from_secs_f64(env_f64("BENCH_SECONDS", 0.25));
    let runs = env_f64("BENCH_RUNS", 5.0).max(1.0) as usize;
    println!("classifier benchmark: TupleMerge vs LinearScan (first-match), single thread, median of {runs} runs");
    println!(
        "{:<12} {:>6} {:>8} {:>4} | {:>7} {:>7} {:>7} {:>7} | {:>8} {:>8} | {:>9} {:>8} {:>6} {:>7} | {:>10} {:>9}",
        "ruleset",
        "rules",
        "headers",
        "src",
        "b1 Mpps",
        "ns/pkt",
        "b16",
        "b256",
        "lin Mpps",
        "x lin",
        "build ms",
        "lin ms",
        "B/rule",
        "tables",
        "updates/s",
        "x lin upd"
    );
    for set in ["acl1", "fw1", "ipc1"] {
        for size in [1000, 10000, 100000] {
            let name = format!("{set}_{size}");
            if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
                continue;
            }
            let rules = match classbench::load_rules(&dir.join(format!("{name}.rules.gz"))) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    continue;
                }
            };
            let tp = dir.join(format!("{name}.trace.gz"));
            let (keys, source): (Vec<PacketKey>, &str) = if tp.exists() {
                let t = classbench::load_trace(&tp).unwrap_or_else(|e| panic!("{e}"));
                (t.iter().map(|e| e.key).collect(), "trace")
            } else {
                (classbench::headers_from_rules(&rules, 1_000_000, 1), "gen")
            };

            let build_ms = 1e3
                * median_secs(3.min(runs), Duration::ZERO, || {
                    black_box(TupleMerge::build(&rules).unwrap());
                });
            let lin_ms = 1e3
                * median_secs(3.min(runs), Duration::ZERO, || {
                    black_box(LinearScan::build(&rules).unwrap());
                });
            let mut tm = TupleMerge::build(&rules).unwrap();
            let mut lin = LinearScan::build(&rules).unwrap();

            // Correctness first: all headers up to 10k rules, a strided sample of 20k beyond.
            let step = if rules.len() > 20_000 { (keys.len() / 20_000).max(1) } else { 1 };
            for k in keys.iter().step_by(step) {
                assert_eq!(tm.classify(k), lin.classify(k), "{name}: disagreement on {k:?}");
            }

            let b1 = time_classify(&tm, &keys, 1, runs, min);
            let b16 = time_classify(&tm, &keys, 16, runs, min);
            let b256 = time_classify(&tm, &keys, 256, runs, min);
            // The linear scan is slow at 100k rules: time it on a prefix of the same headers.
            let lin_keys = &keys[..keys.len().min((40_000_000 / rules.len()).max(1000))];
            let lin_t = time_classify(&lin, lin_keys, 1, runs, min);

            let bytes_per_rule = tm.memory_bytes() as f64 / rules.len() as f64;
            let upd = time_updates(&rules, min, 1000, |r| {
                assert!(tm.remove(r.id));
                tm.insert(*r).expect("re-insert");
            });
            let lin_upd = time_updates(&rules, min, 50, |r| {
                assert!(lin.remove(r.id));
                lin.insert(*r).expect("re-insert");
            });
            // The updates above left the same rule set: re-check a sample.
            for k in keys.iter().step_by(step * 16) {
                assert_eq!(tm.classify(k), lin.classify(k), "{name}: disagreement after updates");
            }
            println!(
                "{:<12} {:>6} {:>8} {:>4} | {:>7.2} {:>7.1} {:>7.2} {:>7.2} | {:>8.3} {:>7.0}x | {:>9.1} {:>8.1} {:>6.0} {:>7} | {:>10.0} {:>8.0}x",
                name,
                rules.len(),
                keys.len(),
                source,
                mpps(b1),
                b1 * 1e9,
                mpps(b16),
                mpps(b256),
                mpps(lin_t),
                lin_t / b1,
                build_ms,
                lin_ms,
                bytes_per_rule,
                tm.stats().tables,
                upd,
                upd / lin_upd,
            );
        }
    }
    println!("b1/b16/b256: batch sizes; x lin: TupleMerge b1 rate / LinearScan rate (same headers, same run);");
    println!("B/rule: TupleMerge heap bytes (sum of capacities) per rule; updates/s: remove+insert of existing rules.");
}
