"""network-policy-api policy-assistant (ex-Cyclonus): its integration tables (ingress and egress
verdicts compared separately), matcher cases, CIDR/ipBlock cases and the README walkthrough.

These cases use the KEP-era v1alpha1 ANP shape (``namespaces: {namespaceSelector: ...}``),
which the ANP normalizer reads beside the released one.
"""

from __future__ import annotations

import copy
import ipaddress
import json

import pytest

from pyclassify.documents import Document, Problems
from pyclassify.inventory import ContainerPort, Endpoint, Inventory, Namespace
from pyclassify.ir import EndpointKind
from pyclassify.kinds.common import PROTOCOL_NUMBERS, ip_block
from pyclassify.reference import Flow, FlowEnd
from tests.conformance.policies import policy_set
from tests.conftest import CASES
from tests.shared_data import skip_mark

FILE = "policy_assistant.json"


def _data_or_none():
    path = CASES / FILE
    return json.loads(path.read_text()) if path.exists() else None


DATA = _data_or_none()
MISSING = skip_mark(CASES / FILE, "policy-assistant's cases")


def _params(items, ident):
    if DATA is None:
        return [pytest.param(None, marks=MISSING)]
    return [pytest.param(item, id=ident(item)) for item in items]


def _named(objects: list[dict], prefix: str) -> list[dict]:
    """The Go tests build ANPs in memory without metadata.name; the API requires one."""
    out = []
    for i, obj in enumerate(objects):
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("name", f"{prefix}-{i}")
        out.append(obj)
    return out


# -- integration tables ------------------------------------------------------------------------


def _integration_cases():
    if DATA is None:
        return []
    return [(c, f) for c in DATA["integration_cases"] for f in c["flows"]]


def _build_integration(case: dict):
    inv = Inventory()
    for name, ns in case["namespaces"].items():
        inv.namespaces[name] = Namespace(name, ns["labels"])  # the mock adds no metadata.name label
    ports = tuple(
        ContainerPort(port, PROTOCOL_NUMBERS[proto], f"serve-{port}-{proto.lower()}")
        for port in case["server_ports"]
        for proto in case["server_protocols"]
    )
    for i, (ref, pod) in enumerate(sorted(case["pods"].items())):
        ns, name = ref.split("/")
        inv.endpoints.append(
            Endpoint(
                EndpointKind.POD,
                name,
                ns,
                pod["labels"],
                ips=(ipaddress.ip_address(f"192.168.1.{i + 1}"),),
                ports=ports,
            )
        )
    objects = list(case["networkPolicies"]) + _named(case["adminNetworkPolicies"], "anp")
    if case["baselineAdminNetworkPolicy"]:
        banp = copy.deepcopy(case["baselineAdminNetworkPolicy"])
        banp.setdefault("metadata", {}).setdefault("name", "default")  # the only name a BANP may have
        objects.append(banp)
    return inv, policy_set(objects, name=case["name"])


_BUILT: dict[str, tuple] = {}


@pytest.mark.parametrize(
    "case,flow",
    [
        pytest.param(c, f, id=f"{c['go_test_func']}/{c['name']}/{f['from']}->{f['to']}:{f['protocol']}/{f['port']}")
        for c, f in _integration_cases()
    ]
    or [pytest.param(None, None, marks=MISSING)],
)
def test_integration_flow(case, flow, evaluate):
    key = f"{case['go_test_func']}/{case['name']}"
    if key not in _BUILT:
        _BUILT[key] = _build_integration(case)
    inv, ps = _BUILT[key]
    src, dst = inv.find(flow["from"]), inv.find(flow["to"])
    verdict = evaluate(
        ps, inv, Flow(FlowEnd(src), FlowEnd(dst), PROTOCOL_NUMBERS[flow["protocol"]], 40000, flow["port"])
    )
    egress = verdict.egress.verdict if verdict.egress else "allow"
    ingress = verdict.ingress.verdict if verdict.ingress else "allow"
    assert (egress == "allow", ingress == "allow") == (flow["egress_allowed"], flow["ingress_allowed"]), (
        verdict.to_json()
    )
    assert verdict.allowed == flow["allowed"]


