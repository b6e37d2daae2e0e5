//! Connections policy denied, and connections picked up mid-stream.
//!
//! A connection whose opening packet policy denied is remembered (bounded, expiring): every later
//! packet of it, either way, is DENIED, never picked up as a connection the other way round; only
//! its opener's fresh attempt (a new SYN; for UDP and the like, its next datagram) is judged
//! again. A TCP connection first seen without its SYN is judged as its client opened it: the end
//! with the higher port. The same holds through the engine's batch judgement and the C ABI the
//! bridge calls.

use proptest::prelude::*;

use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_ICMP_ERROR};
use pyclassify_core::capi::ENGINE_API;
use pyclassify_core::conntrack::{
    code, ConnTrack, CtConfig, CtState, FlowKey, QuotedTuple, QUOTED_VALID, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN,
};
use pyclassify_core::engine::spec::Spec;
use pyclassify_core::engine::{
    Defaults, Judge, Model, PacketVerdict, Snapshot, PACKET_DENIED_CONNECTION, PACKET_POLICY,
};

const S: u64 = 1_000_000_000;
const PSH: u8 = 0x08;
const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&a);
    out
}

fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: u8) -> PacketHeader {
    PacketHeader {
        src_addr: v4(src),
        dst_addr: v4(dst),
        sport,
        dport,
        ip_version: 4,
        protocol: 6,
        tcp_flags: flags,
        flags: FLAG_HAS_PORTS,
        ..Default::default()
    }
}

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> PacketHeader {
    PacketHeader { protocol: 17, ..tcp(src, sport, dst, dport, 0) }
}

fn key(h: &PacketHeader) -> FlowKey {
    FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol)
}

fn ct(max_entries: usize) -> ConnTrack {
    ConnTrack::new(CtConfig { max_entries, ..CtConfig::default() }).unwrap()
}

/// Tracks `h` with a policy that allows a connection iff `allow(its opener's key)`; the judged
/// keys are appended to `judged`.
fn track(
    ct: &mut ConnTrack,
    h: &PacketHeader,
    now: u64,
    allow: impl Fn(&FlowKey) -> bool,
    judged: &mut Vec<FlowKey>,
) -> (CtState, bool) {
    ct.track_judged(h, None, now, |opener| {
        judged.push(key(opener));
        allow(&key(opener))
    })
}

/// A whole TCP exchange after the opening SYN from `c` to `s`: both ways, data, close.
fn rest_of_exchange(c: ([u8; 4], u16), s: ([u8; 4], u16)) -> Vec<PacketHeader> {
    let to_s = |f| tcp(c.0, c.1, s.0, s.1, f);
    let to_c = |f| tcp(s.0, s.1, c.0, c.1, f);
    vec![
        to_c(TCP_SYN | TCP_ACK),
        to_s(TCP_ACK),
        to_s(TCP_ACK | PSH),
        to_c(TCP_ACK),
        to_c(TCP_ACK | PSH),
        to_s(TCP_ACK),
        to_s(TCP_FIN | TCP_ACK),
        to_c(TCP_FIN | TCP_ACK),
        to_s(TCP_ACK),
        to_c(TCP_RST),
    ]
}

