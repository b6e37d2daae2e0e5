"""The inventory kinds and their validation (pyclassify.kinds.inventory_kinds)."""

from __future__ import annotations

import ipaddress
import json
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify.documents import Document, Problems
from pyclassify.inventory import ContainerPort, Endpoint, ServicePort
from pyclassify.ir import PROTO_SCTP, PROTO_TCP, PROTO_UDP, EndpointKind
from pyclassify.kinds.inventory_kinds import (
    build_inventory,
    label_key_error,
    label_value_error,
    port_name_error,
)
from pyclassify.loader import load_text

ip = ipaddress.ip_address
net = ipaddress.ip_network


def build(text: str):
    problems = Problems()
    docs = load_text(textwrap.dedent(text), "inv.yaml", problems)
    inventory = build_inventory(docs, problems)
    return inventory, problems


def errors(problems: Problems) -> list[tuple[int, str]]:
    return [(p.line, p.path) for p in problems.errors]


# --- Namespace ---


def test_namespace_always_carries_its_name_label():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Namespace
        metadata:
          name: shop
          labels:
            team: web
            kubernetes.io/metadata.name: spoofed
        """
    )
    assert not problems.items
    assert dict(inv.namespaces["shop"].labels) == {"team": "web", "kubernetes.io/metadata.name": "shop"}
    assert dict(inv.namespace_labels("shop")) == {"team": "web", "kubernetes.io/metadata.name": "shop"}


def test_namespaces_of_pods_exist_implicitly():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec: {containers: [{name: c}]}
        """
    )
    assert not problems.items
    (pod,) = inv.endpoints
    assert pod.namespace == "default"  # no metadata.namespace: the default namespace
    assert dict(inv.namespaces["default"].labels) == {"kubernetes.io/metadata.name": "default"}


@pytest.mark.parametrize(
    ("labels", "path"),
    [
        ("{Bad Key: x}", "metadata.labels.Bad Key"),
        ("{a: -x}", "metadata.labels.a"),
        ("{a: " + "x" * 64 + "}", "metadata.labels.a"),
        ("{a: 1}", "metadata.labels.a"),  # a YAML number, not a string
        ("{example.com/: x}", "metadata.labels.example.com/"),
        ("{Example.com/a: x}", "metadata.labels.Example.com/a"),
    ],
)
def test_invalid_labels(labels, path):
    inv, problems = build(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns\n  labels: {labels}\n")
    assert errors(problems) == [(5, path)]
    assert dict(inv.namespaces["ns"].labels) == {"kubernetes.io/metadata.name": "ns"}  # the bad label is left out


def test_label_syntax():
    assert label_key_error("app.kubernetes.io/name") is None
    assert label_key_error("a" * 63) is None
    assert label_key_error("a" * 64) is not None
    assert label_key_error("a/b/c") is not None
    assert label_value_error("") is None
    assert label_value_error("v1.2_3-x") is None
    assert label_value_error("x_") is not None


def test_port_name_syntax():
    assert port_name_error("http") is None
    assert port_name_error("h2c-web") is None
    for bad in ("HTTP", "8080", "a--b", "-a", "a-", "abcdefghijklmnop"):
        assert port_name_error(bad) is not None, bad


def test_invalid_namespace_name():
    _, problems = build("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: Shop_1\n")
    assert errors(problems) == [(4, "metadata.name")]


# --- Pod ---

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: api-7d9f
  namespace: backend
  labels:
    app: api
  ownerReferences:
  - apiVersion: apps/v1
    kind: ReplicaSet
    name: api-7d
    controller: true
    uid: 1
spec:
  serviceAccountName: api
  nodeName: node1
  containers:
  - name: api
    ports:
    - name: http
      containerPort: 8080
    - containerPort: 53
      protocol: UDP
  - name: sidecar
    ports:
    - name: http
      containerPort: 15001
      protocol: SCTP
status:
  podIP: 10.0.0.5
  podIPs:
  - ip: 10.0.0.5
  - ip: fd00::5
"""


def test_pod():
    inv, problems = build(POD)
    assert not problems.items
    (pod,) = inv.endpoints
    assert pod.kind is EndpointKind.POD and pod.ref == "backend/api-7d9f"
    assert dict(pod.labels) == {"app": "api"}
    assert pod.ips == (ip("10.0.0.5"), ip("fd00::5"))
    assert pod.ports == (
        ContainerPort(8080, PROTO_TCP, "http"),  # protocol defaults to TCP
        ContainerPort(53, PROTO_UDP, None),
        ContainerPort(15001, PROTO_SCTP, "http"),  # names are unique per container only
    )
    assert pod.named_port("http", PROTO_SCTP) == [15001]
    assert (pod.service_account, pod.node, pod.host_network) == ("api", "node1", False)
    assert pod.workload == "ReplicaSet/api-7d"  # reported under its owner, as np-guard does


def test_pod_without_service_account_gets_default():
    inv, _ = build("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert inv.endpoints[0].service_account == "default"
    assert inv.endpoints[0].workload is None


def test_owner_reference_without_kind_is_a_pod_as_np_guard_reports_it():
    inv, _ = build(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  ownerReferences: [{name: o, controller: true}]\n"
    )
    assert inv.endpoints[0].workload == "Pod/o"


def test_host_network_pod_takes_its_node_addresses():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: agent, namespace: kube-system}
        spec:
          hostNetwork: true
          nodeName: node1
          containers: [{name: a}]
        ---
        apiVersion: v1
        kind: Node
        metadata:
          name: node1
          labels: {zone: a}
        status:
          addresses:
          - {type: InternalIP, address: 192.168.0.1}
          - {type: ExternalIP, address: 203.0.113.1}
          - {type: Hostname, address: node1}
        """
    )
    assert not problems.items
    (pod,) = inv.endpoints
    assert pod.host_network and pod.ips == (ip("192.168.0.1"), ip("203.0.113.1"))
    node = inv.nodes["node1"]
    assert dict(node.labels) == {"zone": "a"} and node.addresses == pod.ips


