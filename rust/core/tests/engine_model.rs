//! The identity engine after random sequences of incremental changes of every kind, held to a
//! model built fresh from the same world, and its compiled programs held to the rule walk. (The
//! engine's semantics are held to `pyclassify/reference.py` by the Python differential tests,
//! tests/test_engine_differential.py and tests/test_engine_incremental.py.)
//!
//! A "world" keeps every object in a slot whose index is its id in the model. After every change
//! the incrementally updated model and a model built fresh from the same world must give the
//! same verdict, tier, policy, rule and Log trail, by every path (flow, header, decision memo).

use proptest::prelude::*;
use serde_json::{json, Value};

use pyclassify_core::engine::spec::Delta;
use pyclassify_core::engine::workload::{flow_header, random_flow, random_spec, Rng};
use pyclassify_core::engine::{Compile, Defaults, Flow, FlowEnd, Judge, Model, PacketVerdict};

const DEFAULTS: [Defaults; 2] =
    [Defaults { pod_allow: true, host_allow: false }, Defaults { pod_allow: false, host_allow: true }];

#[derive(Clone)]
struct World {
    namespaces: serde_json::Map<String, Value>,
    endpoints: Vec<Option<Value>>,
    network_sets: Vec<Option<Value>>,
    nodes: Vec<Option<Value>>,
    services: Vec<Option<Value>>,
    tiers: Value,
    policies: Vec<Option<Value>>,
    profiles: Vec<Option<Value>>,
}

fn slots(v: &Value) -> Vec<Option<Value>> {
    v.as_array().expect("array").iter().cloned().map(Some).collect()
}

impl World {
    fn from(spec: Value) -> World {
        World {
            namespaces: spec["namespaces"].as_object().expect("namespaces").clone(),
            endpoints: slots(&spec["endpoints"]),
            network_sets: slots(&spec["network_sets"]),
            nodes: slots(&spec["nodes"]),
            services: slots(&spec["services"]),
            tiers: spec["tiers"].clone(),
            policies: slots(&spec["policies"]),
            profiles: slots(&spec["profiles"]),
        }
    }

    /// The live slots (the ids of the objects present).
    fn positions(v: &[Option<Value>]) -> Vec<u32> {
        v.iter().enumerate().filter(|(_, x)| x.is_some()).map(|(i, _)| i as u32).collect()
    }

    fn tier_specs(&self) -> Value {
        Value::Array(
            self.tiers
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
                .collect(),
        )
    }

    fn keyed(slot: usize, v: &Value) -> Value {
        let mut v = v.clone();
        v["id"] = json!(slot);
        v
    }

    fn policy(slot: usize, v: &Value) -> Value {
        let mut v = Self::keyed(slot, v);
        v["order"] = json!(slot as f64);
        v["name"] = json!(format!("p{slot}"));
        v
    }

    /// Everything as one delta onto an empty model.
    fn full_delta(&self) -> Delta {
        let keyed = |v: &[Option<Value>]| -> Vec<Value> {
            v.iter().enumerate().filter_map(|(i, x)| x.as_ref().map(|x| Self::keyed(i, x))).collect()
        };
        let ns: Vec<Value> = self.namespaces.iter().map(|(k, v)| json!({"name": k, "labels": v})).collect();
        serde_json::from_value(json!({
            "namespaces": ns,
            "endpoints": keyed(&self.endpoints),
            "network_sets": keyed(&self.network_sets),
            "nodes": keyed(&self.nodes),
            "services": keyed(&self.services),
            "tiers": self.tier_specs(),
            "policies": self.policies.iter().enumerate().filter_map(|(i, p)| p.as_ref().map(|p| Self::policy(i, p))).collect::<Vec<_>>(),
            "profiles": keyed(&self.profiles),
        }))
        .expect("valid delta")
    }
}

