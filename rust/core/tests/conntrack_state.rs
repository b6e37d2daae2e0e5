//! Connection tracking: TCP/UDP/ICMP behaviour, timeouts, cap, revalidation.

use std::collections::HashSet;
use std::time::Duration;

use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_ICMP_ERROR, FLAG_MALFORMED};
use pyclassify_core::conntrack::{
    code, ConnTrack, CtConfig, CtError, CtState, FlowKey, InvalidReason, QuotedTuple, TcpState, Timeouts, QUOTED_VALID,
    TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN,
};

const S: u64 = 1_000_000_000;
const PSH: u8 = 0x08;

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&a);
    out
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];
const R: [u8; 4] = [192, 168, 1, 254];

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
    PacketHeader { protocol: 17, tcp_flags: 0, ..tcp(src, sport, dst, dport, 0) }
}

fn icmp(src: [u8; 4], dst: [u8; 4], ty: u8, id: u16) -> PacketHeader {
    PacketHeader {
        src_addr: v4(src),
        dst_addr: v4(dst),
        sport: id,
        ip_version: 4,
        protocol: 1,
        icmp_type: ty,
        ..Default::default()
    }
}

fn ct() -> ConnTrack {
    ConnTrack::new(CtConfig::default()).unwrap()
}

/// Tracks and confirms if new (policy allows everything).
fn allow(ct: &mut ConnTrack, h: &PacketHeader, now: u64) -> CtState {
    let st = ct.track(h, now);
    if let CtState::New(f) = &st {
        ct.confirm(f, now).unwrap();
    }
    st
}

fn state_of(ct: &ConnTrack, h: &PacketHeader, now: u64) -> Option<TcpState> {
    let k = FlowKey::new(h.src_addr, h.dst_addr, h.sport, h.dport, h.protocol);
    ct.get(&k, now).and_then(|f| f.tcp_state)
}

#[test]
fn tcp_handshake_and_clean_teardown() {
    let mut ct = ct();
    let c2s = |f| tcp(A, 40000, B, 80, f);
    let s2c = |f| tcp(B, 80, A, 40000, f);
    let st = allow(&mut ct, &c2s(TCP_SYN), S);
    let CtState::New(flow) = st else { panic!("SYN must be new, got {st:?}") };
    assert_eq!(flow.key(), FlowKey::new(v4(A), v4(B), 40000, 80, 6));
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::SynSent));
    assert_eq!(ct.track(&s2c(TCP_SYN | TCP_ACK), S), CtState::Reply);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::SynRecv));
    assert_eq!(ct.track(&c2s(TCP_ACK), S), CtState::Established);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::Established));
    let info = ct.get(&FlowKey::new(v4(B), v4(A), 80, 40000, 6), S).unwrap();
    assert!(info.assured);
    assert_eq!(info.key, FlowKey::new(v4(A), v4(B), 40000, 80, 6), "original direction kept");
    assert_eq!((info.packets_orig, info.packets_reply), (2, 1));
    assert_eq!(ct.track(&s2c(TCP_ACK | PSH), S), CtState::Reply);
    // Client closes.
    assert_eq!(ct.track(&c2s(TCP_FIN | TCP_ACK), S), CtState::Established);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::FinWait));
    assert_eq!(ct.track(&s2c(TCP_ACK), S), CtState::Reply);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::CloseWait));
    assert_eq!(ct.track(&s2c(TCP_FIN | TCP_ACK), S), CtState::Reply);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::LastAck));
    assert_eq!(ct.track(&c2s(TCP_ACK), S), CtState::Established);
    assert_eq!(state_of(&ct, &c2s(0), S), Some(TcpState::TimeWait));
    // TIME_WAIT lasts 120 s, then the entry is gone.
    assert!(ct.get(&flow.key(), S + 119 * S).is_some());
    assert!(ct.get(&flow.key(), S + 121 * S).is_none());
    ct.check_invariants().unwrap();
}

