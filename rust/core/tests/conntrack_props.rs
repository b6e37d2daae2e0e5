//! Property tests of the connection tracker: random header sequences (valid and garbage, with
//! random quoted tuples, clock jumps, confirms, sweeps and revalidations) never panic, the table
//! never exceeds its cap, and the internal structures stay consistent. Plus a model check:
//! whatever the interleaving, a confirmed UDP flow answers its replies until it times out.

use proptest::prelude::*;

use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS, FLAG_ICMP_ERROR};
use pyclassify_core::conntrack::{ConnTrack, CtConfig, CtState, QuotedTuple, QUOTED_VALID};

/// Addresses from a small pool so that flows collide, reply and reopen often.
fn addr(i: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12] = 10;
    a[15] = i % 4;
    a
}

#[derive(Clone, Debug)]
enum Op {
    /// A plausible packet from the small pool.
    Packet {
        src: u8,
        dst: u8,
        sport: u16,
        dport: u16,
        proto: u8,
        tcp_flags: u8,
        flags: u8,
        icmp_type: u8,
        quoted: Option<(u8, u8, u16, u16, u8, u8)>,
    },
    /// Any 64 bytes as a header.
    Garbage(Vec<u8>),
    Advance(u64),
    Expire(usize),
    Revalidate(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (
            any::<u8>(), any::<u8>(), 0u16..4, 0u16..4,
            prop::sample::select(vec![6u8, 17, 1, 58, 47, 132, 0]),
            any::<u8>(), any::<u8>(),
            prop::sample::select(vec![0u8, 3, 8, 11, 128, 129, 1, 2, 135, 255]),
            prop::option::of((any::<u8>(), any::<u8>(), 0u16..4, 0u16..4,
                prop::sample::select(vec![6u8, 17, 1, 58]), any::<u8>())),
        ).prop_map(|(src, dst, sport, dport, proto, tcp_flags, flags, icmp_type, quoted)| Op::Packet {
            src, dst, sport, dport, proto, tcp_flags, flags, icmp_type, quoted,
        }),
        1 => prop::collection::vec(any::<u8>(), 64).prop_map(Op::Garbage),
        1 => prop_oneof![0u64..1_000_000_000, 0u64..1_000_000_000_000, Just(u64::MAX / 2)].prop_map(Op::Advance),
        1 => (0usize..50).prop_map(Op::Expire),
        1 => any::<u16>().prop_map(Op::Revalidate),
    ]
}

fn header(op: &Op) -> Option<(PacketHeader, Option<QuotedTuple>)> {
    match op {
        Op::Packet { src, dst, sport, dport, proto, tcp_flags, flags, icmp_type, quoted } => {
            let ip_version = if *proto == 58 { 6 } else { 4 };
            let h = PacketHeader {
                src_addr: addr(*src),
                dst_addr: addr(*dst),
                sport: *sport,
                dport: *dport,
                ip_version,
                protocol: *proto,
                tcp_flags: *tcp_flags,
                // Mostly well-formed: ports on, malformed off; the rest random.
                flags: if flags & 0x80 == 0 { (flags & FLAG_ICMP_ERROR) | FLAG_HAS_PORTS } else { *flags },
                icmp_type: *icmp_type,
                ..Default::default()
            };
            let q = quoted.map(|(s, d, sp, dp, p, f)| QuotedTuple {
                src_addr: addr(s),
                dst_addr: addr(d),
                sport: sp,
                dport: dp,
                protocol: p,
                icmp_type: if f & 2 != 0 { 8 } else { 0 },
                flags: if f & 1 != 0 { QUOTED_VALID } else { f },
                reserved: 0,
            });
            Some((h, q))
        }
        Op::Garbage(bytes) => {
            let mut raw = [0u8; 64];
            raw.copy_from_slice(bytes);
            // SAFETY: PacketHeader is repr(C), 64 bytes, plain integers and byte arrays without
            // padding: every bit pattern is a valid value; read_unaligned copes with alignment.
            let h = unsafe { std::ptr::read_unaligned(raw.as_ptr() as *const PacketHeader) };
            Some((h, None))
        }
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_never_panic_and_respect_the_cap(
        ops in prop::collection::vec(op(), 1..300),
        cap in 1usize..12,
        loose in any::<bool>(),
        sweep in 0usize..4,
        allow_mask in any::<u64>(),
    ) {
        let cfg = CtConfig { max_entries: cap, tcp_loose: loose, sweep_per_packet: sweep, ..CtConfig::default() };
        let mut ct = ConnTrack::new(cfg).unwrap();
        let mut now: u64 = 0;
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Advance(d) => now = now.saturating_add(*d),
                Op::Expire(b) => { ct.expire(now, *b); }
                Op::Revalidate(m) => {
                    let revoked = ct.revalidate(now, |k| (k.sport ^ k.dport) & m == 0);
                    for k in revoked {
                        prop_assert!((k.sport ^ k.dport) & m != 0);
                    }
                }
                _ => {
                    let (h, q) = header(op).unwrap();
                    let st = ct.track_quoted(&h, q.as_ref(), now);
                    if let CtState::New(f) = st {
                        if allow_mask >> (i % 64) & 1 == 1 {
                            let _ = ct.confirm(&f, now);
                            // Right after confirming (same clock), the same packet is tracked: from
                            // the opener, or from the server of a connection picked up mid-stream.
                            let again = ct.track_quoted(&h, q.as_ref(), now);
                            let own = if f.judged_reversed() { CtState::Reply } else { CtState::Established };
                            prop_assert!(
                                again == own || matches!(again, CtState::Invalid(_) | CtState::New(_)),
                                "{again:?}"
                            );
                        }
                    }
                }
            }
            prop_assert!(ct.len() <= cap);
            if let Err(e) = ct.check_invariants() {
                return Err(TestCaseError::fail(e));
            }
        }
        let s = ct.stats();
        prop_assert_eq!(s.packets, s.new + s.established + s.reply + s.related + s.denied + s.invalid + s.untracked);
    }

    #[test]
    fn confirmed_udp_flows_answer_replies_until_timeout(
        flows in prop::collection::vec((0u8..8, 0u8..8, 1u16..6, 1u16..6), 1..40),
        gaps in prop::collection::vec(0u64..40, 1..40),
    ) {
        let mut ct = ConnTrack::new(CtConfig::default()).unwrap();
        let s = 1_000_000_000u64;
        let mut now = 0u64;
        for ((a, b, sp, dp), gap) in flows.iter().zip(gaps.iter().cycle()) {
            now += gap * s;
            let mk = |x: u8| { let mut v = addr(0); v[15] = x; v };
            let q = PacketHeader { src_addr: mk(*a), dst_addr: mk(b + 8), sport: *sp, dport: *dp,
                ip_version: 4, protocol: 17, flags: FLAG_HAS_PORTS, ..Default::default() };
            let r = PacketHeader { src_addr: q.dst_addr, dst_addr: q.src_addr, sport: *dp, dport: *sp, ..q };
            match ct.track(&q, now) {
                CtState::New(f) => { ct.confirm(&f, now).unwrap(); }
                CtState::Established | CtState::Reply => {}
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            }
            prop_assert_eq!(ct.track(&r, now + 29 * s), CtState::Reply);
        }
    }
}