/// Compares the model's snapshot with a fresh model's, and with its own rule walk, on `flows`
/// random flows.
fn compare(world: &World, model: &Model, seed: u64, flows: usize) -> usize {
    let mut fresh = Model::new();
    fresh.apply(world.full_delta()).expect("fresh model builds");
    let (inc, fresh) = (model.snapshot(), fresh.snapshot());
    let eps = World::positions(&world.endpoints);
    let mut r = Rng::new(seed);
    let mut decided = 0;
    let mut memo_checked = 0;
    for i in 0..flows {
        let mut flow = random_flow(&mut r);
        if i % 4 == 0 && !eps.is_empty() {
            // name a source endpoint, as `explain` can
            let pos = r.below(eps.len());
            flow.src = FlowEnd { endpoint: Some(eps[pos]), ..flow.src };
            if i % 8 == 0 {
                flow.src.addr = None;
            }
        }
        for d in DEFAULTS {
            let want = fresh.evaluate_walked(&flow, d).expect("valid flow");
            let got = inc.evaluate(&flow, d).expect("valid flow");
            assert_eq!(got, want, "incremental vs a fresh build's walk, seed {seed}: {flow:?}");
            assert_eq!(fresh.evaluate(&flow, d).expect("valid flow"), want, "fresh vs its walk, seed {seed}: {flow:?}");
            assert_eq!(inc.evaluate_walked(&flow, d).expect("valid flow"), want, "walks, seed {seed}: {flow:?}");
            if flow.src.endpoint.is_none() {
                let h = flow_header(&flow);
                let hv = inc.header_verdict(&h, d);
                assert_eq!(hv, Some(got.clone()), "header path, seed {seed}: {flow:?}");
                // Through the decision memo: the first time walks, the second hits.
                let rec = PacketVerdict::judged(&want);
                assert_eq!(inc.packet_verdict(&h, d), rec, "memo (miss), seed {seed}: {flow:?}");
                assert_eq!(inc.packet_verdict(&h, d), rec, "memo (hit), seed {seed}: {flow:?}");
                memo_checked += 1;
            }
            decided +=
                [&got.egress, &got.ingress].iter().filter(|x| x.as_ref().is_some_and(|d| d.rule.is_some())).count();
        }
    }
    assert!(flows == 0 || memo_checked > 0);
    decided
}

#[test]
fn fresh_model_paths_agree_on_random_worlds() {
    let mut decided = 0;
    for seed in 0..3000u64 {
        let world = World::from(random_spec(seed));
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        decided += compare(&world, &model, seed * 7919 + 1, 40);
    }
    assert!(decided > 10_000, "only {decided} decisions by a rule: the comparison would say little");
}

/// One random change of any kind, as the model sees it.
fn mutate(world: &mut World, r: &mut Rng) -> Delta {
    let donor = random_spec(r.next_u64());
    let pick = |v: &Value, r: &mut Rng| -> Option<Value> {
        let a = v.as_array()?;
        (!a.is_empty()).then(|| a[r.below(a.len())].clone())
    };
    let mut d = Delta::default();
    let upsert = |v: &Value| -> Value { v.clone() };
    match r.below(13) {
        0 | 1 => {
            // pod added (or a host endpoint)
            if let Some(e) = pick(&donor["endpoints"], r) {
                world.endpoints.push(Some(e.clone()));
                let slot = world.endpoints.len() - 1;
                d.endpoints.push(serde_json::from_value(World::keyed(slot, &e)).expect("endpoint"));
            }
        }
        2 => {
            let live = World::positions(&world.endpoints);
            if !live.is_empty() {
                let slot = live[r.below(live.len())] as usize;
                world.endpoints[slot] = None;
                d.remove_endpoints.push(slot as u32);
            }
        }
        3 | 4 => {
            // relabelled, or its addresses / ports / service account changed
            let live = World::positions(&world.endpoints);
            if let (false, Some(other)) = (live.is_empty(), pick(&donor["endpoints"], r)) {
                let slot = live[r.below(live.len())] as usize;
                let mut e = world.endpoints[slot].clone().expect("live");
                match r.below(4) {
                    0 => e["labels"] = other["labels"].clone(),
                    1 => e["ips"] = other["ips"].clone(),
                    2 => e["ports"] = other["ports"].clone(),
                    _ => {
                        e["service_account"] = other["service_account"].clone();
                        e["sa_labels"] = other["sa_labels"].clone();
                    }
                }
                world.endpoints[slot] = Some(e.clone());
                d.endpoints.push(serde_json::from_value(World::keyed(slot, &e)).expect("endpoint"));
            }
        }
        5 => {
            // namespace relabelled
            let names: Vec<String> = world.namespaces.keys().cloned().collect();
            let name = names[r.below(names.len())].clone();
            let team = *r.pick(&[None, Some("red"), Some("blue")]);
            let labels = world.namespaces.get_mut(&name).expect("namespace");
            match team {
                Some(t) => labels["team"] = json!(t),
                None => {
                    labels.as_object_mut().expect("labels").remove("team");
                }
            }
            d.namespaces.push(serde_json::from_value(json!({"name": name, "labels": labels})).expect("namespace"));
        }
        6 | 7 => {
            // policy added or changed
            if let Some(p) = pick(&donor["policies"], r) {
                let live = World::positions(&world.policies);
                let slot = if r.chance(50) || live.is_empty() {
                    world.policies.push(None);
                    world.policies.len() - 1
                } else {
                    live[r.below(live.len())] as usize
                };
                world.policies[slot] = Some(p.clone());
                d.policies.push(serde_json::from_value(World::policy(slot, &p)).expect("policy"));
            }
        }
        8 => {
            let live = World::positions(&world.policies);
            if !live.is_empty() {
                let slot = live[r.below(live.len())] as usize;
                world.policies[slot] = None;
                d.remove_policies.push(slot as u32);
            }
        }
        9 => {
            // network set added, changed or removed
            let live = World::positions(&world.network_sets);
            if !live.is_empty() && r.chance(40) {
                let slot = live[r.below(live.len())] as usize;
                world.network_sets[slot] = None;
                d.remove_network_sets.push(slot as u32);
            } else if let Some(n) = pick(&donor["network_sets"], r) {
                world.network_sets.push(Some(n.clone()));
                let slot = world.network_sets.len() - 1;
                d.network_sets.push(serde_json::from_value(World::keyed(slot, &n)).expect("network set"));
            }
        }
        10 => {
            // profile added, changed or removed
            if world.profiles.iter().any(Option::is_some) && r.chance(40) {
                let slot = World::positions(&world.profiles)[0] as usize;
                world.profiles[slot] = None;
                d.remove_profiles.push(slot as u32);
            } else if let Some(p) = pick(&donor["profiles"], r) {
                let slot = match World::positions(&world.profiles).first() {
                    Some(&s) => s as usize,
                    None => {
                        world.profiles.push(None);
                        world.profiles.len() - 1
                    }
                };
                world.profiles[slot] = Some(p.clone());
                d.profiles.push(serde_json::from_value(World::keyed(slot, &p)).expect("profile"));
            }
        }
        11 => {
            // node relabelled
            if let Some(Some(node)) = world.nodes.first_mut() {
                node["labels"] = json!({"zone": r.pick(&["z1", "z2"])});
                let n = upsert(node);
                d.nodes.push(serde_json::from_value(World::keyed(0, &n)).expect("node"));
            }
        }
        _ => {
            // service changed
            if let Some(s) = pick(&donor["services"], r) {
                world.services[0] = Some(s.clone());
                d.services.push(serde_json::from_value(World::keyed(0, &s)).expect("service"));
            }
        }
    }
    d
}

