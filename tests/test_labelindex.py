"""The Rust label index through Python, held against brute force over ``Selector.matches``.

After every step of a random sequence of endpoint upserts/removals (with and without a parent
namespace), namespace label changes and selector adds/replaces/removes, the index's matches equal
brute-force evaluation of every selector on every endpoint's effective labels (own labels over
the namespace's, prefixed), and the recorded match events, replayed, give the same pairs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify._engine import LabelIndex
from pyclassify.selector import Selector, SelectorError

PREFIX = "pcns."
KEYS = ["app", "tier", "env", "pcns.team", "pcns.env"]
NS_KEYS = ["team", "env", "name"]
VALUES = ["a", "b", "c"]
EPS = [f"ep{i}" for i in range(6)]
NSS = ["ns0", "ns1", "ns2"]
SELS = [f"s{i}" for i in range(6)]

keys = st.sampled_from(KEYS)
values = st.sampled_from(VALUES)
value_sets = st.lists(values, max_size=3, unique=True).map(lambda vs: ", ".join(f"'{v}'" for v in vs))

leaf = st.one_of(
    st.just("all()"),
    keys.map(lambda k: f"has({k})"),
    st.tuples(keys, values).map(lambda t: f"{t[0]} == '{t[1]}'"),
    st.tuples(keys, values).map(lambda t: f"{t[0]} != '{t[1]}'"),
    st.tuples(keys, value_sets).map(lambda t: f"{t[0]} in {{{t[1]}}}"),
    st.tuples(keys, value_sets).map(lambda t: f"{t[0]} not in {{{t[1]}}}"),
    st.tuples(keys, values).map(lambda t: f"{t[0]} ends with '{t[1]}'"),
)
selector_text = st.recursive(
    leaf,
    lambda inner: st.one_of(
        inner.map(lambda s: f"!({s})"),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " && ".join(xs) + ")"),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " || ".join(xs) + ")"),
    ),
    max_leaves=8,
)
own_labels = st.dictionaries(keys, values, max_size=4)
ns_labels = st.dictionaries(st.sampled_from(NS_KEYS), values, max_size=3)

ops = st.one_of(
    st.tuples(st.just("upsert_endpoint"), st.sampled_from(EPS), own_labels, st.none() | st.sampled_from(NSS)),
    st.tuples(st.just("remove_endpoint"), st.sampled_from(EPS)),
    st.tuples(st.just("upsert_parent"), st.sampled_from(NSS), ns_labels),
    st.tuples(st.just("remove_parent"), st.sampled_from(NSS)),
    st.tuples(st.just("add_selector"), st.sampled_from(SELS), selector_text),
    st.tuples(st.just("remove_selector"), st.sampled_from(SELS)),
)


class Model:
    def __init__(self) -> None:
        self.endpoints: dict[str, tuple[dict[str, str], str | None]] = {}
        self.parents: dict[str, dict[str, str]] = {}
        self.selectors: dict[str, Selector] = {}

    def effective(self, ep: str) -> dict[str, str]:
        own, parent = self.endpoints[ep]
        out = {PREFIX + k: v for k, v in self.parents.get(parent, {}).items()} if parent else {}
        out.update(own)
        return out

    def pairs(self) -> set[tuple[str, str]]:
        return {(s, e) for s, sel in self.selectors.items() for e in self.endpoints if sel.matches(self.effective(e))}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=40))
def test_index_equals_brute_force_after_every_step(steps):
    idx = LabelIndex(parent_prefix=PREFIX, record_events=True)
    model = Model()
    replayed: set[tuple[str, str]] = set()
    for step in steps:
        kind = step[0]
        if kind == "upsert_endpoint":
            _, ep, labels, parent = step
            idx.upsert_endpoint(ep, labels, parent)
            model.endpoints[ep] = (labels, parent)
        elif kind == "remove_endpoint":
            assert idx.remove_endpoint(step[1]) == (model.endpoints.pop(step[1], None) is not None)
        elif kind == "upsert_parent":
            idx.upsert_parent(step[1], step[2])
            model.parents[step[1]] = step[2]
        elif kind == "remove_parent":
            assert idx.remove_parent(step[1]) == (model.parents.pop(step[1], None) is not None)
        elif kind == "add_selector":
            sel = Selector(step[2])
            # Both forms are accepted: a Selector object or its text.
            idx.add_selector(step[1], sel if len(step[2]) % 2 else step[2])
            model.selectors[step[1]] = sel
        else:
            assert idx.remove_selector(step[1]) == (model.selectors.pop(step[1], None) is not None)

        for s, e, started in idx.take_events():
            if started:
                assert (s, e) not in replayed, f"{step}: started twice"
                replayed.add((s, e))
            else:
                assert (s, e) in replayed, f"{step}: stopped without a start"
                replayed.discard((s, e))

        want = model.pairs()
        got = {(s, e) for s in model.selectors for e in idx.matching_endpoints(s)}
        assert got == want, step
        assert replayed == want, step
        for e in model.endpoints:
            assert idx.matching_selectors(e) == sorted(s for s, x in want if x == e)
            assert idx.effective_labels(e) == model.effective(e)
        assert (idx.selector_count, idx.endpoint_count) == (len(model.selectors), len(model.endpoints))
    idx.check_invariants()


def test_namespace_labels_are_inherited_and_own_labels_win():
    idx = LabelIndex()
    assert idx.parent_prefix == "pcns."
    idx.add_selector("team-a", "pcns.team == 'a'")
    idx.upsert_endpoint("ns1/p1", {"app": "x"}, parent="ns1")
    idx.upsert_endpoint("ns1/p2", {"app": "x", "pcns.team": "b"}, parent="ns1")
    assert idx.matching_endpoints("team-a") == []
    idx.upsert_parent("ns1", {"team": "a"})
    assert idx.matching_endpoints("team-a") == ["ns1/p1"]
    assert idx.effective_labels("ns1/p1") == {"app": "x", "pcns.team": "a"}
    assert idx.remove_parent("ns1")
    assert idx.matching_endpoints("team-a") == []


def test_strategies_and_event_log():
    idx = LabelIndex()
    idx.add_selector("eq", Selector("app == 'web' && has(tier)"))
    idx.add_selector("scan", "app != 'db'")
    idx.add_selector("never", "app == 'a' && app == 'b'")
    assert idx.strategy("eq") == ("values", "app", ["web"])
    assert idx.strategy("scan") == ("scanned", None, [])
    assert idx.strategy("never") == ("never", None, [])
    assert not idx.record_events
    idx.upsert_endpoint("p", {"app": "web", "tier": "1"})
    assert idx.take_events() == []
    idx.record_events = True
    idx.upsert_endpoint("p", {"app": "db"})
    assert sorted(idx.take_events()) == [("eq", "p", False), ("scan", "p", False)]
    assert idx.remove_endpoint("p") and not idx.remove_endpoint("p")


def test_bad_input_is_a_clear_error():
    idx = LabelIndex()
    with pytest.raises(SelectorError):
        idx.add_selector("s", "app ==")
    with pytest.raises(TypeError, match="Selector or str"):
        idx.add_selector("s", 42)
    with pytest.raises(TypeError, match="mapping of str to str"):
        idx.upsert_endpoint("e", {"app": 1})
    with pytest.raises(TypeError, match="mapping of str to str"):
        idx.upsert_parent("n", ["app"])
    with pytest.raises(KeyError):
        idx.matching_endpoints("nope")
    with pytest.raises(KeyError):
        idx.matching_selectors("nope")
    with pytest.raises(KeyError):
        idx.strategy("nope")
    assert not idx.remove_selector("nope")
    # A failed call leaves the index as it was.
    assert (idx.selector_count, idx.endpoint_count) == (0, 0)
    idx.check_invariants()
