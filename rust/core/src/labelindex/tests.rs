//! Tests of the label index: its filing strategy, match updates and their events, inherited
//! parent labels, and that a change evaluates only the selectors it can affect.

use super::*;

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> LabelMap {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn matched(idx: &LabelIndex<u32, u32>, s: u32) -> Vec<u32> {
    let mut v: Vec<u32> = idx.matching_endpoints(&s).unwrap().copied().collect();
    v.sort();
    v
}

#[test]
fn strategy_prefers_values_then_own_labels() {
    let p = DEFAULT_PARENT_PREFIX;
    assert_eq!(
        IndexStrategy::for_selector(&sel("has(a) && b in {'x','y'} && c == 'z'"), p),
        IndexStrategy::Values { key: "c".into(), values: vec!["z".into()] }
    );
    assert_eq!(
        IndexStrategy::for_selector(&sel("pcns.n == 'x' && app == 'y'"), p),
        IndexStrategy::Values { key: "app".into(), values: vec!["y".into()] }
    );
    assert_eq!(IndexStrategy::for_selector(&sel("has(a) && b != 'x'"), p), IndexStrategy::Present { key: "a".into() });
    assert_eq!(IndexStrategy::for_selector(&sel("all()"), p), IndexStrategy::Scanned);
    assert_eq!(IndexStrategy::for_selector(&sel("a != 'x'"), p), IndexStrategy::Scanned);
    assert_eq!(IndexStrategy::for_selector(&sel("!has(a)"), p), IndexStrategy::Scanned);
    assert_eq!(IndexStrategy::for_selector(&sel("a == 'x' && a == 'y'"), p), IndexStrategy::Never);
    assert_eq!(IndexStrategy::for_selector(&sel("has(a) && !has(a)"), p), IndexStrategy::Never);
    assert_eq!(
        IndexStrategy::for_selector(&sel("a == 'x' || a == 'y'"), p),
        IndexStrategy::Values { key: "a".into(), values: vec!["x".into(), "y".into()] }
    );
}

#[test]
fn endpoint_and_selector_changes_update_matches_and_events() {
    let mut idx: LabelIndex<u32, u32> = LabelIndex::new();
    idx.set_record_events(true);
    idx.add_selector(1, sel("app == 'web'"));
    idx.add_selector(2, sel("all()"));
    idx.upsert_endpoint(10, labels(&[("app", "web")]));
    idx.upsert_endpoint(11, labels(&[("app", "db")]));
    assert_eq!(matched(&idx, 1), vec![10]);
    assert_eq!(matched(&idx, 2), vec![10, 11]);
    idx.take_events();
    idx.upsert_endpoint(11, labels(&[("app", "web")]));
    idx.upsert_endpoint(10, labels(&[("app", "db")]));
    assert_eq!(matched(&idx, 1), vec![11]);
    let ev = idx.take_events();
    assert_eq!(
        ev,
        vec![
            MatchEvent { selector: 1, endpoint: 11, change: MatchChange::Started },
            MatchEvent { selector: 1, endpoint: 10, change: MatchChange::Stopped },
        ]
    );
    idx.add_selector(1, sel("app == 'db'"));
    assert_eq!(matched(&idx, 1), vec![10]);
    assert!(idx.remove_endpoint(&10));
    assert!(!idx.remove_endpoint(&10));
    assert_eq!(matched(&idx, 1), Vec::<u32>::new());
    assert!(idx.remove_selector(&2));
    assert!(idx.matching_endpoints(&2).is_none());
    let mut sels: Vec<u32> = idx.matching_selectors(&11).unwrap().copied().collect();
    sels.sort();
    assert!(sels.is_empty());
    idx.check_invariants().unwrap();
}

#[test]
fn parent_labels_are_inherited_under_the_prefix_and_own_labels_win() {
    let mut idx: LabelIndex<u32, u32, &str> = LabelIndex::new();
    idx.add_selector(1, sel("pcns.team == 'a'"));
    idx.add_selector(2, sel("app == 'x' && has(pcns.team)"));
    idx.upsert_endpoint_with_parent(10, labels(&[("app", "x")]), Some("ns1"));
    idx.upsert_endpoint_with_parent(11, labels(&[("app", "x"), ("pcns.team", "b")]), Some("ns1"));
    assert!(matched_p(&idx, 1).is_empty());
    idx.upsert_parent("ns1", labels(&[("team", "a")]));
    assert_eq!(matched_p(&idx, 1), vec![10]);
    assert_eq!(matched_p(&idx, 2), vec![10, 11]);
    assert_eq!(idx.effective_labels(&10).unwrap(), labels(&[("app", "x"), ("pcns.team", "a")]));
    idx.upsert_parent("ns1", labels(&[("team", "c")]));
    assert!(matched_p(&idx, 1).is_empty());
    assert!(idx.remove_parent(&"ns1"));
    assert_eq!(matched_p(&idx, 2), vec![11]);
    idx.upsert_endpoint_with_parent(10, labels(&[("app", "x")]), Some("ns2"));
    idx.upsert_parent("ns2", labels(&[("team", "a")]));
    assert_eq!(matched_p(&idx, 1), vec![10]);
    idx.check_invariants().unwrap();
    idx.remove_endpoint(&10);
    idx.remove_endpoint(&11);
    idx.remove_parent(&"ns2");
    idx.check_invariants().unwrap();
    assert!(idx.parent_slots.is_empty());
}

fn matched_p(idx: &LabelIndex<u32, u32, &str>, s: u32) -> Vec<u32> {
    let mut v: Vec<u32> = idx.matching_endpoints(&s).unwrap().copied().collect();
    v.sort();
    v
}

#[test]
fn an_unrelated_label_change_evaluates_no_selector() {
    let mut idx: LabelIndex<u32, u32> = LabelIndex::new();
    for i in 0..100 {
        idx.add_selector(i, sel(&format!("app == 'a{i}'")));
    }
    idx.add_selector(1000, sel("all()"));
    idx.add_selector(1001, sel("tier != 'x'"));
    idx.upsert_endpoint(1, labels(&[("app", "a5"), ("hash", "1")]));
    let before = idx.evaluations();
    idx.upsert_endpoint(1, labels(&[("app", "a5"), ("hash", "2")]));
    assert_eq!(idx.evaluations(), before, "a change of a label no selector names evaluated selectors");
    idx.upsert_endpoint(1, labels(&[("app", "a6"), ("hash", "2")]));
    // Only the old match (a5) is evaluated: the candidate filed under app=a6 is exactly
    // `app == 'a6'`, so being found there is the match.
    assert_eq!(idx.evaluations() - before, 1);
    let m: Vec<u32> = idx.matching_selectors(&1).unwrap().copied().collect();
    assert_eq!(m.len(), 3);
}
