//! Flow records judged once per distinct decision (`records::judge::RecordJudge`) sum to what
//! judging every record on its own gives: totals, verdicts, decisions per rule, and under two
//! policy sets the records whose verdict flips, whatever the key capacity (folding) and batching.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;

use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS};
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::{Defaults, Judge, Model, Snapshot};
use pyclassify_core::records::judge::RecordJudge;
use pyclassify_core::records::tally::{DecisionKey, Measures};
use pyclassify_core::records::FlowCounts;

const DEFAULTS: Defaults = Defaults { pod_allow: true, host_allow: false };

fn v4(last: u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&[10, 0, 0, last]);
    out
}

/// Pods 10.0.0.1 (namespace a) and 10.0.0.2 (b); b's ingress allows TCP to `port` from source
/// ports 1000-1999 only, so that source ports fall in several classes.
fn snapshot(port: u16) -> Arc<Snapshot> {
    let pod = |ns: &str, ip: &str| {
        serde_json::json!({
            "kind": "pod", "namespace": ns, "labels": {"app": ns, "projectcalico.org/namespace": ns},
            "raw_labels": {"app": ns}, "sa_labels": {}, "service_account": "default", "ips": [ip],
            "ports": [], "host_network": false, "profiles": [], "addressable": true,
        })
    };
    let entity = |first: u16, last: u16| {
        serde_json::json!({
            "nets": [], "not_nets": [], "selector": null, "not_selector": null, "endpoint_kinds": null,
            "namespace": null, "namespace_selector": null, "namespace_relation": null, "same_labels": [],
            "not_same_labels": [], "service_account_names": null, "service_account_selector": null,
            "service": null, "node_selector": null, "domains": [],
            "ports": [{"protocol": 6, "first": first, "last": last, "name": null}], "not_ports": [],
            "unresolvable": false
        })
    };
    let spec = serde_json::json!({
        "namespaces": {"a": {"kubernetes.io/metadata.name": "a"}, "b": {"kubernetes.io/metadata.name": "b"}},
        "endpoints": [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")],
        "network_sets": [], "nodes": [], "services": [], "profiles": [],
        "tiers": [{"name": "default", "default_action": "Deny"}],
        "policies": [{
            "tier": "default", "types": ["ingress"],
            "subject": {"selector": "all()", "endpoint_kinds": ["pod"], "namespace": "b", "namespace_selector": null,
                        "service_account_selector": null},
            "ingress": [{"action": "Allow", "ip_version": null, "protocols": [6], "not_protocols": [], "icmp": null,
                         "not_icmp": null, "sources": [entity(1000, 1999)], "destinations": [entity(port, port)]}],
            "egress": [],
        }],
    });
    let spec: Spec = serde_json::from_value(spec).expect("spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("model builds");
    model.snapshot()
}

fn record() -> impl Strategy<Value = (PacketHeader, FlowCounts)> {
    (
        1u8..4,
        1u8..4,
        prop::sample::select(vec![80u16, 999, 1000, 1500, 1999, 2000, 40000, 40001]),
        prop::sample::select(vec![8080u16, 8081, 53]),
        0u8..3,
        1u64..5,
        0u64..100,
        any::<bool>(),
    )
        .prop_map(|(s, d, sport, dport, proto, flows, packets, placed)| {
            let protocol = [6u8, 17, 6][proto as usize];
            let h = PacketHeader {
                src_addr: v4(s),
                dst_addr: v4(d),
                sport,
                dport,
                ip_version: 4,
                protocol,
                tcp_flags: if protocol == 6 { 2 } else { 0 },
                flags: FLAG_HAS_PORTS,
                ..Default::default()
            };
            let c = FlowCounts {
                flows,
                packets,
                bytes: packets * 100,
                has_src: 1,
                has_dst: placed as u8,
                first_ns: packets,
                last_ns: packets + 10,
                ..Default::default()
            };
            (h, c)
        })
}

fn add(m: &mut Measures, c: &FlowCounts) {
    m[0] += 1;
    m[1] += c.flows;
    m[2] += c.packets;
    m[3] += c.bytes;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn records_judged_once_per_key_sum_as_each_judged_alone(
        records in prop::collection::vec(record(), 0..60),
        cap in 1usize..8,
        batch in 1usize..20,
        keep in any::<bool>(),
    ) {
        let (old, new) = (snapshot(8080), snapshot(8081));
        let mut judge = RecordJudge::new(vec![old.clone(), new.clone()], DEFAULTS, None, false).with_cap(cap);
        let (headers, counts): (Vec<_>, Vec<_>) = records.iter().copied().unzip();
        let mut ids = Vec::new();
        for (h, c) in headers.chunks(batch).zip(counts.chunks(batch)) {
            judge.add(0, h, c, keep.then_some(&mut ids));
            if keep {
                // each record's entry holds its own verdict
                for ((h, c), &i) in h.iter().zip(c).zip(&ids) {
                    if c.has_dst == 0 {
                        prop_assert_eq!(i, u32::MAX);
                    } else {
                        prop_assert_eq!(judge.entries[i as usize].verdicts[0], old.packet_verdict(h, DEFAULTS));
                    }
                }
            }
        }
        judge.fold();

        let (mut totals, mut allowed, mut denied, mut unplaced, mut flipped) =
            (Measures::default(), Measures::default(), Measures::default(), Measures::default(), Measures::default());
        let mut no_policy = [Measures::default(); 2];
        let mut by_rule: HashMap<DecisionKey, Measures> = HashMap::new();
        for (h, c) in &records {
            add(&mut totals, c);
            if c.has_dst == 0 {
                add(&mut unplaced, c);
                continue;
            }
            let (a, b) = (old.packet_verdict(h, DEFAULTS), new.packet_verdict(h, DEFAULTS));
            add(if a.allow != 0 { &mut allowed } else { &mut denied }, c);
            if a.allow != b.allow {
                add(&mut flipped, c);
            }
            for (d, s) in [&a.egress, &a.ingress].into_iter().enumerate() {
                if s.present != 1 {
                    add(&mut no_policy[d], c);
                } else {
                    add(by_rule.entry((d as u8, s.tier, s.source_kind, s.source, s.rule, s.reason, s.allow)).or_default(), c);
                }
            }
        }
        let t = &judge.tally;
        prop_assert_eq!(t.totals, totals);
        prop_assert_eq!(t.allowed, allowed);
        prop_assert_eq!(t.denied, denied);
        prop_assert_eq!(t.unplaced, unplaced);
        prop_assert_eq!(t.no_policy, no_policy);
        prop_assert_eq!(&t.by_rule, &by_rule);
        let mut got = Measures::default();
        for e in &judge.flipped {
            prop_assert_ne!(e.verdicts[0].allow, e.verdicts[1].allow);
            prop_assert_eq!(e.verdicts[0], old.packet_verdict(&e.header, DEFAULTS));
            prop_assert_eq!(e.verdicts[1], new.packet_verdict(&e.header, DEFAULTS));
            for (g, x) in got.iter_mut().zip(e.sums) {
                *g += x;
            }
        }
        prop_assert_eq!(got, flipped);
        prop_assert!(judge.decisions <= judge.judged);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// A judge keeping its keys from run to run (`restart` between them) sums each run as a
    /// new judge sums it alone, and decides a key seen in an earlier run no more.
    #[test]
    fn a_judge_keeping_its_keys_sums_each_run_as_a_new_judge(
        runs in prop::collection::vec(prop::collection::vec(record(), 0..40), 1..5),
        cap in prop_oneof![1usize..64, Just(1usize << 20)],
        keep in any::<bool>(),
    ) {
        let (old, new) = (snapshot(8080), snapshot(8081));
        let mut kept = RecordJudge::new(vec![old.clone(), new.clone()], DEFAULTS, None, false).with_cap(cap).keeping_keys();
        let mut decided_before = 0u64;
        for run in &runs {
            kept.restart();
            let mut fresh = RecordJudge::new(vec![old.clone(), new.clone()], DEFAULTS, None, false).with_cap(cap);
            let (headers, counts): (Vec<_>, Vec<_>) = run.iter().copied().unzip();
            let mut ids = Vec::new();
            kept.add(3, &headers, &counts, keep.then_some(&mut ids));
            fresh.add(3, &headers, &counts, None);
            kept.fold();
            fresh.fold();
            let (a, b) = (&kept.tally, &fresh.tally);
            prop_assert_eq!(a.totals, b.totals);
            prop_assert_eq!(a.allowed, b.allowed);
            prop_assert_eq!(a.denied, b.denied);
            prop_assert_eq!(a.unplaced, b.unplaced);
            prop_assert_eq!(a.no_policy, b.no_policy);
            prop_assert_eq!(&a.by_rule, &b.by_rule);
            prop_assert_eq!(&a.reported, &b.reported);
            prop_assert_eq!((kept.first_ns, kept.last_ns, kept.judged), (fresh.first_ns, fresh.last_ns, fresh.judged));
            // what flipped, by connection (a key's sums may be folded in parts, at `cap`)
            let flips = |j: &RecordJudge| {
                let mut f: HashMap<_, (Measures, usize)> = HashMap::new();
                for e in &j.flipped {
                    let h = &e.header;
                    let at = f.entry((h.src_addr, h.dst_addr, h.protocol, h.dport)).or_default();
                    for (g, x) in at.0.iter_mut().zip(e.sums) {
                        *g += x;
                    }
                    at.1 += e.examples.len();
                }
                f
            };
            prop_assert_eq!(flips(&kept), flips(&fresh));
            prop_assert_eq!(kept.examples.len(), fresh.examples.len());
            decided_before += kept.decisions;
        }
        if cap == 1 << 20 {
            // a key is decided once over all runs (no table started over)
            let mut all = RecordJudge::new(vec![old.clone(), new.clone()], DEFAULTS, None, false);
            for run in &runs {
                let (headers, counts): (Vec<_>, Vec<_>) = run.iter().copied().unzip();
                all.add(3, &headers, &counts, None);
            }
            prop_assert_eq!(decided_before, all.decisions);
        }
    }
}

#[test]
fn records_of_one_key_make_one_decision_per_source_port_class() {
    let s = snapshot(8080);
    let mut judge = RecordJudge::new(vec![s], DEFAULTS, None, false);
    let c = FlowCounts { flows: 1, has_src: 1, has_dst: 1, ..Default::default() };
    let at = |sport: u16| PacketHeader {
        src_addr: v4(1),
        dst_addr: v4(2),
        sport,
        dport: 8080,
        ip_version: 4,
        protocol: 6,
        tcp_flags: 2,
        flags: FLAG_HAS_PORTS,
        ..Default::default()
    };
    // 1000..=1999 allowed, the rest not: two classes among these five records
    let hs = [at(1000), at(1500), at(1999), at(40000), at(40001)];
    judge.add(0, &hs, &[c; 5], None);
    judge.fold();
    assert_eq!((judge.decisions, judge.judged), (2, 5));
    assert_eq!((judge.tally.allowed[0], judge.tally.denied[0]), (3, 2));
}