#[test]
fn server_side_close_tracks_which_side_sent_fin() {
    let mut ct = ct();
    allow(&mut ct, &tcp(A, 1, B, 2, TCP_SYN), 0);
    ct.track(&tcp(B, 2, A, 1, TCP_SYN | TCP_ACK), 0);
    ct.track(&tcp(A, 1, B, 2, TCP_ACK), 0);
    ct.track(&tcp(B, 2, A, 1, TCP_FIN | TCP_ACK), 0);
    assert_eq!(state_of(&ct, &tcp(A, 1, B, 2, 0), 0), Some(TcpState::FinWait));
    // The server's own retransmitted FIN does not advance.
    ct.track(&tcp(B, 2, A, 1, TCP_FIN | TCP_ACK), 0);
    assert_eq!(state_of(&ct, &tcp(A, 1, B, 2, 0), 0), Some(TcpState::FinWait));
    ct.track(&tcp(A, 1, B, 2, TCP_FIN | TCP_ACK), 0);
    assert_eq!(state_of(&ct, &tcp(A, 1, B, 2, 0), 0), Some(TcpState::LastAck));
}

#[test]
fn rst_closes_and_a_new_syn_is_judged_again() {
    let mut ct = ct();
    allow(&mut ct, &tcp(A, 1, B, 2, TCP_SYN), 0);
    ct.track(&tcp(B, 2, A, 1, TCP_SYN | TCP_ACK), 0);
    ct.track(&tcp(A, 1, B, 2, TCP_ACK), 0);
    assert_eq!(ct.track(&tcp(B, 2, A, 1, TCP_RST), 0), CtState::Reply);
    assert_eq!(state_of(&ct, &tcp(A, 1, B, 2, 0), 0), Some(TcpState::Close));
    // After RST only RST or a new SYN fit.
    assert_eq!(ct.track(&tcp(A, 1, B, 2, TCP_ACK), 0), CtState::Invalid(InvalidReason::TcpBadTransition));
    // CLOSE lasts 10 s.
    assert!(ct.get(&FlowKey::new(v4(A), v4(B), 1, 2, 6), 11 * S).is_none());
    // A SYN on a closed connection reopens it: New again, old entry gone.
    let mut ct2 = self::ct();
    allow(&mut ct2, &tcp(A, 1, B, 2, TCP_SYN), 0);
    ct2.track(&tcp(A, 1, B, 2, TCP_RST), 0);
    assert!(matches!(ct2.track(&tcp(A, 1, B, 2, TCP_SYN), 1), CtState::New(_)));
    assert_eq!(ct2.len(), 0, "a reopening SYN removes the closed entry until policy confirms");
    ct2.check_invariants().unwrap();
}

#[test]
fn tcp_packets_that_open_nothing_are_invalid() {
    let mut ct = ct();
    for flags in [TCP_SYN | TCP_ACK, TCP_FIN | TCP_ACK, TCP_RST, 0, TCP_SYN | TCP_FIN, PSH] {
        assert!(
            matches!(ct.track(&tcp(A, 1, B, 2, flags), 0), CtState::Invalid(InvalidReason::TcpNoConnection)),
            "flags {flags:#x}"
        );
    }
    assert_eq!(ct.len(), 0);
    // The opener cannot send the SYN-ACK.
    allow(&mut ct, &tcp(A, 1, B, 2, TCP_SYN), 0);
    assert!(matches!(ct.track(&tcp(A, 1, B, 2, TCP_SYN | TCP_ACK), 0), CtState::Invalid(_)));
}

#[test]
fn loose_pickup_on_and_off() {
    let mut on = ct();
    let mid = tcp(A, 5000, B, 22, TCP_ACK | PSH);
    let st = on.track(&mid, 0);
    let CtState::New(f) = st else { panic!("loose pickup must offer a mid-stream ACK, got {st:?}") };
    on.confirm(&f, 0).unwrap();
    assert_eq!(state_of(&on, &mid, 0), Some(TcpState::Established));
    assert!(!on.get(&f.key(), 0).unwrap().assured, "not assured before a reply");
    assert_eq!(on.track(&tcp(B, 22, A, 5000, TCP_ACK), 0), CtState::Reply);
    assert!(on.get(&f.key(), 0).unwrap().assured);

    let mut off = ConnTrack::new(CtConfig { tcp_loose: false, ..CtConfig::default() }).unwrap();
    assert_eq!(off.track(&mid, 0), CtState::Invalid(InvalidReason::TcpNoConnection));
    assert!(matches!(off.track(&tcp(A, 5000, B, 22, TCP_SYN), 0), CtState::New(_)));
}