# -- matcher cases -----------------------------------------------------------------------------

NAMED_PORT_NUMBER = 8080  # the port the destination's "resolvedPortName" container port gets


def _end(side: dict, name: str, port_name: str | None, protocol: int, inv: Inventory) -> FlowEnd:
    ip = ipaddress.ip_address(side["ip"])
    internal = side.get("internal")
    if internal is None:
        return FlowEnd(None, ip)
    ns = internal["namespace"]
    if internal.get("namespaceLabels") is not None:
        inv.namespaces[ns] = Namespace(ns, internal["namespaceLabels"])
    ports = (ContainerPort(NAMED_PORT_NUMBER, protocol, port_name),) if port_name else ()
    ep = Endpoint(EndpointKind.POD, name, ns, internal.get("podLabels") or {}, ips=(ip,), ports=ports)
    inv.endpoints.append(ep)
    return FlowEnd(ep, ip)


@pytest.mark.parametrize(
    "case", _params(DATA["matcher_cases"]["cases"] if DATA else [], lambda c: f"{c['describe']}/{c['it']}")
)
def test_matcher_case(case, evaluate):
    traffic = case["traffic"]
    protocol = PROTOCOL_NUMBERS[traffic["protocol"]]
    port_name = traffic.get("resolvedPortName")
    inv = Inventory()
    src = _end(traffic["source"], "src", None, protocol, inv)
    dst = _end(traffic["destination"], "dst", port_name, protocol, inv)
    dport = traffic["port"] if traffic["port"] is not None else NAMED_PORT_NUMBER
    ps = policy_set(case["policies"], name=case["it"])
    assert evaluate(ps, inv, Flow(src, dst, protocol, 40000, dport)).allowed == case["allowed"]


# -- CIDR and ipBlock cases --------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", _params(DATA["ip_cidr_membership_cases"]["cases"] if DATA else [], lambda c: f"{c['ip']} in {c['cidr']}")
)
def test_cidr_membership(case):
    problems = Problems()
    block = ip_block(Document({}, "case", 1), problems, ("ipBlock",), {"cidr": case["cidr"]})
    assert block is not None and not problems
    assert (ipaddress.ip_address(case["ip"]) in block[0]) == case["member"]


@pytest.mark.parametrize(
    "case",
    _params(DATA["ipblock_match_cases"]["cases"] if DATA else [], lambda c: f"{c['ip']} in {json.dumps(c['ipBlock'])}"),
)
def test_ipblock_match(case, evaluate):
    """Through a NetworkPolicy egress rule, so the evaluator's nets/not_nets are what is tested."""
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "x"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": case["ipBlock"]}]}]},
    }
    if case.get("error"):
        problems = Problems()
        assert ip_block(Document({}, "case", 1), problems, ("ipBlock",), case["ipBlock"]) is None
        assert problems.errors
        with pytest.raises(ValueError):
            ipaddress.ip_address(case["ip"])
        return
    inv = Inventory()
    src = Endpoint(EndpointKind.POD, "a", "x", {}, ips=(ipaddress.ip_address("10.9.9.9"),))
    inv.endpoints.append(src)
    flow = Flow(FlowEnd(src), FlowEnd(None, ipaddress.ip_address(case["ip"])), 6, 40000, 80)
    assert evaluate(policy_set([policy]), inv, flow).allowed == case["match"]
    if case["ipBlock"].get("except"):
        # The source test also asserts the IP is inside the CIDR without the except list.
        policy["spec"]["egress"][0]["to"][0]["ipBlock"] = {"cidr": case["ipBlock"]["cidr"]}
        assert evaluate(policy_set([policy]), inv, flow).allowed