#[test]
fn a_denied_opening_keeps_its_whole_connection_denied_both_ways() {
    // opened from either end: A's port 40000 to B's 8081, and B's port 40000 to A's 8081
    for (c, s) in [((A, 40000), (B, 8081)), ((B, 40000), (A, 8081))] {
        let mut ct = ct(1024);
        let mut judged = Vec::new();
        let deny_8081 = |k: &FlowKey| k.dport != 8081;
        let syn = tcp(c.0, c.1, s.0, s.1, TCP_SYN);
        let (st, ok) = track(&mut ct, &syn, S, deny_8081, &mut judged);
        assert!(matches!(st, CtState::New(_)) && !ok);
        assert_eq!(judged, vec![key(&syn)]);
        for (i, h) in rest_of_exchange(c, s).iter().enumerate() {
            let (st, ok) = track(&mut ct, h, S + i as u64, deny_8081, &mut judged);
            assert_eq!((st, ok), (CtState::Denied, false), "packet {i} of the denied connection");
            assert_eq!(st.code(), code::DENIED);
        }
        assert_eq!(judged.len(), 1, "no later packet is judged, none picked up the other way round");
        // the opener's retransmitted SYN is judged again (policy may have changed meanwhile)
        let (st, ok) = track(&mut ct, &syn, 2 * S, deny_8081, &mut judged);
        assert!(matches!(st, CtState::New(_)) && !ok);
        assert_eq!(judged.len(), 2);
        let (st, ok) = track(&mut ct, &syn, 3 * S, |_| true, &mut judged);
        assert!(matches!(st, CtState::New(_)) && ok, "allowed now: tracked");
        assert_eq!(
            track(&mut ct, &tcp(s.0, s.1, c.0, c.1, TCP_SYN | TCP_ACK), 3 * S, |_| false, &mut judged),
            (CtState::Reply, true)
        );
        assert_eq!((ct.len(), ct.denials()), (1, 0));
        let stats = ct.stats();
        assert_eq!((stats.denied, stats.pickups), (10, 0));
        ct.check_invariants().unwrap();
    }
}

#[test]
fn a_denial_is_forgotten_after_two_idle_minutes() {
    let mut ct = ct(1024);
    let mut judged = Vec::new();
    let syn = tcp(A, 40000, B, 8081, TCP_SYN);
    track(&mut ct, &syn, S, |_| false, &mut judged);
    let data = tcp(B, 8081, A, 40000, TCP_ACK | PSH);
    // each packet keeps it: idle 119 s at most
    for t in [60, 179, 298] {
        assert_eq!(track(&mut ct, &data, t * S, |_| true, &mut judged), (CtState::Denied, false));
    }
    // past 120 s idle: a new connection, picked up mid-stream and judged as A opened it
    let (st, _) = track(&mut ct, &data, 419 * S, |_| false, &mut judged);
    let CtState::New(f) = st else { panic!("{st:?}") };
    assert!(f.picked_up() && f.judged_reversed());
    assert_eq!(f.key(), key(&syn));
    assert_eq!(*judged.last().unwrap(), key(&syn));
}

#[test]
fn a_connection_picked_up_mid_stream_is_judged_as_its_client_opened_it() {
    let client_first = tcp(A, 40000, B, 8081, TCP_ACK | PSH);
    let server_first = tcp(B, 8081, A, 40000, TCP_ACK | PSH);
    let opener = key(&client_first);
    for (first, reversed) in [(client_first, false), (server_first, true)] {
        let mut ct = ct(1024);
        let mut judged = Vec::new();
        let (st, ok) = track(&mut ct, &first, S, |k| k.dport == 8081, &mut judged);
        let CtState::New(f) = st else { panic!("{st:?}") };
        assert!(ok && f.picked_up() && f.judged_reversed() == reversed);
        assert_eq!(st.code(), if reversed { code::NEW_PICKUP_REPLY } else { code::NEW_PICKUP });
        assert_eq!((f.key(), judged), (opener, vec![opener]), "policy judges the client's connection");
        // tracked as A's connection: A's packets are the original direction
        assert_eq!(ct.track(&client_first, S), CtState::Established);
        assert_eq!(ct.track(&server_first, S), CtState::Reply);
        assert_eq!(ct.stats().pickups, 1);
        ct.check_invariants().unwrap();
    }
    // denied picked up, from either side: the whole connection, both ways
    for first in [client_first, server_first] {
        let mut ct = ct(1024);
        let mut judged = Vec::new();
        assert!(!track(&mut ct, &first, S, |k| k.dport != 8081, &mut judged).1);
        let close = [tcp(A, 40000, B, 8081, TCP_FIN | TCP_ACK), tcp(B, 8081, A, 40000, TCP_RST)];
        for h in [client_first, server_first, close[0], close[1]] {
            assert_eq!(track(&mut ct, &h, S, |_| true, &mut judged), (CtState::Denied, false));
        }
        assert_eq!(judged, vec![opener]);
    }
    // equal ports: the first packet's sender is the client
    let mut ct = ct(1024);
    let CtState::New(f) = ct.track(&tcp(B, 5000, A, 5000, TCP_ACK), S) else { panic!() };
    assert!(f.picked_up() && !f.judged_reversed());
    assert_eq!(f.key(), key(&tcp(B, 5000, A, 5000, TCP_ACK)));
    // a SYN is no pickup
    let CtState::New(f) = ct.track(&tcp(B, 80, A, 40000, TCP_SYN), S) else { panic!() };
    assert!(!f.picked_up() && !f.judged_reversed());
}