#[test]
fn udp_unreplied_then_assured_timeouts() {
    let mut ct = ct();
    let q = udp(A, 5353, B, 53);
    let r = udp(B, 53, A, 5353);
    assert!(matches!(allow(&mut ct, &q, 0), CtState::New(_)));
    let key = FlowKey::new(v4(A), v4(B), 5353, 53, 17);
    assert!(ct.get(&key, 29 * S).is_some());
    assert!(ct.get(&key, 31 * S).is_none(), "unreplied UDP lasts 30 s");
    // The reply after the timeout is not a reply any more: it would open its own flow.
    let CtState::New(f) = ct.track(&r, 31 * S) else { panic!("expired reply must be new") };
    assert_eq!(f.key(), FlowKey::new(v4(B), v4(A), 53, 5353, 17));

    let mut ct = self::ct();
    allow(&mut ct, &q, 0);
    assert_eq!(ct.track(&r, S), CtState::Reply);
    assert!(ct.get(&key, S).unwrap().assured);
    assert!(ct.get(&key, S + 119 * S).is_some(), "assured UDP lasts 120 s");
    assert!(ct.get(&key, S + 121 * S).is_none());
    assert_eq!(ct.stats().reply, 1);
}

#[test]
fn icmp_echo_request_and_reply() {
    let mut ct = ct();
    // A reply to nothing is invalid.
    assert_eq!(ct.track(&icmp(B, A, 0, 7), 0), CtState::Invalid(InvalidReason::IcmpNoRequest));
    let CtState::New(f) = allow(&mut ct, &icmp(A, B, 8, 7), 0) else { panic!("echo request is new") };
    assert_eq!(f.key(), FlowKey { src: f.key().src, dst: f.key().dst, sport: 7, dport: 8 << 8, proto: 1 });
    assert_eq!(ct.track(&icmp(B, A, 0, 7), S), CtState::Reply);
    // Another identifier is another flow.
    assert_eq!(ct.track(&icmp(B, A, 0, 8), S), CtState::Invalid(InvalidReason::IcmpNoRequest));
    // B pinging A with the same id is its own flow (keyed by requester).
    assert!(matches!(ct.track(&icmp(B, A, 8, 7), S), CtState::New(_)));
    // 30 s timeout.
    assert_eq!(ct.track(&icmp(A, B, 8, 7), 30 * S), CtState::Established);
    assert_eq!(ct.track(&icmp(B, A, 0, 7), 61 * S), CtState::Invalid(InvalidReason::IcmpNoRequest));
    // Neighbour discovery is untracked.
    let mut ns = icmp(A, B, 135, 0);
    ns.ip_version = 6;
    ns.protocol = 58;
    assert_eq!(ct.track(&ns, 0), CtState::Untracked);
    // ICMPv6 echo.
    let mut e6 = icmp(A, B, 128, 3);
    e6.ip_version = 6;
    e6.protocol = 58;
    assert!(matches!(allow(&mut ct, &e6, 0), CtState::New(_)));
    let r6 = PacketHeader { src_addr: e6.dst_addr, dst_addr: e6.src_addr, icmp_type: 129, ..e6 };
    assert_eq!(ct.track(&r6, 0), CtState::Reply);
}

fn quote(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: u8) -> QuotedTuple {
    QuotedTuple {
        src_addr: v4(src),
        dst_addr: v4(dst),
        sport,
        dport,
        protocol: proto,
        flags: QUOTED_VALID,
        ..Default::default()
    }
}

fn icmp_error(from: [u8; 4], to: [u8; 4], ty: u8, code: u8) -> PacketHeader {
    PacketHeader { flags: FLAG_ICMP_ERROR, icmp_code: code, ..icmp(from, to, ty, 0) }
}

