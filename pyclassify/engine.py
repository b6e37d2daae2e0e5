"""The native engine: the IR and inventory held by the Rust engine, asked per flow or per batch
of packet headers, and kept up to date by deltas.

``EngineState`` owns the Rust ``Model``: each ``update(policy_set, inventory)`` sends it the
objects (endpoints, namespaces, policies, ...) that were added, changed or removed since the last
one, as JSON of the shapes ``pyclassify.engine_spec`` declares (generated from the Rust types;
the engine refuses any other key), and takes a new immutable snapshot. ``NativeEngine`` is such a snapshot, with
the tables that turn the engine's numeric answers (tier, policy and profile ids) back into names.
Its verdicts must equal ``pyclassify.reference.evaluate`` on every flow:
tests/test_engine_differential.py holds them to it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from pyclassify import _engine
from pyclassify.batch import HEADER_DTYPE, SIDE_DTYPE, VERDICT_DTYPE
from pyclassify.bulk import collector_paused
from pyclassify.engine_spec import (
    EndpointSpec,
)
from pyclassify.flow import (
    Decision,
    Flow,
    Verdict,
    namespace_labels,
    service_account_labels,
)
from pyclassify.inventory import Endpoint, Inventory, NetworkSet, Node, Service
from pyclassify.ir import (
    Direction,
    Policy,
    PolicySet,
    Profile,
    Tier,
)
from pyclassify.spec_builder import (
    RuleLists,
    endpoint_spec_with,
    engine_spec,
    namespaces_of,
    network_set_spec,
    node_spec,
    policy_spec,
    profile_spec,
    service_spec,
    tier_spec,
    unique_endpoint_keys,
    unique_policy_keys,
)

#: The engine refused a change (the model and the state keep their last good snapshot).
EngineError = _engine.EngineError

REASONS = ("rule", "end-of-tier", "profile", "default")

# PacketVerdict.reason (rust/core/src/engine/mod.rs).
PACKET_POLICY = 0  # policy judged the packet
PACKET_ESTABLISHED = 1  # it belongs to a connection already allowed (or answers one)
PACKET_MALFORMED = 2  # it could not be decoded far enough to judge: denied
PACKET_INVALID = 3  # connection tracking found it invalid (opens nothing): denied
PACKET_DENIED_CONNECTION = 4  # it belongs to a connection whose opening policy denied: denied
PACKET_NOT_IP: int = _engine.PACKET_NOT_IP  # not IP (ARP, LLDP, ...): passed, as a firewall does

# PacketVerdict.ct_state of a packet that picked a TCP connection up mid-stream (rust/core/src/
# conntrack: the lower port is the server's): judged as sent (its sender opened the connection),
# or, sent by the server, judged as its reverse (the client's connection).
CT_NEW_PICKUP: int = _engine.ConnTrack.NEW_PICKUP
CT_NEW_PICKUP_REPLY: int = _engine.ConnTrack.NEW_PICKUP_REPLY

# PacketVerdict.http (rust/core/src/engine/records.rs): admitted provisionally, its connection's
# HTTP request awaited; judged with the request the packet completed; denied because no more
# connections can be watched; denied because the request stream broke (+ HTTP_ERROR_NAMES index);
# held back (dropped, the connection kept): a segment after a gap in what was read.
HTTP_AWAITS: int = _engine.HTTP_AWAITS
HTTP_REQUEST: int = _engine.HTTP_REQUEST
HTTP_TABLE_FULL: int = _engine.HTTP_TABLE_FULL
HTTP_ERROR: int = _engine.HTTP_ERROR
HTTP_OUT_OF_ORDER: int = _engine.HTTP_OUT_OF_ORDER
HTTP_ERROR_NAMES: tuple[str, ...] = tuple(_engine.HTTP_ERROR_NAMES)

assert VERDICT_DTYPE.itemsize == _engine.VERDICT_SIZE


def Tracker(**config: Any) -> Any:  # noqa: N802 - a factory named like the thing it makes
    """A connection tracker for ``NativeEngine.judge`` (``pyclassify._engine.ConnTrack``)."""
    return _engine.ConnTrack(**config)


_MISSING = object()


class _Ids:
    """Small integer ids for keys, reused after their key goes (the engine's tables are dense)."""

    def __init__(self) -> None:
        self.of: dict[Any, int] = {}
        self.free: list[int] = []
        self.next = 0

    def copy(self) -> _Ids:
        c = _Ids()
        c.of, c.free, c.next = dict(self.of), list(self.free), self.next
        return c

    def get(self, key: Any) -> int:
        id_ = self.of.get(key)
        if id_ is None:
            if self.free:
                id_ = self.free.pop()
            else:
                id_, self.next = self.next, self.next + 1
            self.of[key] = id_
        return id_

    def drop(self, key: Any) -> int:
        id_ = self.of.pop(key)
        self.free.append(id_)
        return id_


class _Table:
    """What the model holds of one kind: key -> (comparable value, id)."""

    def __init__(self, field: str, spec: Any) -> None:
        self.field = field  # the delta's field: "endpoints" (and "remove_endpoints")
        self.spec = spec  # (value, id) -> the object's JSON-able spec
        self.values: dict[Any, Any] = {}
        self.ids = _Ids()


class EngineState:
    """The native engine's mutable state (a Rust ``Model``), kept in step with a project.

    Two ways to change it, both ending in one atomic delta on the model:

    - per object, as a watch delivers them: ``set_endpoint``, ``delete_policy``, ... then
      ``commit()``, which hands the delta to the model and returns the new snapshot;
    - per project, as a file reload does: ``update(policy_set, inventory)`` compares every
      object with what the model holds (by key: kind, namespace and name) and sets or deletes
      only what was added, changed or removed.

    The model updates just the identities, selectors and programs a delta touches, and hands
    out a new snapshot beside the old one, which stays valid. A delta that does not compile is
    rejected whole (``pyclassify._engine.EngineError``): the model and this state keep their
    last good state.
    """

    def __init__(self) -> None:
        self.model = _engine.Model()
        self._namespaces: dict[str, dict[str, str]] = {}
        self._endpoints = _Table("endpoints", lambda v, i: _endpoint_spec_of(v, i))
        self._network_sets = _Table("network_sets", network_set_spec)
        self._nodes = _Table("nodes", node_spec)
        self._services = _Table("services", service_spec)
        #: The rule lists of the delta being built (sent once each, however many policies name them).
        self._lists = RuleLists()
        self._policies = _Table("policies", lambda v, i: policy_spec(v, i, self._lists))
        self._profiles = _Table("profiles", lambda v, i: profile_spec(v, i, self._lists))
        self._tiers = _Table("tiers", tier_spec)
        self._pending: dict[str, Any] = {}
        self._undo: list[tuple] = []
        self._freed: list[tuple[_Table, int]] = []
        #: Deltas applied, and how many of them built the engine from nothing (the first one).
        self.deltas = 0
        self.full_builds = 0
        #: Objects sent by the last delta: how much of the world a change touched.
        self.last_delta_size = 0
        #: The DNS-learned facts the model's snapshots carry (``Inventory.domains``).
        self._domains: Any = None

    # --- per object ---

    def _set(self, table: _Table, key: Any, value: Any) -> None:
        old = table.values.get(key, _MISSING)
        if old is not _MISSING and (old is value or old == value):
            return
        fresh = key not in table.ids.of
        id_ = table.ids.get(key)
        self._undo.append((table, key, old, id_ if fresh else None))
        table.values[key] = value
        if table is self._tiers:
            self._pending["tiers"] = True
        else:
            self._pending.setdefault(table.field, []).append(table.spec(value, id_))

    def _delete(self, table: _Table, key: Any) -> None:
        old = table.values.pop(key, _MISSING)
        if old is _MISSING:
            return
        id_ = table.ids.of.pop(key)
        self._undo.append((table, key, old, -1 - id_))
        self._freed.append((table, id_))  # reusable from the next delta on, never within this one
        if table is self._tiers:
            self._pending["tiers"] = True
        else:
            self._pending.setdefault("remove_" + table.field, []).append(id_)

    def set_endpoint(
        self, key: Any, endpoint: Endpoint, sa_labels: dict[str, str], addressable: bool = True, enforced: bool = True
    ) -> None:
        """An endpoint added or changed (``sa_labels``: the labels of its service account;
        ``enforced``: ``Inventory.enforces``, false for another node's endpoint)."""
        self._set(self._endpoints, key, (endpoint, sa_labels, addressable, enforced))

    def delete_endpoint(self, key: Any) -> None:
        self._delete(self._endpoints, key)

    def set_namespace(self, name: str, labels: dict[str, str]) -> None:
        """A namespace's labels as policy sees them (``flow.namespace_labels``)."""
        old = self._namespaces.get(name, _MISSING)
        if old == labels:
            return
        self._undo.append((None, name, old, None))
        self._namespaces[name] = labels
        self._pending.setdefault("namespaces", []).append({"name": name, "labels": labels})

    def delete_namespace(self, name: str) -> None:
        old = self._namespaces.pop(name, _MISSING)
        if old is not _MISSING:
            self._undo.append((None, name, old, None))
            self._pending.setdefault("remove_namespaces", []).append(name)

    def set_network_set(self, key: Any, network_set: NetworkSet) -> None:
        self._set(self._network_sets, key, network_set)

    def delete_network_set(self, key: Any) -> None:
        self._delete(self._network_sets, key)

    def set_node(self, key: Any, node: Node) -> None:
        self._set(self._nodes, key, node)

    def delete_node(self, key: Any) -> None:
        self._delete(self._nodes, key)

    def set_service(self, key: Any, service: Service) -> None:
        self._set(self._services, key, service)

    def delete_service(self, key: Any) -> None:
        self._delete(self._services, key)

    def set_policy(self, key: Any, policy: Policy) -> None:
        self._set(self._policies, key, policy)

    def delete_policy(self, key: Any) -> None:
        self._delete(self._policies, key)

    def set_profile(self, key: Any, profile: Profile) -> None:
        self._set(self._profiles, key, profile)

    def delete_profile(self, key: Any) -> None:
        self._delete(self._profiles, key)

    def set_tier(self, tier: Tier) -> None:
        self._set(self._tiers, tier.name, tier)

    def delete_tier(self, name: str) -> None:
        self._delete(self._tiers, name)

    def commit(self) -> Any:
        """Applies what was set and deleted since the last commit as one delta; returns the new
        snapshot (``pyclassify._engine.Engine``). On an error nothing changes, here or in the
        model, and the error is raised."""
        delta, self._pending = self._pending, {}
        undo, self._undo = self._undo, []
        freed, self._freed = self._freed, []
        lists, self._lists = self._lists, RuleLists()
        if delta.pop("tiers", False):
            delta["tiers"] = [tier_spec(t, self._tiers.ids.of[name]) for name, t in self._tiers.values.items()]
        size = sum(len(v) for v in delta.values())
        if lists.specs:
            delta["rule_lists"] = lists.specs
        if delta:
            try:
                with collector_paused():
                    self.model.apply(orjson.dumps(delta))
            except BaseException:
                self._rollback(undo)
                raise
            self.full_builds += self.deltas == 0
            self.deltas += 1
        for table, id_ in freed:
            table.ids.free.append(id_)
        self.last_delta_size = size
        return self.model.snapshot()

    def _rollback(self, undo: list[tuple]) -> None:
        for table, key, old, id_ in reversed(undo):
            if table is None:  # a namespace
                if old is _MISSING:
                    self._namespaces.pop(key, None)
                else:
                    self._namespaces[key] = old
                continue
            if old is _MISSING:
                table.values.pop(key, None)
            else:
                table.values[key] = old
            if id_ is not None and id_ >= 0:  # a key that got a new id: give it back
                table.ids.of.pop(key, None)
                table.ids.free.append(id_)
            elif id_ is not None:  # a deleted key: its id again
                table.ids.of[key] = -1 - id_

    # --- per project ---

    def update(
        self, policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()
    ) -> NativeEngine:
        """A snapshot of ``policy_set`` over ``inventory``, reached by a delta from the last one."""
        return NativeEngine(
            policy_set, inventory, committed=self.commit_project(policy_set, inventory, extra_endpoints)
        )

    def commit_project(
        self, policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()
    ) -> Committed:
        """Sends what changed since the last commit as one delta (``update``), and returns the
        snapshot with the keys that name its ids."""
        with collector_paused():
            extra_endpoints = tuple(extra_endpoints)
            all_endpoints = (*inventory.endpoints, *extra_endpoints)
            n_inventory = len(inventory.endpoints)
            keys = unique_endpoint_keys(all_endpoints)
            self._sync(
                self._endpoints,
                {
                    key: (e, service_account_labels(inventory, e), i < n_inventory, inventory.enforces(e))
                    for i, (key, e) in enumerate(zip(keys, all_endpoints))
                },
            )
            namespaces = {ns: namespace_labels(inventory, ns) for ns in namespaces_of(inventory, all_endpoints)}
            for name, labels in namespaces.items():
                self.set_namespace(name, labels)
            for name in [n for n in self._namespaces if n not in namespaces]:
                self.delete_namespace(name)
            self._sync(self._network_sets, {(n.namespace, n.name): n for n in inventory.network_sets})
            self._sync(self._nodes, dict(inventory.nodes))
            self._sync(self._services, dict(inventory.services))
            self._sync(self._tiers, {t.name: t for t in policy_set.tiers})
            policy_keys = unique_policy_keys(policy_set.policies)
            self._sync(self._policies, dict(zip(policy_keys, policy_set.policies)))
            self._sync(self._profiles, {p.name: p for p in policy_set.profiles})
            if inventory.domains is not self._domains:  # shared, not copied: learning goes on in it
                self.model.set_domain_facts(inventory.domains)
                self._domains = inventory.domains
        return Committed(self, self.commit(), extra_endpoints, keys, policy_keys)

    def _sync(self, table: _Table, items: dict[Any, Any]) -> None:
        for key in [k for k in table.values if k not in items]:
            self._delete(table, key)
        for key, value in items.items():
            self._set(table, key, value)


def _endpoint_spec_of(value: tuple, id_: int) -> EndpointSpec:
    endpoint, sa_labels, addressable, enforced = value
    return endpoint_spec_with(endpoint, sa_labels, id_, addressable, enforced)


@dataclass(frozen=True)
class Committed:
    """A snapshot the engine state committed, and what names its ids: the keys of the
    project-wide diff (``EngineState.update``), or none when the caller sent its changes object
    by object (worked out on first use)."""

    state: EngineState
    snapshot: Any  # pyclassify._engine.Engine
    extra_endpoints: tuple[Endpoint, ...] = ()
    endpoint_keys: list[tuple] | None = None
    policy_keys: list[tuple] | None = None


@dataclass
class Lane:
    """Some packets of a batch judged together by one engine with one connection tracker
    (``NativeEngine.judge_lanes``): ``rows`` (ascending) index the batch; ``headers`` (as judged:
    a Service packet rewritten to a backend), ``quotes`` (the flows ICMP errors quote) and
    ``segments`` (TCP payloads for http rules, with a tracker) are parallel to them; ``out``
    gets the verdicts."""

    engine: NativeEngine
    rows: npt.NDArray[np.int64]
    headers: npt.NDArray[Any]
    tracker: Any = None
    quotes: npt.NDArray[Any] | None = None
    segments: npt.NDArray[Any] | None = None
    out: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=VERDICT_DTYPE))


