//! Random rulesets with interleaved inserts and removes: TupleMerge == LinearScan == brute force,
//! for classify, classify_batch and matches_below, under several tunings (tiny collision limits
//! force bucket splits), with the pruning index clean, dirty and built again in between. The
//! bit-vector classifier (the engine's scheme; built once, so built again after each change) is
//! held to the same brute force.

use proptest::prelude::*;
use pyclassify_core::classifier::{
    BitVector, ClassRule, Classifier, ClassifierError, LinearScan, Match, PacketKey, PortRange, Prefix, PruningMode,
    TupleMerge, TupleMergeConfig,
};

/// Addresses from a small pool so prefixes overlap; IPv4-mapped and IPv6.
fn addr() -> impl Strategy<Value = u128> {
    prop_oneof![
        (0u32..4, any::<u32>()).prop_map(|(hi, lo)| Prefix::v4((hi << 30) | (lo & 0xff00_00ff), 32).addr),
        Just(Prefix::v4(0x0a00_0001, 32).addr),
        (0u128..4).prop_map(|x| (0x2001_0db8u128 << 96) | (x << 70) | x),
    ]
}

fn prefix() -> impl Strategy<Value = Prefix> {
    (addr(), 0u8..=32).prop_map(|(a, l)| {
        if a >> 32 == 0xffff {
            Prefix { addr: a, len: 96 + l }
        } else {
            Prefix { addr: a, len: l * 4 }
        }
    })
}

fn range() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        Just(PortRange::ANY),
        (0u16..8).prop_map(|p| PortRange::exact(p * 1000)),
        (0u16..4000, 0u16..3000).prop_map(|(lo, w)| PortRange { lo, hi: lo + w }),
        Just(PortRange { lo: 0, hi: 1023 }),
        Just(PortRange { lo: 1024, hi: 65535 }),
    ]
}

fn opt(values: &'static [u8]) -> impl Strategy<Value = Option<u8>> {
    prop_oneof![Just(None), proptest::sample::select(values).prop_map(Some)]
}

fn rule() -> impl Strategy<Value = ClassRule> {
    (0u32..12, prefix(), prefix(), range(), range(), opt(&[1, 6, 17]), opt(&[0, 3, 8]), opt(&[0, 1])).prop_map(
        |(priority, src, dst, sport, dport, proto, icmp_type, icmp_code)| ClassRule {
            id: 0, // assigned by the test
            priority,
            src,
            dst,
            sport,
            dport,
            proto,
            icmp_type,
            icmp_code,
        },
    )
}

/// Keys drawn near the rules: one of the pool's addresses, ports near the ranges' ends.
fn key() -> impl Strategy<Value = PacketKey> {
    (
        addr(),
        addr(),
        prop_oneof![Just(0u16), Just(1023), Just(1024), Just(65535), 0u16..8000],
        prop_oneof![Just(0u16), Just(1000), Just(3000), Just(1024), 0u16..8000],
        proptest::sample::select(&[1u8, 6, 17, 47][..]),
        0u8..10,
        0u8..3,
    )
        .prop_map(|(src, dst, sport, dport, proto, icmp_type, icmp_code)| PacketKey {
            src,
            dst,
            sport,
            dport,
            proto,
            icmp_type,
            icmp_code,
        })
}

#[derive(Clone, Debug)]
enum Op {
    Insert(ClassRule),
    /// Remove the live rule at this index modulo the number of live rules.
    Remove(usize),
    Check(PacketKey),
    /// Build the pruning index again (every table clean, renumbered).
    Rebuild,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => rule().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Remove),
        3 => key().prop_map(Op::Check),
        1 => Just(Op::Rebuild),
    ]
}

fn config() -> impl Strategy<Value = TupleMergeConfig> {
    (
        1usize..10,
        prop_oneof![Just(1u8), Just(4), Just(8), Just(32)],
        prop_oneof![Just(1u8), Just(16), Just(64)],
        prop_oneof![Just(PruningMode::Auto), Just(PruningMode::Always), Just(PruningMode::Never)],
    )
        .prop_map(|(collision_limit, v4_step, v6_step, pruning)| TupleMergeConfig {
            collision_limit,
            v4_step,
            v6_step,
            pruning,
        })
}

fn brute_best(rules: &[ClassRule], k: &PacketKey) -> Option<Match> {
    rules.iter().filter(|r| r.matches(k)).min_by_key(|r| r.rank()).map(|r| Match { id: r.id, priority: r.priority })
}

