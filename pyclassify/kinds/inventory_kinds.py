"""The inventory kinds: Namespace, Pod and the workload controllers, Node, Service,
EndpointSlice, ServiceAccount, and Calico HostEndpoint, GlobalNetworkSet and NetworkSet. One
concept, in one module although it is long: the cluster's objects validated and built into the
``Inventory`` (``InventoryBuilder``, with the checks they share in ``_Checker``).

Each object is validated as the API server would validate it and every error is reported with
its field path, so ``check`` fails. The object still enters the inventory with its valid parts
(an invalid IP or label is left out, not the pod), because offline analysis of a folder that
np-guard's netpol-analyzer accepts should still work; only an object without a usable name is
dropped. Workload controllers become one endpoint each, from their pod template and with
no IPs, so a folder of manifests can be analysed before it is deployed (np-guard's
netpol-analyzer reads folders the same way): pods a controller owns are tagged with it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.inventory import (
    ContainerPort,
    Endpoint,
    Inventory,
    IPAddress,
    Namespace,
    NetworkSet,
    Node,
    Service,
    ServiceAccount,
    ServicePort,
    container_port,
    endpoint,
)
from pyclassify.ir import PROTO_TCP, EndpointKind, IPNetwork
from pyclassify.kinds.common import K8S_PROTOCOL_NUMBERS
from pyclassify.names import (
    DOMAIN_NAME,
    INTERFACE_NAME,
    dns1035_label_error,
    dns1123_label_error,
    dns1123_subdomain_error,
    is_dns1123_subdomain,
    label_key_error,
    label_value_error,
    port_name_error,
)
from pyclassify.selector import Selector, SelectorError

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # EndpointSlice -> its Service
DEFAULT_NAMESPACE = "default"
DEFAULT_SERVICE_ACCOUNT = "default"  # what the ServiceAccount admission plugin fills in

PROTOCOLS = K8S_PROTOCOL_NUMBERS

# Where each workload controller keeps its pod template.
WORKLOAD_TEMPLATES: dict[str, FieldPath] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}

# --- Kubernetes name and label syntax (k8s.io/apimachinery/pkg/util/validation) ---

# DNS names and label keys and values: pyclassify.names (imported above).
_DOMAIN = re.compile(DOMAIN_NAME)


def selected_pod_ips(service: Service, pods: Iterable[Endpoint]) -> tuple[IPAddress, ...]:
    """The addresses of the pods a Service's selector picks (of its namespace's ``pods``): its
    endpoints when no EndpointSlice says otherwise, as the endpoints controller makes them."""
    selector = list((service.selector or {}).items())
    return tuple(dict.fromkeys(ip for e in pods if all(e.labels.get(k) == v for k, v in selector) for ip in e.ips))


def _ipv4(packed: bytes) -> ipaddress.IPv4Address:
    """``IPv4Address(packed)`` without its constructor's checks, which ``inet_pton`` has made
    (a third of the cost of reading a pod's address)."""
    address = _new_ipv4(ipaddress.IPv4Address)
    address._ip = int.from_bytes(packed, "big")  # type: ignore[attr-defined]  # the field the constructor sets; typeshed leaves it out
    return address


_new_ipv4 = ipaddress.IPv4Address.__new__


def parse_ip(text: str) -> IPAddress | None:
    """An IP address as ``ipaddress.ip_address`` reads it, None if invalid. Dotted-quad IPv4, the
    bulk of a cluster's addresses, goes through the C parser: glibc's ``inet_pton`` is as strict
    (four decimal octets, no leading zeros), ``ipaddress`` is ten times slower."""
    if text.count(".") == 3 and ":" not in text:
        try:
            packed = socket.inet_pton(socket.AF_INET, text)
        except OSError:
            return None
        return _ipv4(packed)
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class _Checker:
    """Validation helpers bound to one document; remembers whether any error was found."""

    def __init__(self, doc: Document, problems: Problems) -> None:
        self.doc = doc
        self.problems = problems
        self.ok = True

    def error(self, path: FieldPath, message: str) -> None:
        self.ok = False
        self.problems.error(self.doc, path, message)

    def get(self, path: FieldPath, default: Any = None) -> Any:
        value = self.doc.get(path, default)
        return default if value is None else value

    def mapping(self, path: FieldPath) -> dict[str, Any]:
        value = self.doc.get(path)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.error(path, "must be an object")
            return {}
        return value

    def sequence(self, path: FieldPath) -> list[Any]:
        value = self.doc.get(path)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, "must be a list")
            return []
        return value

    def string(self, path: FieldPath, required: bool = False) -> str | None:
        value = self.doc.get(path)
        if value is None or value == "":
            if required:
                self.error(path, "Required value")
            return None
        if not isinstance(value, str):
            self.error(path, f"must be a string, not {value!r}")
            return None
        return value

    def boolean(self, path: FieldPath) -> bool:
        value = self.doc.get(path)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.error(path, f"must be true or false, not {value!r}")
            return False
        return value

    def labels(self, path: FieldPath) -> dict[str, str]:
        labels: dict[str, str] = {}
        for key, value in self.mapping(path).items():
            where = path + (key,)
            if not isinstance(key, str):
                self.error(where, f"label key {key!r} must be a string")
                continue
            err = label_key_error(key)
            if err:
                self.error(where, f"invalid label key {key!r}: {err}")
                continue
            if value is None:
                value = ""
            if not isinstance(value, str):
                # A YAML number or boolean: the API server does not turn it into a string.
                self.error(where, f"label value must be a string, not {value!r} (quote it)")
                continue
            err = label_value_error(value)
            if err:
                self.error(where, f"invalid label value {value!r}: {err}")
                continue
            labels[key] = value
        return labels

    def ip(self, path: FieldPath, value: Any) -> IPAddress | None:
        if not isinstance(value, str):
            self.error(path, f"must be an IP address string, not {value!r}")
            return None
        ip = parse_ip(value)
        if ip is None:
            self.error(path, f"invalid IP address {value!r}")
        return ip

    def cidr(self, path: FieldPath, value: Any) -> IPNetwork | None:
        """A CIDR or a bare address (Calico nets accept both; host bits are masked off)."""
        if not isinstance(value, str):
            self.error(path, f"must be a CIDR string, not {value!r}")
            return None
        try:
            return ipaddress.ip_network(value, strict=False)
        except ValueError:
            self.error(path, f"invalid CIDR {value!r}")
            return None

    def port_number(self, path: FieldPath, value: Any) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be a port number, not {value!r}")
            return None
        if not 1 <= value <= 65535:
            self.error(path, f"port {value} must be between 1 and 65535, inclusive")
            return None
        return value

    def protocol(self, path: FieldPath) -> int | None:
        value = self.doc.get(path)
        if value is None:
            return PROTO_TCP  # the Kubernetes default
        if not isinstance(value, str) or value not in PROTOCOLS:  # a list or a map is no protocol
            self.error(path, f"unsupported protocol {value!r}: must be one of TCP, UDP, SCTP")
            return None
        return PROTOCOLS[value]

    def port_name(self, path: FieldPath, value: Any) -> str | None:
        if not isinstance(value, str):
            self.error(path, f"port name must be a string, not {value!r}")
            return None
        err = port_name_error(value)
        if err:
            self.error(path, f"invalid port name {value!r}: {err}")
            return None
        return value

    def dns_label_port_name(self, path: FieldPath, value: Any) -> str | None:
        """The name of a Service or EndpointSlice port: a DNS-1123 label (``8001-8000``, as
        ``kubectl create service`` writes, and ``https-metrics-endpoint`` are valid), as the
        API server's ValidateDNS1123Label checks it — not the container ports' IANA name."""
        if not isinstance(value, str):
            self.error(path, f"port name must be a string, not {value!r}")
            return None
        err = dns1123_label_error(value)
        if err:
            self.error(path, f"invalid port name {value!r}: {err}")
            return None
        return value

    def name(self, kind: str = "subdomain") -> str:
        name = self.string(("metadata", "name"), required=True) or ""
        if name:
            check = {"label": dns1123_label_error, "dns1035": dns1035_label_error}.get(kind, dns1123_subdomain_error)
            err = check(name)
            if err:
                self.error(("metadata", "name"), f"invalid name {name!r}: {err}")
        return name

    def namespace(self) -> str:
        """metadata.namespace; objects without one go to ``default`` (as kubectl applies them)."""
        ns = self.string(("metadata", "namespace"))
        if ns is None:
            return DEFAULT_NAMESPACE
        err = dns1123_label_error(ns)
        if err:
            self.error(("metadata", "namespace"), f"invalid namespace {ns!r}: {err}")
        return ns


