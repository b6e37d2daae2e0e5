//! Rules sent once and compiled once: a delta's `rule_lists`, named by position by every policy
//! with those rules, and the model's sharing of compiled rules among policies whose rules are
//! equal, held to the rule walk of a model built from the same world with every rule sent in
//! place (`Spec::into_delta`), on random worlds where every policy has a copy (its rules,
//! another policy's subject), and through removals of either copy.

use std::sync::Arc;

use serde_json::{json, Value};

use pyclassify_core::engine::spec::{Delta, RuleSpecs, Spec};
use pyclassify_core::engine::workload::{random_flow, random_spec, Rng};
use pyclassify_core::engine::{Compile, Decision, Defaults, FlowEnd, Model, Snapshot, Source, Verdict};

const DEFAULTS: [Defaults; 2] =
    [Defaults { pod_allow: true, host_allow: false }, Defaults { pod_allow: false, host_allow: true }];

/// A random world where each policy is followed by a copy of its rules under another policy's
/// subject (same tier, so the whole-world order holds).
fn world_with_copies(seed: u64) -> Value {
    let mut spec = random_spec(seed);
    let policies = spec["policies"].as_array().expect("policies").clone();
    let mut r = Rng::new(seed ^ 0x5eed);
    let mut out = Vec::new();
    for p in &policies {
        out.push(p.clone());
        let mut copy = p.clone();
        copy["subject"] = policies[r.below(policies.len())]["subject"].clone();
        out.push(copy);
    }
    spec["policies"] = Value::Array(out);
    spec
}

/// The whole world as one delta whose policies and profiles name their rules by position in
/// `rule_lists` (each distinct list once), ids and orders by position as `Spec::into_delta`.
fn listed_delta(spec: &Value) -> Vec<u8> {
    listed(spec, None)
}

/// `listed_delta`, or with `only`: a delta of those policies alone (the rest of the world is
/// as the model holds it).
fn listed(spec: &Value, only: Option<&[usize]>) -> Vec<u8> {
    let mut lists: Vec<Value> = Vec::new();
    let mut position = |rules: &Value| -> usize {
        lists.iter().position(|l| l == rules).unwrap_or_else(|| {
            lists.push(rules.clone());
            lists.len() - 1
        })
    };
    let keyed = |v: &Value| -> Vec<Value> {
        v.as_array()
            .expect("array")
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let mut x = x.clone();
                x["id"] = json!(i);
                x
            })
            .collect()
    };
    let policies: Vec<Value> = spec["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut p = p.clone();
            p["id"] = json!(i);
            p["order"] = json!(i as f64);
            p["name"] = json!(format!("p{i}"));
            p["ingress"] = json!(position(&p["ingress"]));
            p["egress"] = json!(position(&p["egress"]));
            p
        })
        .collect();
    if let Some(only) = only {
        let policies: Vec<&Value> = only.iter().map(|&i| &policies[i]).collect();
        return serde_json::to_vec(&json!({"policies": policies, "rule_lists": lists})).expect("json");
    }
    let profiles: Vec<Value> = spec["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut p = p.clone();
            p["id"] = json!(i);
            p["ingress"] = json!(position(&p["ingress"]));
            p["egress"] = json!(position(&p["egress"]));
            p
        })
        .collect();
    let tiers: Vec<Value> = spec["tiers"]
        .as_array()
        .expect("tiers")
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut t = t.clone();
            t["id"] = json!(i);
            t["order"] = json!(i as f64);
            t
        })
        .collect();
    let namespaces: Vec<Value> = spec["namespaces"]
        .as_object()
        .expect("namespaces")
        .iter()
        .map(|(k, v)| json!({"name": k, "labels": v}))
        .collect();
    serde_json::to_vec(&json!({
        "namespaces": namespaces,
        "endpoints": keyed(&spec["endpoints"]),
        "network_sets": keyed(&spec["network_sets"]),
        "nodes": keyed(&spec["nodes"]),
        "services": keyed(&spec["services"]),
        "tiers": tiers,
        "policies": policies,
        "profiles": profiles,
        "rule_lists": lists,
    }))
    .expect("json")
}

/// Whether a policy's compiled rules depend on more than its rules (relative peers: the
/// subject's namespace; node selectors: the nodes' addresses): those are not shared.
fn context_free(policy: &Value) -> bool {
    ["ingress", "egress"].iter().flat_map(|d| policy[d].as_array().expect("rules")).all(|rule| {
        ["sources", "destinations"].iter().flat_map(|s| rule[s].as_array().expect("peers")).all(|e| {
            e["namespace_relation"].is_null()
                && e["same_labels"].as_array().is_none_or(|v| v.is_empty())
                && e["not_same_labels"].as_array().is_none_or(|v| v.is_empty())
                && e["node_selector"].is_null()
        })
    })
}