@pytest.mark.parametrize(
    "case", _params(DATA["k8s_label_selector_cases"]["cases"] if DATA else [], lambda c: json.dumps(c["selector"]))
)
def test_label_selector(case):
    from pyclassify.selector import Selector

    assert Selector.from_label_selector(case["selector"]).matches(case["labels"]) == case["match"]


# -- README walkthrough --------------------------------------------------------------------------


def _walkthrough_traffic():
    if DATA is None:
        return [pytest.param(None, None, marks=MISSING)]
    out = []
    for doc in DATA["documented_outputs"]:
        for i, t in enumerate(doc.get("traffic", [])):
            out.append(pytest.param(doc, t, id=f"{doc['name']}[{i}]"))
    return out


@pytest.mark.parametrize("doc,traffic", _walkthrough_traffic())
def test_documented_output(doc, traffic, evaluate):
    inv = Inventory()
    ends = []
    for n, side in enumerate((traffic["source"], traffic["destination"])):
        ns = side["namespace"]
        if side.get("namespaceLabels") is not None:
            inv.namespaces[ns] = Namespace(ns, side["namespaceLabels"])
        ports = (
            ContainerPort(traffic["port"], PROTOCOL_NUMBERS[traffic["protocol"]], traffic.get("resolvedPortName")),
        )
        ep = Endpoint(
            EndpointKind.POD,
            f"pod{n}",
            ns,
            side.get("podLabels") or {},
            ips=(ipaddress.ip_address(f"10.0.0.{n + 1}"),),
            ports=ports,
        )
        inv.endpoints.append(ep)
        ends.append(FlowEnd(ep))
    ps = policy_set(doc["policies"], name=doc["name"])
    verdict = evaluate(ps, inv, Flow(ends[0], ends[1], PROTOCOL_NUMBERS[traffic["protocol"]], 40000, traffic["port"]))
    assert verdict.allowed == (traffic["verdict"] == "Allowed"), verdict.to_json()


def _probe_tables():
    if DATA is None:
        return [pytest.param(None, None, None, marks=MISSING)]
    out = []
    for doc in DATA["documented_outputs"]:
        for probe in doc.get("probes", []):
            for pair in probe["combined"]:
                out.append(
                    pytest.param(doc, probe, pair, id=f"{doc['name']}/{probe['protocol']}-{probe['port']}/{pair}")
                )
    return out


@pytest.mark.parametrize("doc,probe,pair", _probe_tables())
def test_documented_probe_table(doc, probe, pair, evaluate):
    """The README's probe tables: combined, ingress and egress verdicts per pod pair. The demo's
    probe file gives namespaces only their listed labels (no kubernetes.io/metadata.name), so
    the ANPs/BANP select nothing there and only the NetworkPolicy acts."""
    inv = Inventory()
    for name, ns in doc["namespaces"].items():
        inv.namespaces[name] = Namespace(name, ns["labels"])
    for ref, pod in doc["pods"].items():
        ns, name = ref.split("/")
        ports = []
        for text in pod["ports"]:  # "serve-80-tcp:80/TCP"
            port_name, _, rest = text.partition(":")
            number, _, proto = rest.partition("/")
            ports.append(ContainerPort(int(number), PROTOCOL_NUMBERS[proto], port_name))
        inv.endpoints.append(
            Endpoint(
                EndpointKind.POD, name, ns, pod["labels"], ips=(ipaddress.ip_address(pod["ip"]),), ports=tuple(ports)
            )
        )
    src_ref, dst_ref = pair.split("->")
    ps = policy_set(doc["policies"], name=doc["name"])
    flow = Flow(
        FlowEnd(inv.find(src_ref)),
        FlowEnd(inv.find(dst_ref)),
        PROTOCOL_NUMBERS[probe["protocol"]],
        40000,
        probe["port"],
    )
    verdict = evaluate(ps, inv, flow)
    assert verdict.allowed == probe["combined"][pair], verdict.to_json()
    assert (verdict.ingress is None or verdict.ingress.verdict == "allow") == probe["ingress"][pair]
    assert (verdict.egress is None or verdict.egress.verdict == "allow") == probe["egress"][pair]