#[test]
fn icmp_errors_are_related_to_the_flow_they_quote() {
    let mut ct = ct();
    allow(&mut ct, &tcp(A, 40000, B, 80, TCP_SYN), 0);
    // A router tells A that B is unreachable, quoting A's SYN.
    let err = icmp_error(R, A, 3, 1);
    let q = quote(A, 40000, B, 80, 6);
    assert_eq!(ct.track_quoted(&err, Some(&q), 0), CtState::Related);
    // Time exceeded, quoted in the other direction (B's reply hit a TTL limit, error to B).
    ct.track(&tcp(B, 80, A, 40000, TCP_SYN | TCP_ACK), 0);
    let q_rev = quote(B, 80, A, 40000, 6);
    assert_eq!(ct.track_quoted(&icmp_error(R, B, 11, 0), Some(&q_rev), 0), CtState::Related);
    // An error addressed to someone else than the quoted packet's sender is not related.
    assert_eq!(
        ct.track_quoted(&icmp_error(R, B, 3, 1), Some(&q), 0),
        CtState::Invalid(InvalidReason::IcmpErrorUnrelated)
    );
    // Unknown flow, missing or invalid quote, non-error type with the flag.
    let other = quote(A, 40001, B, 80, 6);
    assert_eq!(ct.track_quoted(&err, Some(&other), 0), CtState::Invalid(InvalidReason::IcmpErrorUnrelated));
    assert_eq!(ct.track(&err, 0), CtState::Invalid(InvalidReason::IcmpErrorNoQuote));
    let mut bad = q;
    bad.flags = 0;
    assert_eq!(ct.track_quoted(&err, Some(&bad), 0), CtState::Invalid(InvalidReason::IcmpErrorNoQuote));
    assert_eq!(
        ct.track_quoted(&icmp_error(R, A, 8, 0), Some(&q), 0),
        CtState::Invalid(InvalidReason::IcmpErrorBadType)
    );
    // ICMPv6 packet too big quoting a v6 UDP flow.
    let a6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let b6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let u6 = PacketHeader { src_addr: a6, dst_addr: b6, ip_version: 6, ..udp(A, 9000, B, 443) };
    allow(&mut ct, &u6, 0);
    let ptb = PacketHeader {
        src_addr: b6,
        dst_addr: a6,
        ip_version: 6,
        protocol: 58,
        icmp_type: 2,
        flags: FLAG_ICMP_ERROR,
        ..Default::default()
    };
    let q6 = QuotedTuple {
        src_addr: a6,
        dst_addr: b6,
        sport: 9000,
        dport: 443,
        protocol: 17,
        flags: QUOTED_VALID,
        ..Default::default()
    };
    assert_eq!(ct.track_quoted(&ptb, Some(&q6), 0), CtState::Related);
    // An error quoting an echo request.
    allow(&mut ct, &icmp(A, B, 8, 99), 0);
    let qe = QuotedTuple { icmp_type: 8, sport: 99, ..quote(A, 0, B, 0, 1) };
    assert_eq!(ct.track_quoted(&icmp_error(R, A, 3, 0), Some(&qe), 0), CtState::Related);
    assert_eq!(ct.stats().related, 4);
}

#[test]
fn malformed_and_portless_packets_are_invalid() {
    let mut ct = ct();
    let mut h = tcp(A, 1, B, 2, TCP_SYN);
    h.flags |= FLAG_MALFORMED;
    assert_eq!(ct.track(&h, 0), CtState::Invalid(InvalidReason::Malformed));
    let mut h = udp(A, 1, B, 2);
    h.flags = 0;
    assert_eq!(ct.track(&h, 0), CtState::Invalid(InvalidReason::NoPorts));
    let mut h = udp(A, 1, B, 2);
    h.ip_version = 0;
    assert_eq!(ct.track(&h, 0), CtState::Invalid(InvalidReason::NotIp));
    // ICMPv6 in an IPv4 packet.
    let mut h = icmp(A, B, 128, 1);
    h.protocol = 58;
    assert_eq!(ct.track(&h, 0), CtState::Invalid(InvalidReason::NotIp));
    // Generic protocols (GRE) are tracked without ports.
    let gre = PacketHeader { protocol: 47, flags: 0, ..udp(A, 0, B, 0) };
    assert!(matches!(allow(&mut ct, &gre, 0), CtState::New(_)));
    let back = PacketHeader { src_addr: gre.dst_addr, dst_addr: gre.src_addr, ..gre };
    assert_eq!(ct.track(&back, 599 * S), CtState::Reply);
    assert_eq!(ct.stats().invalid, 4);
}

