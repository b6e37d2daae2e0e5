"""The engine spec's JSON as `pyclassify.engine` writes it and the Rust engine reads it
(`rust/core/src/engine/spec.rs`): generated from the Rust types, do not edit. Regenerate with
`cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin engine-spec`; `cargo test`
fails while this file differs from what the generator writes. The engine refuses a key that is
not declared here."""

from typing import NotRequired, TypeAlias, TypedDict


class ContainerPortSpec(TypedDict):
    name: NotRequired[str | None]
    port: int
    protocol: int


class Delta(TypedDict):
    """One atomic change: objects added or replaced (by id) and ids removed. `tiers`, when given,
    replaces the whole tier list (tiers are few and their order is global)."""

    endpoints: NotRequired["list[EndpointSpec]"]
    namespaces: NotRequired["list[NamespaceSpec]"]
    network_sets: NotRequired["list[NetworkSetSpec]"]
    nodes: NotRequired["list[NodeSpec]"]
    policies: NotRequired["list[PolicySpec]"]
    profiles: NotRequired["list[ProfileSpec]"]
    remove_endpoints: NotRequired[list[int]]
    remove_namespaces: NotRequired[list[str]]
    remove_network_sets: NotRequired[list[int]]
    remove_nodes: NotRequired[list[int]]
    remove_policies: NotRequired[list[int]]
    remove_profiles: NotRequired[list[int]]
    remove_services: NotRequired[list[int]]
    #: Rule lists the policies and profiles of this delta name by position (`RuleSpecs`).
    rule_lists: NotRequired["list[list[RuleSpec]]"]
    services: NotRequired["list[ServiceSpec]"]
    tiers: NotRequired["list[TierSpec] | None"]


class EndpointSpec(TypedDict):
    #: False for endpoints named in flows but not in the inventory: their IPs do not resolve.
    addressable: NotRequired[bool]
    #: False for another node's endpoints when enforcing for one node (`enforce --node`):
    #: selectors still see them as peers, but their own policy is that node's to enforce.
    enforced: NotRequired[bool]
    host_network: bool
    #: Stable id given by the caller (position in a whole-world spec).
    id: NotRequired[int]
    ips: list[str]
    kind: str
    #: As policy sees them (Calico's added labels included); when absent, derived from
    #: `raw_labels` by [`EndpointSpec::policy_labels`].
    labels: NotRequired[dict[str, str] | None]
    #: Its name (with the namespace, the order among endpoints sharing an address).
    name: NotRequired[str]
    namespace: NotRequired[str | None]
    ports: "list[ContainerPortSpec]"
    profiles: list[str]
    #: As written (Service selectors match these).
    raw_labels: dict[str, str]
    sa_labels: dict[str, str]
    service_account: NotRequired[str | None]


class EntitySpec(TypedDict):
    #: Calico `domains`, ANP `domainNames`: the addresses learned from DNS for these names.
    domains: NotRequired[list[str]]
    endpoint_kinds: NotRequired[list[str] | None]
    namespace: NotRequired[str | None]
    namespace_relation: NotRequired[str | None]
    namespace_selector: NotRequired[str | None]
    nets: list[str]
    node_selector: NotRequired[str | None]
    not_nets: list[str]
    not_ports: "list[PortSpec]"
    not_same_labels: list[str]
    not_selector: NotRequired[str | None]
    ports: "list[PortSpec]"
    same_labels: list[str]
    selector: NotRequired[str | None]
    service: NotRequired[tuple[str, str] | None]
    service_account_names: NotRequired[list[str] | None]
    service_account_selector: NotRequired[str | None]
    unresolvable: bool


class HttpSpec(TypedDict):
    """`HttpMatch` of `pyclassify/ir.py`: methods, and paths as `["exact"|"prefix", path]`."""

    methods: list[str]
    paths: list[tuple[str, str]]


class IcmpSpec(TypedDict):
    code: NotRequired[int | None]
    type: NotRequired[int | None]


class NamespaceSpec(TypedDict):
    """A namespace and its labels (as policy sees them: `pyclassify.reference.namespace_labels`)."""

    labels: dict[str, str]
    name: str


class NetworkSetSpec(TypedDict):
    id: NotRequired[int]
    labels: dict[str, str]
    namespace: NotRequired[str | None]
    nets: list[str]


class NodeSpec(TypedDict):
    addresses: list[str]
    id: NotRequired[int]
    labels: dict[str, str]


class PolicySpec(TypedDict):
    egress: "RuleSpecs"
    id: NotRequired[int]
    ingress: "RuleSpecs"
    kind: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str | None]
    #: The sort key within the tier (docs/architecture.md §3, felix's policy_sorter): order (None last),
    #: then kind, namespace, name.
    order: NotRequired[float | None]
    subject: "SubjectSpec"
    tier: str
    types: list[str]


class PortSpec(TypedDict):
    first: NotRequired[int | None]
    last: NotRequired[int | None]
    name: NotRequired[str | None]
    protocol: NotRequired[int | None]


class ProfileSpec(TypedDict):
    egress: "RuleSpecs"
    id: NotRequired[int]
    ingress: "RuleSpecs"
    name: str


class RuleSpec(TypedDict):
    action: str
    destinations: "list[EntitySpec]"
    #: Calico's `http` match (`Rule.http`): the connection's request must match.
    http: NotRequired["HttpSpec | None"]
    icmp: NotRequired["IcmpSpec | None"]
    ip_version: NotRequired[int | None]
    not_icmp: NotRequired["IcmpSpec | None"]
    not_protocols: list[int]
    protocols: NotRequired[list[int] | None]
    sources: "list[EntitySpec]"


RuleSpecs: TypeAlias = list[RuleSpec] | int


class ServicePortSpec(TypedDict):
    port: int
    protocol: int
    target_port: NotRequired["TargetPort | None"]


class ServiceSpec(TypedDict):
    id: NotRequired[int]
    ips: list[str]
    name: str
    namespace: str
    ports: "list[ServicePortSpec]"
    selector: NotRequired[dict[str, str] | None]


class Spec(TypedDict):
    endpoints: "list[EndpointSpec]"
    namespaces: dict[str, dict[str, str]]
    network_sets: "list[NetworkSetSpec]"
    nodes: "list[NodeSpec]"
    policies: "list[PolicySpec]"
    profiles: "list[ProfileSpec]"
    services: "list[ServiceSpec]"
    tiers: "list[TierSpec]"


class SubjectSpec(TypedDict):
    endpoint_kinds: list[str]
    namespace: NotRequired[str | None]
    namespace_selector: NotRequired[str | None]
    #: Shared by the policies of one subject (the model holds it once, `Model::intern`).
    selector: str
    service_account_selector: NotRequired[str | None]


TargetPort: TypeAlias = int | str


class TierSpec(TypedDict):
    default_action: str
    id: NotRequired[int]
    name: str
    #: Tier order (None: after every ordered tier); tiers are evaluated by (order, name).
    order: NotRequired[float | None]