#[test]
fn a_denied_udp_query_keeps_its_answers_denied_and_its_retries_judged() {
    let mut ct = ct(1024);
    let mut judged = Vec::new();
    let query = udp(A, 40000, B, 53);
    let answer = udp(B, 53, A, 40000);
    assert!(!track(&mut ct, &query, S, |_| false, &mut judged).1);
    assert_eq!(
        track(&mut ct, &answer, S, |_| true, &mut judged),
        (CtState::Denied, false),
        "the answer is not judged as a flow from B's port 53"
    );
    // the client asks again: judged again
    assert!(!track(&mut ct, &query, 2 * S, |_| false, &mut judged).1);
    assert_eq!(judged, vec![key(&query), key(&query)]);
    // an ICMP error about the denied query is no more allowed than the query
    let mut err = PacketHeader {
        src_addr: v4(B),
        dst_addr: v4(A),
        ip_version: 4,
        protocol: 1,
        icmp_type: 3,
        icmp_code: 3,
        flags: FLAG_ICMP_ERROR,
        ..Default::default()
    };
    err.ts_ns = 2 * S;
    let quoted = QuotedTuple {
        src_addr: v4(A),
        dst_addr: v4(B),
        sport: 40000,
        dport: 53,
        protocol: 17,
        flags: QUOTED_VALID,
        ..Default::default()
    };
    assert_eq!(ct.track_quoted(&err, Some(&quoted), 2 * S), CtState::Denied);
    // allowed on a retry: tracked, its answer a reply
    assert!(track(&mut ct, &query, 3 * S, |_| true, &mut judged).1);
    assert_eq!(ct.track(&answer, 3 * S), CtState::Reply);
    ct.check_invariants().unwrap();
}

#[test]
fn denials_take_only_spare_room_and_go_first() {
    let mut ct = ct(4);
    let mut judged = Vec::new();
    for p in 0..10u16 {
        track(&mut ct, &tcp(A, 40000 + p, B, 8081, TCP_SYN), S, |_| false, &mut judged);
        ct.check_invariants().unwrap();
    }
    assert_eq!((ct.len(), ct.denials()), (0, 4), "the newest four denials, within the cap");
    assert_eq!(ct.track(&tcp(B, 8081, A, 40009, TCP_ACK), S), CtState::Denied);
    // real connections push denials out, never the other way round
    for p in 0..4u16 {
        assert!(track(&mut ct, &tcp(A, 50000 + p, B, 80, TCP_SYN), S, |_| true, &mut judged).1);
        ct.track(&tcp(B, 80, A, 50000 + p, TCP_SYN | TCP_ACK), S);
        ct.track(&tcp(A, 50000 + p, B, 80, TCP_ACK), S); // assured: never dropped early
        ct.check_invariants().unwrap();
    }
    assert_eq!((ct.len(), ct.denials()), (4, 0));
    assert!(!track(&mut ct, &tcp(A, 40000, B, 8081, TCP_SYN), S, |_| false, &mut judged).1);
    assert_eq!((ct.len(), ct.denials()), (4, 0), "no room: not remembered");
    // denials are no tracked connections: not listed, not revalidated, not revoked
    let mut ct = self::ct(16);
    track(&mut ct, &tcp(A, 40000, B, 8081, TCP_SYN), S, |_| false, &mut judged);
    assert!(ct.flows().is_empty() && ct.get(&key(&tcp(A, 40000, B, 8081, 0)), S).is_none());
    assert!(ct.revalidate(S, |_| false).is_empty());
    assert!(!ct.revoke(&key(&tcp(A, 40000, B, 8081, 0)), S));
    assert_eq!(ct.track(&tcp(B, 8081, A, 40000, TCP_ACK), S), CtState::Denied);
    ct.check_invariants().unwrap();
}

