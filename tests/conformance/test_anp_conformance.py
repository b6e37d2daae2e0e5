"""network-policy-api conformance (AdminNetworkPolicy / BaselineAdminNetworkPolicy v1alpha1):
every probe of every subtest, against the reference evaluator.

The model: five namespaces, two pods each; the forbidden-forrest pods are hostNetwork, so
their address is their node's (the `nodes` peer tests reach them through it). Each subtest's
``policies_snapshot`` is the complete policy set in force at probe time.
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from pyclassify.inventory import ContainerPort, Endpoint, Inventory, Namespace, Node
from pyclassify.ir import EndpointKind
from pyclassify.kinds.common import PROTOCOL_NUMBERS
from pyclassify.reference import Flow, FlowEnd
from tests.conformance.policies import policy_set
from tests.conftest import CASES, load_cases
from tests.shared_data import skip_mark


def _container_ports(entries: list[dict]) -> tuple[ContainerPort, ...]:
    return tuple(ContainerPort(e["containerPort"], PROTOCOL_NUMBERS[e["protocol"]], e.get("name")) for e in entries)


def build_inventory(model: dict) -> Inventory:
    inv = Inventory()
    for ns in model["namespaces"].values():
        inv.namespaces[ns["name"]] = Namespace(ns["name"], ns["labels"])
    regular = _container_ports(model["container_ports_regular_pods"])
    forrest = _container_ports(model["container_ports_forbidden_forrest"])
    node_index = 0
    for i, (_key, pod) in enumerate(sorted(model["pods"].items())):
        if pod["hostNetwork"]:
            node_index += 1
            node = Node(
                f"node-{node_index}", {"kubernetes.io/os": "linux"}, (ipaddress.ip_address(f"172.18.0.{node_index}"),)
            )
            inv.nodes[node.name] = node
            ip, ports, node_name = node.addresses[0], forrest, node.name
        else:
            ip, ports, node_name = ipaddress.ip_address(f"10.244.0.{i + 1}"), regular, None
        inv.endpoints.append(
            Endpoint(
                kind=EndpointKind.POD,
                name=pod["name"],
                namespace=pod["namespace"],
                labels=pod["labels"],
                ips=(ip,),
                ports=ports,
                node=node_name,
                host_network=pod["hostNetwork"],
            )
        )
    return inv


def _probes():
    if not (CASES / "anp_conformance.json").exists():
        return [pytest.param(None, None, None, marks=skip_mark(CASES / "anp_conformance.json", "conformance cases"))]
    data = json.loads((CASES / "anp_conformance.json").read_text())
    out = []
    for test in data["tests"]:
        for s, sub in enumerate(test["subtests"]):
            for p, probe in enumerate(sub["probes"]):
                pid = f"{test['short_name']}-{s}-{p}-{probe['client']}->{probe['server']}:{probe['protocol']}/{probe['port']}"
                out.append(pytest.param(test["short_name"], s, probe, id=pid))
    return out


@pytest.fixture(scope="module")
def data():
    return load_cases("anp_conformance.json")


@pytest.fixture(scope="module")
def inventory(data):
    return build_inventory(data["model"])


_SETS: dict = {}


@pytest.mark.parametrize("test_name,sub_index,probe", _probes())
def test_probe(data, inventory, test_name, sub_index, probe, evaluate):
    test = next(t for t in data["tests"] if t["short_name"] == test_name)
    sub = test["subtests"][sub_index]
    key = (test_name, sub_index)
    if key not in _SETS:
        snapshot = _with_pod_ips(sub["policies_snapshot"], data, inventory)
        _SETS[key] = policy_set(snapshot, name=f"{test_name}[{sub_index}]")
    client = inventory.find(_ref(data, probe["client"]))
    server = inventory.find(_ref(data, probe["server"]))
    flow = Flow(
        FlowEnd(client, client.ips[0]),
        FlowEnd(server, server.ips[0]),
        PROTOCOL_NUMBERS[probe["protocol"]],
        40000,
        probe["port"],
    )
    verdict = evaluate(_SETS[key], inventory, flow)
    assert verdict.allowed == probe["expect_connect"], verdict.to_json()


def _with_pod_ips(objects: list, data: dict, inventory: Inventory) -> list:
    """Fill the case's ``{podIP(<house>/<pod>)}`` placeholders with the model's pod IPs (the
    suite builds those CIDRs at run time from the live pods)."""
    text = json.dumps(objects)

    def ip_of(match: re.Match) -> str:
        return str(inventory.find(_ref(data, match.group(1))).ips[0])

    return json.loads(re.sub(r"\{podIP\(([^)]+)\)\}", ip_of, text))


def _ref(data: dict, short: str) -> str:
    """``gryffindor/harry-potter-0`` -> ``network-policy-conformance-gryffindor/harry-potter-0``."""
    return f"{data['model']['pods'][short]['namespace']}/{data['model']['pods'][short]['name']}"
