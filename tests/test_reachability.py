"""The identity-level reachability table (``pyclassify.reachability``) and the ``matrix`` built on
it: every cell agrees with pair-by-pair evaluation, the conformance suites' expected verdicts
come out of the table, and outside regions hold only outside addresses."""

from __future__ import annotations

import ipaddress
import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cluster import generate
from pyclassify import reachability as reach
from pyclassify.analysis import explain, matrix, matrix_pods
from pyclassify.cli import main
from pyclassify.engine import NativeEngine
from pyclassify.kinds.common import PROTOCOL_NUMBERS
from pyclassify.project import load_project
from pyclassify.selector import Selector
from tests.conformance import test_policy_assistant as pa
from tests.test_diff import project_of

DEMO = "examples/demo"


@pytest.fixture(scope="module")
def demo():
    return load_project([DEMO])


@pytest.fixture(scope="module")
def small_cluster():
    return project_of(generate(60, seed=11).objects())


@pytest.mark.parametrize("proto,port", [(6, 80), (6, 8080), (6, 5432), (17, 53), (6, None), (1, None), (132, 9)])
def test_matrix_agrees_with_reference_on_demo(demo, proto, port) -> None:
    native = matrix(demo, proto, port)
    oracle = matrix(demo, proto, port, engine="reference")
    assert native.rows() == oracle.rows()


def test_matrix_cells_agree_with_explain_on_a_cluster(small_cluster) -> None:
    result = matrix(small_cluster, 6, 8080)
    pods = result.pods
    rng = random.Random(1)
    rows = result.rows()
    for _ in range(300):
        i, j = rng.randrange(len(pods)), rng.randrange(len(pods))
        verdict = explain(small_cluster, pods[i].ref, pods[j].ref, 6, 8080, engine="reference").verdict
        assert rows[i][j] == verdict.allowed, (pods[i].ref, pods[j].ref)


def test_port_any_is_the_union_over_ports(small_cluster) -> None:
    # The namespaces with the most pods but one keep the reference's pod pairs few.
    sizes = {}
    for p in matrix_pods(small_cluster):
        sizes[p.namespace] = sizes.get(p.namespace, 0) + 1
    namespaces = tuple(sorted(sizes, key=sizes.get)[-3:][::2])
    anyport = np.array(matrix(small_cluster, 6, "any", namespaces=namespaces).rows())
    union = np.zeros_like(anyport)
    bounds = NativeEngine(small_cluster.policy_set, small_cluster.inventory)._engine.port_bounds()
    for lo, _ in reach.port_ranges(bounds):  # one port of every class, by the pod-pair path
        union |= np.array(matrix(small_cluster, 6, lo, engine="reference", namespaces=namespaces).rows())
    assert anyport.any() and not anyport.all()
    assert (anyport == union).all()


def test_namespace_and_selector_pick_rows_and_columns(small_cluster) -> None:
    ns = sorted({p.namespace for p in matrix_pods(small_cluster)})[2]
    full = matrix(small_cluster, 6, 8080)
    picked = matrix(small_cluster, 6, 8080, namespaces=(ns,))
    assert picked.pods and all(p.namespace == ns for p in picked.pods)
    index = [full.pods.index(p) for p in picked.pods]
    assert picked.rows() == np.array(full.rows())[np.ix_(index, index)].tolist()
    sel = Selector.parse("has(app)")
    assert all("app" in p.labels for p in matrix(small_cluster, 6, 80, selector=sel).pods)


def test_by_identity_groups_pods_and_agrees(small_cluster) -> None:
    by_pod = matrix(small_cluster, 6, 8080)
    by_id = matrix(small_cluster, 6, 8080, by="identity")
    assert len(by_id.groups) < len(by_pod.pods)
    assert sum(g["count"] for g in by_id.group_json) == len(by_pod.pods)
    where = {ref: k for k, g in enumerate(by_id.group_json) for ref in g["endpoints"]}
    pods = [p.ref for p in by_pod.pods]
    rows, table = by_pod.rows(), by_id.rows()
    for i, a in enumerate(pods):
        for j, b in enumerate(pods):
            assert rows[i][j] == table[where[a]][where[b]]