/// The whole world built with its rules in place, ids by position: what the shared model is
/// held to, by its rule walk.
fn in_place(spec: &Value) -> Arc<Snapshot> {
    let mut model = Model::new();
    model.apply(serde_json::from_value::<Spec>(spec.clone()).expect("spec").into_delta()).expect("model builds");
    model.snapshot()
}

/// Model decisions name policies by id; `first` is the id of the whole world's policy 0.
fn shift(v: Verdict, first: u32) -> Verdict {
    let map = |d: Option<Decision>| {
        d.map(|mut d| {
            let f = |s: Source| match s {
                Source::Policy(i) => Source::Policy(i - first),
                other => other,
            };
            d.source = d.source.map(f);
            for l in &mut d.logs {
                l.source = f(l.source);
            }
            d
        })
    };
    Verdict { allow: v.allow, egress: map(v.egress), ingress: map(v.ingress), awaits_request: v.awaits_request }
}

fn compare(spec: &Value, model: &Model, first: u32, seed: u64) -> usize {
    let reference = in_place(spec);
    let snap = model.snapshot();
    let endpoints = spec["endpoints"].as_array().expect("endpoints").len();
    let mut r = Rng::new(seed);
    let mut decided = 0;
    for i in 0..60 {
        let mut flow = random_flow(&mut r);
        if i % 4 == 0 && endpoints > 0 {
            flow.src = FlowEnd { endpoint: Some(r.below(endpoints) as u32), ..flow.src };
        }
        for d in DEFAULTS {
            let want = reference.evaluate_walked(&flow, d).expect("valid flow");
            let got = shift(snap.evaluate(&flow, d).expect("valid flow"), first);
            assert_eq!(got, want, "seed {seed}: {flow:?}");
            decided +=
                [&got.egress, &got.ingress].iter().filter(|x| x.as_ref().is_some_and(|d| d.rule.is_some())).count();
        }
    }
    decided
}

#[test]
fn copies_share_their_compiled_rules_and_judge_as_rules_in_place() {
    let (mut shared, mut decided) = (0, 0);
    for seed in 0..600u64 {
        let spec = world_with_copies(seed);
        let mut model = Model::new();
        model.apply(Delta::from_json(&listed_delta(&spec)).expect("delta")).expect("model builds");
        decided += compare(&spec, &model, 0, seed * 7919 + 3);
        let snap = model.snapshot();
        for (i, p) in spec["policies"].as_array().expect("policies").iter().enumerate().step_by(2) {
            let (a, b) = (snap.policy_rules(i as u32).expect("rules"), snap.policy_rules(i as u32 + 1).expect("rules"));
            if context_free(p) {
                assert!(std::ptr::eq(a, b), "seed {seed}: policy {i} and its copy compiled apart");
                shared += 1;
            } else {
                assert!(!std::ptr::eq(a, b), "seed {seed}: policy {i} has relative peers or node selectors, shared");
            }
        }
    }
    assert!(shared > 500 && decided > 2_000, "{shared} shared, {decided} decided: the test would say little");
}

#[test]
fn shared_rules_outlive_each_of_their_users() {
    for seed in 0..300u64 {
        let spec = world_with_copies(seed);
        let n = spec["policies"].as_array().expect("policies").len() as u32;
        let mut model = Model::new();
        model.apply(Delta::from_json(&listed_delta(&spec)).expect("delta")).expect("model builds");
        // The originals go: each copy still judges with the rules it shared.
        let originals: Vec<u32> = (0..n).step_by(2).collect();
        model
            .apply(
                Delta::from_json(&serde_json::to_vec(&json!({"remove_policies": originals})).expect("json"))
                    .expect("delta"),
            )
            .expect("removal");
        let mut copies = spec.clone();
        copies["policies"] =
            Value::Array(spec["policies"].as_array().expect("p").iter().skip(1).step_by(2).cloned().collect());
        // The model names copy k (whole-world position k) by its id 2k + 1.
        let reference = in_place(&copies);
        let snap = model.snapshot();
        let mut r = Rng::new(seed);
        for _ in 0..40 {
            let flow = random_flow(&mut r);
            for d in DEFAULTS {
                let want = reference.evaluate_walked(&flow, d).expect("flow");
                let got = snap.evaluate(&flow, d).expect("flow");
                let unmap = |v: Verdict| {
                    let f = |d: Option<Decision>| {
                        d.map(|mut d| {
                            let g = |s: Source| match s {
                                Source::Policy(i) => Source::Policy((i - 1) / 2),
                                o => o,
                            };
                            d.source = d.source.map(g);
                            for l in &mut d.logs {
                                l.source = g(l.source);
                            }
                            d
                        })
                    };
                    Verdict {
                        allow: v.allow,
                        egress: f(v.egress),
                        ingress: f(v.ingress),
                        awaits_request: v.awaits_request,
                    }
                };
                assert_eq!(unmap(got), want, "seed {seed}: {flow:?}");
            }
        }
        // Then the copies go too: nothing is left of the rules (their selectors released).
        let rest: Vec<u32> = (1..n).step_by(2).collect();
        model
            .apply(
                Delta::from_json(&serde_json::to_vec(&json!({"remove_policies": rest})).expect("json")).expect("delta"),
            )
            .expect("removal");
        let fresh = {
            let mut none = spec.clone();
            none["policies"] = json!([]);
            let mut m = Model::new();
            m.apply(Delta::from_json(&listed_delta(&none)).expect("delta")).expect("model");
            m
        };
        assert_eq!(model.stats().selectors, fresh.stats().selectors, "seed {seed}: selectors of removed rules held");
    }
}

