//! Label index benchmarks: endpoint update latency, namespace label change, selector add and
//! full build, each beside a brute-force baseline measured in the same run.
//!
//! Run: `cargo bench --manifest-path rust/Cargo.toml --bench labelindex` (optionally
//! `-- ENDPOINTS SELECTORS`, default `10000 1000`; under callgrind:
//! `valgrind --tool=callgrind target/release/deps/labelindex-* 10000 1000`).
//!
//! Workload (deterministic, seeded): 50 namespaces (parents) labelled name/team/env; endpoints
//! spread over them with app (500 apps), tier (4), version (3), pod-template-hash (unique) and
//! on 10% `monitoring`; selectors of realistic shapes: `app == x` (40%), `app == x && tier == y`
//! (15%), `app in {3 apps}` (10%), `tier in {..} && pcns.name == ns` (10%), namespace selectors
//! `pcns.team == t && has(app)` (10%), `pcns.env == 'prod' && tier == 'db'` (5%),
//! `has(monitoring)` (5%), and unindexable ones (5%: `all()`, `version != 'v1'`,
//! `!has(quarantine)`, `tier not in {..}`).
//!
//! Baseline: what an index-less engine does: on an endpoint update evaluate every selector
//! against the endpoint's effective labels; on a selector add evaluate it against every endpoint.
//! Figures are medians of 5 rounds of wall time on a shared machine: read the ratios.

use std::hint::black_box;
use std::time::Instant;

use pyclassify_core::labelindex::{LabelIndex, LabelMap, DEFAULT_PARENT_PREFIX};
use pyclassify_core::selector::Selector;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const NAMESPACES: usize = 50;
const APPS: usize = 500;
const TIERS: &[&str] = &["frontend", "backend", "db", "cache"];