class NativeEngine:
    """An immutable snapshot of the native engine for one policy set and inventory.

    ``NativeEngine(policy_set, inventory)`` builds one from nothing; ``engine.update(policy_set,
    inventory)`` gives the next snapshot by a delta on the same engine state (see
    ``EngineState``), leaving this one as it was.
    """

    def __init__(
        self,
        policy_set: PolicySet,
        inventory: Inventory,
        extra_endpoints: tuple[Endpoint, ...] = (),
        *,
        committed: Committed | None = None,
    ) -> None:
        if committed is None:
            committed = EngineState().commit_project(policy_set, inventory, extra_endpoints)
        state = committed.state
        self.state = state
        self.policy_set = policy_set
        self.inventory = inventory
        self.extra_endpoints = committed.extra_endpoints
        self._engine = committed.snapshot
        self._tier_names = {state._tiers.ids.of[t.name]: t.name for t in policy_set.tiers}
        prids = state._profiles.ids.of
        self._profiles = {prids[p.name]: p for p in policy_set.profiles}
        self._keys_then = (committed.endpoint_keys, committed.policy_keys)
        if committed.endpoint_keys is None:
            # Named on first use, from the ids as they are now (later deltas reuse ids).
            self._ids_then = (dict(state._endpoints.ids.of), dict(state._policies.ids.of))
        else:
            # Named now, by the keys the project-wide diff already worked out.
            self._ids_then = (state._endpoints.ids.of, state._policies.ids.of)
            _ = (self._endpoint_ids, self._policies)

    @classmethod
    def _facade(cls, state: EngineState, snapshot: Any, policy_set: PolicySet, inventory: Inventory) -> NativeEngine:
        """The facade of a snapshot whose changes the caller sent object by object
        (``LiveProject``), without the project-wide diff of ``update``."""
        return cls(policy_set, inventory, committed=Committed(state, snapshot))

    @functools.cached_property
    def _endpoint_ids(self) -> dict[int, int]:
        ids, keys = self._ids_then[0], self._keys_then[0]
        all_endpoints = (*self.inventory.endpoints, *self.extra_endpoints)
        return {
            id(e): ids[k] for e, k in zip(all_endpoints, unique_endpoint_keys(all_endpoints) if keys is None else keys)
        }

    @functools.cached_property
    def _policies(self) -> dict[int, Policy]:
        pids, keys = self._ids_then[1], self._keys_then[1]
        policies = self.policy_set.policies
        return {pids[k]: p for k, p in zip(unique_policy_keys(policies) if keys is None else keys, policies)}

    def update(
        self, policy_set: PolicySet, inventory: Inventory, extra_endpoints: tuple[Endpoint, ...] = ()
    ) -> NativeEngine:
        """The next snapshot, by a delta from the engine state's latest one."""
        return self.state.update(policy_set, inventory, extra_endpoints)

    @property
    def stats(self) -> dict[str, int]:
        return dict(self._engine.stats())

    @property
    def model_stats(self) -> dict[str, int]:
        """Figures of the engine state: identities, interned selectors, programs, deltas."""
        return dict(self.state.model.stats())

    @property
    def compile_stats(self) -> dict[str, int]:
        """How the local identities' programs are decided: compiled (and the bytes they hold),
        or walked rule by rule and why (``walked_services``, ``walked_domains``,
        ``walked_memory``: past the compiled form's memory bound)."""
        return dict(self._engine.compile_stats())

    def walked_for_memory(self) -> list[dict[str, Any]]:
        """The programs decided by walking their rules because their compiled form would exceed
        the engine's memory bound: for each, its direction, the policies it lists (references),
        the megabytes it would take and the endpoints it decides for (references)."""
        walked = self._engine.walked_for_memory()
        if not walked:
            return []
        by_identity: dict[int, list[str]] = {}
        for e in self.inventory.endpoints:
            identity = self._engine.identity_of(self._endpoint_id(e))
            if identity is not None:
                by_identity.setdefault(identity, []).append(e.ref)
        return [
            {
                "direction": direction,
                "policies": [self._policies[p].ref for p in policies if p in self._policies],
                "megabytes": round(size / 1e6, 1),
                "endpoints": sorted(ref for i in identities for ref in by_identity.get(i, [])),
            }
            for direction, policies, size, identities in walked
        ]

    def evaluate(self, flow: Flow, default_pod: str = "allow", default_host: str = "deny") -> Verdict:
        """One flow, with the same answer and explanation as the reference evaluator."""
        ends = []
        for end in (flow.src, flow.dst):
            ep = None if end.endpoint is None else self._endpoint_id(end.endpoint)
            ip = None if end.ip is None else str(end.ip)
            ends.append((ip, ep))
        request = None if flow.request is None else (flow.request.method, flow.request.path)
        allowed, egress, ingress, awaits = self._engine.evaluate(
            ends[0][0],
            ends[0][1],
            ends[1][0],
            ends[1][1],
            flow.protocol,
            flow.sport,
            flow.dport,
            flow.icmp_type,
            flow.icmp_code,
            default_pod == "allow",
            default_host == "allow",
            flow.ts_ns,
            request,
        )
        # The subject of each side: the endpoint named, else the one its address resolves to.
        src, dst = (ep if ep is not None or ip is None else self._engine.owner_of(ip) for ip, ep in ends)
        return Verdict(
            "allow" if allowed else "deny",
            self._decision(egress, Direction.EGRESS, src),
            self._decision(ingress, Direction.INGRESS, dst),
            awaits_request=awaits,
        )

    side_dtype = SIDE_DTYPE

    def judge(
        self,
        headers: npt.NDArray[Any],
        quotes: npt.NDArray[Any] | None = None,
        tracker: Any = None,
        default_pod: str = "allow",
        default_host: str = "deny",
        interpret: bool = False,
        payload: tuple[Any, npt.NDArray[Any]] | None = None,
        memo: bool = True,
    ) -> npt.NDArray[Any]:
        """Verdict records (``VERDICT_DTYPE``) for a header batch (``HEADER_DTYPE``), computed
        without the GIL by the decision memo and, behind it, each side's compiled program; with
        a ``Tracker``, connection tracking decides established traffic. Untracked batches only:
        ``memo=False`` asks the compiled programs for every packet (a cold memo),
        ``interpret=True`` walks the rules for every packet instead — the same verdicts, the
        benchmarks' baselines.
        ``payload`` (with a tracker): ``(data, segments)``, the bytes and each header's TCP
        payload in them (``httprules.segments``), for http rules; without it a connection whose
        verdict awaits its HTTP request is denied."""
        if headers.dtype != HEADER_DTYPE:
            raise TypeError(f"expected a header batch of HEADER_DTYPE, got {headers.dtype}")
        headers = np.ascontiguousarray(headers)
        out = np.zeros(len(headers), dtype=VERDICT_DTYPE)
        if quotes is not None:
            quotes = np.ascontiguousarray(quotes)
        data, segments = payload if payload is not None else (None, None)
        if segments is not None:
            segments = np.ascontiguousarray(segments, dtype=np.int64).reshape(-1)
        self._engine.judge(
            headers,
            out,
            default_pod == "allow",
            default_host == "allow",
            tracker,
            quotes,
            interpret,
            data,
            segments,
            memo,
        )
        return out

    def judge_lanes(
        self,
        headers: npt.NDArray[Any],
        lanes: list[Lane],
        default_pod: str = "allow",
        default_host: str = "deny",
        data: Any = None,
        dns: npt.NDArray[np.int64] | None = None,
    ) -> tuple[int, int, list[int], int] | None:
        """Judges one batch (``headers``, as captured) in ``lanes`` in one call without the GIL,
        each lane's verdicts into its ``out``; ``data``: the bytes the lanes' segments and
        ``dns`` point into. ``dns`` ((m, 3) int64: row, ``[start, end)`` in ``data``, by
        ascending row): DNS messages, each learned into this engine's domain facts once every
        lane has judged up to its row, if this engine's lanes let it through (the answer to an
        allowed query); then returns (messages, new facts, malformed messages by
        ``DNS_ERROR_NAMES``, messages policy denied and so not learned), else None."""
        if headers.dtype != HEADER_DTYPE:
            raise TypeError(f"expected a header batch of HEADER_DTYPE, got {headers.dtype}")
        args = []
        for lane in lanes:
            lane.out = np.zeros(len(lane.rows), dtype=VERDICT_DTYPE)
            segments = None if lane.segments is None else np.ascontiguousarray(lane.segments, np.int64).reshape(-1)
            args.append(
                (
                    lane.engine._engine,
                    np.ascontiguousarray(lane.rows, np.int64),
                    np.ascontiguousarray(lane.headers),
                    lane.out,
                    lane.tracker,
                    None if lane.quotes is None else np.ascontiguousarray(lane.quotes),
                    segments,
                )
            )
        rows = None if dns is None else np.ascontiguousarray(dns, np.int64).reshape(-1)
        return self._engine.judge_lanes(
            np.ascontiguousarray(headers), args, default_pod == "allow", default_host == "allow", data, rows
        )

    def judge_via(
        self, headers: npt.NDArray[Any], endpoint: Endpoint | None, side: Direction, default_host: str = "deny"
    ) -> npt.NDArray[Any]:
        """Verdict records for a header batch of traffic the host routes in (``side`` ingress)
        or out (egress) by host endpoint ``endpoint``'s interface, judged by that endpoint's
        forward hook: this engine's policies are the set's ``for_hook(Hook.FORWARD)``, the
        endpoint stands in as the subject of that side (``hostpath``'s forward step); ``allow``
        0 where the hook drops the packet. ``endpoint`` None: no host endpoint, nothing dropped."""
        if headers.dtype != HEADER_DTYPE:
            raise TypeError(f"expected a header batch of HEADER_DTYPE, got {headers.dtype}")
        headers = np.ascontiguousarray(headers)
        out = np.zeros(len(headers), dtype=VERDICT_DTYPE)
        index = None if endpoint is None else self._endpoint_id(endpoint)
        self._engine.judge_via(headers, out, index, side is Direction.INGRESS, True, default_host == "allow")
        return out

    def endpoint_index(self, endpoint: Endpoint) -> int:
        """The engine's index of ``endpoint`` (what the live forward loops are given)."""
        return self._endpoint_id(endpoint)

    def classify(
        self, headers: npt.NDArray[Any], default_pod: str = "allow", default_host: str = "deny"
    ) -> npt.NDArray[np.uint8]:
        """Verdicts (1 allow, 0 deny) for a header batch, each packet judged alone."""
        return self.judge(headers, None, None, default_pod, default_host)["allow"].copy()

    def side_decision(self, side: Any, direction: Direction, subject: Endpoint | str | None = None) -> Decision | None:
        """A ``SIDE_DTYPE`` record of ``judge``'s output as the reference's ``Decision``.
        ``subject``: the endpoint of that side (or its address), which a decision at the end of
        a tier names the policies of (``Decision.policies``); None leaves them unnamed."""
        if not side["present"]:
            return None
        kind = int(side["source_kind"])
        source = None if kind == 0 else ("policy" if kind == 1 else "profile", int(side["source"]))
        rule = None if int(side["rule"]) < 0 else int(side["rule"])
        tier = None if int(side["tier"]) < 0 else int(side["tier"])
        if isinstance(subject, Endpoint):
            subject_id: int | None = self._endpoint_ids.get(id(subject))
        else:
            subject_id = None if subject is None else self._engine.owner_of(subject)
        return self._decision(
            (bool(side["allow"]), tier, source, rule, int(side["reason"]), [], bool(side["awaits"])),
            direction,
            subject_id,
        )

    def compiled_listing(self, endpoint: Endpoint, direction: Direction, family: int) -> list[Any]:
        """The compiled stages of ``endpoint``'s ``direction`` side for IPv4 or IPv6 (``render``):
        see ``pyclassify._engine.Engine.compiled_listing``."""
        return self._engine.compiled_listing(self._endpoint_id(endpoint), direction.value, family)

    def _endpoint_id(self, ep: Endpoint) -> int:
        try:
            return self._endpoint_ids[id(ep)]
        except KeyError:
            raise ValueError(f"endpoint {ep.ref} is not in this engine's inventory") from None

    def _decision(self, raw: Any, direction: Direction, subject: int | None = None) -> Decision | None:
        if raw is None:
            return None
        allowed, tier, source, rule, reason, logs, awaits = raw
        policy_ref, label = self._source(source, rule, direction)
        decision = Decision(
            "allow" if allowed else "deny",
            None if tier is None else self._tier_names[tier],
            policy_ref,
            label,
            REASONS[reason],
            awaits_request=awaits,
        )
        if REASONS[reason] == "end-of-tier" and tier is not None and subject is not None:
            decision.policies = [
                self._policies[p].ref for p in self._engine.tier_policies(subject, direction.value, tier)
            ]
        for log_tier, log_source, log_rule in logs:
            ref, log_label = self._source(log_source, log_rule, direction)
            decision.logs.append((None if log_tier is None else self._tier_names[log_tier], ref or "", log_label))
        return decision

    def _source(self, source: Any, rule: int | None, direction: Direction) -> tuple[str | None, Any]:
        """``("policy", i)`` / ``("profile", i)`` / None -> (reference, rule label)."""
        if source is None:
            return None, None
        kind, index = source
        if kind == "policy":
            policy = self._policies[index]
            return policy.ref, None if rule is None else policy.rules(direction)[rule].label
        profile = self._profiles[index]
        return f"Profile/{profile.name}", None if rule is None else profile.rules(direction)[rule].label


__all__ = ["EngineState", "Lane", "NativeEngine", "engine_spec"]