#[test]
fn sweep_removes_expired_entries_without_lookups() {
    let cfg = CtConfig { sweep_per_packet: 0, ..CtConfig::default() };
    let mut ct = ConnTrack::new(cfg).unwrap();
    for p in 0..100u16 {
        allow(&mut ct, &udp(A, 1000 + p, B, 53), 0);
    }
    assert_eq!(ct.len(), 100);
    assert_eq!(ct.expire(31 * S, 40), 40, "bounded work per call");
    assert_eq!(ct.len(), 60);
    assert_eq!(ct.expire(31 * S, 1000), 60);
    assert!(ct.is_empty());
    assert_eq!(ct.stats().expired, 100);
    // With a per-packet sweep, unrelated traffic clears old entries.
    let mut ct = ConnTrack::new(CtConfig { sweep_per_packet: 8, ..CtConfig::default() }).unwrap();
    for p in 0..100u16 {
        allow(&mut ct, &udp(A, 1000 + p, B, 53), 0);
    }
    for _ in 0..13 {
        ct.track(&icmp(A, B, 135, 0), 31 * S);
    }
    assert_eq!(ct.len(), 0);
    ct.check_invariants().unwrap();
}

#[test]
fn custom_timeouts_and_config_errors() {
    let t = Timeouts { udp_unreplied: Duration::from_millis(5), ..Timeouts::default() };
    let mut ct = ConnTrack::new(CtConfig { timeouts: t, ..CtConfig::default() }).unwrap();
    allow(&mut ct, &udp(A, 1, B, 2), 0);
    assert_eq!(ct.track(&udp(B, 2, A, 1), 4_000_000), CtState::Reply);
    for bad in [
        CtConfig { max_entries: 0, ..CtConfig::default() },
        CtConfig { timeouts: Timeouts { icmp: Duration::ZERO, ..Timeouts::default() }, ..CtConfig::default() },
        CtConfig { timeouts: Timeouts { generic: Duration::MAX, ..Timeouts::default() }, ..CtConfig::default() },
    ] {
        let err = ConnTrack::new(bad).err().expect("must be rejected");
        assert!(matches!(err, CtError::InvalidConfig(_)));
        assert!(err.to_string().starts_with("invalid conntrack configuration"), "{err}");
    }
}

#[test]
fn cap_drops_oldest_unassured_only() {
    let mut ct = ConnTrack::new(CtConfig { max_entries: 4, ..CtConfig::default() }).unwrap();
    // Two assured UDP flows.
    for p in [1u16, 2] {
        allow(&mut ct, &udp(A, p, B, 53), 0);
        ct.track(&udp(B, 53, A, p), 0);
    }
    // Two unassured: port 3 older, then port 4; port 3 seen again -> port 4 is least recent.
    allow(&mut ct, &udp(A, 3, B, 53), 1);
    allow(&mut ct, &udp(A, 4, B, 53), 2);
    ct.track(&udp(A, 3, B, 53), 3);
    assert_eq!(ct.len(), 4);
    allow(&mut ct, &udp(A, 5, B, 53), 4);
    assert_eq!(ct.len(), 4);
    assert_eq!(ct.stats().early_drops, 1);
    let has = |ct: &ConnTrack, p: u16| ct.get(&FlowKey::new(v4(A), v4(B), p, 53, 17), 4).is_some();
    assert!(has(&ct, 1) && has(&ct, 2) && has(&ct, 3) && has(&ct, 5));
    assert!(!has(&ct, 4), "the least recently seen unassured entry goes");
    allow(&mut ct, &udp(A, 6, B, 53), 5);
    allow(&mut ct, &udp(A, 7, B, 53), 5);
    assert!(has(&ct, 1) && has(&ct, 2), "assured entries are never dropped early");
    assert_eq!(ct.stats().early_drops, 3);
    // Make everything assured: then a new flow is refused.
    for p in [6u16, 7] {
        ct.track(&udp(B, 53, A, p), 5);
    }
    let CtState::New(f) = ct.track(&udp(A, 8, B, 53), 5) else { panic!() };
    assert_eq!(ct.confirm(&f, 5), Err(CtError::TableFull));
    assert_eq!(ct.stats().insert_failed, 1);
    assert_eq!(ct.len(), 4);
    // Once they time out there is room again (found by the sweep, counted as expired).
    let expired_before = ct.stats().expired;
    let CtState::New(f) = ct.track(&udp(A, 8, B, 53), 200 * S) else { panic!() };
    ct.confirm(&f, 200 * S).unwrap();
    assert!(ct.stats().expired > expired_before);
    ct.check_invariants().unwrap();
}