#[derive(Clone, Debug)]
struct Pkt {
    from_a: bool,
    a_port: u16,
    b_port: u16,
    proto: u8,
    flags: u8,
    step_ms: u64,
}

fn pkt() -> impl Strategy<Value = Pkt> {
    (
        any::<bool>(),
        prop::sample::select(vec![8081u16, 40000, 40001]),
        prop::sample::select(vec![8081u16, 40000, 53]),
        prop::sample::select(vec![6u8, 6, 6, 17]),
        prop::sample::select(vec![TCP_SYN, TCP_SYN | TCP_ACK, TCP_ACK, TCP_ACK | PSH, TCP_FIN | TCP_ACK, TCP_RST]),
        0u64..2000,
    )
        .prop_map(|(from_a, a_port, b_port, proto, flags, step_ms)| Pkt {
            from_a,
            a_port,
            b_port,
            proto,
            flags,
            step_ms,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever the packets: policy always judges the opener's key (for a pickup, the client
    /// with the higher port), and after a denied opening no packet of that connection passes
    /// until its opener tries afresh (a SYN; UDP: its next datagram, judged again) or it idled.
    #[test]
    fn no_packet_of_a_denied_connection_passes(pkts in prop::collection::vec(pkt(), 1..120)) {
        let mut ct = ct(64);
        let mut now = S;
        // canonical (A end, B end, proto) -> (opener is A, last packet time)
        let mut denied: std::collections::HashMap<(u16, u16, u8), (bool, u64)> = Default::default();
        let policy = |k: &FlowKey| k.dport != 8081;
        for p in &pkts {
            now += p.step_ms * 1_000_000;
            let h = if p.from_a {
                tcp(A, p.a_port, B, p.b_port, p.flags)
            } else {
                tcp(B, p.b_port, A, p.a_port, p.flags)
            };
            let h = if p.proto == 17 { udp(h.src_addr[12..].try_into().unwrap(), h.sport,
                                           h.dst_addr[12..].try_into().unwrap(), h.dport) } else { h };
            let conn = (p.a_port, p.b_port, p.proto);
            let mut judged = None;
            let (st, ok) = ct.track_judged(&h, None, now, |opener| {
                judged = Some(key(opener));
                policy(&key(opener))
            });
            if let CtState::New(f) = st {
                let k = judged.expect("a new connection is judged");
                prop_assert_eq!(k, f.key());
                if f.picked_up() && k.sport != k.dport {
                    prop_assert!(k.sport > k.dport, "a pickup's client has the higher port: {:?}", k);
                }
            }
            if let Some(&(opener_is_a, last)) = denied.get(&conn) {
                let fresh = p.from_a == opener_is_a && (p.proto == 17 || p.flags == TCP_SYN);
                if !fresh && now - last < 120 * S {
                    prop_assert!(!ok, "packet {:?} of a denied connection passed as {:?}", p, st);
                    prop_assert_eq!(st, CtState::Denied);
                }
            }
            match (st, ok) {
                (CtState::New(f), false) => {
                    denied.insert(conn, (f.key().src == u128::from_be_bytes(v4(A)), now));
                }
                (CtState::New(_), true) => { denied.remove(&conn); }
                (CtState::Denied, _) => { denied.get_mut(&conn).expect("the model knows it").1 = now; }
                _ => {}
            }
            ct.check_invariants().map_err(TestCaseError::fail)?;
        }
    }
}

/// Pods a (10.0.0.1) and b (10.0.0.2); b takes TCP 8080 only.
fn engine() -> std::sync::Arc<Snapshot> {
    let pod = |ns: &str, ip: &str| {
        serde_json::json!({
            "kind": "pod", "namespace": ns, "labels": {"app": ns, "projectcalico.org/namespace": ns},
            "raw_labels": {"app": ns}, "sa_labels": {}, "service_account": "default", "ips": [ip],
            "ports": [], "host_network": false, "profiles": [], "addressable": true,
        })
    };
    let entity = serde_json::json!({
        "nets": [], "not_nets": [], "selector": null, "not_selector": null, "endpoint_kinds": null,
        "namespace": null, "namespace_selector": null, "namespace_relation": null, "same_labels": [],
        "not_same_labels": [], "service_account_names": null, "service_account_selector": null,
        "service": null, "node_selector": null, "domains": [],
        "ports": [{"protocol": 6, "first": 8080, "last": 8080, "name": null}], "not_ports": [],
        "unresolvable": false
    });
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
                         "not_icmp": null, "sources": [], "destinations": [entity]}],
            "egress": [],
        }],
    });
    let spec: Spec = serde_json::from_value(spec).expect("spec");
    let mut model = Model::new();
    model.apply(spec.into_delta()).expect("model builds");
    model.snapshot()
}

