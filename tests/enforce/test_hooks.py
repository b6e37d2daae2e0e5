"""Which host endpoint interfaces the daemon judges by their forward hook (``forward_endpoints``),
and which early hooks a project needs (``early_hooks``), on manifests alone (no root needed)."""

from __future__ import annotations

from pathlib import Path

from pyclassify.enforce.hooks import early_hooks, forward_endpoints, forward_json
from pyclassify.ir import Hook
from pyclassify.project import load_project


def hep(name: str, node: str, spec: str) -> str:
    return (
        f"apiVersion: projectcalico.org/v3\nkind: HostEndpoint\n"
        f"metadata: {{name: {name}, labels: {{edge: 'true'}}}}\nspec: {{node: {node}, {spec}}}\n"
    )


HEPS = "---\n".join(
    [
        hep("b-eth1", "node1", "interfaceName: eth1"),
        hep("a-eth1", "node1", "interfaceName: eth1"),
        hep("auto", "node1", "interfaceName: '*'"),
        hep("other-node", "node2", "interfaceName: eth9"),
        hep("by-address", "node1", "expectedIPs: [192.0.2.1]"),
    ]
)


POLICY = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: p}
spec:
  selector: edge == 'true'
  applyOnForward: FORWARD
  preDNAT: PRE_DNAT
  types: [Ingress]
  ingress: [{action: Allow}]
"""


def project(tmp_path: Path, forward: bool, pre_dnat: bool = False):
    policy = POLICY.replace("FORWARD", str(forward).lower()).replace("PRE_DNAT", str(pre_dnat).lower())
    (tmp_path / "heps.yaml").write_text(HEPS + "---" + policy)
    p = load_project([str(tmp_path)])
    assert not p.problems.errors, p.problems.errors
    p.inventory.enforcing_node = "node1"  # enforce --node node1
    return p


def test_interfaces_of_this_node_judged_by_their_forward_hook(tmp_path: Path) -> None:
    got = forward_endpoints(project(tmp_path, forward=True))
    # one endpoint per interface (the first by name), '*' too; another node's and one without an
    # interface are not this node's to judge on FORWARD
    assert {iface: e.name for iface, e in got.items()} == {"*": "auto", "eth1": "a-eth1"}
    assert forward_json((("eth1", 3, 4),)) == {"eth1": {"in": 3, "out": 4}}


def test_no_apply_on_forward_policy_no_forward_hook(tmp_path: Path) -> None:
    assert forward_endpoints(project(tmp_path, forward=False)) == {}


def test_early_hooks_a_project_needs(tmp_path: Path) -> None:
    assert early_hooks(project(tmp_path, forward=True)) == []
    assert early_hooks(project(tmp_path, forward=True, pre_dnat=True)) == [Hook.PRE_DNAT]