def test_pod_errors_name_path_and_line():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
        spec:
          containers:
          - name: c
            ports:
            - name: http
              containerPort: 0
            - name: http
              containerPort: 80
            - name: Web_UI
              containerPort: 81
              protocol: HTTP
            - name: ok
        status:
          podIP: 10.0.0.256
        """
    )
    assert errors(problems) == [
        (10, "spec.containers[0].ports[0].containerPort"),
        (11, "spec.containers[0].ports[1].name"),
        (15, "spec.containers[0].ports[2].protocol"),
        (13, "spec.containers[0].ports[2].name"),
        (16, "spec.containers[0].ports[3].containerPort"),
        (18, "status.podIP"),
    ]
    # The pod is kept with what is valid; check still fails on the errors above.
    (pod,) = inv.endpoints
    assert pod.ips == () and pod.ports == ()


def test_duplicate_pod_is_an_error_naming_both_places_and_the_first_wins():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: p, labels: {v: "1"}}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: p, labels: {v: "2"}}
        """
    )
    assert [p.severity for p in problems] == ["error"] and problems.items[0].line == 7
    assert "already defined at inv.yaml:3" in problems.items[0].message
    assert [dict(e.labels) for e in inv.endpoints] == [{"v": "1"}]


# --- workload controllers ---

TEMPLATE = """\
    metadata:
      labels: {app: web}
    spec:
      serviceAccountName: web
      containers:
      - name: web
        ports:
        - {name: http, containerPort: 8080}
"""