fn brute_below(rules: &[ClassRule], k: &PacketKey, below: u32) -> Vec<Match> {
    let mut v: Vec<&ClassRule> = rules.iter().filter(|r| r.priority < below && r.matches(k)).collect();
    v.sort_by_key(|r| r.rank());
    v.iter().map(|r| Match { id: r.id, priority: r.priority }).collect()
}

fn check(tm: &TupleMerge, lin: &LinearScan, live: &[ClassRule], k: &PacketKey) -> Result<(), TestCaseError> {
    let want = brute_best(live, k);
    prop_assert_eq!(lin.classify(k), want);
    prop_assert_eq!(tm.classify(k), want);
    let mut out = [None; 3];
    tm.classify_batch(&[*k, *k, *k], &mut out);
    prop_assert_eq!(out, [want; 3]);
    for below in [0, 3, 7, 12, u32::MAX] {
        let mut got = vec![Match { id: 999, priority: 999 }]; // appended after existing content
        tm.matches_below(k, below, &mut got);
        let mut exp = vec![Match { id: 999, priority: 999 }];
        exp.extend(brute_below(live, k, below));
        prop_assert_eq!(&got, &exp);
        let mut got = Vec::new();
        lin.matches_below(k, below, &mut got);
        prop_assert_eq!(&got, &exp[1..]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn interleaved_updates_agree_with_brute_force(
        cfg in config(),
        initial in proptest::collection::vec(rule(), 0..40),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut next_id = 0u32;
        let mut live: Vec<ClassRule> = initial
            .into_iter()
            .map(|mut r| { r.id = next_id; next_id += 1; r })
            .collect();
        let mut tm = TupleMerge::build_with(&live, cfg).unwrap();
        let mut lin = LinearScan::build(&live).unwrap();
        for op in ops {
            match op {
                Op::Insert(mut r) => {
                    r.id = next_id;
                    next_id += 1;
                    tm.insert(r).unwrap();
                    lin.insert(r).unwrap();
                    live.push(r);
                }
                Op::Remove(i) => {
                    if live.is_empty() {
                        prop_assert!(!tm.remove(7));
                    } else {
                        let r = live.swap_remove(i % live.len());
                        prop_assert!(tm.remove(r.id));
                        prop_assert!(!tm.remove(r.id));
                        prop_assert!(lin.remove(r.id));
                    }
                }
                Op::Check(k) => check(&tm, &lin, &live, &k)?,
                Op::Rebuild => tm.rebuild_pruning(),
            }
            prop_assert_eq!(tm.len(), live.len());
            prop_assert_eq!(lin.len(), live.len());
        }
        // Every rule's own corner points, one at a time and then all in one batch (mixed keys:
        // each lane of the batch path skips and stops on its own).
        let mut corners = Vec::new();
        for r in live.clone() {
            let k = PacketKey {
                src: r.src.addr, dst: r.dst.addr, sport: r.sport.hi, dport: r.dport.lo,
                proto: r.proto.unwrap_or(6), icmp_type: r.icmp_type.unwrap_or(0), icmp_code: r.icmp_code.unwrap_or(0),
            };
            check(&tm, &lin, &live, &k)?;
            corners.push(k);
            corners.push(PacketKey { sport: r.sport.lo, dport: r.dport.hi, ..k });
        }
        let mut out = vec![None; corners.len()];
        tm.classify_batch(&corners, &mut out);
        for (k, got) in corners.iter().zip(&out) {
            prop_assert_eq!(*got, brute_best(&live, k));
        }
    }
}

/// The bit-vector classifier against brute force on `rules` and `keys`: first match, the batch
/// path and every match below a priority.
fn check_bitvector(rules: &[ClassRule], keys: &[PacketKey]) -> Result<(), TestCaseError> {
    let bv = BitVector::build(rules).unwrap();
    prop_assert_eq!(bv.len(), rules.len());
    let mut out = vec![None; keys.len()];
    bv.classify_batch(keys, &mut out);
    for (k, got) in keys.iter().zip(&out) {
        let want = brute_best(rules, k);
        prop_assert_eq!(bv.classify(k), want);
        prop_assert_eq!(*got, want);
        for below in [0, 3, 7, 12, u32::MAX] {
            let mut got = vec![Match { id: 999, priority: 999 }];
            bv.matches_below(k, below, &mut got);
            let mut exp = vec![Match { id: 999, priority: 999 }];
            exp.extend(brute_below(rules, k, below));
            prop_assert_eq!(&got, &exp);
        }
    }
    Ok(())
}

/// A rule's own corner points (its prefixes' first addresses, its ports' ends).
fn corners(rules: &[ClassRule]) -> Vec<PacketKey> {
    let mut v = Vec::new();
    for r in rules {
        let k = PacketKey {
            src: r.src.addr,
            dst: r.dst.addr,
            sport: r.sport.hi,
            dport: r.dport.lo,
            proto: r.proto.unwrap_or(6),
            icmp_type: r.icmp_type.unwrap_or(0),
            icmp_code: r.icmp_code.unwrap_or(0),
        };
        v.push(k);
        v.push(PacketKey { sport: r.sport.lo, dport: r.dport.hi, ..k });
        // The prefixes' last addresses and the ones after them (an interval's end and the next).
        let last = |p: Prefix| p.addr | !Prefix::mask(p.len);
        v.push(PacketKey { src: last(r.src), dst: last(r.dst), ..k });
        v.push(PacketKey { src: last(r.src).wrapping_add(1), dst: last(r.dst).wrapping_add(1), ..k });
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Up to 80 rules (past the prefixes an address's atom is scanned among, so both of its
    /// lookups run), IPv4-only sets and mixed ones, rebuilt after each insert or remove.
    #[test]
    fn bitvector_agrees_with_brute_force(
        initial in proptest::collection::vec(rule(), 0..80),
        v4_only in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..30),
    ) {
        let mut next_id = 0u32;
        let v4 = |p: &Prefix| p.addr >> 32 == 0xffff;
        let mut live: Vec<ClassRule> = initial
            .into_iter()
            .filter(|r| !v4_only || (v4(&r.src) && v4(&r.dst)))
            .map(|mut r| { r.id = next_id; next_id += 1; r })
            .collect();
        let mut keys = Vec::new();
        for op in ops {
            match op {
                Op::Insert(mut r) => {
                    if v4_only && !(v4(&r.src) && v4(&r.dst)) {
                        continue;
                    }
                    r.id = next_id;
                    next_id += 1;
                    live.push(r);
                    check_bitvector(&live, &keys)?;
                }
                Op::Remove(i) if !live.is_empty() => {
                    live.swap_remove(i % live.len());
                    check_bitvector(&live, &keys)?;
                }
                Op::Check(k) => keys.push(k),
                _ => {}
            }
        }
        keys.extend(corners(&live));
        check_bitvector(&live, &keys)?;
    }
}

#[test]
fn errors_leave_the_classifier_unchanged() {
    let r = ClassRule { dport: PortRange::exact(80), proto: Some(6), ..ClassRule::any(1, 5) };
    let mut tm = TupleMerge::build(&[r]).unwrap();
    assert_eq!(tm.insert(r), Err(ClassifierError::DuplicateId(1)));
    assert_eq!(TupleMerge::build(&[r, ClassRule { priority: 9, ..r }]).err(), Some(ClassifierError::DuplicateId(1)));
    assert_eq!(LinearScan::build(&[r, ClassRule { priority: 9, ..r }]).err(), Some(ClassifierError::DuplicateId(1)));
    let bad = ClassRule { sport: PortRange { lo: 9, hi: 8 }, ..ClassRule::any(2, 0) };
    assert!(matches!(tm.insert(bad), Err(ClassifierError::BadPortRange { id: 2, .. })));
    let bad = ClassRule { dst: Prefix { addr: 0, len: 200 }, ..ClassRule::any(3, 0) };
    assert!(matches!(tm.insert(bad), Err(ClassifierError::BadPrefixLength { id: 3, field: "dst", len: 200 })));
    assert!(matches!(TupleMerge::build(&[bad]), Err(ClassifierError::BadPrefixLength { .. })));
    assert!(matches!(BitVector::build(&[bad]), Err(ClassifierError::BadPrefixLength { .. })));
    assert_eq!(BitVector::build(&[r, ClassRule { priority: 9, ..r }]).err(), Some(ClassifierError::DuplicateId(1)));
    assert_eq!(tm.len(), 1);
    let k = PacketKey::v4(1, 2, 3, 80, 6);
    assert_eq!(tm.classify(&k), Some(Match { id: 1, priority: 5 }));
    assert_eq!(tm.classify(&PacketKey::v4(1, 2, 3, 81, 6)), None);
    assert!(tm.remove(1));
    assert!(tm.is_empty());
    assert_eq!(tm.classify(&k), None);
    assert_eq!(tm.stats().tables, 0);
}

#[test]
fn equal_priorities_go_to_the_lower_id() {
    let rules = [ClassRule::any(9, 1), ClassRule::any(4, 1), ClassRule::any(2, 3)];
    let tm = TupleMerge::build(&rules).unwrap();
    let lin = LinearScan::build(&rules).unwrap();
    let k = PacketKey::default();
    assert_eq!(tm.classify(&k), Some(Match { id: 4, priority: 1 }));
    assert_eq!(lin.classify(&k), Some(Match { id: 4, priority: 1 }));
    let mut v = Vec::new();
    tm.matches_below(&k, u32::MAX, &mut v);
    assert_eq!(v.iter().map(|m| m.id).collect::<Vec<_>>(), [4, 9, 2]);
}

/// More tables than the pruning index tracks (128): the tables past it are probed for every key,
/// before and after the index is built again, and through updates that leave it dirty.
#[test]
fn tables_past_the_pruning_index_are_probed() {
    let cfg = TupleMergeConfig { collision_limit: 8, v4_step: 1, v6_step: 1, pruning: PruningMode::Always };
    let mut rules = Vec::new();
    let mut id = 0u32;
    for sl in 0..=32u8 {
        for dl in (0..=32u8).step_by(4) {
            let s = 0x0a00_0000u32 | (id.wrapping_mul(2_654_435_761) >> 8);
            let d = 0xc0a8_0000u32 | id.wrapping_mul(40_503);
            rules.push(ClassRule {
                src: Prefix::v4(s, sl),
                dst: Prefix::v4(d, dl),
                dport: PortRange::exact((id % 7) as u16 * 10),
                // Most specific first: no table yet holds a rule's tuple, so each gets its own.
                ..ClassRule::any(id, 100 - sl as u32 - dl as u32)
            });
            id += 1;
        }
    }
    let mut tm = TupleMerge::build_with(&rules, cfg).unwrap();
    assert!(tm.stats().tables > 128, "{:?}", tm.stats());
    let mut lin = LinearScan::build(&rules).unwrap();
    let keys: Vec<PacketKey> = rules
        .iter()
        .flat_map(|r| {
            let k = PacketKey::v4(r.src.addr as u32, r.dst.addr as u32, 1, r.dport.lo, 6);
            [k, PacketKey { dst: k.dst ^ 1, ..k }, PacketKey { src: k.src ^ 0x100, ..k }]
        })
        .collect();
    let agree = |tm: &TupleMerge, lin: &LinearScan| {
        for k in &keys {
            assert_eq!(tm.classify(k), lin.classify(k), "{k:?}");
        }
    };
    agree(&tm, &lin);
    for r in rules.iter().step_by(3) {
        assert!(tm.remove(r.id));
        assert!(lin.remove(r.id));
    }
    for r in rules.iter().step_by(3) {
        let moved = ClassRule { priority: r.priority / 2, dport: PortRange::ANY, ..*r };
        tm.insert(moved).unwrap();
        lin.insert(moved).unwrap();
    }
    agree(&tm, &lin);
    tm.rebuild_pruning();
    agree(&tm, &lin);
}

/// Past 4,096 rules a row's aggregate is more than one word: 5,000 seeded rules, most narrow so
/// that first matches fall in every aggregate word, against the linear scan.
#[test]
fn bitvector_past_one_aggregate_word() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rules: Vec<ClassRule> = (0..5000u32)
        .map(|id| {
            let r = next();
            ClassRule {
                src: Prefix::v4(0x0a00_0000 | (r as u32 & 0xffff), if r >> 60 == 0 { 8 } else { 28 }),
                dport: PortRange::exact((r >> 20) as u16 % 64),
                proto: Some([6, 17][(r >> 40) as usize % 2]),
                ..ClassRule::any(id, id)
            }
        })
        .collect();
    let bv = BitVector::build(&rules).unwrap();
    let lin = LinearScan::build(&rules).unwrap();
    let mut far = 0;
    for _ in 0..20_000 {
        let r = next();
        let k = PacketKey::v4(
            0x0a00_0000 | (r as u32 & 0xffff),
            1,
            9,
            (r >> 20) as u16 % 64,
            [6, 17][(r >> 40) as usize % 2],
        );
        let want = lin.classify(&k);
        assert_eq!(bv.classify(&k), want, "{k:?}");
        far += want.is_some_and(|m| m.id >= 4096) as u32;
    }
    assert!(far > 0, "no first match past the first aggregate word");
}
