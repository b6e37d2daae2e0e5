"""``pyclassify diff``: exact against brute force, and its command line.

The property test changes random policies of small generated clusters (every kind the
generator writes: NetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy, Calico tier
and GlobalNetworkPolicy) and checks the changes ``diff`` reports against every pod pair (and
outside addresses) judged one by one, on a port sample chosen without the engine's classes:
every port a rule or container names, its neighbours, and random ones. A sample of the flows is
judged again by the reference evaluator.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import random
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cluster import generate
from pyclassify import reachability as reach
from pyclassify.batch import FLAG_HAS_PORTS, HEADER_DTYPE
from pyclassify.cli import main
from pyclassify.diff import diff
from pyclassify.documents import Document, Problems
from pyclassify.engine import NativeEngine
from pyclassify.flow import Flow, FlowEnd
from pyclassify.ir import PortRange
from pyclassify.project import Project, build_project
from pyclassify.reference import evaluate
from pyclassify.services import address_bytes

PROTOCOLS = (6, 17, 132)


def project_of(objects: list[dict]) -> Project:
    project = build_project([Document(o, "cluster.json", i + 1) for i, o in enumerate(objects)], Problems())
    assert not project.problems.errors, [str(p) for p in project.problems.errors]
    return project


POLICY_KINDS = ("NetworkPolicy", "AdminNetworkPolicy", "BaselineAdminNetworkPolicy", "GlobalNetworkPolicy", "Tier")


def _mutate(obj: dict, rng: random.Random) -> dict | None:
    """One edit a person might make to a policy (None: delete it)."""
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {})
    choice = rng.randrange(7)
    if choice == 0:
        return None
    rule_lists = [k for k in ("ingress", "egress") if spec.get(k)]
    if choice == 1 and rule_lists:  # drop a rule
        rules = spec[rng.choice(rule_lists)]
        rules.pop(rng.randrange(len(rules)))
        return obj
    if choice == 2 and rule_lists:  # flip an action
        rules = spec[rng.choice(rule_lists)]
        rule = rules[rng.randrange(len(rules))]
        if "action" in rule:
            options = ["Allow", "Deny", "Pass"] if obj["kind"] != "BaselineAdminNetworkPolicy" else ["Allow", "Deny"]
            if obj["kind"] == "GlobalNetworkPolicy":
                options = ["Allow", "Deny", "Pass", "Log"]
            rule["action"] = rng.choice([a for a in options if a != rule["action"]])
            return obj
    if choice == 3:  # move a port
        text = json.dumps(obj)
        ports = sorted({int(p) for p in __import__("re").findall(r'"port": (\d+)', text)})
        if ports:
            old = rng.choice(ports)
            return json.loads(text.replace(f'"port": {old}', f'"port": {rng.choice([old + 1, 53, 443, 9999])}'))
    if choice == 4:  # reorder
        for key in ("priority", "order"):
            if key in spec:
                spec[key] = (
                    rng.choice([0, 1, 50, 99, 500, 1000]) if obj["kind"] != "Tier" else rng.choice([1, 100, 5000])
                )
                return obj
    if choice == 5 and obj["kind"] == "NetworkPolicy":  # isolate the other direction too
        spec["policyTypes"] = ["Ingress", "Egress"]
        return obj
    if choice == 6 and obj["kind"] == "Tier":
        spec["defaultAction"] = rng.choice(["Pass", "Deny"])
        return obj
    # Add a rule allowing everything in one direction.
    if obj["kind"] == "NetworkPolicy":
        direction = rng.choice(["ingress", "egress"])
        spec.setdefault(direction, []).append({})
        types = spec.setdefault("policyTypes", [])
        if direction.capitalize() not in types:
            types.append(direction.capitalize())
        return obj
    return None


def brute_force(old: NativeEngine, new: NativeEngine, project: Project, rng: random.Random):
    """Every flow of the sample judged alone by both engines: {(src, dst, proto, port, icmp)}
    of those whose verdict changed, and the sample."""
    pods = [p for p in reach.table_endpoints(project.inventory) if p.ips]
    ends = [(p.ref, p.ips[0]) for p in pods if project.inventory.owner_of(p.ips[0]) is p]
    outside = set()
    for e in (old, new):
        for cidr in e._engine.class_prefixes():
            net = ipaddress.ip_network(cidr)
            if net.version == 4:
                outside.update({net.network_address, net.broadcast_address})
    outside.update(ipaddress.ip_address(rng.randrange(1 << 32)) for _ in range(5))
    owned = {ip for p in project.inventory.endpoints for ip in p.ips}
    ends += [(str(ip), ip) for ip in outside if ip not in owned and ip.version == 4]
    ports: set[int] = {0, 1, 65535, *(rng.randrange(65536) for _ in range(8))}
    for ps in (old.policy_set, new.policy_set):
        for rule in reach._rules([ps]):
            for m, _ in reach._entities(rule):
                for p in (*m.ports, *m.not_ports):
                    if isinstance(p.port, PortRange):
                        ports.update({p.port.first - 1, p.port.first, p.port.last, p.port.last + 1})
    for ep in project.inventory.endpoints:
        for cp in ep.ports:
            ports.update({cp.port - 1, cp.port, cp.port + 1})
    ports = sorted(p for p in ports if 0 <= p <= 65535)
    flows = (
        [(proto, port, None) for proto in PROTOCOLS for port in ports]
        + [(1, None, t) for t in (0, 3, 8, 11)]
        + [(47, None, None)]
    )
    pairs = [(i, j) for i, a in enumerate(ends) for j, b in enumerate(ends) if not (_outside(a) and _outside(b))]
    raw = np.stack([np.frombuffer(address_bytes(ip), np.uint8) for _, ip in ends])
    si = np.repeat(np.array([i for i, _ in pairs]), len(flows))
    di = np.repeat(np.array([j for _, j in pairs]), len(flows))
    h = np.zeros(len(si), HEADER_DTYPE)
    h["src_addr"] = raw[si]
    h["dst_addr"] = raw[di]
    h["ip_version"] = 4
    n = len(pairs)
    h["protocol"] = np.tile([proto for proto, _, _ in flows], n)
    h["flags"] = np.tile([FLAG_HAS_PORTS if port is not None else 0 for _, port, _ in flows], n)
    h["sport"] = np.tile([reach.EPHEMERAL if port is not None else 0 for _, port, _ in flows], n)
    h["dport"] = np.tile([port or 0 for _, port, _ in flows], n)
    h["icmp_type"] = np.tile([itype or 0 for _, _, itype in flows], n)
    pairs = [(ends[i], ends[j]) for i, j in pairs]
    before = old.judge(h)["allow"]
    after = new.judge(h)["allow"]
    keys = [(sa, da, proto, port, itype) for (sa, _), (da, _) in pairs for proto, port, itype in flows]
    changed = {keys[i] for i in np.flatnonzero(before != after)}
    # The engines against the oracle, on a sample.
    by_ref = {p.ref: p for p in pods}
    for i in rng.sample(range(len(keys)), min(150, len(keys))):
        sa, da, proto, port, itype = keys[i]
        src = FlowEnd(by_ref.get(sa), ipaddress.ip_address(dict(ends)[sa]) if sa not in by_ref else by_ref[sa].ips[0])
        dst = FlowEnd(by_ref.get(da), ipaddress.ip_address(dict(ends)[da]) if da not in by_ref else by_ref[da].ips[0])
        flow = Flow(
            src,
            dst,
            proto,
            reach.EPHEMERAL if port is not None else None,
            port,
            itype,
            0 if itype is not None else None,
        )
        for engine, got in ((old, before[i]), (new, after[i])):
            assert evaluate(engine.policy_set, project.inventory, flow).allowed == bool(got), (keys[i], engine)
    return changed, keys


def _outside(end: tuple) -> bool:
    return "/" not in end[0]


def covered_flows(result, ends: list[str]) -> set[tuple]:
    """(src, dst, flow class) of every flow the changes of ``result`` cover, among ``ends``."""
    out = set()
    for c in result.changes:
        srcs = [e for e in ends if _member(c.src, e)]
        dsts = [e for e in ends if _member(c.dst, e)]
        out.update((a, b, fc) for a in srcs for b in dsts for fc in c.classes)
    return out


def _member(group: reach.Group, end: str) -> bool:
    if not group.outside:
        return any(ep.ref == end for ep, _ in group.members)
    if not _outside((end,)):
        return False
    ip = ipaddress.ip_address(end)
    inside = any(ip in ipaddress.ip_network(c) for c in group.cidrs)
    return inside and not any(ip in ipaddress.ip_network(c) for c in group.excluded)


def check_exact(old_project: Project, new_project: Project, seed: int) -> Any:
    result = diff(old_project.policy_set, new_project.policy_set, old_project.inventory)
    old = NativeEngine(old_project.policy_set, old_project.inventory)
    new = NativeEngine(new_project.policy_set, old_project.inventory)
    changed, keys = brute_force(old, new, old_project, random.Random(seed))
    ends = sorted({k[0] for k in keys} | {k[1] for k in keys})
    cover = covered_flows(result, ends)
    classes: dict[tuple, Any] = {}
    for src, dst, proto, port, itype in keys:
        flow = (proto, port, itype)
        if flow not in classes:
            classes[flow] = result.space.class_of(
                4, proto, port, reach.EPHEMERAL if port is not None else None, itype, 0 if itype is not None else None
            )
            assert classes[flow] is not None, flow
        key = (src, dst, proto, port, itype)
        assert ((src, dst, classes[flow]) in cover) == (key in changed), (
            key,
            key in changed,
            [result.change_text(c) for c in result.changes],
        )
    return result


def policy_objects(cluster) -> list[dict]:
    return [o for o in cluster.objects() if o["kind"] in POLICY_KINDS]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 3))
def test_diff_matches_brute_force(seed: int, edits: int) -> None:
    rng = random.Random(seed)
    cluster = generate(rng.choice([40, 60]), seed=rng.randrange(1000))
    objects = cluster.objects()
    old_project = project_of(objects)
    candidates = [i for i, o in enumerate(objects) if o["kind"] in POLICY_KINDS]
    changed = list(objects)
    for _ in range(edits):
        i = rng.choice(candidates)
        edited = _mutate(changed[i], rng) if changed[i] is not None else None
        changed[i] = edited
    new_objects = [o for o in changed if o is not None]
    problems = Problems()
    new_project = build_project([Document(o, "cluster.json", i + 1) for i, o in enumerate(new_objects)], problems)
    if problems.errors:
        return  # an edit the API would refuse: not a change diff is asked about
    check_exact(old_project, new_project, seed)


def test_no_change_is_no_change() -> None:
    project = project_of(generate(60, seed=3).objects())
    result = diff(project.policy_set, project.policy_set, project.inventory)
    assert result.changes == [] and result.judged == 0


def test_tier_order_change_is_exact() -> None:
    cluster = generate(40, seed=5)
    objects = cluster.objects()
    old_project = project_of(objects)
    edited = [copy.deepcopy(o) for o in objects]
    for o in edited:
        if o["kind"] == "Tier":
            o["spec"]["order"] = 2_000_000  # after the default tier
    result = check_exact(old_project, project_of(edited), 5)
    assert not result.whole and result.changes  # the tier's policies now come after the default tier's


# --- the command line --------------------------------------------------------------------------

DEMO = "examples/demo"
CHANGE = "examples/changes/db-behind-pgbouncer.yaml"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_apply_reports_and_exits_5() -> None:
    r = run("diff", DEMO, "--apply", CHANGE)
    assert r.exit_code == 5, r.output
    assert "TCP 5432: allowed → denied, by the end of tier default" in r.output
    assert "TCP 6432: denied → allowed, by NetworkPolicy/backend/allow-api-to-db rule 0" in r.output


def test_cli_json_contract() -> None:
    r = run("diff", DEMO, "--apply", CHANGE, "--json")
    assert r.exit_code == 5
    doc = json.loads(r.output)
    assert doc["changed"] is True
    assert doc["policies_changed"] == ["NetworkPolicy/backend/allow-api-to-db", "NetworkPolicy/frontend/web-egress"]
    closed = next(c for c in doc["changes"] if c["flows"][0]["ports"] == [[5432, 5432]])
    assert closed["from"]["endpoints"] == ["backend/api"] and closed["to"]["endpoints"] == ["backend/db"]
    assert closed["was"]["verdict"] == "allow" and closed["now"]["verdict"] == "deny"
    assert closed["now"]["ingress"]["reason"] == "end-of-tier"
    assert closed["was"]["ingress"] == {
        "verdict": "allow",
        "tier": "default",
        "policy": "NetworkPolicy/backend/allow-api-to-db",
        "rule": 0,
        "reason": "rule",
        "logs": [],
    }
    assert doc["summary"]["opened"] == 1 and doc["summary"]["closed"] == doc["summary"]["changes"] - 1


def test_cli_against_same_exits_0(tmp_path) -> None:
    r = run("diff", DEMO, "--against", DEMO)
    assert r.exit_code == 0, r.output
    assert "0 changes in reachability" in r.output


def test_cli_against_policy_only(tmp_path) -> None:
    # NEW holds policy only: judged over OLD's inventory.
    policy = tmp_path / "new"
    policy.mkdir()
    for name in ("20-networkpolicies.yaml", "30-adminnetworkpolicies.yaml"):
        (policy / name).write_text(open(f"{DEMO}/{name}").read())
    calico = open(f"{DEMO}/40-calico.yaml").read().split("\n---\n")
    (policy / "40-calico.yaml").write_text(
        "\n---\n".join(d for d in calico if "kind: GlobalNetworkSet" not in d and "kind: HostEndpoint" not in d)
    )
    r = run("diff", DEMO, "--against", str(policy), "--json")
    assert r.exit_code == 0, r.output


def test_cli_inventories_must_agree(tmp_path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for f in (
        "00-namespaces.yaml",
        "15-cluster.yaml",
        "20-networkpolicies.yaml",
        "30-adminnetworkpolicies.yaml",
        "40-calico.yaml",
    ):
        (other / f).write_text(open(f"{DEMO}/{f}").read())
    (other / "10-pods.yaml").write_text(open(f"{DEMO}/10-pods.yaml").read().replace("10.0.1.10", "10.0.1.11"))
    r = run("diff", DEMO, "--against", str(other))
    assert r.exit_code == 1
    assert "different inventories" in r.output and "frontend/web" in r.output


@pytest.mark.parametrize(
    "args,message",
    [
        ((DEMO,), "--against NEW... (a whole policy set) or --apply FILE"),
        ((DEMO, "--against"), "--against needs the new policy set"),
        ((DEMO, "--against", DEMO, "--apply", CHANGE), "one of them"),
        ((DEMO, "--against", DEMO, "--against", DEMO), "--against is given twice"),
        ((DEMO, "--bogus", "--against", DEMO), "no such option"),
    ],
)
def test_cli_usage_errors(args, message) -> None:
    r = run("diff", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_cli_apply_refuses_inventory() -> None:
    r = run("diff", DEMO, "--apply", f"{DEMO}/10-pods.yaml")
    assert r.exit_code == 1
    assert "--apply takes policy objects" in r.output


def test_cli_invalid_new_side(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: x\n  namespace: backend\n"
        "spec:\n  podSelector: {}\n  policyTypes: [Sideways]\n"
    )
    r = run("diff", DEMO, "--apply", str(bad))
    assert r.exit_code == 1
    assert "bad.yaml:8" in r.output


def test_cli_says_icmp_alone_where_no_rule_names_an_icmp_type() -> None:
    """The demo names no ICMP type: a closed flow covers every ICMP type, not "other types"."""
    r = run("diff", DEMO, "--apply", CHANGE)
    assert r.exit_code == 5, r.output
    assert "ICMP;" in r.output and "other types" not in r.output


def test_cli_end_of_tier_names_the_isolating_policies() -> None:
    r = run("diff", DEMO, "--apply", CHANGE)
    assert "(deny: isolated by NetworkPolicy/backend/" in r.output, r.output
    doc = json.loads(run("diff", DEMO, "--apply", CHANGE, "--json").output)
    closed = next(c for c in doc["changes"] if c["flows"][0]["ports"] == [[5432, 5432]])
    assert closed["now"]["ingress"]["policies"]