@pytest.mark.parametrize(
    ("kind", "api", "template_path", "selector"),
    [
        ("Deployment", "apps/v1", "spec.template", "selector: {matchLabels: {app: web}}"),
        ("StatefulSet", "apps/v1", "spec.template", "selector: {matchLabels: {app: web}}"),
        (
            "DaemonSet",
            "apps/v1",
            "spec.template",
            "selector: {matchExpressions: [{key: app, operator: In, values: [web]}]}",
        ),
        ("ReplicaSet", "apps/v1", "spec.template", "selector: {matchLabels: {app: web}}"),
        ("Job", "batch/v1", "spec.template", ""),
        ("ReplicationController", "v1", "spec.template", "selector: {app: web}"),
        ("CronJob", "batch/v1", "spec.jobTemplate.spec.template", "schedule: '* * * * *'"),
    ],
)
def test_workload_controllers_are_endpoints_from_their_template(kind, api, template_path, selector):
    parts = template_path.split(".")
    body = "".join("  " * i + f"{p}:\n" for i, p in enumerate(parts))
    indent = "  " * len(parts)
    template = textwrap.indent(textwrap.dedent(TEMPLATE), indent)
    text = f"apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: web\n  namespace: shop\n"
    text += f"spec:\n  {selector}\n" + body[len("spec:\n") :] + template
    inv, problems = build(text)
    assert not problems.items, [str(p) for p in problems]
    (ep,) = inv.endpoints
    assert (ep.kind, ep.ref, ep.workload) == (EndpointKind.POD, "shop/web", f"{kind}/web")
    assert dict(ep.labels) == {"app": "web"}
    assert ep.ports == (ContainerPort(8080, PROTO_TCP, "http"),)
    assert ep.service_account == "web" and ep.ips == ()


def test_workload_selector_must_match_template_and_be_valid():
    _, problems = build(
        """\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: a}
        spec:
          selector: {matchLabels: {app: other}}
          template:
            metadata:
              labels: {app: a}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: b}
        spec:
          selector:
            matchExpressions:
            - {key: app, operator: Equals, values: [b]}
          template:
            metadata:
              labels: {app: b}
        ---
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: c}
        spec:
          template: {}
        """
    )
    assert errors(problems) == [
        (8, "spec.template.metadata.labels"),
        (16, "spec.selector.matchExpressions[0].operator"),
        (24, "spec.selector"),
    ]


def test_workload_without_template():
    inv, problems = build("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {selector: {}}\n")
    assert errors(problems) == [(4, "spec.template")]
    assert inv.endpoints == []


# --- Service, EndpointSlice, ServiceAccount ---


def test_service_with_endpoint_slice():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: api, namespace: shop}
        spec:
          selector: {app: api}
          clusterIP: 10.96.0.10
          clusterIPs: [10.96.0.10, fd00:96::10]
          ports:
          - {name: http, port: 80, targetPort: http}
          - {name: dns, port: 53, targetPort: 5353, protocol: UDP}
          - {name: plain, port: 8080}
        ---
        apiVersion: discovery.k8s.io/v1
        kind: EndpointSlice
        metadata:
          name: api-abc
          namespace: shop
          labels: {kubernetes.io/service-name: api}
        addressType: IPv4
        endpoints:
        - addresses: [10.0.0.7, 10.0.0.8]
        ports:
        - {name: http, port: 8080, protocol: TCP}
        """
    )
    assert not problems.items
    svc = inv.services[("shop", "api")]
    assert dict(svc.selector) == {"app": "api"}
    assert svc.cluster_ips == (ip("10.96.0.10"), ip("fd00:96::10"))
    assert svc.ports == (
        ServicePort(80, "http", PROTO_TCP, "http"),
        ServicePort(53, 5353, PROTO_UDP, "dns"),
        ServicePort(8080, 8080, PROTO_TCP, "plain"),  # targetPort defaults to port
    )
    assert svc.endpoint_ips == (ip("10.0.0.7"), ip("10.0.0.8"))


def test_service_without_slices_takes_its_selected_pods():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: api, namespace: shop}
        spec:
          clusterIP: None
          selector: {app: api}
          ports: [{port: 80}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: a, namespace: shop, labels: {app: api}}
        status: {podIP: 10.0.0.1}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: b, namespace: other, labels: {app: api}}
        status: {podIP: 10.0.0.2}
        """
    )
    assert not problems.items
    svc = inv.services[("shop", "api")]
    assert svc.cluster_ips == () and svc.endpoint_ips == (ip("10.0.0.1"),)