def test_outside_groups_hold_no_endpoint_address(small_cluster) -> None:
    engine = NativeEngine(small_cluster.policy_set, small_cluster.inventory)
    owned = {ip for e in small_cluster.inventory.endpoints for ip in e.ips}
    groups = reach.outside_groups([engine])
    assert any(g.cidrs == ["0.0.0.0/0"] for g in groups) and any("::/0" in g.cidrs for g in groups)
    for g in groups:
        assert g.representative not in owned
        assert any(g.representative in ipaddress.ip_network(c) for c in g.cidrs)
        assert not any(g.representative in ipaddress.ip_network(c) for c in g.excluded)


def test_port_ranges_cover_every_port() -> None:
    assert reach.port_ranges([]) == [(0, 65535)]
    assert reach.port_ranges([0, 80, 81]) == [(0, 79), (80, 80), (81, 65535)]
    assert reach.port_ranges([443, 80]) == [(0, 79), (80, 442), (443, 65535)]


# --- the conformance suites' expected verdicts, out of the identity table -----------------------


def _integration_tables():
    if pa.DATA is None:
        return [pytest.param(None, marks=pa.MISSING)]
    return [pytest.param(c, id=f"{c['go_test_func']}/{c['name']}") for c in pa.DATA["integration_cases"]]


@pytest.mark.parametrize("case", _integration_tables())
def test_policy_assistant_tables_through_identity_groups(case) -> None:
    inv, ps = pa._build_integration(case)
    engine = NativeEngine(ps, inv)
    groups = reach.endpoint_groups([engine], reach.table_endpoints(inv))
    where = {ep.ref: k for k, g in enumerate(groups) for ep, _ in g.members}
    by_flow: dict[tuple, list] = {}
    for flow in case["flows"]:
        by_flow.setdefault((flow["protocol"], flow["port"]), []).append(flow)
    for (protocol, port), flows in by_flow.items():
        space = reach.FlowSpace.build([engine], [PROTOCOL_NUMBERS[protocol]], dport=port)
        table, _ = reach.reach_table(engine, groups, groups, space, {})
        for flow in flows:
            got = table[where[flow["from"]], where[flow["to"]]]
            assert bool(got) == flow["allowed"], flow


# --- the command line --------------------------------------------------------------------------


def test_cli_matrix_by_identity_json() -> None:
    r = CliRunner().invoke(main, ["matrix", DEMO, "--port", "any", "--by", "identity", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["port"] == "any" and len(doc["groups"]) == len(doc["matrix"])
    assert {"namespace", "labels", "count", "endpoints"} <= set(doc["groups"][0])


@pytest.mark.parametrize(
    "args,message",
    [
        (["--port", "http"], "neither a port"),
        (["--port", "70000"], "0-65535"),
        (["--selector", "app =="], "--selector"),
        (["--engine", "reference", "--port", "any"], "--engine reference judges one port"),
    ],
)
def test_cli_matrix_usage_errors(args, message) -> None:
    r = CliRunner().invoke(main, ["matrix", DEMO, *args])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_anp_conformance_probes_through_identity_groups() -> None:
    """Every probe of network-policy-api's ANP/BANP conformance between pods (the hostNetwork
    pods are their node's traffic, outside the table), out of one identity table per subtest
    and protocol/port."""
    from tests.conformance import test_anp_conformance as anp
    from tests.conformance.policies import policy_set
    from tests.conftest import load_cases

    data = load_cases("anp_conformance.json")
    inv = anp.build_inventory(data["model"])
    checked = 0
    for test in data["tests"]:
        for s, sub in enumerate(test["subtests"]):
            ps = policy_set(anp._with_pod_ips(sub["policies_snapshot"], data, inv), name=f"{test['short_name']}[{s}]")
            engine = NativeEngine(ps, inv)
            groups = reach.endpoint_groups([engine], reach.table_endpoints(inv))
            where = {ep.ref: k for k, g in enumerate(groups) for ep, _ in g.members}
            tables: dict[tuple, np.ndarray] = {}
            for probe in sub["probes"]:
                client, server = anp._ref(data, probe["client"]), anp._ref(data, probe["server"])
                if client not in where or server not in where:
                    continue  # a hostNetwork pod
                key = (probe["protocol"], probe["port"])
                if key not in tables:
                    space = reach.FlowSpace.build([engine], [PROTOCOL_NUMBERS[key[0]]], dport=key[1])
                    tables[key] = reach.reach_table(engine, groups, groups, space, {})[0]
                assert bool(tables[key][where[client], where[server]]) == probe["expect_connect"], (
                    test["short_name"],
                    s,
                    probe,
                )
                checked += 1
    assert checked > 100
