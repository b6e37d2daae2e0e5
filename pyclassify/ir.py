"""The tiered rule IR (docs/architecture.md §3): every policy kind normalizes into these types.

The IR is plain, frozen, typed data. Normalizers (one per kind, in ``pyclassify.kinds``) build
it; the reference evaluator (``pyclassify.reference``) interprets it per flow; the native
engine compiles it. Anything whose meaning depends on the subject endpoint (named ports,
ANP ``related: Self`` / ``sameLabels``) is an explicit field here, so no consumer needs to
know which kind a rule came from.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from pyclassify.selector import Selector

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ICMPV6 = 58
PROTO_SCTP = 132
PROTO_UDPLITE = 136

# Tier orders from docs/architecture.md §3.
TIER_KUBE_ADMIN = "kube-admin"
TIER_DEFAULT = "default"
TIER_KUBE_BASELINE = "kube-baseline"
KUBE_ADMIN_ORDER = 1_000.0
DEFAULT_TIER_ORDER = 1_000_000.0
KUBE_BASELINE_ORDER = 10_000_000.0

#: Calico's staged kinds and the enforced kind each previews.
STAGED_KINDS = {
    "StagedGlobalNetworkPolicy": "GlobalNetworkPolicy",
    "StagedNetworkPolicy": "NetworkPolicy",
    "StagedKubernetesNetworkPolicy": "NetworkPolicy",
}
STAGED_ACTIONS = ("Set", "Delete", "Learn", "Ignore")
STAGED_DELETE = "Delete"


class Action(str, enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"
    PASS = "Pass"
    LOG = "Log"


class Direction(str, enum.Enum):
    INGRESS = "ingress"
    EGRESS = "egress"


class Hook(str, enum.Enum):
    """Where Calico judges host-endpoint traffic (felix's chains), in the order a packet meets
    them. Workload policy is judged at NORMAL."""

    UNTRACKED = "untracked"  # raw PREROUTING/OUTPUT: doNotTrack policies, before conntrack
    PRE_DNAT = "pre-dnat"  # mangle PREROUTING: preDNAT policies, inbound, before a DNAT
    FORWARD = "forward"  # filter FORWARD: applyOnForward policies, traffic the host routes
    NORMAL = "normal"  # filter INPUT/OUTPUT (to and from the host) and every workload


class EndpointKind(str, enum.Enum):
    POD = "pod"
    HOST = "host"  # Calico HostEndpoint
    NETWORK_SET = "networkset"  # GlobalNetworkSet / NetworkSet (matched by rule selectors only)


class Relation(str, enum.Enum):
    """ANP namespace relation to the subject's namespace."""

    SELF = "Self"
    NOT_SELF = "NotSelf"


@dataclass(frozen=True)
class PortRange:
    first: int
    last: int  # inclusive


@dataclass(frozen=True)
class NamedPort:
    """Resolved against the container ports of the endpoint on that side of the flow."""

    name: str


@dataclass(frozen=True)
class PortMatch:
    """One port entry. ``protocol`` None = any protocol (Calico, where the rule carries it);
    K8s/ANP entries carry their own protocol. ``port`` None = every port of the protocol."""

    protocol: int | None = None
    port: PortRange | NamedPort | None = None


@dataclass(frozen=True)
class IcmpMatch:
    type: int | None = None
    code: int | None = None  # only with type


@dataclass(frozen=True)
class HttpMatch:
    """Calico's ``http`` match of an ingress Allow rule: the connection's HTTP requests, read off
    its payload (``Flow.request``). ``methods`` compare exactly; ``paths`` are ``("exact", p)``
    or ``("prefix", p)`` against the request's path without its query; empty lists match any."""

    methods: tuple[str, ...] = ()
    paths: tuple[tuple[str, str], ...] = ()

    def matches(self, method: str, path: str) -> bool:
        return (not self.methods or method in self.methods) and (
            not self.paths or any(path == p if kind == "exact" else path.startswith(p) for kind, p in self.paths)
        )


@dataclass(frozen=True)
class ServiceRef:
    """A Calico ``services`` match: the service's endpoints (and, as destination, its ports)."""

    name: str
    namespace: str


@dataclass(frozen=True)
class EntityMatch:
    """One side (source or destination) of a rule: every field present must hold (AND).

    Endpoint fields (``selector`` and friends) only match addresses that belong to a known
    endpoint of one of ``endpoint_kinds``; ``nets`` match any address.
    """

    nets: tuple[IPNetwork, ...] = ()  # address in any of them (empty: no constraint)
    not_nets: tuple[IPNetwork, ...] = ()  # address in none of them
    selector: Selector | None = None  # labels of the endpoint / network set
    not_selector: Selector | None = None
    endpoint_kinds: frozenset[EndpointKind] | None = None  # None: any kind the selector sees
    namespace: str | None = None  # endpoint must be in this namespace (namespaced scope)
    namespace_selector: Selector | None = None  # labels of the endpoint's namespace
    namespace_relation: Relation | None = None  # ANP related: Self / NotSelf
    same_labels: tuple[str, ...] = ()  # namespace label values equal to the subject's
    not_same_labels: tuple[str, ...] = ()  # namespace label values differ from the subject's
    service_account_names: frozenset[str] | None = None
    service_account_selector: Selector | None = None  # labels of the ServiceAccount
    service: ServiceRef | None = None
    node_selector: Selector | None = None  # address is one of a matching Node's addresses
    domains: tuple[str, ...] = ()  # DNS names: the addresses learned for them (Inventory.domains)
    ports: tuple[PortMatch, ...] = ()  # any of them (empty: no constraint)
    not_ports: tuple[PortMatch, ...] = ()  # none of them
    unresolvable: str | None = None  # why the peer cannot be resolved: fails closed


@dataclass(frozen=True)
class Rule:
    action: Action
    index: int  # position in the policy's ingress/egress list
    name: str | None = None  # the rule's name where the kind has names (ANP, CNP)
    ip_version: int | None = None
    protocols: frozenset[int] | None = None  # flow protocol in the set (None: any)
    not_protocols: frozenset[int] = frozenset()
    icmp: IcmpMatch | None = None
    not_icmp: IcmpMatch | None = None
    sources: tuple[EntityMatch, ...] = ()  # any of them (empty: anything)
    destinations: tuple[EntityMatch, ...] = ()  # any of them (empty: anything)
    http: HttpMatch | None = None  # the connection's HTTP request must match (TCP only)
    path: str = ""  # field path in the source manifest, for explain (e.g. spec.ingress[2])

    @property
    def label(self) -> str | int:
        """How explain names the rule: its name where the kind has names, else its index."""
        return self.name if self.name is not None else self.index


@dataclass(frozen=True)
class Subject:
    """Which endpoints a policy applies to (AND of the present fields)."""

    selector: Selector = field(default_factory=Selector.all)
    endpoint_kinds: frozenset[EndpointKind] = frozenset({EndpointKind.POD, EndpointKind.HOST})
    namespace: str | None = None
    namespace_selector: Selector | None = None
    service_account_selector: Selector | None = None


@dataclass(frozen=True)
class SourceRef:
    file: str
    line: int


@dataclass(frozen=True)
class Policy:
    kind: str  # the manifest kind, e.g. NetworkPolicy, GlobalNetworkPolicy, AdminNetworkPolicy
    namespace: str | None
    name: str
    tier: str
    order: float | None  # None = last within the tier
    subject: Subject
    types: frozenset[Direction]
    ingress: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()
    source: SourceRef | None = None
    unenforceable: tuple[str, ...] = ()  # reasons this policy cannot be enforced faithfully yet
    do_not_track: bool = False
    pre_dnat: bool = False
    apply_on_forward: bool = False
    #: Calico's ``stagedAction`` for the staged kinds (``Set``, ``Delete``, ``Learn``,
    #: ``Ignore``): a staged policy is not in force; it is judged beside the enforced set to say
    #: what it would do (``PolicySet.staged_view``). None for every enforced policy.
    staged: str | None = None

    @property
    def hook(self) -> Hook:
        """The one hook a doNotTrack or preDNAT policy is judged at; NORMAL for the rest (an
        applyOnForward policy is judged at FORWARD too)."""
        return Hook.UNTRACKED if self.do_not_track else Hook.PRE_DNAT if self.pre_dnat else Hook.NORMAL

    @property
    def ref(self) -> str:
        """``Kind/namespace/name`` as explain prints it (no namespace part for cluster kinds)."""
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"

    def rules(self, direction: Direction) -> tuple[Rule, ...]:
        return self.ingress if direction is Direction.INGRESS else self.egress

    def sort_key(self, tier_order: float) -> tuple[object, ...]:
        """Total, deterministic order (as felix's policy_sorter): tier, order (unset last),
        then kind, namespace and name."""
        unset = self.order is None
        return (tier_order, unset, self.order or 0.0, self.kind, self.namespace or "", self.name)


@dataclass(frozen=True)
class Tier:
    name: str
    order: float | None
    default_action: Action = Action.DENY  # end-of-tier action when a policy applied


@dataclass(frozen=True)
class Profile:
    """Calico Profile: rules applied after all tiers to endpoints that carry it."""

    name: str
    ingress: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()
    labels_to_apply: tuple[tuple[str, str], ...] = ()
    source: SourceRef | None = None

    def rules(self, direction: Direction) -> tuple[Rule, ...]:
        return self.ingress if direction is Direction.INGRESS else self.egress


BUILTIN_TIERS = (
    Tier(TIER_KUBE_ADMIN, KUBE_ADMIN_ORDER, Action.PASS),
    Tier(TIER_DEFAULT, DEFAULT_TIER_ORDER, Action.DENY),
    Tier(TIER_KUBE_BASELINE, KUBE_BASELINE_ORDER, Action.PASS),
)


@dataclass(frozen=True)
class PolicySet:
    """Every tier and policy in force, in evaluation order; and the staged policies, which are
    not in force."""

    tiers: tuple[Tier, ...]
    policies: tuple[Policy, ...]  # sorted by tier order, then Policy.sort_key; the NORMAL hook's
    profiles: tuple[Profile, ...] = ()
    staged: tuple[Policy, ...] = ()  # Policy.staged set; never evaluated as enforced
    #: doNotTrack and preDNAT policies: judged at their own hooks only (``for_hook``), never
    #: with the policies above
    early: tuple[Policy, ...] = ()

    def all_policies(self) -> tuple[Policy, ...]:
        """Every policy, enforced and staged: what a rebuild of this set starts from."""
        return self.policies + self.early + self.staged

    def for_hook(self, hook: Hook) -> PolicySet:
        """The policies judged at ``hook``, in the same tiers; profiles only at NORMAL (felix
        applies host profiles in the filter INPUT/OUTPUT chains only)."""
        if hook is Hook.NORMAL:
            return self
        if hook is Hook.FORWARD:
            return PolicySet(self.tiers, tuple(p for p in self.policies if p.apply_on_forward))
        # felix's raw and mangle chains never drop at a tier's end: what no rule decides goes on
        tiers = tuple(replace(t, default_action=Action.PASS) for t in self.tiers)
        return PolicySet(tiers, tuple(p for p in self.early if p.hook is hook))

    def staged_view(self) -> PolicySet | None:
        """The set as it would be with every staged policy enforced, as Calico's staged policies
        preview it: a staged policy takes the place of the enforced policy of the same kind,
        namespace and name (or joins the set), ``stagedAction: Delete`` removes that policy.
        It keeps its staged kind, so an explanation names it. None when nothing is staged."""
        if not self.staged:
            return None
        counterparts = {(STAGED_KINDS[p.kind], p.namespace, p.name) for p in self.staged}
        kept = [p for p in self.policies + self.early if (p.kind, p.namespace, p.name) not in counterparts]
        added = [replace(p, staged=None) for p in self.staged if p.staged != STAGED_DELETE]
        return PolicySet.build(kept + added, list(self.tiers), list(self.profiles))

    @staticmethod
    def build(policies: list[Policy], tiers: Iterable[Tier] = (), profiles: Iterable[Profile] = ()) -> PolicySet:
        by_name = {t.name: t for t in BUILTIN_TIERS}
        for t in tiers:
            if t.name in (TIER_KUBE_ADMIN, TIER_KUBE_BASELINE):
                continue  # built in: their order and default action are fixed
            by_name[t.name] = t
        for p in policies:
            by_name.setdefault(p.tier, Tier(p.tier, None, Action.DENY))

        def tier_key(t: Tier) -> tuple[bool, float, str]:
            return (t.order is None, t.order or 0.0, t.name)

        ordered_tiers = tuple(sorted(by_name.values(), key=tier_key))
        rank = {t.name: i for i, t in enumerate(ordered_tiers)}
        ordered = sorted(policies, key=lambda p: p.sort_key(rank[p.tier]))
        normal = tuple(p for p in ordered if p.staged is None and p.hook is Hook.NORMAL)
        early = tuple(p for p in ordered if p.staged is None and p.hook is not Hook.NORMAL)
        staged = tuple(p for p in ordered if p.staged is not None)
        return PolicySet(ordered_tiers, normal, tuple(profiles), staged, early)