def test_service_errors():
    _, problems = build(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: 1api}
        spec:
          clusterIP: 10.96.0.300
          selector: {app: "x y"}
          ports:
          - {name: http, port: 70000}
          - {port: 81, protocol: ICMP}
          - {name: http, port: 82, targetPort: Not_A_Name}
        """
    )
    assert errors(problems) == [
        (3, "metadata.name"),
        (6, "spec.selector.app"),
        (5, "spec.clusterIP"),
        (8, "spec.ports[0].port"),
        (9, "spec.ports[1].name"),
        (9, "spec.ports[1].protocol"),
        (10, "spec.ports[2].name"),
        (10, "spec.ports[2].targetPort"),
    ]


def test_service_port_names_are_dns_labels():
    """Service port names are DNS-1123 labels (ValidateDNS1123Label in the API server's
    validateServicePort), not IANA service names: `kubectl create service clusterip --tcp
    8001:8000` names its port 8001-8000, charts use names longer than 15 characters. A named
    targetPort is a container port's name, an IANA_SVC_NAME; a quoted number is no such name."""
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: api}
        spec:
          ports:
          - {name: 8001-8000, port: 8001, targetPort: 8000}
          - {name: https-metrics-endpoint, port: 8443, targetPort: metrics}
        ---
        apiVersion: discovery.k8s.io/v1
        kind: EndpointSlice
        metadata: {name: api-x, labels: {kubernetes.io/service-name: api}}
        addressType: IPv4
        endpoints: [{addresses: [10.0.0.1]}]
        ports: [{name: 8001-8000, port: 8000}, {name: https-metrics-endpoint, port: 9100}]
        """
    )
    assert not problems.items, [str(p) for p in problems]
    ports = inv.services[("default", "api")].ports
    assert [(p.name, p.port, p.target_port) for p in ports] == [
        ("8001-8000", 8001, 8000),
        ("https-metrics-endpoint", 8443, "metrics"),
    ]
    _, problems = build(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: api}
        spec:
          ports:
          - {name: Metrics_1, port: 80, targetPort: "8080"}
          - {name: a-very-long-port-name-that-is-longer-than-sixty-three-characters-x, port: 81}
        """
    )
    assert [(p.path, p.message) for p in problems.errors] == [
        (
            "spec.ports[0].name",
            "invalid port name 'Metrics_1': must be a lowercase RFC 1123 label "
            "(a-z, 0-9 and '-', starting and ending alphanumeric)",
        ),
        ("spec.ports[0].targetPort", "invalid port name '8080': must contain at least one letter (a-z)"),
        (
            "spec.ports[1].name",
            "invalid port name 'a-very-long-port-name-that-is-longer-than-sixty-three-characters-x': "
            "must be no more than 63 characters",
        ),
    ]


def test_endpoint_slice_errors():
    _, problems = build(
        """\
        apiVersion: discovery.k8s.io/v1
        kind: EndpointSlice
        metadata: {name: s, labels: {kubernetes.io/service-name: api}}
        addressType: IPv4
        endpoints:
        - addresses: [fd00::1, 10.0.0.999]
        - addresses: []
        ports:
        - {port: 0, name: 8001-8000}
        - {port: 80, name: Bad_Name}
        - {port: 81, name: 8001-8000}
        """
    )
    # The API server validates no EndpointSlice port number (port 0 stands); port names are
    # DNS-1123 labels, unique in the slice (discovery validation's validatePorts).
    assert errors(problems) == [
        (6, "endpoints[0].addresses[0]"),
        (6, "endpoints[0].addresses[1]"),
        (7, "endpoints[1].addresses"),
        (10, "ports[1].name"),
        (11, "ports[2].name"),
    ]


def test_service_account():
    inv, problems = build(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: api, namespace: shop, labels: {role: x}}\n"
    )
    assert not problems.items
    sa = inv.service_accounts[("shop", "api")]
    assert (sa.name, sa.namespace, dict(sa.labels)) == ("api", "shop", {"role": "x"})


def test_node_errors():
    _, problems = build(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  addresses:\n  - {type: InternalIP, address: nope}\n"
    )
    assert errors(problems) == [(6, "status.addresses[0].address")]