fn run_sequence(seed: u64, steps: usize, flows: usize) {
    let mut world = World::from(random_spec(seed));
    let mut model = Model::new();
    model.apply(world.full_delta()).expect("model builds");
    let mut r = Rng::new(seed ^ 0x5eed);
    for step in 0..steps {
        let before = model.snapshot();
        let delta = mutate(&mut world, &mut r);
        model.apply(delta).expect("delta applies");
        compare(&world, &model, seed.wrapping_mul(31).wrapping_add(step as u64), flows);
        // The snapshot handed out before the change still answers as before (immutable).
        let _ = before.stats();
    }
}

#[test]
fn incremental_changes_equal_a_fresh_build() {
    for seed in 0..400u64 {
        run_sequence(seed, 12, 20);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn prop_incremental_sequences(seed in any::<u64>(), steps in 1usize..25) {
        run_sequence(seed, steps, 15);
    }
}

#[test]
fn snapshots_are_immutable_and_share_what_did_not_change() {
    let mut world = World::from(random_spec(11));
    for i in 0..300 {
        world.endpoints.push(Some(json!({
            "kind": "pod", "namespace": "a", "labels": {"app": format!("x{}", i % 7)}, "raw_labels": {},
            "sa_labels": {}, "service_account": null, "ips": [format!("10.9.{}.{}", i / 250, i % 250)], "ports": [],
            "host_network": false, "profiles": [], "addressable": true
        })));
    }
    let mut model = Model::new();
    model.apply(world.full_delta()).expect("builds");
    let before = model.snapshot();
    let flows: Vec<_> = {
        let mut r = Rng::new(3);
        (0..300).map(|_| random_flow(&mut r)).collect()
    };
    let verdicts: Vec<_> = flows.iter().map(|f| before.evaluate(f, DEFAULTS[0]).expect("flow")).collect();
    let mut r = Rng::new(5);
    let delta = mutate(&mut world, &mut r);
    model.apply(delta).expect("applies");
    let after = model.snapshot();
    for (f, v) in flows.iter().zip(&verdicts) {
        assert_eq!(&before.evaluate(f, DEFAULTS[0]).expect("flow"), v, "an old snapshot changed under a delta");
    }
    let (chunks, shards) = after.shared_with(&before);
    assert!(
        chunks >= 3 && shards >= 60,
        "a one-object change copied too much: {chunks} chunks, {shards} shards shared"
    );
}

/// A Calico `notSelector`-only peer, as felix renders it: "address not in the IP set of what the
/// notSelector matches". An address nothing owns matches (today's outside world); a pod it
/// matches, and any address in a network set it matches (global or namespaced), does not; with
/// the namespace scoping of a namespaced NetworkPolicy (`namespace`) the address must be
/// something of that namespace. Every path of the identity engine (compiled, walk, header path,
/// memo, listing) gives that answer.
#[test]
fn not_selector_only_peer_matches_what_it_does_not_exclude() {
    use pyclassify_core::engine::{Addr, Direction, Flow};

    let entity = |namespace: Option<&str>| {
        json!({
            "nets": [], "not_nets": [], "selector": null, "not_selector": "app == 'x'", "endpoint_kinds": null,
            "namespace": namespace, "namespace_selector": null, "namespace_relation": null, "same_labels": [],
            "not_same_labels": [], "service_account_names": null, "service_account_selector": null,
            "service": null, "node_selector": null, "domains": [], "ports": [], "not_ports": [],
            "unresolvable": false
        })
    };
    let pod = |ns: &str, app: &str, ip: &str| {
        json!({"kind": "pod", "namespace": ns, "raw_labels": {"app": app}, "sa_labels": {}, "service_account": null,
               "ips": [ip], "ports": [], "host_network": false, "profiles": []})
    };
    for (namespace, outside_allowed) in [(None, true), (Some("a"), false)] {
        let spec = json!({
            "namespaces": {"a": {"kubernetes.io/metadata.name": "a"}, "b": {"kubernetes.io/metadata.name": "b"}},
            "endpoints": [pod("a", "t", "10.0.0.9"), pod("a", "x", "10.0.0.1"), pod("a", "o", "10.0.0.2"), pod("b", "o", "10.0.1.2")],
            "network_sets": [
                {"namespace": null, "labels": {"app": "x"}, "nets": ["192.0.2.0/24"]},
                {"namespace": "a", "labels": {"app": "x"}, "nets": ["198.51.100.0/24"]},
                {"namespace": null, "labels": {"app": "y"}, "nets": ["203.0.113.0/24"]},
            ],
            "nodes": [], "services": [],
            "tiers": [{"name": "default", "default_action": "Deny"}],
            "policies": [{
                "tier": "default", "types": ["ingress"],
                "subject": {"selector": "app == 't'", "endpoint_kinds": ["pod"], "namespace": null,
                            "namespace_selector": null, "service_account_selector": null},
                "ingress": [{"action": "Allow", "ip_version": null, "protocols": null, "not_protocols": [], "icmp": null,
                             "not_icmp": null, "sources": [entity(namespace)], "destinations": []}],
                "egress": [],
            }],
            "profiles": [],
        });
        let world = World::from(spec);
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        let snap = model.snapshot();
        let target = Addr::parse("10.0.0.9").expect("addr");
        let cases = [
            ("8.8.8.8", outside_allowed),      // outside: nothing excludes it
            ("203.0.113.5", outside_allowed),  // in a network set the notSelector does not match
            ("10.0.0.1", false),               // a pod it matches
            ("10.0.0.2", true),                // a pod of the namespace it does not match
            ("10.0.1.2", namespace.is_none()), // another namespace's pod
            ("192.0.2.7", false),              // in a matching GlobalNetworkSet
            ("198.51.100.7", false),           // in a matching NetworkSet
        ];
        let listing = snap.listing(0, Direction::Ingress, false).expect("listing");
        for (src, want) in cases {
            let a = Addr::parse(src).expect("addr");
            let flow = Flow {
                src: FlowEnd { addr: Some(a), endpoint: None },
                dst: FlowEnd { addr: Some(target), endpoint: None },
                protocol: 6,
                sport: Some(40000),
                dport: Some(80),
                icmp_type: None,
                icmp_code: None,
                ts_ns: None,
            };
            for d in DEFAULTS {
                let got = snap.evaluate(&flow, d).expect("flow");
                let ingress = got.ingress.as_ref().expect("the policy applies to the target");
                assert_eq!((ingress.allow, ingress.rule.is_some()), (want, want), "{src} (namespace {namespace:?})");
                assert_eq!(got, snap.evaluate_walked(&flow, d).expect("flow"), "compiled vs walk: {src}");
                let h = flow_header(&flow);
                assert_eq!(snap.header_verdict(&h, d), Some(got.clone()), "header path: {src}");
                let rec = PacketVerdict::judged(&got);
                assert_eq!(snap.packet_verdict(&h, d), rec, "memo (miss): {src}");
                assert_eq!(snap.packet_verdict(&h, d), rec, "memo (hit): {src}");
            }
            // The rendered Allow tuples cover exactly the sources the rule matches.
            let listed = listing[0]
                .entries
                .iter()
                .any(|(r, exact)| *exact && r.src.contains(a.bits) && r.dst.contains(target.bits));
            assert_eq!(listed, want, "listing: {src} (namespace {namespace:?})");
        }
    }
}

// ---- compiled programs against the rule walk -------------------------------------------------

/// Ports around every boundary the random worlds' rules name (range ends, their successors).
const EDGE_PORTS: [u16; 22] =
    [0, 1, 52, 53, 54, 79, 80, 81, 153, 154, 442, 443, 444, 999, 1000, 1001, 1100, 8080, 8180, 10053, 18080, 65535];

/// A world as `random_spec` makes it, with (for half the seeds) its `services` and `domains`
/// peers dropped: programs with them are walked, so without them most programs compile.
fn compilable_world(seed: u64) -> World {
    let mut spec = random_spec(seed);
    if seed % 2 == 0 {
        let strip = |rules: &mut Value| {
            for rule in rules.as_array_mut().into_iter().flatten() {
                for side in ["sources", "destinations"] {
                    for e in rule[side].as_array_mut().into_iter().flatten() {
                        e["service"] = Value::Null;
                        e["domains"] = json!([]);
                    }
                }
            }
        };
        for list in ["policies", "profiles"] {
            for p in spec[list].as_array_mut().into_iter().flatten() {
                strip(&mut p["ingress"]);
                strip(&mut p["egress"]);
            }
        }
    }
    World::from(spec)
}

/// A random flow with ports at rule boundaries, ICMP types and codes no rule names, and
/// protocols no rule names, some by endpoint.
fn edge_flow(r: &mut Rng, endpoints: &[u32]) -> pyclassify_core::engine::Flow {
    let mut f = random_flow(r);
    if f.sport.is_some() {
        if r.chance(60) {
            f.dport = Some(*r.pick(&EDGE_PORTS));
        }
        if r.chance(40) {
            f.sport = Some(*r.pick(&EDGE_PORTS));
        }
    } else if r.chance(50) {
        f.icmp_type = Some(*r.pick(&[0u8, 3, 5, 8, 11]));
        f.icmp_code = Some(*r.pick(&[0u8, 1, 2]));
    }
    if r.chance(5) {
        f.protocol = *r.pick(&[99u8, 0, 255]);
        f.icmp_type = None;
        f.icmp_code = None;
    }
    if r.chance(20) && !endpoints.is_empty() {
        f.dst = FlowEnd { endpoint: Some(*r.pick(endpoints)), ..f.dst };
        if r.chance(30) {
            f.dst.addr = None;
        }
    }
    f
}

/// Compares every way the snapshot decides through its compiled programs with the rule walk on
/// `flows` random flows: verdict, tier, policy or profile, rule, reason, the Log trail and
/// whether it awaits an HTTP request; the batch records too. Returns the sides a compiled
/// program decided.
fn compiled_equals_walk(world: &World, model: &Model, seed: u64, flows: usize) -> usize {
    let snap = model.snapshot();
    if seed % 2 == 0 {
        // Every program compiled now; otherwise each the first time a flow needs it.
        snap.compile_all();
    }
    let eps = World::positions(&world.endpoints);
    let mut r = Rng::new(seed);
    for _ in 0..flows {
        let flow = edge_flow(&mut r, &eps);
        for d in DEFAULTS {
            let walked = snap.evaluate_walked(&flow, d).expect("valid flow");
            assert_eq!(snap.evaluate(&flow, d).expect("valid flow"), walked, "compiled vs walk, seed {seed}: {flow:?}");
            if flow.src.endpoint.is_none() && flow.dst.endpoint.is_none() {
                let h = flow_header(&flow);
                let want = snap.header_verdict_walked(&h, d).map(|v| PacketVerdict::judged(&v));
                let mut out = [PacketVerdict::default()];
                snap.classify_compiled(std::slice::from_ref(&h), &mut out, d);
                assert_eq!(Some(out[0]), want, "compiled batch record, seed {seed}: {flow:?}");
                assert_eq!(Some(snap.packet_verdict(&h, d)), want, "memo over compiled, seed {seed}: {flow:?}");
            }
        }
    }
    snap.compile_stats().compiled
}

#[test]
fn compiled_programs_equal_the_rule_walk() {
    let mut compiled = 0;
    for seed in 0..1500u64 {
        let world = compilable_world(seed);
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        compiled += compiled_equals_walk(&world, &model, seed * 7919 + 3, 40);
    }
    assert!(compiled > 3000, "only {compiled} compiled programs: the comparison would say little");
}

/// Past 24 prefixes at one end a program finds an address's atom by a binary search over the
/// intervals its prefixes cut the addresses into: worlds whose `nets` peers also name nested
/// prefixes around the pool's addresses (every /32 and /31 of 10.0.0.0/29, /128s and a /127 in
/// fd00::/64) and disjoint ones beside them, decided as the rule walk decides.
#[test]
fn programs_with_many_prefixes_equal_the_rule_walk() {
    let mut extra: Vec<String> = (1..=8).map(|i| format!("10.0.0.{i}/32")).collect();
    extra.extend((0..4).map(|i| format!("10.0.0.{}/31", 2 * i)));
    extra.extend((0..16).map(|i| format!("10.{}.0.0/16", 100 + i)));
    extra.extend(
        ["fd00::1/128", "fd00::2/128", "fd00::/127", "fd00::/126", "10.0.0.8/29", "192.168.9.0/24"].map(String::from),
    );
    let mut compiled = 0;
    for seed in 0..300u64 {
        let mut world = compilable_world(seed);
        let mut r = Rng::new(seed ^ 0x9e37);
        for p in world.policies.iter_mut().flatten() {
            for side in ["ingress", "egress"] {
                for rule in p[side].as_array_mut().into_iter().flatten() {
                    for peers in ["sources", "destinations"] {
                        for e in rule[peers].as_array_mut().into_iter().flatten() {
                            let Some(nets) = e["nets"].as_array_mut() else { continue };
                            if !nets.is_empty() && r.chance(70) {
                                nets.extend(extra.iter().filter(|_| r.chance(80)).map(|n| json!(n)));
                            }
                        }
                    }
                }
            }
        }
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        compiled += compiled_equals_walk(&world, &model, seed * 31 + 5, 60);
    }
    assert!(compiled > 500, "only {compiled} compiled programs");
}

fn compiled_sequence(seed: u64, steps: usize, flows: usize) -> usize {
    let mut world = compilable_world(seed);
    let mut model = Model::new();
    model.apply(world.full_delta()).expect("model builds");
    let mut r = Rng::new(seed ^ 0xc0de);
    let mut compiled = 0;
    for step in 0..steps {
        let delta = mutate(&mut world, &mut r);
        model.apply(delta).expect("delta applies");
        compiled += compiled_equals_walk(&world, &model, seed.wrapping_mul(131).wrapping_add(step as u64), flows);
    }
    compiled
}

#[test]
fn compiled_programs_equal_the_walk_after_changes() {
    let compiled: usize = (0..300u64).map(|seed| compiled_sequence(seed, 12, 15)).sum();
    assert!(compiled > 5000, "only {compiled} compiled programs");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn prop_compiled_equals_walk(seed in any::<u64>(), steps in 1usize..20) {
        compiled_sequence(seed, steps, 20);
    }
}

/// Programs compiled on first use (not when the model makes them) decide the same, and the
/// snapshots that share a program keep the compiled form of their own rules.
#[test]
fn lazily_compiled_programs_equal_the_walk() {
    for seed in 0..200u64 {
        let mut world = compilable_world(seed);
        let mut model = Model::new();
        model.set_compile(Compile::OnFirstUse);
        model.apply(world.full_delta()).expect("model builds");
        let before = model.snapshot();
        let mut r = Rng::new(seed);
        let delta = mutate(&mut world, &mut r);
        model.apply(delta).expect("delta applies");
        let after = model.snapshot();
        let mut f = Rng::new(seed + 1);
        for _ in 0..30 {
            let flow = random_flow(&mut f);
            for snap in [&after, &before] {
                assert_eq!(
                    snap.evaluate(&flow, DEFAULTS[0]).unwrap(),
                    snap.evaluate_walked(&flow, DEFAULTS[0]).unwrap(),
                    "seed {seed}"
                );
            }
        }
    }
}

/// Bad input: a program whose compiled form would exceed the memory bound (12,000 rules, each
/// its own CIDR and port range) is walked instead, counted as such, and allows exactly the
/// flows some rule names (as the compiled form of the one-rule case does); one rule of thousands of CIDRs crossed with thousands of port ranges
/// compiles (its rows add up, they do not multiply).
#[test]
fn programs_past_the_memory_bound_are_walked() {
    use pyclassify_core::engine::{Addr, Flow};

    let entity = |nets: Vec<String>, ports: Vec<Value>| {
        json!({
            "nets": nets, "not_nets": [], "selector": null, "not_selector": null, "endpoint_kinds": null,
            "namespace": null, "namespace_selector": null, "namespace_relation": null, "same_labels": [],
            "not_same_labels": [], "service_account_names": null, "service_account_selector": null,
            "service": null, "node_selector": null, "domains": [], "ports": ports, "not_ports": [],
            "unresolvable": false
        })
    };
    // Rules enough that the rows (a distinct address and port atom per rule, a bit per rule
    // in each) pass the bound: about rules² / 4 bytes.
    const RULES: usize = 12_000;
    let net = |i: usize| format!("100.{}.{}.{}/32", 64 + i / 65536, (i / 256) % 256, i % 256);
    let range = |i: usize| json!({"protocol": 6, "first": 1024 + 10 * (i % 6000), "last": 1033 + 10 * (i % 6000), "name": null});
    let rule = |sources: Value, destinations: Value| {
        json!({"action": "Allow", "ip_version": null, "protocols": [6], "not_protocols": [], "icmp": null,
               "not_icmp": null, "sources": [sources], "destinations": [destinations]})
    };
    let many_rules: Vec<Value> =
        (0..RULES).map(|i| rule(entity(vec![net(i)], vec![]), entity(vec![], vec![range(i)]))).collect();
    let one_rule =
        vec![rule(entity((0..2000).map(net).collect(), vec![]), entity(vec![], (0..2000).map(range).collect()))];
    for (rules, walked) in [(many_rules, true), (one_rule, false)] {
        let spec = json!({
            "namespaces": {"a": {"kubernetes.io/metadata.name": "a"}},
            "endpoints": [{"kind": "pod", "namespace": "a", "raw_labels": {"app": "t"}, "sa_labels": {},
                           "service_account": null, "ips": ["10.0.0.9"], "ports": [], "host_network": false, "profiles": []}],
            "network_sets": [], "nodes": [], "services": [],
            "tiers": [{"name": "default", "default_action": "Deny"}],
            "policies": [{
                "tier": "default", "types": ["ingress"],
                "subject": {"selector": "all()", "endpoint_kinds": ["pod"], "namespace": null,
                            "namespace_selector": null, "service_account_selector": null},
                "ingress": rules, "egress": [],
            }],
            "profiles": [],
        });
        let world = World::from(spec);
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        let snap = model.snapshot();
        let st = snap.compile_stats();
        assert_eq!((st.walked_memory, st.walked_identities), if walked { (1, 1) } else { (0, 0) }, "{st:?}");
        assert_eq!(snap.walked_for_memory().len(), walked as usize);
        let mut r = Rng::new(9);
        let (mut allowed, mut denied) = (0, 0);
        for _ in 0..400 {
            let i = r.below(RULES);
            let j = if r.chance(80) { i } else { r.below(2 * RULES) };
            let src = Addr::parse(net(j).trim_end_matches("/32")).expect("addr");
            let port = (1024 + 10 * (i % 6000) + r.below(12)) as u16;
            // Allowed when a rule names both: rule j (and j ± 6000, the same range) for the many
            // rules, any of the first 2000 sources with a port in the ranges' span for the one.
            let named = if walked {
                j < RULES && (1024 + 10 * (j % 6000)..=1033 + 10 * (j % 6000)).contains(&(port as usize))
            } else {
                j < 2000 && (1024..=1033 + 10 * 1999).contains(&(port as usize))
            };
            let flow = Flow {
                src: FlowEnd { addr: Some(src), endpoint: None },
                dst: FlowEnd { addr: Some(Addr::parse("10.0.0.9").expect("addr")), endpoint: None },
                protocol: 6,
                sport: Some(40000),
                dport: Some(port),
                icmp_type: None,
                icmp_code: None,
                ts_ns: None,
            };
            let want = snap.evaluate_walked(&flow, DEFAULTS[0]).expect("flow");
            assert_eq!(want.ingress.as_ref().map(|d| d.allow), Some(named), "{flow:?}");
            if named {
                allowed += 1
            } else {
                denied += 1
            }
            assert_eq!(snap.evaluate(&flow, DEFAULTS[0]).expect("flow"), want, "{flow:?}");
            let h = flow_header(&flow);
            assert_eq!(snap.packet_verdict(&h, DEFAULTS[0]), PacketVerdict::judged(&want), "{flow:?}");
        }
        // a tenth of the flows each way at least (the many-rules world allows 50 of its 400)
        assert!(allowed >= 40 && denied >= 40, "{allowed} allowed, {denied} denied: the check would say little");
    }
}

/// Traffic of random pod pairs, almost every packet a new combination: the memo stops hitting
/// and is left out, and whole runs of packets go to the compiled programs in groups (their
/// memory fetched ahead). Every record must be the rule walk's, whether a batch went through
/// the memo, around it in groups, or straight to the compiled programs; groups cut anywhere.
#[test]
fn grouped_compiled_lookups_equal_the_rule_walk() {
    use pyclassify_core::engine::classes::memo_counts;
    use pyclassify_core::engine::snapshot::GROUPED_FROM;
    use pyclassify_core::engine::spec::Spec;
    use pyclassify_core::engine::workload::{policy_workload, workload_flows, WorkloadShape};

    // enough addresses that the memo's misses go in groups
    let shape = WorkloadShape { pods: GROUPED_FROM + 1000, namespaces: 50, policies: 200, seed: 3 };
    let spec: Spec = serde_json::from_value(policy_workload(shape)).expect("spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("model builds");
    let snap = model.snapshot();
    let flows = workload_flows(shape, 30_000, 11);
    let headers: Vec<_> = flows.iter().map(flow_header).collect();
    for d in DEFAULTS {
        let want: Vec<PacketVerdict> =
            headers.iter().map(|h| PacketVerdict::judged(&snap.header_verdict_walked(h, d).expect("flow"))).collect();
        let (hits, misses) = memo_counts();
        let mut memo = vec![PacketVerdict::default(); headers.len()];
        for (hs, out) in headers.chunks(256).zip(memo.chunks_mut(256)) {
            snap.classify_detailed(hs, out, d);
        }
        let (hits2, misses2) = memo_counts();
        let looked_up = (hits2 - hits + misses2 - misses) as usize;
        assert!(looked_up < headers.len(), "the memo was never left out ({looked_up} lookups)");
        let mut compiled = vec![PacketVerdict::default(); headers.len()];
        for (hs, out) in headers.chunks(100).zip(compiled.chunks_mut(100)) {
            snap.classify_compiled(hs, out, d);
        }
        for i in 0..headers.len() {
            assert_eq!(memo[i], want[i], "through the memo: {:?}", flows[i]);
            assert_eq!(compiled[i], want[i], "compiled alone: {:?}", flows[i]);
        }
    }
}

/// Traffic that repeats (a few dozen flows, each many times, interleaved), through the batch
/// path: the memo stays in use and the exact-match cache in front of it answers most packets.
/// Every record must be the rule walk's, for both defaults and after a random change (a new
/// snapshot empties both caches), on random worlds.
#[test]
fn repeated_traffic_through_the_flow_cache_equals_the_rule_walk() {
    use pyclassify_core::engine::classes::memo_counts;
    let mut hit = 0;
    let mut judged = 0;
    for seed in 0..200u64 {
        let mut world = World::from(random_spec(seed));
        let mut model = Model::new();
        model.apply(world.full_delta()).expect("model builds");
        let mut r = Rng::new(seed ^ 0xe3c);
        // Flows alike but for one field each, so that a key missing a field would be seen.
        let mut flows = Vec::new();
        for _ in 0..10 {
            let f = random_flow(&mut r);
            let port = |r: &mut Rng| Some(*r.pick(&[22, 25, 53, 80, 443, 1000, 3306, 5432, 8080, 9090, 40000]));
            flows.push(f);
            flows.push(Flow { dport: f.dport.and(port(&mut r)), ..f });
            flows.push(Flow { sport: f.sport.and(port(&mut r)), ..f });
            flows.push(Flow { protocol: [6, 17, 132, f.protocol][r.below(4)], ..f });
            flows.push(Flow { icmp_type: f.icmp_type.map(|t| t ^ 8), icmp_code: f.icmp_code.map(|c| c ^ 1), ..f });
            flows.push(Flow { dst: f.src, src: f.dst, ..f });
        }
        let headers: Vec<_> = (0..1500).map(|_| flow_header(&flows[r.below(flows.len())])).collect();
        for step in 0..2 {
            let snap = model.snapshot();
            for (pod_allow, host_allow) in [(true, false), (false, true), (false, false), (true, true)] {
                let d = Defaults { pod_allow, host_allow };
                let want: Vec<PacketVerdict> = headers
                    .iter()
                    .map(|h| {
                        snap.header_verdict_walked(h, d)
                            .map_or_else(|| PacketVerdict::undecodable(h), |v| PacketVerdict::judged(&v))
                    })
                    .collect();
                let (hits, _) = memo_counts();
                let mut got = vec![PacketVerdict::default(); headers.len()];
                for (hs, out) in headers.chunks(97).zip(got.chunks_mut(97)) {
                    snap.classify_detailed(hs, out, d);
                }
                hit += (memo_counts().0 - hits) as usize;
                judged += headers.len();
                for i in 0..headers.len() {
                    assert_eq!(got[i], want[i], "seed {seed}, step {step}, {d:?}: {:?}", headers[i]);
                }
            }
            let delta = mutate(&mut world, &mut r);
            model.apply(delta).expect("delta applies");
        }
    }
    assert!(hit > judged / 2, "the caches answered {hit} of {judged} packets: the path went untested");
}

/// The same on a policy workload, whose rules tell ports and protocols apart: flows alike but
/// for the destination port, the protocol or the ICMP type, each repeated.
#[test]
fn repeated_workload_traffic_through_the_flow_cache_equals_the_rule_walk() {
    use pyclassify_core::engine::spec::Spec;
    use pyclassify_core::engine::workload::{policy_workload, workload_flows, WorkloadShape};
    let shape = WorkloadShape { pods: 400, namespaces: 10, policies: 80, seed: 5 };
    let spec: Spec = serde_json::from_value(policy_workload(shape)).expect("spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("model builds");
    let snap = model.snapshot();
    let mut r = Rng::new(21);
    let mut flows = Vec::new();
    for f in workload_flows(shape, 60, 9) {
        for (protocol, dport) in [(6u8, 8080u16), (6, 9090), (6, 22), (17, 53), (6, 5432), (17, 8080)] {
            let icmp = (f.protocol == 1).then_some(0);
            flows.push(Flow {
                protocol,
                dport: Some(dport),
                sport: f.sport.or(Some(40000)),
                icmp_type: None,
                icmp_code: None,
                ..f
            });
            flows.push(Flow {
                protocol: 1,
                sport: None,
                dport: None,
                icmp_type: Some(dport as u8 % 16),
                icmp_code: icmp,
                ..f
            });
        }
    }
    let headers: Vec<_> = (0..20_000).map(|_| flow_header(&flows[r.below(flows.len())])).collect();
    let d = Defaults { pod_allow: true, host_allow: true };
    let want: Vec<PacketVerdict> =
        headers.iter().map(|h| PacketVerdict::judged(&snap.header_verdict_walked(h, d).expect("flow"))).collect();
    assert!(want.iter().any(|v| v.allow == 0) && want.iter().any(|v| v.allow == 1 && v.ingress.present != 0));
    let mut got = vec![PacketVerdict::default(); headers.len()];
    for (hs, out) in headers.chunks(256).zip(got.chunks_mut(256)) {
        snap.classify_detailed(hs, out, d);
    }
    for i in 0..headers.len() {
        assert_eq!(got[i], want[i], "{:?}", headers[i]);
    }
}