/// A denied connection and an allowed one, then one picked up from its server's side.
fn capture() -> Vec<PacketHeader> {
    let mut hs = vec![tcp(A, 40000, B, 8081, TCP_SYN)];
    hs.extend(rest_of_exchange((A, 40000), (B, 8081)));
    hs.push(tcp(A, 40001, B, 8080, TCP_SYN));
    hs.extend(rest_of_exchange((A, 40001), (B, 8080)));
    hs.push(tcp(B, 8081, A, 40002, TCP_ACK | PSH));
    hs.push(tcp(A, 40002, B, 8081, TCP_ACK));
    for (i, h) in hs.iter_mut().enumerate() {
        h.ts_ns = S + i as u64 * 1_000;
    }
    hs
}

fn check(hs: &[PacketHeader], out: &[PacketVerdict]) {
    let n = rest_of_exchange((A, 1), (B, 2)).len();
    let (denied, rest) = out.split_at(n + 1);
    let (allowed, picked) = rest.split_at(n + 1);
    assert_eq!((denied[0].allow, denied[0].reason, denied[0].ingress.present), (0, PACKET_POLICY, 1));
    for (i, v) in denied[1..].iter().enumerate() {
        assert_eq!((v.allow, v.reason, v.ct_state), (0, PACKET_DENIED_CONNECTION, code::DENIED), "packet {}", i + 1);
    }
    assert!(allowed.iter().all(|v| v.allow == 1));
    // b's answer first: judged as a's connection to b:8081 (b's ingress denies it), then denied
    let first = picked[0];
    assert_eq!((first.allow, first.reason, first.ct_state), (0, PACKET_POLICY, code::NEW_PICKUP_REPLY));
    assert_eq!((first.ingress.present, first.ingress.allow), (1, 0), "b's ingress judged");
    assert_eq!((picked[1].allow, picked[1].reason), (0, PACKET_DENIED_CONNECTION));
    assert_eq!(hs.len(), out.len());
}

#[test]
fn the_engine_judges_a_denied_connection_whole() {
    let engine = engine();
    let hs = capture();
    let mut out = vec![PacketVerdict::default(); hs.len()];
    let mut ct = ConnTrack::new(CtConfig::default()).unwrap();
    engine.classify_tracked(&mut ct, &hs, None, &mut out, Defaults { pod_allow: true, host_allow: false });
    check(&hs, &out);
}

#[test]
fn the_bridge_judges_a_denied_connection_whole() {
    // the C ABI's judge with a tracker of its own, as the bridge's loop calls it, in two chunks
    let engine = engine();
    let hs = capture();
    let mut out = vec![PacketVerdict::default(); hs.len()];
    unsafe {
        let ct = (ENGINE_API.ct_new)(1024, 1);
        assert!(!ct.is_null());
        let (first, second) = out.split_at_mut(5);
        for (h, o) in [(&hs[..5], first), (&hs[5..], second)] {
            let rc = (ENGINE_API.judge)(&*engine, ct, h.as_ptr(), std::ptr::null(), h.len(), o.as_mut_ptr(), 1, 0);
            assert_eq!(rc, 0);
        }
        let mut stats = [0u64; 32];
        let n = (ENGINE_API.ct_stats)(ct, stats.as_mut_ptr(), stats.len());
        let names = pyclassify_core::capi::CT_STATS_NAMES;
        assert_eq!(n, names.len());
        let stat = |name: &str| stats[names.iter().position(|x| *x == name).unwrap()];
        assert_eq!((stat("denied"), stat("pickups")), (11, 1));
        (ENGINE_API.ct_free)(ct);
    }
    check(&hs, &out);
}