# --- Calico ---


def test_host_endpoint():
    inv, problems = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata:
          name: node1-eth0
          labels: {role: ingress}
        spec:
          node: node1
          interfaceName: eth0
          expectedIPs: [192.168.0.1, "fd00::1"]
          profiles: [edge]
          ports:
          - {name: ssh, port: 22, protocol: TCP}
          - {name: dns, port: 53, protocol: UDP}
        """
    )
    assert not problems.items
    (hep,) = inv.endpoints
    assert (hep.kind, hep.name, hep.namespace, hep.ref) == (EndpointKind.HOST, "node1-eth0", None, "node1-eth0")
    assert hep.ips == (ip("192.168.0.1"), ip("fd00::1"))
    assert hep.ports == (ContainerPort(22, PROTO_TCP, "ssh"), ContainerPort(53, PROTO_UDP, "dns"))
    assert (hep.node, hep.interface, hep.profiles) == ("node1", "eth0", ("edge",))


def test_wildcard_host_endpoint_takes_node_addresses():
    inv, _ = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: node1-all}
        spec: {node: node1, interfaceName: "*"}
        ---
        apiVersion: v1
        kind: Node
        metadata: {name: node1}
        status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
        """
    )
    assert inv.endpoints[0].ips == (ip("192.168.0.1"),)


def test_host_endpoint_errors():
    _, problems = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: h}
        spec:
          expectedIPs: [300.1.1.1]
          ports:
          - {port: 22}
          - {name: web, port: 80, protocol: ICMP}
        """
    )
    assert errors(problems) == [
        (4, "spec.node"),
        (5, "spec.expectedIPs[0]"),
        (7, "spec.ports[0].name"),
        (8, "spec.ports[1].protocol"),
    ]


def test_host_endpoint_interface_names():
    """enforce names a host endpoint's interface in iptables rules: a name Linux and Calico
    accept, or '*'; anything else is an error on its line (and the endpoint names none)."""
    inv, problems = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: ok}
        spec: {node: n1, interfaceName: eth0.100}
        ---
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: all}
        spec: {node: n1, interfaceName: "*"}
        ---
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: bad}
        spec:
          node: n1
          interfaceName: "eth0 -j ACCEPT"
        ---
        apiVersion: projectcalico.org/v3
        kind: HostEndpoint
        metadata: {name: long}
        spec: {node: n1, interfaceName: a-very-long-interface, expectedIPs: [10.0.0.1]}
        """
    )
    assert errors(problems) == [(16, "spec.interfaceName"), (21, "spec.interfaceName")]
    assert {e.name: e.interface for e in inv.endpoints} == {"ok": "eth0.100", "all": "*", "bad": None, "long": None}


