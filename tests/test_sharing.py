"""pyclassify.sharing: copies of a policy hold their parts once (selectors, networks, rule
lists), a build shares what did not change with the set it replaces, and the footprint counts
each distinct part once and forgets what nothing holds any more, whatever the order of changes."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify.documents import Document, Problems
from pyclassify.ir import Policy
from pyclassify.kinds import policy_normalizer
from pyclassify.project import build_project
from pyclassify.sharing import BYTES, Shared


def gnp(name: str, nets: list[str], selector: str = "app == 'a' || app == 'b'", port: int = 443) -> dict[str, Any]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "types": ["Ingress"],
            "ingress": [
                {
                    "action": "Allow",
                    "protocol": "TCP",
                    "source": {"nets": nets, "selector": "role == 'client'"},
                    "destination": {"ports": [port]},
                },
                {"action": "Deny", "source": {"notNets": ["10.0.0.0/8"]}},
            ],
        },
    }


NETS = ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/25"]


def policies_of(obj: dict[str, Any]) -> list[Policy]:
    doc = Document(copy.deepcopy(obj), "test.yaml", 1)
    normalize = policy_normalizer(doc)
    assert normalize is not None
    return [p for p in normalize(doc, Problems()) if isinstance(p, Policy)]


def project(objects: list[dict[str, Any]], shared: Shared | None = None) -> Any:
    return build_project(
        [Document(copy.deepcopy(o), "test.yaml", i + 1) for i, o in enumerate(objects)], Problems(), shared
    )


def test_copies_hold_their_parts_once() -> None:
    p = project([gnp(f"copy-{i}", NETS) for i in range(20)])
    policies = p.policy_set.policies
    assert len(policies) == 20
    first = policies[0]
    for other in policies[1:]:
        assert other.ingress is first.ingress  # the rule list: one object
        assert other.subject is first.subject
    assert p.shared.units["rule"] == 2 and p.shared.units["peer"] == 3
    assert p.shared.units["net"] == len(NETS) + 1
    assert p.shared.units["policy"] == 20
    # copies differing in one port share their networks and selectors, not their rules
    q = project([gnp("a", NETS, port=443), gnp("b", NETS, port=8443)])
    a, b = q.policy_set.policies
    assert a.ingress is not b.ingress
    assert a.ingress[0].sources[0].nets is b.ingress[0].sources[0].nets
    assert a.ingress[0].sources[0].selector is b.ingress[0].sources[0].selector
    assert a.ingress[1] is b.ingress[1]  # one build makes equal rules one object
    assert q.shared.units["net"] == len(NETS) + 1
    assert q.shared.units["rule"] == 4  # counted per list: a rule shared by two lists is counted in each


def test_a_rebuild_shares_what_did_not_change_with_the_set_in_force() -> None:
    old = project([gnp("keep", NETS), gnp("change", NETS[:1])])
    new = project([gnp("keep", NETS), gnp("change", NETS[:2])], Shared(parent=old.shared))
    keep_old, change_old = old.policy_set.policies[1], old.policy_set.policies[0]
    keep_new, change_new = new.policy_set.policies[1], new.policy_set.policies[0]
    assert (keep_old.name, change_old.name) == ("keep", "change")
    assert keep_new.ingress is keep_old.ingress
    assert change_new.ingress is not change_old.ingress
    assert change_new.ingress[1] == change_old.ingress[1]
    # the new table stands alone: the old one can go
    assert new.shared._parent is None
    fresh = project([gnp("keep", NETS), gnp("change", NETS[:2])])
    assert new.shared.units == fresh.shared.units and new.shared.footprint == fresh.shared.footprint


def test_removing_every_holder_forgets_every_part() -> None:
    shared = Shared()
    held = [shared.add(p) for i in range(5) for p in policies_of(gnp(f"p{i}", NETS[: 1 + i % 3]))]
    shared.done()
    assert shared.footprint > 0
    for p in held:
        shared.remove(p)
    assert shared.footprint == 0 and all(n == 0 for n in shared.units.values())
    assert not shared._leaves and not shared._groups
    shared.remove(held[0])  # removed already: nothing
    assert shared.footprint == 0


POOL = [
    gnp("a", NETS),
    gnp("b", NETS),
    gnp("c", NETS[:1]),
    gnp("d", NETS, selector="all()"),
    gnp("e", NETS[1:], port=80),
    gnp("f", []),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(POOL) - 1)), max_size=30))
def test_the_footprint_is_that_of_what_is_held_whatever_the_order(ops: list[tuple[bool, int]]) -> None:
    """Adding and removing policies in any order leaves the footprint and units a fresh table
    has for the policies held at the end."""
    shared = Shared()
    held: dict[int, Policy] = {}
    for add, i in ops:
        if add and i not in held:
            (p,) = policies_of(POOL[i])
            held[i] = shared.add(p)
        elif not add and i in held:
            shared.remove(held.pop(i))
        shared.done()
    fresh = Shared()
    for i in sorted(held):
        (p,) = policies_of(POOL[i])
        fresh.add(p)
    assert shared.units == fresh.units
    assert shared.footprint == fresh.footprint == sum(n * BYTES[k] for k, n in fresh.units.items())