#[test]
fn revalidate_removes_and_reports_denied_flows() {
    let mut ct = ct();
    for p in 0..50u16 {
        allow(&mut ct, &tcp(A, 1000 + p, B, if p % 5 == 0 { 22 } else { 80 }, TCP_SYN), 0);
        ct.track(&tcp(B, if p % 5 == 0 { 22 } else { 80 }, A, 1000 + p, TCP_SYN | TCP_ACK), 0);
    }
    allow(&mut ct, &icmp(A, B, 8, 1), 0);
    let mut revoked = ct.revalidate(1, |k| k.dport != 22);
    revoked.sort();
    assert_eq!(revoked.len(), 10);
    for k in &revoked {
        assert_eq!((k.src, k.dport, k.proto), (FlowKey::new(v4(A), v4(B), 0, 0, 0).src, 22, 6), "original direction");
    }
    // Revoked connections stay, marked: every packet of theirs, either way, is dropped, so that
    // the server's next ACK is not picked up as a connection from B (which policy may allow).
    assert_eq!(ct.len(), 51);
    for (h, what) in [
        (tcp(B, 22, A, 1000, TCP_ACK), "the server's ACK"),
        (tcp(A, 1000, B, 22, TCP_ACK), "the client's ACK"),
        (tcp(B, 22, A, 1000, TCP_SYN | TCP_ACK), "a SYN-ACK"),
    ] {
        assert_eq!(ct.track(&h, 1), CtState::Invalid(InvalidReason::Revoked), "{what}");
    }
    // Revoked ones are not reported again; allowed again, they are restored.
    assert!(ct.revalidate(1, |k| k.dport != 22).is_empty());
    assert!(ct.revalidate(1, |k| k.dport != 22 || k.sport == 1010).is_empty());
    assert_eq!(ct.stats().restored, 1);
    assert_eq!(ct.track(&tcp(B, 22, A, 1010, TCP_ACK), 1), CtState::Reply);
    // A fresh SYN from the opener on the same ports is a new connection, for policy to judge.
    let CtState::New(f) = ct.track(&tcp(A, 1005, B, 22, TCP_SYN), 1) else {
        panic!("a new SYN on a revoked connection's ports is offered to policy")
    };
    assert_eq!(f.key(), FlowKey::new(v4(A), v4(B), 1005, 22, 6));
    assert_eq!(ct.len(), 50);
    // Idle long enough, a revoked entry goes.
    assert!(matches!(ct.track(&tcp(B, 22, A, 1000, TCP_ACK), 200_000_000_000), CtState::New(_)));
    assert_eq!(ct.track(&tcp(B, 80, A, 1001, TCP_ACK), 1), CtState::Reply);
    assert_eq!(ct.stats().revoked, 10);
    // Judge sees ICMP queries with the request type in dport.
    let icmp_revoked = ct.revalidate(1, |k| k.proto != 1);
    assert_eq!(icmp_revoked, vec![FlowKey::new(v4(A), v4(B), 1, 8 << 8, 1)]);
    // remove_keys takes keys in either direction.
    let set: HashSet<FlowKey> = [FlowKey::new(v4(B), v4(A), 80, 1001, 6)].into();
    assert_eq!(ct.remove_keys(&set), 1);
    ct.check_invariants().unwrap();
}

#[test]
fn batch_tracks_in_order_and_reports_codes() {
    let mut ct = ct();
    let hdrs = [
        tcp(A, 1, B, 80, TCP_SYN),
        tcp(B, 80, A, 1, TCP_SYN | TCP_ACK),
        tcp(A, 2, B, 23, TCP_SYN),           // denied by policy
        tcp(B, 23, A, 2, TCP_SYN | TCP_ACK), // so its reply is denied with it
        icmp(A, B, 135, 0),                  // untracked: policy verdict applies
    ];
    let verdicts = [1, 0, 0, 1, 1];
    let mut states = [0u8; 5];
    let mut allowed = [9u8; 5];
    ct.track_batch(&hdrs, None, &verdicts, Some(0), &mut states, &mut allowed).unwrap();
    assert_eq!(states, [code::NEW, code::REPLY, code::NEW, code::DENIED, code::UNTRACKED]);
    assert_eq!(allowed, [1, 1, 0, 0, 1]);
    assert_eq!((ct.len(), ct.denials()), (1, 1));
    let err = ct.track_batch(&hdrs, None, &verdicts[..4], None, &mut states, &mut allowed).unwrap_err();
    assert_eq!(err, CtError::LengthMismatch { what: "verdicts", got: 4, expected: 5 });
    assert_eq!(err.to_string(), "verdicts has 4 entries, the header batch has 5");
}