/// A shared rule list's users change one by one: each original takes the next original's rules,
/// its copy keeps the old ones. The programs listing a changed policy are compiled against its
/// new rules, those listing only its copy keep theirs, and a snapshot taken before the change
/// still decides by the rules it holds: the compiled programs of both snapshots decide as the
/// rule walk, the new one as the same world built with its rules in place. Programs compiled with the snapshot and on first use.
#[test]
fn compiled_programs_follow_each_user_of_shared_rules() {
    let mut moved = 0;
    for seed in 0..300u64 {
        let mut spec = world_with_copies(seed);
        let mut model = Model::new();
        model.set_compile([Compile::Always, Compile::Built, Compile::OnFirstUse][seed as usize % 3]);
        model.apply(Delta::from_json(&listed_delta(&spec)).expect("delta")).expect("model builds");
        let before = model.snapshot();
        if seed % 2 == 0 {
            before.compile_all();
        }
        let policies = spec["policies"].as_array().expect("policies").clone();
        let originals: Vec<usize> = (0..policies.len()).step_by(2).collect();
        for (k, &i) in originals.iter().enumerate() {
            let next = &policies[originals[(k + 1) % originals.len()]];
            for d in ["ingress", "egress"] {
                spec["policies"][i][d] = next[d].clone();
            }
        }
        model.apply(Delta::from_json(&listed(&spec, Some(&originals))).expect("delta")).expect("change applies");
        let after = model.snapshot();
        let ps = spec["policies"].as_array().expect("policies");
        for (k, &i) in originals.iter().enumerate() {
            // The original now holds what the next original's copy holds: shared with it.
            let j = originals[(k + 1) % originals.len()] + 1;
            if context_free(&ps[i]) && ps[i]["ingress"] == ps[j]["ingress"] && ps[i]["egress"] == ps[j]["egress"] {
                let (a, b) =
                    (after.policy_rules(i as u32).expect("rules"), after.policy_rules(j as u32).expect("rules"));
                assert!(std::ptr::eq(a, b), "seed {seed}: policy {i} and policy {j} hold equal rules apart");
                moved += 1;
            }
        }
        let mut r = Rng::new(seed ^ 0xfeed);
        for _ in 0..40 {
            let mut flow = random_flow(&mut r);
            if r.chance(30) {
                let n = spec["endpoints"].as_array().expect("endpoints").len();
                if n > 0 {
                    flow.src = FlowEnd { endpoint: Some(r.below(n) as u32), ..flow.src };
                }
            }
            for d in DEFAULTS {
                for (snap, name) in [(&after, "after"), (&before, "before")] {
                    let walked = snap.evaluate_walked(&flow, d).expect("flow");
                    assert_eq!(
                        snap.evaluate(&flow, d).expect("flow"),
                        walked,
                        "seed {seed}, {name} the change: {flow:?}"
                    );
                }
            }
        }
        compare(&spec, &model, 0, seed * 31 + 7);
    }
    assert!(moved > 200, "only {moved} changed policies shared their new rules: the test would say little");
}

#[test]
fn a_rule_list_position_must_be_in_the_delta() {
    let delta = |ingress: &str| {
        format!(
            r#"{{"tiers": [{{"id": 0, "name": "default", "default_action": "Deny"}}],
                 "policies": [{{"id": 0, "tier": "default", "types": ["ingress"],
                   "subject": {{"selector": "all()", "endpoint_kinds": ["pod"], "namespace": null,
                                "namespace_selector": null, "service_account_selector": null}},
                   "ingress": {ingress}, "egress": []}}],
                 "rule_lists": []}}"#
        )
        .into_bytes()
    };
    let err = Delta::from_json(&delta("3")).expect_err("position 3 of no list");
    assert!(err.to_string().contains("rule list 3"), "{err}");
    // A delta built by hand that still names a list: refused, and nothing changes.
    let mut hand = Delta::from_json(&delta("[]")).expect("delta");
    hand.policies[0].ingress = RuleSpecs::Listed(0);
    let mut model = Model::new();
    let before = model.snapshot().generation();
    let err = model.apply(hand).expect_err("an unresolved list");
    assert!(err.to_string().contains("rule list"), "{err}");
    assert_eq!(model.snapshot().generation(), before);
    assert_eq!(model.stats().policies, 0);
}
