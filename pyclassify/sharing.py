"""Equal parts of the IR held once, and what the project they make costs.

Policy sets repeat themselves: one allow-list of partner networks pasted into a policy per
namespace, one long selector in every policy of a tier, a policy copied for each team. Each
copy is normalized on its own, so without sharing the IR holds as many equal selectors,
networks, peers and rules as there are copies, and so does everything built from it (the
engine's delta, its compiled rules). ``Shared`` holds each part once: ``add(policy)`` returns
the policy with its parts replaced by equal ones held already, so the copies cost one; the
engine then sends and compiles each distinct rule list once (``pyclassify.engine``
``rule_lists``).

Two kinds of parts are held, with how many holders use each: leaves (selectors, network and
port tuples), by value, and rule lists and subjects, by content (their leaves' identities and
their own fields), so a change one object at a time (a watch event) shares what it can with
the set in force, and ``remove`` forgets what nothing uses any more. Peers and rules are made
one by a build's memo (``done`` lets it go). ``footprint`` is the project's estimated memory:
each distinct part at its measured cost, plus each policy, endpoint and byte of the objects
read (``count``). A memory budget holds a project to it (``pyclassify.budget``).

A build that replaces a set looks its parts up in the table of the set in force (``parent``)
before making them anew, so the two share what did not change.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator
from typing import Any

from pyclassify.ir import EntityMatch, Policy, Profile, Rule, Subject

#: Estimated bytes per part: what one more distinct part adds to the peak memory of a daemon
#: loading the set (its document kept and parsed, its Python IR, its share of the engine's
#: delta and its compiled form together). Fitted to the peak RSS of ``PolicySource.load`` on
#: the shapes of bench/heavy_policies.py and bench/cluster.py (least squares), then raised 10 %:
#: the estimate is 1.06-1.12 times the measured peak on them (bench/README.md "Memory").
BYTES = {
    "net": 780,  # a network of a peer's nets or notNets
    "port": 220,  # a port or range of a peer's ports or notPorts
    "selector_char": 77,  # a character of a selector's canonical text
    "peer": 3300,
    "rule": 3300,
    "item": 16,  # a place in a tuple of peers or rules
    "policy": 5000,  # a policy or profile: its own record, its subject, its share of the delta
    "endpoint": 5500,  # an endpoint of the inventory, in the IR and the engine
    "source_byte": 4,  # a byte of an object as read (compact JSON): the document kept and parsed
    "source_value": 120,  # a value (mapping, list, scalar) of an object as read
}

#: How many of the costliest policies an over-budget report names.
NAMED = 5


class _Leaf:
    """A leaf held: how many rule lists and subjects hold it, and what it costs."""

    __slots__ = ("value", "refs", "kind", "n")

    def __init__(self, value: Any, kind: str, n: int) -> None:
        self.value, self.refs, self.kind, self.n = value, 0, kind, n


class _Held:
    """A rule list or subject held: how many policies hold it, and what it costs apart from its
    leaves (which it holds, one count each)."""

    __slots__ = ("value", "refs", "units", "digest")

    def __init__(self, value: Any, units: dict[str, int], digest: int) -> None:
        self.value, self.refs, self.units, self.digest = value, 0, units, digest


class Shared:
    def __init__(self, parent: Shared | None = None) -> None:
        #: leaf value -> held (a leaf is its own key: equal leaves, one entry)
        self._leaves: dict[Any, _Leaf] = {}
        #: content hash -> the rule lists and subjects with it (equal by value among them)
        self._groups: dict[int, list[_Held]] = {}
        self._parent = parent
        #: the build's peers and rules, by content: made one while the build lasts
        self._memo: dict[tuple[Any, ...], Any] = {}
        #: the policies and profiles added and not removed, by identity, with what they hold
        self._held: dict[int, tuple[Any, tuple[_Held | None, ...]]] = {}
        self.footprint = 0
        #: the distinct parts held, by kind (the keys of BYTES)
        self.units: dict[str, int] = dict.fromkeys(BYTES, 0)
        #: the costliest policies added: (bytes they brought, reference), at most NAMED
        self._costliest: list[tuple[int, str]] = []

    # --- policies and profiles ---

    def add(self, p: Policy) -> Policy:
        """``p`` with its parts shared; counted in ``footprint`` until ``remove``."""
        before = self.footprint
        ingress, egress = self._list(p.ingress), self._list(p.egress)
        subject = self._subject(p.subject)
        self.count("policy", 1)
        self._note(self.footprint - before, p.ref)
        if not (_value(ingress, ()) is p.ingress and _value(egress, ()) is p.egress and subject.value is p.subject):
            p = dataclasses.replace(p, ingress=_value(ingress, ()), egress=_value(egress, ()), subject=subject.value)
        self._held[id(p)] = (p, (ingress, egress, subject))
        return p

    def add_profile(self, p: Profile) -> Profile:
        before = self.footprint
        ingress, egress = self._list(p.ingress), self._list(p.egress)
        self.count("policy", 1)
        self._note(self.footprint - before, f"Profile/{p.name}")
        if not (_value(ingress, ()) is p.ingress and _value(egress, ()) is p.egress):
            p = dataclasses.replace(p, ingress=_value(ingress, ()), egress=_value(egress, ()))
        self._held[id(p)] = (p, (ingress, egress))
        return p

    def remove(self, p: Policy | Profile) -> None:
        """A policy or profile ``add`` returned, no longer held (any other: nothing)."""
        held = self._held.pop(id(p), None)
        if held is None:
            return
        for part in held[1]:
            if part is not None:
                self._release(part)
        self.count("policy", -1)

    remove_profile = remove

    def done(self) -> None:
        """The build (or the change) is over: its memo of peers and rules and the table of the
        set it replaces are let go (what is held stays)."""
        self._memo = {}
        self._parent = None

    def count(self, kind: str, units: int) -> None:
        """``units`` more (or fewer) parts of ``kind`` held outside the table (a key of BYTES:
        endpoints, the bytes of the objects read)."""
        self.units[kind] += units
        self.footprint += units * BYTES[kind]

    def count_source(self, size: tuple[int, int], sign: int = 1) -> None:
        """An object read (``project.source_size``: bytes, values) kept, or let go (-1)."""
        self.count("source_byte", sign * size[0])
        self.count("source_value", sign * size[1])

    def costliest(self) -> list[tuple[int, str]]:
        """The policies that brought the most (bytes, reference), costliest first: the first
        of equal copies brings their shared parts, the others little."""
        return sorted(self._costliest, reverse=True)

    def _note(self, cost: int, ref: str) -> None:
        if len(self._costliest) < NAMED:
            heapq.heappush(self._costliest, (cost, ref))
        elif cost > self._costliest[0][0]:
            heapq.heapreplace(self._costliest, (cost, ref))

    # --- leaves: selectors, network and port tuples ---

    def _canonical(self, value: Any) -> Any:
        """The leaf held equal to ``value`` (here, or in the set in force), else ``value``."""
        if not value:
            return value  # None and (): nothing to hold
        held = self._leaves.get(value)
        if held is None and self._parent is not None:
            held = self._parent._leaves.get(value)
        return value if held is None else held.value

    def _hold_leaf(self, value: Any, units: Any) -> None:
        held = self._leaves.get(value)
        if held is None:
            held = self._leaves[value] = _Leaf(value, *units(value))
            self.count(held.kind, held.n)
        held.refs += 1

    def _release_leaf(self, value: Any) -> None:
        held = self._leaves.get(value)
        if held is None:
            return
        held.refs -= 1
        if held.refs == 0:
            del self._leaves[value]
            self.count(held.kind, -held.n)

    # --- peers and rules (the build's memo), rule lists and subjects (held) ---

    def _entity(self, m: EntityMatch) -> tuple[EntityMatch, tuple[Any, ...]]:
        """The build's one peer equal to ``m``, and its content key (its leaves' identities,
        its own fields)."""
        leaves = tuple(self._canonical(getattr(m, name)) for name in _ENTITY_LEAVES)
        key = (EntityMatch, *map(id, leaves), *map(m.__getattribute__, _ENTITY_REST))
        made = self._memo.get(key)
        if made is None:
            same = all(v is getattr(m, name) for name, v in zip(_ENTITY_LEAVES, leaves))
            made = self._memo[key] = m if same else dataclasses.replace(m, **dict(zip(_ENTITY_LEAVES, leaves)))
        return made, key

    def _rule(self, r: Rule) -> tuple[Rule, tuple[Any, ...]]:
        sources = [self._entity(e) for e in r.sources]
        destinations = [self._entity(e) for e in r.destinations]
        key = (
            Rule,
            tuple(k for _, k in sources),
            tuple(k for _, k in destinations),
            *map(r.__getattribute__, _RULE_REST),
        )
        made = self._memo.get(key)
        if made is None:
            s = _same(tuple(e for e, _ in sources), r.sources)
            d = _same(tuple(e for e, _ in destinations), r.destinations)
            made = self._memo[key] = (
                r if s is r.sources and d is r.destinations else dataclasses.replace(r, sources=s, destinations=d)
            )
        return made, key

    def _list(self, rules: tuple[Rule, ...]) -> _Held | None:
        """The held rule list equal to ``rules`` (None for no rules), one more holder."""
        if not rules:
            return None
        made = [self._rule(r) for r in rules]
        value = tuple(r for r, _ in made)
        digest = hash(tuple(k for _, k in made))
        return self._hold_group(digest, value, _list_units)

    def _subject(self, s: Subject) -> _Held:
        leaves = (
            self._canonical(s.selector),
            self._canonical(s.namespace_selector),
            self._canonical(s.service_account_selector),
        )
        digest = hash((Subject, *map(id, leaves), s.endpoint_kinds, s.namespace))
        if any(a is not b for a, b in zip(leaves, (s.selector, s.namespace_selector, s.service_account_selector))):
            s = dataclasses.replace(
                s, selector=leaves[0], namespace_selector=leaves[1], service_account_selector=leaves[2]
            )
        return self._hold_group(digest, s, lambda _: {})

    def _hold_group(self, digest: int, value: Any, units: Any) -> _Held:
        """The rule list or subject held equal to ``value`` (here, or adopted from the set in
        force), else ``value`` held now with its leaves (``units(value)``: its own units by
        kind); one more holder either way."""
        for held in self._groups.get(digest, ()):
            if held.value == value:
                held.refs += 1
                return held
        found = None
        if self._parent is not None:
            found = next((h for h in self._parent._groups.get(digest, ()) if h.value == value), None)
        held = _Held(found.value, found.units, digest) if found is not None else _Held(value, units(value), digest)
        self._groups.setdefault(digest, []).append(held)
        for kind, n in held.units.items():
            self.count(kind, n)
        for leaf, leaf_units in _leaves_of(held.value):
            self._hold_leaf(leaf, leaf_units)
        held.refs += 1
        return held

    def _release(self, held: _Held) -> None:
        held.refs -= 1
        if held.refs:
            return
        group = self._groups.get(held.digest, [])
        if any(h is held for h in group):
            group[:] = [h for h in group if h is not held]
            if not group:
                del self._groups[held.digest]
        for kind, n in held.units.items():
            self.count(kind, -n)
        for leaf, _ in _leaves_of(held.value):
            self._release_leaf(leaf)


def _value(held: _Held | None, empty: Any) -> Any:
    return empty if held is None else held.value


def _same(made: tuple[Any, ...], given: tuple[Any, ...]) -> tuple[Any, ...]:
    """``given`` when ``made`` holds the very same objects, else ``made``."""
    return given if len(made) == len(given) and all(a is b for a, b in zip(made, given)) else made


def _list_units(rules: tuple[Rule, ...]) -> dict[str, int]:
    """What a rule list costs apart from its leaves: its rules, peers and places."""
    peers = sum(len(r.sources) + len(r.destinations) for r in rules)
    return {"rule": len(rules), "peer": peers, "item": len(rules) + peers}


def _leaves_of(value: Any) -> Iterator[tuple[Any, Any]]:
    """The leaves of a rule list or subject, each with its units function, every occurrence."""
    if isinstance(value, Subject):
        for v in (value.selector, value.namespace_selector, value.service_account_selector):
            if v:
                yield v, _selector_units
        return
    for r in value:
        for m in (*r.sources, *r.destinations):
            for name, units in _ENTITY_LEAF_UNITS:
                v = getattr(m, name)
                if v:
                    yield v, units


def _selector_units(selector: Any) -> tuple[str, int]:
    return "selector_char", len(selector.canonical)


def _nets_units(nets: tuple[Any, ...]) -> tuple[str, int]:
    return "net", len(nets)


def _ports_units(ports: tuple[Any, ...]) -> tuple[str, int]:
    return "port", len(ports)


#: The fields of a peer held as leaves (selectors, networks, ports), and the rest, which are
#: small (names, kinds, flags) and part of its content key as they are.
_ENTITY_LEAVES = (
    "nets",
    "not_nets",
    "selector",
    "not_selector",
    "namespace_selector",
    "service_account_selector",
    "node_selector",
    "ports",
    "not_ports",
)
_ENTITY_LEAF_UNITS = tuple(
    (name, _nets_units if "nets" in name else _ports_units if "ports" in name else _selector_units)
    for name in _ENTITY_LEAVES
)
_ENTITY_REST = tuple(f.name for f in dataclasses.fields(EntityMatch) if f.name not in _ENTITY_LEAVES)
_RULE_REST = tuple(f.name for f in dataclasses.fields(Rule) if f.name not in ("sources", "destinations"))