@dataclass
class InventoryBuilder:
    """Collects inventory objects document by document; ``build()`` links them up."""

    problems: Problems
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    endpoints: list[Endpoint] = field(default_factory=list)
    network_sets: list[NetworkSet] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    services: dict[tuple[str, str], Service] = field(default_factory=dict)
    service_accounts: dict[tuple[str, str], ServiceAccount] = field(default_factory=dict)
    # EndpointSlice addresses by (namespace, service name)
    slice_ips: dict[tuple[str, str], list[IPAddress]] = field(default_factory=dict)
    # (kind, namespace, name) -> (file, line) of its first definition
    _seen: dict[tuple[str, str | None, str], Document] = field(default_factory=dict)
    #: build_project checks duplicates of every kind before objects reach the builder.
    check_duplicates: bool = True
    #: Pods read that hold no address, so are no endpoint (``pod_without_address``): each
    #: with why
    released: list[tuple[Endpoint, str]] = field(default_factory=list)

    def add(self, doc: Document) -> None:
        handler = _HANDLERS.get(doc.kind)
        if handler is not None:
            handler(self, doc)

    def add_all(self, docs: Iterable[Document]) -> None:
        for doc in docs:
            self.add(doc)

    def build(self) -> Inventory:
        endpoints = [self._finish_endpoint(e) for e in self.endpoints]
        self._pods_by_namespace: dict[str, list[Endpoint]] = {}
        for e in endpoints:
            if e.kind is EndpointKind.POD and e.namespace:
                self._pods_by_namespace.setdefault(e.namespace, []).append(e)
        namespaces = dict(self.namespaces)
        for ns in sorted({e.namespace for e in endpoints if e.namespace} | {k[0] for k in self.services}):
            # Namespaces without a manifest exist implicitly, with the label the API server sets.
            namespaces.setdefault(ns, Namespace(ns, {NAMESPACE_NAME_LABEL: ns}))
        services = {key: self._finish_service(svc, endpoints) for key, svc in self.services.items()}
        return Inventory(
            namespaces=namespaces,
            endpoints=endpoints,
            network_sets=list(self.network_sets),
            nodes=dict(self.nodes),
            services=services,
            service_accounts=dict(self.service_accounts),
        )

    # --- linking ---

    def _finish_endpoint(self, ep: Endpoint) -> Endpoint:
        """Host-network pods and wildcard host endpoints without IPs take their node's addresses."""
        takes_node_ips = ep.host_network or (ep.kind is EndpointKind.HOST and ep.interface == "*")
        if takes_node_ips and not ep.ips and ep.node in self.nodes:
            return replace(ep, ips=self.nodes[ep.node].addresses)
        return ep

    def _finish_service(self, svc: Service, endpoints: list[Endpoint]) -> Service:
        ips: Sequence[IPAddress] | None = self.slice_ips.get((svc.namespace, svc.name))
        from_slices = ips is not None
        if ips is None and svc.selector:
            # No EndpointSlice given: the endpoints are the selected pods, as the controller would make.
            ips = selected_pod_ips(svc, self._pods_by_namespace.get(svc.namespace, ()))
        return replace(svc, endpoint_ips=tuple(dict.fromkeys(ips or ())), from_slices=from_slices)

    def _unique(self, doc: Document, kind: str, namespace: str | None, name: str) -> bool:
        if not self.check_duplicates:
            return True
        """The first object of a kind and name wins; a second one is an error naming both places
        (``build_project`` catches them first, for every kind; this guards direct callers)."""
        key = (kind, namespace, name)
        first = self._seen.get(key)
        if first is not None:
            where = f"{first.file}:{first.line_of(('metadata', 'name'))}"
            self.problems.error(doc, ("metadata", "name"), f"duplicate {kind} {name!r}: already defined at {where}")
            return False
        self._seen[key] = doc.locator()
        return True

    # --- kinds ---

    def add_namespace(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name("label")
        labels = c.labels(("metadata", "labels"))
        if not name or not self._unique(doc, "Namespace", None, name):
            return
        labels[NAMESPACE_NAME_LABEL] = name  # the API server sets it and keeps it set
        self.namespaces[name] = Namespace(name, labels)

    def add_service_account(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name()
        ns = c.namespace()
        labels = c.labels(("metadata", "labels"))
        if name and self._unique(doc, "ServiceAccount", ns, name):
            self.service_accounts[(ns, name)] = ServiceAccount(name, ns, labels)

    def add_node(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name()
        labels = c.labels(("metadata", "labels"))
        addresses: list[IPAddress] = []
        for i, entry in enumerate(c.sequence(("status", "addresses"))):
            path = ("status", "addresses", i)
            if not isinstance(entry, dict):
                c.error(path, "must be an object")
                continue
            if entry.get("type") in ("InternalIP", "ExternalIP"):
                ip = c.ip(path + ("address",), entry.get("address"))
                if ip is not None:
                    addresses.append(ip)
        if name and self._unique(doc, "Node", None, name):
            self.nodes[name] = Node(name, labels, tuple(dict.fromkeys(addresses)))

    def add_pod(self, doc: Document) -> None:
        endpoint = valid_pod(doc)
        if endpoint is None:  # something to report: the checked path names every problem
            endpoint = checked_pod(doc, self.problems)
        if endpoint is None or not self._unique(doc, "Pod", endpoint.namespace, endpoint.name):
            return
        why = pod_without_address(doc.obj)
        if why is not None:
            self.released.append((endpoint, why))
            return
        self.endpoints.append(endpoint)

    def add_workload(self, doc: Document) -> None:
        """A controller: one endpoint from its pod template, named after the controller."""
        c = _Checker(doc, self.problems)
        name = c.name()
        ns = c.namespace()
        c.labels(("metadata", "labels"))
        template = WORKLOAD_TEMPLATES[doc.kind]
        if not isinstance(doc.get(template), dict):
            c.error(template, "Required value: a pod template")
            return
        labels = c.labels(template + ("metadata", "labels"))
        spec = _pod_spec(c, template + ("spec",))
        _check_workload_selector(c, doc, labels)
        if not name or not self._unique(doc, doc.kind, ns, name):
            return
        self.endpoints.append(
            Endpoint(
                kind=EndpointKind.POD,
                name=name,
                namespace=ns,
                labels=labels,
                ports=spec.ports,
                service_account=spec.service_account,
                node=spec.node,
                host_network=spec.host_network,
                workload=f"{doc.kind}/{name}",
            )
        )

    def add_service(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name("dns1035")
        ns = c.namespace()
        c.labels(("metadata", "labels"))
        selector = c.labels(("spec", "selector")) if doc.get(("spec", "selector")) is not None else None
        cluster_ips: list[IPAddress] = []
        single = c.string(("spec", "clusterIP"))
        candidates: list[tuple[FieldPath, Any]] = [(("spec", "clusterIP"), single)] if single else []
        candidates += [(("spec", "clusterIPs", i), v) for i, v in enumerate(c.sequence(("spec", "clusterIPs")))]
        for path, value in candidates:
            if value == "None":
                continue  # a headless service has no virtual IP
            ip = c.ip(path, value)
            if ip is not None:
                cluster_ips.append(ip)
        ports = _service_ports(c)
        if name and self._unique(doc, "Service", ns, name):
            self.services[(ns, name)] = Service(name, ns, selector, tuple(dict.fromkeys(cluster_ips)), ports)

    def add_endpoint_slice(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        c.name()
        ns = c.namespace()
        labels = c.labels(("metadata", "labels"))
        address_type = doc.get(("addressType",))
        if address_type not in ("IPv4", "IPv6", "FQDN"):
            c.error(("addressType",), f"unsupported address type {address_type!r}: must be IPv4, IPv6 or FQDN")
        ips: list[IPAddress] = []
        for i, ep in enumerate(c.sequence(("endpoints",))):
            path = ("endpoints", i)
            if not isinstance(ep, dict):
                c.error(path, "must be an object")
                continue
            addresses = c.sequence(path + ("addresses",))
            if not addresses:
                c.error(path + ("addresses",), "Required value: at least one address")
            for j, value in enumerate(addresses):
                if address_type == "FQDN":
                    continue  # names, not addresses
                ip = c.ip(path + ("addresses", j), value)
                if ip is not None:
                    if ip.version != (4 if address_type == "IPv4" else 6):
                        c.error(path + ("addresses", j), f"{value} is not an {address_type} address")
                    else:
                        ips.append(ip)
        names: set[str] = set()
        for i, port in enumerate(c.sequence(("ports",))):
            path = ("ports", i)
            if not isinstance(port, dict):
                c.error(path, "must be an object")
                continue
            # The port number is not validated by the API server (any int32; the schema's).
            c.protocol(path + ("protocol",))
            name = port.get("name") or ""  # defaulted to "", and unique including ""
            if name:
                name = c.dns_label_port_name(path + ("name",), name)
            if name is not None:
                if name in names:
                    c.error(path + ("name",), f"Duplicate value: {name!r}")
                names.add(name)
        service = labels.get(SERVICE_NAME_LABEL)
        if service:
            self.slice_ips.setdefault((ns, service), []).extend(ips)

    def add_host_endpoint(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name()
        labels = c.labels(("metadata", "labels"))
        node = c.string(("spec", "node"), required=True)
        interface = given = c.string(("spec", "interfaceName"))
        if interface and interface != "*" and not INTERFACE_NAME.fullmatch(interface):
            # enforce names it in iptables rules: a Linux interface name, as Calico validates it
            c.error(
                ("spec", "interfaceName"),
                f"{interface[:40]!r} is not an interface name "
                "(1-15 letters, digits, '.', '_' or '-'), nor '*' (every interface)",
            )
            interface = None
        ips = [
            ip
            for i, v in enumerate(c.sequence(("spec", "expectedIPs")))
            if (ip := c.ip(("spec", "expectedIPs", i), v)) is not None
        ]
        if not given and not c.sequence(("spec", "expectedIPs")):
            c.error(("spec",), "at least one of interfaceName or expectedIPs must be specified")
        ports = _calico_ports(c, ("spec", "ports"))
        profiles = []
        for i, value in enumerate(c.sequence(("spec", "profiles"))):
            if not isinstance(value, str) or not value:
                c.error(("spec", "profiles", i), f"profile name must be a non-empty string, not {value!r}")
            else:
                profiles.append(value)
        if not name or not self._unique(doc, "HostEndpoint", None, name):
            return
        self.endpoints.append(
            Endpoint(
                kind=EndpointKind.HOST,
                name=name,
                namespace=None,
                labels=labels,
                ips=tuple(dict.fromkeys(ips)),
                ports=ports,
                node=node,
                profiles=tuple(profiles),
                interface=interface,
            )
        )

    def add_network_set(self, doc: Document) -> None:
        c = _Checker(doc, self.problems)
        name = c.name()
        ns = c.namespace() if doc.kind == "NetworkSet" else None
        labels = c.labels(("metadata", "labels"))
        nets = [
            net
            for i, v in enumerate(c.sequence(("spec", "nets")))
            if (net := c.cidr(("spec", "nets", i), v)) is not None
        ]
        domains = []
        for i, value in enumerate(c.sequence(("spec", "allowedEgressDomains"))):
            if not isinstance(value, str) or len(value) > 253 or not _DOMAIN.fullmatch(value):
                c.error(("spec", "allowedEgressDomains", i), f"invalid domain name {value!r}")
            else:
                domains.append(value)
        if name and self._unique(doc, doc.kind, ns, name):
            self.network_sets.append(NetworkSet(name, ns, labels, tuple(nets), tuple(domains)))


@dataclass(frozen=True)
class _PodSpec:
    ports: tuple[ContainerPort, ...]
    service_account: str
    node: str | None
    host_network: bool


def _pod_spec(c: _Checker, spec: FieldPath) -> _PodSpec:
    """A pod spec with every problem reported (pods with none take ``_valid_pod_spec``)."""
    containers = c.sequence(spec + ("containers",))
    ports: list[ContainerPort] = []
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            c.error(spec + ("containers", i), "must be an object")
            continue
        if container.get("ports") is None:
            continue
        names: set[str] = set()  # port names are unique per container
        for j, port in enumerate(c.sequence(spec + ("containers", i, "ports"))):
            at = spec + ("containers", i, "ports", j)
            if not isinstance(port, dict):
                c.error(at, "must be an object")
                continue
            number = port.get("containerPort")
            if number is None:
                c.error(at + ("containerPort",), "Required value")
                continue
            number = c.port_number(at + ("containerPort",), number)
            protocol = c.protocol(at + ("protocol",))
            name = None
            if port.get("name") not in (None, ""):
                name = c.port_name(at + ("name",), port["name"])
                if name in names:
                    c.error(at + ("name",), f"Duplicate value: port name {name!r}")
                    continue
                if name:
                    names.add(name)
            if number is not None and protocol is not None:
                ports.append(container_port(number, protocol, name))
    # serviceAccount is the deprecated spelling of serviceAccountName.
    account = c.string(spec + ("serviceAccountName",)) or c.string(spec + ("serviceAccount",))
    return _PodSpec(
        ports=tuple(ports),
        service_account=account or DEFAULT_SERVICE_ACCOUNT,
        node=c.string(spec + ("nodeName",)),
        host_network=c.boolean(spec + ("hostNetwork",)),
    )


def _check_workload_selector(c: _Checker, doc: Document, template_labels: dict[str, str]) -> None:
    """apps/v1 and batch controllers' selector must select their own template's labels."""
    raw = doc.get(("spec", "selector"))
    if raw is None:
        # apps/v1 requires a selector; older groups, Jobs and RCs default it from the template.
        if doc.api_version == "apps/v1":
            c.error(("spec", "selector"), "Required value")
        return
    if doc.kind == "CronJob":
        return  # its selector lives in the job template, which is rarely written by hand
    if not isinstance(raw, dict):
        c.error(("spec", "selector"), "must be an object")
        return
    if doc.kind == "ReplicationController":
        wanted = c.labels(("spec", "selector"))  # a plain label map here
        selector = Selector.from_label_selector({"matchLabels": wanted}) if wanted else None
    else:
        try:
            selector = Selector.from_label_selector(raw)
        except SelectorError as exc:
            sub = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", exc.field or "") if p)
            c.error(("spec", "selector") + sub, f"invalid selector: {exc.message}")
            return
        if selector.is_all and doc.kind != "Job":
            c.error(("spec", "selector"), "Invalid value: empty selector is invalid for a workload")
            return
    if selector is not None and not selector.matches(template_labels):
        c.error(("spec", "template", "metadata", "labels"), "Invalid value: selector does not match template labels")


def _service_ports(c: _Checker) -> tuple[ServicePort, ...]:
    ports: list[ServicePort] = []
    entries = c.sequence(("spec", "ports"))
    names: set[str] = set()
    for i, entry in enumerate(entries):
        path = ("spec", "ports", i)
        if not isinstance(entry, dict):
            c.error(path, "must be an object")
            continue
        name = entry.get("name")
        if name in (None, ""):
            name = None
            if len(entries) > 1:
                c.error(path + ("name",), "Required value: every port of a multi-port service needs a name")
        else:
            name = c.dns_label_port_name(path + ("name",), name)
            if name in names:
                c.error(path + ("name",), f"Duplicate value: port name {name!r}")
            if name:
                names.add(name)
        if entry.get("port") is None:
            c.error(path + ("port",), "Required value")
            continue
        number = c.port_number(path + ("port",), entry.get("port"))
        protocol = c.protocol(path + ("protocol",))
        target = entry.get("targetPort")
        if isinstance(target, str):
            # A string is a port name (IANA_SVC_NAME), as the API server reads an IntOrString:
            # "8080" is no number there ("must contain at least one letter").
            target = c.port_name(path + ("targetPort",), target)
        elif target is not None and target != 0:
            target = c.port_number(path + ("targetPort",), target)
        else:
            target = number  # targetPort defaults to port (0 is unset)
        node_port = None
        if entry.get("nodePort") is not None:
            node_port = c.port_number(path + ("nodePort",), entry.get("nodePort"))
        if number is not None and protocol is not None:
            ports.append(ServicePort(number, target, protocol, name, node_port))
    return tuple(ports)


def _calico_ports(c: _Checker, path: FieldPath) -> tuple[ContainerPort, ...]:
    """HostEndpoint ``ports``: named ports that policies can refer to; name and port required."""
    ports: list[ContainerPort] = []
    names: set[tuple[str, int]] = set()
    for i, entry in enumerate(c.sequence(path)):
        ppath = path + (i,)
        if not isinstance(entry, dict):
            c.error(ppath, "must be an object")
            continue
        if not entry.get("name"):
            c.error(ppath + ("name",), "Required value")
            continue
        name = c.port_name(ppath + ("name",), entry.get("name"))
        if entry.get("port") is None:
            c.error(ppath + ("port",), "Required value")
            continue
        number = c.port_number(ppath + ("port",), entry.get("port"))
        protocol = c.protocol(ppath + ("protocol",))
        if name is None or number is None or protocol is None:
            continue
        if (name, protocol) in names:
            c.error(ppath + ("name",), f"Duplicate value: port name {name!r}")
            continue
        names.add((name, protocol))
        ports.append(container_port(number, protocol, name))
    return tuple(ports)


def _owner(doc: Document) -> str | None:
    """The controller owning a pod as ``Kind/name`` (np-guard reports the pod under it)."""
    md = doc.obj.get("metadata")
    refs = md.get("ownerReferences") if isinstance(md, dict) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("name") and ref.get("kind") != "Node":
            # np-guard reports an owner reference without a kind as a Pod.
            return f"{ref.get('kind') or 'Pod'}/{ref['name']}"
    return None


#: Phases of a pod whose containers have all ended: its address is released (Calico's
#: ``IsFinished``; ``Completed`` is what some tools print for Succeeded).
FINISHED_PHASES = frozenset({"Succeeded", "Failed", "Completed"})


def pod_without_address(obj: dict[str, Any]) -> str | None:
    """Why a Pod object is no endpoint, or None when it is one. A pod whose containers have
    all ended (phase Succeeded or Failed) has released its address, and a pod the cluster has
    not given an address yet (a status with a phase but no ``podIP``: Pending) holds none: no
    packet comes from it or goes to it, as Calico and Cilium make no endpoint of either. A Pod
    without a status (a manifest before it is applied) is an endpoint judged by name."""
    status = obj.get("status")
    if type(status) is not dict:
        return None
    phase = status.get("phase")
    if phase in FINISHED_PHASES:
        return f"phase {phase}: its address is released"
    if phase and not status.get("podIP") and not status.get("podIPs"):
        return f"phase {phase} without an address yet"
    return None


def checked_pod(doc: Document, problems: Problems) -> Endpoint | None:
    """A Pod as an endpoint, every problem reported (the endpoint keeps what is valid)."""
    c = _Checker(doc, problems)
    name = c.name()
    ns = c.namespace()
    labels = c.labels(("metadata", "labels"))
    spec = _pod_spec(c, ("spec",))
    ips: list[IPAddress] = []
    pod_ip = c.string(("status", "podIP"))
    parsed = None
    if pod_ip:
        parsed = ip = c.ip(("status", "podIP"), pod_ip)
        if ip is not None:
            ips.append(ip)
    for i, entry in enumerate(c.sequence(("status", "podIPs"))):
        if not isinstance(entry, dict):
            c.error(("status", "podIPs", i), "must be an object")
            continue
        text = entry.get("ip")
        # podIPs[0] repeats podIP: parse it once
        ip = parsed if parsed is not None and text == pod_ip else c.ip(("status", "podIPs", i, "ip"), text)
        if ip is not None:
            ips.append(ip)
    if not name:
        return None
    return _pod_endpoint(doc, name, ns, labels, ips, spec)


def _pod_endpoint(
    doc: Document, name: str, ns: str, labels: dict[str, str], ips: list[IPAddress], spec: _PodSpec
) -> Endpoint:
    """The endpoint both pod paths build (``checked_pod``, ``valid_pod``)."""
    return endpoint(
        kind=EndpointKind.POD,
        name=name,
        namespace=ns,
        labels=labels,
        ips=tuple(dict.fromkeys(ips)),
        ports=spec.ports,
        service_account=spec.service_account,
        node=spec.node,
        host_network=spec.host_network,
        workload=_owner(doc),
    )


def valid_pod(doc: Document) -> Endpoint | None:
    """A Pod with nothing to report, read straight from its object; None as soon as anything is
    unusual (then ``checked_pod`` reports it). Most pods of a cluster take this path, which
    builds the same endpoint as ``checked_pod`` at a third of the cost."""
    obj = doc.obj
    md = obj.get("metadata")
    if type(md) is not dict:
        return None
    name = md.get("name")
    # pod names are unique: checked directly, not through the cache that repeated values use
    if type(name) is not str or not name or not is_dns1123_subdomain(name):
        return None
    ns = md.get("namespace")
    if ns is None or ns == "":
        ns = DEFAULT_NAMESPACE
    elif type(ns) is not str or dns1123_label_error(ns):
        return None
    raw = md.get("labels")
    if raw is None:
        labels: dict[str, str] = {}
    elif type(raw) is not dict:
        return None
    else:
        for k, v in raw.items():
            if type(k) is not str or type(v) is not str or label_key_error(k) or label_value_error(v):
                return None
        labels = dict(raw)
    spec = _valid_pod_spec(obj.get("spec"))
    if spec is None:
        return None
    status = obj.get("status")
    ips: list[IPAddress] = []
    if status is not None:
        if type(status) is not dict:
            return None
        pod_ip = status.get("podIP")
        parsed = None
        if pod_ip is not None and pod_ip != "":
            if type(pod_ip) is not str:
                return None
            parsed = parse_ip(pod_ip)
            if parsed is None:
                return None
            ips.append(parsed)
        entries = status.get("podIPs")
        if entries is not None:
            if type(entries) is not list:
                return None
            for entry in entries:
                if type(entry) is not dict:
                    return None
                text = entry.get("ip")
                if parsed is not None and text == pod_ip:
                    ips.append(parsed)
                    continue
                if type(text) is not str:
                    return None
                ip = parse_ip(text)
                if ip is None:
                    return None
                ips.append(ip)
    return _pod_endpoint(doc, name, ns, labels, ips, spec)


def _valid_pod_spec(spec: Any) -> _PodSpec | None:
    """``_pod_spec`` for a spec with nothing to report; None if anything is unusual."""
    if spec is None:
        spec = {}
    elif type(spec) is not dict:
        return None
    containers = spec.get("containers")
    ports: list[ContainerPort] = []
    if containers is not None:
        if type(containers) is not list:
            return None
        for container in containers:
            if type(container) is not dict:
                return None
            container_ports = container.get("ports")
            if container_ports is None:
                continue
            if type(container_ports) is not list:
                return None
            names: set[str] = set()
            for port in container_ports:
                if type(port) is not dict:
                    return None
                number = port.get("containerPort")
                if type(number) is not int or not 1 <= number <= 65535:
                    return None
                raw_protocol = port.get("protocol")
                protocol = (
                    PROTO_TCP
                    if raw_protocol is None
                    else PROTOCOLS.get(raw_protocol)
                    if type(raw_protocol) is str
                    else None
                )
                if protocol is None:
                    return None
                name = port.get("name")
                if name is None or name == "":
                    name = None
                elif type(name) is not str or name in names or port_name_error(name):
                    return None
                else:
                    names.add(name)
                ports.append(container_port(number, protocol, name))
    account = node = None
    for key in ("serviceAccountName", "serviceAccount", "nodeName"):
        value = spec.get(key)
        if value is None or value == "":
            continue
        if type(value) is not str:
            return None
        if key == "nodeName":
            node = value
        elif account is None:
            account = value
    host_network = spec.get("hostNetwork")
    if host_network is not None and type(host_network) is not bool:
        return None
    return _PodSpec(tuple(ports), account or DEFAULT_SERVICE_ACCOUNT, node or None, host_network is True)


_HANDLERS = {
    "Namespace": InventoryBuilder.add_namespace,
    "Pod": InventoryBuilder.add_pod,
    "Node": InventoryBuilder.add_node,
    "Service": InventoryBuilder.add_service,
    "EndpointSlice": InventoryBuilder.add_endpoint_slice,
    "ServiceAccount": InventoryBuilder.add_service_account,
    "HostEndpoint": InventoryBuilder.add_host_endpoint,
    "GlobalNetworkSet": InventoryBuilder.add_network_set,
    "NetworkSet": InventoryBuilder.add_network_set,
    **{kind: InventoryBuilder.add_workload for kind in WORKLOAD_TEMPLATES},
}


def build_inventory(docs: Iterable[Document], problems: Problems) -> Inventory:
    builder = InventoryBuilder(problems)
    builder.add_all(docs)
    return builder.build()