def test_network_sets():
    inv, problems = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: GlobalNetworkSet
        metadata: {name: bad-actors, labels: {threat: high}}
        spec:
          nets: [198.51.100.0/24, 203.0.113.7, "2001:db8::/32"]
        ---
        apiVersion: projectcalico.org/v3
        kind: NetworkSet
        metadata: {name: partners, namespace: shop}
        spec:
          nets: [192.0.2.0/24]
          allowedEgressDomains: [api.example.com, "*.partner.example"]
        """
    )
    assert not problems.items
    g, n = inv.network_sets
    assert (g.name, g.namespace, dict(g.labels)) == ("bad-actors", None, {"threat": "high"})
    assert g.nets == (net("198.51.100.0/24"), net("203.0.113.7/32"), net("2001:db8::/32"))
    assert (n.namespace, n.nets, n.domains) == (
        "shop",
        (net("192.0.2.0/24"),),
        ("api.example.com", "*.partner.example"),
    )


def test_network_set_errors():
    _, problems = build(
        """\
        apiVersion: projectcalico.org/v3
        kind: GlobalNetworkSet
        metadata: {name: g}
        spec:
          nets: [10.0.0.0/33, 10.0.0.0/8]
          allowedEgressDomains: ["bad domain"]
        """
    )
    assert errors(problems) == [(5, "spec.nets[0]"), (6, "spec.allowedEgressDomains[0]")]


def test_kinds_from_other_groups_are_not_inventory():
    # A Service from some CRD group is not a Kubernetes Service: only the registry dispatches.
    from pyclassify.kinds import is_inventory_kind

    problems = Problems()
    (doc,) = load_text("apiVersion: example.com/v1\nkind: Service\nmetadata: {name: s}\n", "x.yaml", problems)
    assert not is_inventory_kind(doc)
    (core,) = load_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "x.yaml", problems)
    assert is_inventory_kind(core)


def test_workloads_are_named_as_np_guard_names_them():
    """Every workload np-guard reports (``ns/name[Kind]``, owned pods under their owner, objects
    without namespace in ``default``) is an endpoint of the inventory built from the same manifests
    — but those whose pods have all finished: np-guard reports a Job's Succeeded pods, which have
    released their address; Calico and Cilium make no endpoint of them, nor does pyclassify."""
    from pyclassify.kinds.inventory_kinds import InventoryBuilder
    from pyclassify.loader import documents_of
    from tests.shared_data import shared_path

    def workload(ep: Endpoint) -> str:
        kind, _, name = (ep.workload or f"Pod/{ep.name}").partition("/")
        return f"{ep.namespace}/{name}[{kind}]"

    cases = json.loads(shared_path("cases", "npguard.json", what="np-guard's cases").read_text())["cases"]
    for case in cases:
        problems = Problems()
        docs = [d for m in case["manifests"] for d in documents_of(m, case["name"], problems)]
        inv = build_inventory(docs, problems)
        names = {workload(ep) for ep in inv.pods()}
        builder = InventoryBuilder(Problems())
        builder.add_all(d for d in docs if d.kind == "Pod")
        finished = {workload(ep) for ep, _ in builder.released}
        wanted = {
            f"{end['namespace']}/{end['name']}[{end['kind']}]"
            for conn in case["expected"]["connections"]
            for end in (conn.get("src_parsed") or {}, conn.get("dst_parsed") or {})
            if end.get("type") == "workload"
        }
        assert not finished & names, (case["name"], sorted(finished & names))
        assert wanted - finished <= names, (case["name"], sorted(wanted - finished - names))


# --- the fast path for pods ---


def _pod_variants():
    from bench.cluster import generate

    return [p for p in generate(200, seed=9).pods.values()]


_POD_FIELDS = [
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "labels"),
    ("spec", "containers"),
    ("spec", "serviceAccountName"),
    ("spec", "hostNetwork"),
    ("spec", "nodeName"),
    ("status", "podIP"),
    ("status", "podIPs"),
    ("status",),
    ("metadata",),
]
_ODD_VALUES = [
    None,
    "",
    3,
    True,
    "Not_Valid!",
    "10.0.0.300",
    "fd00::1",
    [],
    {},
    [{"ip": "10.1.2.3"}],
    [{"ip": 7}],
    {"a": "b"},
    {"a": 1},
    {"": "x"},
    [{"name": "c", "ports": [{"containerPort": 70000}]}],
    [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81, "name": "http"}]}],
]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(range(200)),
    st.lists(st.tuples(st.sampled_from(_POD_FIELDS), st.sampled_from(_ODD_VALUES)), max_size=3),
)
def test_fast_pod_path_equals_the_checked_one(index, edits):
    import copy

    from pyclassify.kinds.inventory_kinds import checked_pod, valid_pod

    pods = _pod_variants_cached()
    obj = copy.deepcopy(pods[index % len(pods)])
    for path, value in edits:
        node = obj
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = copy.deepcopy(value)
    doc = Document(obj, "p.yaml", 1)
    problems = Problems()
    slow = checked_pod(doc, problems)
    fast = valid_pod(doc)
    if fast is not None:
        assert not problems.items, problems.items
        assert fast == slow
    elif not problems.items:
        # the fast path may decline a valid pod (a label value None, ...), never accept a bad one
        assert slow is not None or not obj.get("metadata", {}).get("name")


_CACHE: list = []


def _pod_variants_cached():
    if not _CACHE:
        _CACHE.extend(_pod_variants())
    return _CACHE


def test_bulk_constructors_build_the_same_objects():
    """``endpoint`` and ``container_port`` (the loaders' bulk paths) equal the dataclasses' own
    constructors field for field, and ``parse_ip``'s IPv4 shortcut equals ``ipaddress``."""
    import dataclasses

    from pyclassify.inventory import Endpoint, container_port, endpoint
    from pyclassify.kinds.inventory_kinds import parse_ip

    fields = dict(
        kind=EndpointKind.POD,
        name="web-1",
        namespace="prod",
        labels={"app": "web"},
        ips=(ip("10.0.0.1"),),
        ports=(ContainerPort(80, PROTO_TCP, "http"),),
        service_account="sa",
        node="n1",
        host_network=False,
        workload="ReplicaSet/web",
    )
    fast, slow = endpoint(**fields), Endpoint(**fields)
    assert fast == slow and repr(fast) == repr(slow)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        endpoint(name="x", namespace="y", labels={})  # kind missing
    with pytest.raises(TypeError):
        endpoint(**fields, colour="blue")
    assert container_port(80, PROTO_TCP, "http") is container_port(80, PROTO_TCP, "http")
    assert container_port(80, PROTO_TCP, "http") == ContainerPort(80, PROTO_TCP, "http")
    for text in ("10.244.84.3", "0.0.0.0", "255.255.255.255"):
        parsed = parse_ip(text)
        assert parsed == ip(text) and hash(parsed) == hash(ip(text)) and type(parsed) is type(ip(text))
    assert parse_ip("10.1.2.03") is None and parse_ip("10.1.2") is None and parse_ip("256.1.1.1") is None


def test_a_protocol_that_is_a_list_or_a_map_is_an_error_not_a_crash():
    inv, problems = build(
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: a}
        spec:
          containers:
          - name: c
            ports: [{containerPort: 80, protocol: [TCP]}]
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: s, namespace: a}
        spec:
          ports: [{port: 80, protocol: {a: 1}}]
        """
    )
    assert errors(problems) == [(7, "spec.containers[0].ports[0].protocol"), (13, "spec.ports[0].protocol")]
    assert all("unsupported protocol" in p.message for p in problems.errors)
    assert [e.ref for e in inv.endpoints] == ["a/p"]


# --- bad input at cluster size ---


def test_one_invalid_object_among_ten_thousand_pods(tmp_path):
    """(Here, not in test_project.py: it needs the generator in bench/, which the installed-package run
    does not have.) Issue 11's bad-input rule at cluster size: one broken pod among 10,000 is reported with
    file, line and field; every other object loads; `check` exits 1 listing it."""
    import subprocess
    import sys

    from bench import cluster as gen
    from pyclassify.project import load_project

    c = gen.generate(10_000, seed=1)
    key = sorted(c.pods)[5000]
    c.pods[key]["status"]["podIP"] = "10.0.0.300"
    c.pods[key]["status"]["podIPs"] = [{"ip": "10.0.0.300"}]
    path = gen.write_yaml(c, tmp_path / "cluster.yaml")
    problems = Problems()
    project = load_project([str(path)], problems)
    assert [(p.path, "invalid IP address" in p.message) for p in problems.errors] == [
        ("status.podIP", True),
        ("status.podIPs[0].ip", True),
    ]
    line = problems.errors[0].line
    assert path.read_text().splitlines()[line - 1].strip() == "podIP: 10.0.0.300"
    assert list(project.invalid) == [("", "Pod", *key)]
    # Everything else is there: every pod (the broken one without its address), every policy.
    assert len(project.inventory.endpoints) >= len(c.pods)
    assert sum(e.kind == EndpointKind.POD for e in project.inventory.endpoints) == len(c.pods)
    assert len([p for p in project.policy_set.policies if p.kind == "NetworkPolicy"]) == len(c.network_policies)
    r = subprocess.run(
        [sys.executable, "-m", "pyclassify", "check", str(path)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 1
    assert f"{path}:{line}: status.podIP: " in r.stderr + r.stdout
