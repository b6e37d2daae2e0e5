//! `engine::lanes::judge_lanes` against one tracked judgement of the whole batch: connections are
//! independent, so the batch's connections spread over lanes (each with a tracker of its own),
//! cut into runs at any DNS messages, get the verdicts one tracker over the whole batch gives.

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::conntrack::{ConnTrack, CtConfig};
use pyclassify_core::engine::lanes::{judge_lanes, DnsMessage, Lane};
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::workload::{flow_header, policy_workload, workload_flows, Rng, WorkloadShape};
use pyclassify_core::engine::{Defaults, Judge, Model, PacketVerdict};
use pyclassify_core::http::HttpConns;

const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// A batch of `n` packets over the workload's flows: each a flow's packet or its reply, in time
/// order.
fn batch(shape: WorkloadShape, n: usize, seed: u64) -> Vec<PacketHeader> {
    let flows = workload_flows(shape, 200, seed);
    let r = &mut Rng::new(seed ^ 0x5eed);
    (0..n)
        .map(|i| {
            let mut h = flow_header(r.pick(&flows));
            if r.chance(40) {
                std::mem::swap(&mut h.src_addr, &mut h.dst_addr);
                std::mem::swap(&mut h.sport, &mut h.dport);
                h.tcp_flags = TCP_SYN | TCP_ACK;
            } else {
                h.tcp_flags = if r.chance(50) { TCP_SYN } else { TCP_ACK };
            }
            h.ts_ns = 1_000_000_000 + i as u64 * 1_000;
            h
        })
        .collect()
}

/// Which of `lanes` a packet's connection goes to (its two ends, in either order).
fn lane_of(h: &PacketHeader, lanes: usize) -> usize {
    let a = (h.src_addr, h.sport);
    let b = (h.dst_addr, h.dport);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut x = h.protocol as u64;
    for byte in lo.0.iter().chain(hi.0.iter()) {
        x = x.wrapping_mul(31).wrapping_add(*byte as u64);
    }
    x = x.wrapping_mul(31).wrapping_add(lo.1 as u64).wrapping_mul(31).wrapping_add(hi.1 as u64);
    (x % lanes as u64) as usize
}

#[test]
fn connections_spread_over_lanes_judge_as_one_tracker() {
    let shape = WorkloadShape { pods: 300, namespaces: 6, policies: 40, seed: 3 };
    let spec: Spec = serde_json::from_value(policy_workload(shape)).expect("workload spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("model builds");
    let engine = model.snapshot();
    let defaults = Defaults { pod_allow: true, host_allow: false };
    for seed in 0..4u64 {
        let hs = batch(shape, 5000, seed);
        let mut whole = vec![PacketVerdict::default(); hs.len()];
        let mut ct = ConnTrack::new(CtConfig::default()).expect("tracker");
        engine.classify_tracked(&mut ct, &hs, None, &mut whole, defaults);
        assert!(whole.iter().any(|v| v.allow == 1) && whole.iter().any(|v| v.allow == 0));
        assert!(whole.iter().any(|v| v.reason == 1), "some packets pass as established");

        for n in [1usize, 3] {
            let rows: Vec<Vec<i64>> = (0..n)
                .map(|k| (0..hs.len()).filter(|&i| lane_of(&hs[i], n) == k).map(|i| i as i64).collect())
                .collect();
            let heads: Vec<Vec<PacketHeader>> =
                rows.iter().map(|r| r.iter().map(|&i| hs[i as usize]).collect()).collect();
            let mut outs: Vec<Vec<PacketVerdict>> =
                rows.iter().map(|r| vec![PacketVerdict::default(); r.len()]).collect();
            let mut cts: Vec<ConnTrack> =
                (0..n).map(|_| ConnTrack::new(CtConfig::default()).expect("tracker")).collect();
            let mut https: Vec<HttpConns> = (0..n).map(|_| HttpConns::new(16, 4096, 16)).collect();
            // messages cut the runs anywhere (one out of order, one past the end): without domain
            // facts they teach nothing, and change no verdict
            let r = &mut Rng::new(seed);
            let mut at: Vec<usize> = (0..40).map(|_| r.below(hs.len())).collect();
            at.sort_unstable();
            at.push(7);
            at.push(hs.len() + 3);
            let messages: Vec<DnsMessage<'_>> = at.iter().map(|&index| DnsMessage { index, payload: b"x" }).collect();
            let mut lanes: Vec<Lane<'_>> = rows
                .iter()
                .zip(heads.iter())
                .zip(outs.iter_mut())
                .zip(cts.iter_mut().zip(https.iter_mut()))
                .map(|(((rows, headers), out), (ct, http))| Lane {
                    engine: &engine,
                    rows,
                    headers,
                    quotes: None,
                    segments: None,
                    tracker: Some((ct, http)),
                    out,
                })
                .collect();
            let tally = judge_lanes(&mut lanes, &hs, &messages, &engine, defaults);
            assert_eq!(tally.messages, messages.len() as u64 - 1, "the one past the end is not read");
            assert_eq!(tally.learned, 0);
            drop(lanes);
            for (k, r) in rows.iter().enumerate() {
                for (j, &i) in r.iter().enumerate() {
                    let (a, b) = (&whole[i as usize], &outs[k][j]);
                    assert_eq!(
                        (a.allow, a.reason, a.ct_state),
                        (b.allow, b.reason, b.ct_state),
                        "seed {seed}, {n} lanes, packet {i}"
                    );
                }
            }
        }
    }
}
