//! The label index against brute force: after any sequence of selector, endpoint and parent
//! updates, every selector's matches equal `Selector::matches` over every endpoint's effective
//! labels (own labels over the parent's, prefixed), and the recorded match events, replayed
//! from the start, give the same sets.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;
use pyclassify_core::labelindex::{LabelIndex, LabelMap, MatchChange, DEFAULT_PARENT_PREFIX};
use pyclassify_core::selector::Selector;

const KEYS: &[&str] = &["a", "b", "c", "pcns.a", "pcns.b"];
const PARENT_KEYS: &[&str] = &["a", "b", "c"];
const VALUES: &[&str] = &["x", "y", "z"];

#[derive(Debug, Clone)]
enum Op {
    UpsertEndpoint(u8, LabelMap, Option<u8>),
    RemoveEndpoint(u8),
    UpsertParent(u8, LabelMap),
    RemoveParent(u8),
    AddSelector(u8, String),
    RemoveSelector(u8),
}

fn label_map(keys: &'static [&'static str]) -> impl Strategy<Value = LabelMap> {
    prop::collection::btree_map(
        prop::sample::select(keys).prop_map(str::to_string),
        prop::sample::select(VALUES).prop_map(str::to_string),
        0..4,
    )
}

fn leaf() -> impl Strategy<Value = String> {
    let k = || prop::sample::select(KEYS);
    let v = || prop::sample::select(VALUES);
    let set = || {
        prop::collection::btree_set(prop::sample::select(VALUES), 0..3)
            .prop_map(|s| s.iter().map(|v| format!("'{v}'")).collect::<Vec<_>>().join(","))
    };
    prop_oneof![
        Just("all()".to_string()),
        k().prop_map(|k| format!("has({k})")),
        (k(), v()).prop_map(|(k, v)| format!("{k} == '{v}'")),
        (k(), v()).prop_map(|(k, v)| format!("{k} != '{v}'")),
        (k(), set()).prop_map(|(k, s)| format!("{k} in {{{s}}}")),
        (k(), set()).prop_map(|(k, s)| format!("{k} not in {{{s}}}")),
        (k(), v()).prop_map(|(k, v)| format!("{k} starts with '{v}'")),
    ]
}

fn selector_text() -> impl Strategy<Value = String> {
    leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|s| format!("!({s})")),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| format!("({})", v.join(" && "))),
            prop::collection::vec(inner, 2..4).prop_map(|v| format!("({})", v.join(" || "))),
        ]
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, label_map(KEYS), prop::option::of(0u8..3)).prop_map(|(e, l, p)| Op::UpsertEndpoint(e, l, p)),
        1 => (0u8..8).prop_map(Op::RemoveEndpoint),
        2 => (0u8..3, label_map(PARENT_KEYS)).prop_map(|(p, l)| Op::UpsertParent(p, l)),
        1 => (0u8..3).prop_map(Op::RemoveParent),
        3 => (0u8..8, selector_text()).prop_map(|(s, t)| Op::AddSelector(s, t)),
        1 => (0u8..8).prop_map(Op::RemoveSelector),
    ]
}

#[derive(Default)]
struct Model {
    endpoints: HashMap<u8, (LabelMap, Option<u8>)>,
    parents: HashMap<u8, LabelMap>,
    selectors: HashMap<u8, Selector>,
}

impl Model {
    fn effective(&self, ep: u8) -> LabelMap {
        let (own, parent) = &self.endpoints[&ep];
        let mut out = LabelMap::new();
        if let Some(p) = parent.and_then(|p| self.parents.get(&p)) {
            for (k, v) in p {
                out.insert(format!("{DEFAULT_PARENT_PREFIX}{k}"), v.clone());
            }
        }
        out.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    fn matches(&self) -> BTreeMap<u8, BTreeSet<u8>> {
        self.selectors
            .iter()
            .map(|(&s, sel)| {
                let eps = self.endpoints.keys().copied().filter(|&e| sel.matches(&self.effective(e))).collect();
                (s, eps)
            })
            .collect()
    }
}

fn index_matches(idx: &LabelIndex<u8, u8, u8>, model: &Model) -> BTreeMap<u8, BTreeSet<u8>> {
    model.selectors.keys().map(|&s| (s, idx.matching_endpoints(&s).unwrap().copied().collect())).collect()
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut idx: LabelIndex<u8, u8, u8> = LabelIndex::new();
    idx.set_record_events(true);
    let mut model = Model::default();
    let mut replayed: BTreeSet<(u8, u8)> = BTreeSet::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op.clone() {
            Op::UpsertEndpoint(e, l, p) => {
                idx.upsert_endpoint_with_parent(e, l.clone(), p);
                model.endpoints.insert(e, (l, p));
            }
            Op::RemoveEndpoint(e) => {
                prop_assert_eq!(idx.remove_endpoint(&e), model.endpoints.remove(&e).is_some());
            }
            Op::UpsertParent(p, l) => {
                idx.upsert_parent(p, l.clone());
                model.parents.insert(p, l);
            }
            Op::RemoveParent(p) => {
                prop_assert_eq!(idx.remove_parent(&p), model.parents.remove(&p).is_some());
            }
            Op::AddSelector(s, text) => {
                let sel = Selector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
                idx.add_selector(s, sel.clone());
                model.selectors.insert(s, sel);
            }
            Op::RemoveSelector(s) => {
                prop_assert_eq!(idx.remove_selector(&s), model.selectors.remove(&s).is_some());
            }
        }
        for ev in idx.take_events() {
            let pair = (ev.selector, ev.endpoint);
            match ev.change {
                MatchChange::Started => prop_assert!(replayed.insert(pair), "step {}: started twice: {:?}", step, pair),
                MatchChange::Stopped => {
                    prop_assert!(replayed.remove(&pair), "step {}: stopped unmatched {:?}", step, pair)
                }
            }
        }
        let want = model.matches();
        prop_assert_eq!(&index_matches(&idx, &model), &want, "step {}: {:?}", step, op);
        let flat: BTreeSet<(u8, u8)> = want.iter().flat_map(|(&s, eps)| eps.iter().map(move |&e| (s, e))).collect();
        prop_assert_eq!(&replayed, &flat, "step {}: replayed events differ", step);
        for &e in model.endpoints.keys() {
            let mut got: Vec<u8> = idx.matching_selectors(&e).unwrap().copied().collect();
            got.sort();
            let expect: Vec<u8> = want.iter().filter(|(_, eps)| eps.contains(&e)).map(|(&s, _)| s).collect();
            prop_assert_eq!(got, expect);
            prop_assert_eq!(idx.effective_labels(&e).unwrap(), model.effective(e));
        }
        prop_assert_eq!(idx.selector_count(), model.selectors.len());
        prop_assert_eq!(idx.endpoint_count(), model.endpoints.len());
        idx.check_invariants().map_err(TestCaseError::fail)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn index_equals_brute_force(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}

/// Turning recording off drops the log, so an undrained index does not grow one.
#[test]
fn events_are_off_by_default_and_cleared_when_turned_off() {
    let mut idx: LabelIndex<u8, u8, u8> = LabelIndex::new();
    idx.add_selector(1, Selector::parse("all()").unwrap());
    idx.upsert_endpoint(1, LabelMap::new());
    assert!(idx.take_events().is_empty());
    idx.set_record_events(true);
    idx.upsert_endpoint(2, LabelMap::new());
    assert_eq!(idx.take_events().len(), 1);
    idx.upsert_endpoint(3, LabelMap::new());
    idx.set_record_events(false);
    assert!(idx.take_events().is_empty());
}