fn ns_labels(i: usize) -> LabelMap {
    let env = ["prod", "staging", "dev"][i % 3];
    [("name", format!("ns-{i}")), ("team", format!("t{}", i % 10)), ("env", env.to_string())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn ep_labels(rng: &mut Rng, app: usize, hash: u64) -> LabelMap {
    let mut m = LabelMap::new();
    m.insert("app".into(), format!("app-{app}"));
    m.insert("tier".into(), TIERS[app % TIERS.len()].into());
    m.insert("version".into(), format!("v{}", rng.below(3) + 1));
    m.insert("pod-template-hash".into(), format!("{hash:016x}"));
    if rng.below(10) == 0 {
        m.insert("monitoring".into(), "true".into());
    }
    m
}

fn selector_text(rng: &mut Rng) -> String {
    let app = |r: &mut Rng| format!("app-{}", r.below(APPS));
    match rng.below(100) {
        0..=39 => format!("app == '{}'", app(rng)),
        40..=54 => format!("app == '{}' && tier == '{}'", app(rng), TIERS[rng.below(4)]),
        55..=64 => format!("app in {{'{}', '{}', '{}'}}", app(rng), app(rng), app(rng)),
        65..=74 => format!("tier in {{'frontend', 'backend'}} && pcns.name == 'ns-{}'", rng.below(NAMESPACES)),
        75..=84 => format!("pcns.team == 't{}' && has(app)", rng.below(10)),
        85..=89 => "pcns.env == 'prod' && tier == 'db'".to_string(),
        90..=94 => "has(monitoring)".to_string(),
        _ => ["all()", "version != 'v1'", "!has(quarantine)", "tier not in {'db', 'cache'}"][rng.below(4)].to_string(),
    }
}

struct Workload {
    namespaces: Vec<LabelMap>,
    endpoints: Vec<(LabelMap, usize)>,
    selectors: Vec<Selector>,
}

fn workload(n_eps: usize, n_sels: usize) -> Workload {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let namespaces = (0..NAMESPACES).map(ns_labels).collect();
    let endpoints = (0..n_eps)
        .map(|i| {
            let app = rng.below(APPS);
            let h = rng.next();
            (ep_labels(&mut rng, app, h), i % NAMESPACES)
        })
        .collect();
    let selectors = (0..n_sels).map(|_| Selector::parse(&selector_text(&mut rng)).unwrap()).collect();
    Workload { namespaces, endpoints, selectors }
}

type Index = LabelIndex<u32, u32, u32>;

fn build(w: &Workload, selectors_first: bool) -> Index {
    let mut idx = Index::new();
    idx.set_record_events(true);
    for (i, l) in w.namespaces.iter().enumerate() {
        idx.upsert_parent(i as u32, l.clone());
    }
    let add_sels = |idx: &mut Index| {
        for (i, s) in w.selectors.iter().enumerate() {
            idx.add_selector(i as u32, s.clone());
        }
    };
    if selectors_first {
        add_sels(&mut idx);
    }
    for (i, (l, ns)) in w.endpoints.iter().enumerate() {
        idx.upsert_endpoint_with_parent(i as u32, l.clone(), Some(*ns as u32));
        if i % 1024 == 0 {
            idx.take_events();
        }
    }
    if !selectors_first {
        add_sels(&mut idx);
    }
    idx.take_events();
    idx
}

/// The endpoint's effective labels, composed the way the index does (own over prefixed parent).
fn effective(w: &Workload, own: &LabelMap, ns: usize) -> LabelMap {
    let mut m: LabelMap =
        w.namespaces[ns].iter().map(|(k, v)| (format!("{DEFAULT_PARENT_PREFIX}{k}"), v.clone())).collect();
    m.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    m
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// Median over 5 rounds of `f(round)`'s seconds divided by `per`.
fn time_per(per: usize, mut f: impl FnMut(usize)) -> f64 {
    median(
        (0..5)
            .map(|round| {
                let t = Instant::now();
                f(round);
                t.elapsed().as_secs_f64() / per as f64
            })
            .collect(),
    )
}

fn row(name: &str, ours_ns: f64, base_ns: f64) {
    println!("{name:<44} {:>12.0} ns {:>14.0} ns {:>9.1}x", ours_ns, base_ns, base_ns / ours_ns);
}

fn check_against_brute_force(idx: &Index, w: &Workload, eps: &[(LabelMap, usize)]) {
    for (s, sel) in w.selectors.iter().enumerate().step_by(37) {
        let got: std::collections::BTreeSet<u32> = idx.matching_endpoints(&(s as u32)).unwrap().copied().collect();
        let want: std::collections::BTreeSet<u32> = eps
            .iter()
            .enumerate()
            .filter(|(_, (l, ns))| sel.matches(&effective(w, l, *ns)))
            .map(|(i, _)| i as u32)
            .collect();
        assert_eq!(got, want, "selector {s} ({sel}) disagrees with brute force");
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n_eps = args.first().copied().unwrap_or(10_000);
    let n_sels = args.get(1).copied().unwrap_or(1_000);
    let w = workload(n_eps, n_sels);
    println!("label index: {n_eps} endpoints in {NAMESPACES} namespaces, {n_sels} selectors");

    // ---- full build ----
    let t = Instant::now();
    let idx = build(&w, true);
    let build_sel_first = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let idx2 = build(&w, false);
    let build_ep_first = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut brute_pairs = 0usize;
    for (l, ns) in &w.endpoints {
        let eff = effective(&w, l, *ns);
        brute_pairs += w.selectors.iter().filter(|s| s.matches(&eff)).count();
    }
    let build_brute = t.elapsed().as_secs_f64();
    let pairs: usize = (0..n_sels as u32).map(|s| idx.matching_endpoints(&s).unwrap().count()).sum();
    assert_eq!(pairs, brute_pairs);
    assert_eq!(pairs, (0..n_sels as u32).map(|s| idx2.matching_endpoints(&s).unwrap().count()).sum::<usize>());
    println!(
        "{pairs} (selector, endpoint) matches; {} scanned selectors",
        (0..n_sels as u32)
            .filter(|s| matches!(idx.strategy(s), Some(pyclassify_core::labelindex::IndexStrategy::Scanned)))
            .count()
    );
    println!("{:<44} {:>15} {:>17} {:>10}", "", "index", "brute force", "ratio");
    row("full build, selectors then endpoints (ns)", build_sel_first * 1e9, build_brute * 1e9);
    row("full build, endpoints then selectors (ns)", build_ep_first * 1e9, build_brute * 1e9);
    drop(idx2);

    let mut idx = idx;
    let mut eps = w.endpoints.clone();
    let updates = 5_000.min(n_eps / 2).max(1);
    let sels = &w.selectors;
    let mut rng = Rng(42);

    // ---- endpoint updates: 5 rounds of `updates` distinct endpoints each, planned ahead from
    // the state the previous round leaves, so every update really changes labels ----
    type Change = fn(&mut Rng, &LabelMap, usize) -> LabelMap;
    let relabel: Change = |rng, _old, _i| {
        let app = rng.below(APPS);
        let h = rng.next();
        ep_labels(rng, app, h)
    };
    let version: Change = |_rng, old, i| {
        let mut l = old.clone();
        let v = if old.get("version").map(String::as_str) == Some("v9") { "v8" } else { "v9" };
        l.insert("version".into(), format!("{v}{}", i % 2));
        l
    };
    let app_only: Change = |rng, old, _i| {
        let mut l = old.clone();
        l.insert("app".into(), format!("app-{}", rng.below(APPS)));
        l
    };
    let unrelated: Change = |_rng, old, i| {
        let mut l = old.clone();
        l.insert("pod-template-hash".into(), format!("{i:016x}"));
        l
    };
    let cases: [(&str, Change); 4] = [
        ("endpoint update: all labels (ns/update)", relabel),
        ("endpoint update: app label (ns/update)", app_only),
        ("endpoint update: version label (ns/update)", version),
        ("endpoint update: unnamed label (ns/update)", unrelated),
    ];
    for (name, change) in cases {
        let mut sim = eps.clone();
        let mut counter = 0usize;
        let plans: Vec<Vec<(usize, LabelMap)>> = (0..5)
            .map(|_| {
                let mut seen = std::collections::HashSet::new();
                let mut plan = Vec::with_capacity(updates);
                while plan.len() < updates {
                    let e = rng.below(n_eps);
                    if seen.insert(e) {
                        counter += 1;
                        plan.push((e, change(&mut rng, &sim[e].0, counter)));
                    }
                }
                for (e, l) in &plan {
                    sim[*e].0 = l.clone();
                }
                plan
            })
            .collect();
        let ev0 = idx.evaluations();
        let ours = time_per(updates, |round| {
            for (e, l) in &plans[round] {
                idx.upsert_endpoint_with_parent(*e as u32, l.clone(), Some(eps[*e].1 as u32));
            }
            idx.take_events();
        });
        let evals = (idx.evaluations() - ev0) as f64 / (5 * updates) as f64;
        let base = time_per(updates, |round| {
            for (e, l) in &plans[round] {
                let eff = effective(&w, l, eps[*e].1);
                black_box(w.selectors.iter().filter(|s| s.matches(&eff)).count());
            }
        });
        eps = sim;
        row(name, ours * 1e9, base * 1e9);
        println!("{:<44} {evals:>12.1} selector evaluations per update (brute force: {n_sels})", "");
    }
    check_against_brute_force(&idx, &w, &eps);

    // ---- endpoint churn: a pod deleted and a new one created ----
    let churn = updates / 2;
    let ours = time_per(churn * 2, |round| {
        for i in 0..churn {
            let id = (n_eps + round * churn + i) as u32;
            let (l, ns) = &eps[i % n_eps];
            idx.upsert_endpoint_with_parent(id, l.clone(), Some(*ns as u32));
            idx.remove_endpoint(&id);
        }
        idx.take_events();
    });
    let base = time_per(churn * 2, |_| {
        for i in 0..churn {
            let (l, ns) = &eps[i % n_eps];
            let eff = effective(&w, l, *ns);
            black_box(sels.iter().filter(|s| s.matches(&eff)).count());
        }
    });
    row("endpoint add+remove (ns/operation)", ours * 1e9, base * 1e9);

    // ---- namespace label change: every pod of the namespace inherits it ----
    let per_ns = n_eps.div_ceil(NAMESPACES);
    let ns_changes = 50;
    let mut ns_state = w.namespaces.clone();
    let ours = time_per(ns_changes, |round| {
        for i in 0..ns_changes {
            let ns = i % NAMESPACES;
            let mut l = ns_state[ns].clone();
            l.insert("team".into(), format!("t{}", (i + round + 1) % 10));
            idx.upsert_parent(ns as u32, l.clone());
            ns_state[ns] = l;
        }
        idx.take_events();
    });
    let base = time_per(ns_changes, |_| {
        for i in 0..ns_changes {
            let ns = i % NAMESPACES;
            for (l, _) in eps.iter().filter(|(_, n)| *n == ns) {
                let mut m: LabelMap =
                    ns_state[ns].iter().map(|(k, v)| (format!("{DEFAULT_PARENT_PREFIX}{k}"), v.clone())).collect();
                m.extend(l.iter().map(|(k, v)| (k.clone(), v.clone())));
                black_box(sels.iter().filter(|s| s.matches(&m)).count());
            }
        }
    });
    row(&format!("namespace label change, {per_ns} pods (ns/change)"), ours * 1e9, base * 1e9);
    let w_now = Workload { namespaces: ns_state, endpoints: Vec::new(), selectors: w.selectors.clone() };
    check_against_brute_force(&idx, &w_now, &eps);

    // ---- selector add (replace an existing selector by a fresh one of a realistic shape) ----
    let sel_plan: Vec<Selector> = (0..200).map(|_| Selector::parse(&selector_text(&mut rng)).unwrap()).collect();
    let ours = time_per(sel_plan.len(), |_| {
        for (i, s) in sel_plan.iter().enumerate() {
            idx.add_selector((n_sels + i) as u32, s.clone());
        }
        for i in 0..sel_plan.len() {
            idx.remove_selector(&((n_sels + i) as u32));
        }
        idx.take_events();
    });
    let effs: Vec<LabelMap> = eps.iter().map(|(l, ns)| effective(&w_now, l, *ns)).collect();
    let base = time_per(sel_plan.len(), |_| {
        for s in &sel_plan {
            black_box(effs.iter().filter(|l| s.matches(*l)).count());
        }
    });
    row("selector add+remove (ns/selector)", ours * 1e9, base * 1e9);
    println!("goal: endpoint update < 10000 ns");
}
