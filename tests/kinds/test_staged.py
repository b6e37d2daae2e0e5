"""Calico's staged kinds: validated as their enforced kinds, kept out of the enforced set, and
judged in ``PolicySet.staged_view`` (the set as it would be with them enforced)."""

from __future__ import annotations

import ipaddress
import textwrap

from pyclassify.documents import Problems
from pyclassify.inventory import Endpoint, Inventory
from pyclassify.ir import PROTO_TCP, EndpointKind, PolicySet
from pyclassify.loader import load_text
from pyclassify.project import build_project
from pyclassify.reference import Flow, FlowEnd, evaluate
from tests.kinds.test_calico import normalize as normalize_text

ENFORCED = """\
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-in, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{port: 5432}]}]
"""


def normalize(text: str) -> tuple[list, list[str]]:
    out, problems = normalize_text(text)
    return out, [str(p) for p in problems.errors]


def project(text: str):
    problems = Problems()
    return build_project(load_text(textwrap.dedent(text), "t.yaml", problems), problems)


def verdict(pset: PolicySet, dst_labels: dict[str, str], dport: int) -> str:
    dst = Endpoint(EndpointKind.POD, "dst", "shop", dst_labels, (ipaddress.ip_address("10.0.0.2"),))
    src = Endpoint(EndpointKind.POD, "src", "shop", {"app": "client"}, (ipaddress.ip_address("10.0.0.3"),))
    flow = Flow(FlowEnd(src, src.ips[0]), FlowEnd(dst, dst.ips[0]), PROTO_TCP, 40000, dport)
    return evaluate(pset, Inventory(endpoints=[src, dst]), flow).verdict


def test_each_staged_kind_normalizes_as_its_enforced_kind():
    objs, errors = normalize("""\
        apiVersion: projectcalico.org/v3
        kind: StagedGlobalNetworkPolicy
        metadata: {name: g}
        spec: {stagedAction: Set, selector: all(), ingress: [{action: Deny}]}
        ---
        apiVersion: projectcalico.org/v3
        kind: StagedNetworkPolicy
        metadata: {name: n, namespace: shop}
        spec: {tier: default, selector: app == 'web', egress: [{action: Allow}]}
        ---
        apiVersion: projectcalico.org/v3
        kind: StagedKubernetesNetworkPolicy
        metadata: {name: k, namespace: shop}
        spec: {stagedAction: Learn, podSelector: {}, policyTypes: [Ingress]}
    """)
    assert errors == []
    assert [(p.kind, p.namespace, p.name, p.staged) for p in objs] == [
        ("StagedGlobalNetworkPolicy", None, "g", "Set"),
        ("StagedNetworkPolicy", "shop", "n", "Set"),  # Set is the default
        ("StagedKubernetesNetworkPolicy", "shop", "k", "Learn"),
    ]
    assert objs[0].ref == "StagedGlobalNetworkPolicy/g"
    assert len(objs[1].egress) == 1 and len(objs[0].ingress) == 1


def test_staged_policies_are_refused_as_their_enforced_kinds_are():
    _, errors = normalize("""\
        apiVersion: projectcalico.org/v3
        kind: StagedNetworkPolicy
        metadata: {name: n, namespace: shop}
        spec:
          stagedAction: Sett
          selector: app == 'web'
        ---
        apiVersion: projectcalico.org/v3
        kind: StagedGlobalNetworkPolicy
        metadata: {name: g}
        spec:
          ingress: [{action: Allow, protocol: TCP, bogus: 1}]
        ---
        apiVersion: projectcalico.org/v3
        kind: StagedKubernetesNetworkPolicy
        metadata: {name: k, namespace: shop}
        spec:
          stagedAction: Delete
          podSelector: {matchLabels: {app: db}}
    """)
    assert errors == [
        "t.yaml:5: spec.stagedAction: Unsupported value: 'Sett': supported values: "
        '"Set", "Delete", "Learn", "Ignore"',
        "t.yaml:12: spec.ingress[0].bogus: unknown field 'bogus'",
        "t.yaml:19: spec.podSelector: Spec fields should all be zero-value if stagedAction is Delete",
    ]


def test_a_staged_delete_names_its_policy_and_may_keep_its_tier():
    objs, errors = normalize("""\
        apiVersion: projectcalico.org/v3
        kind: StagedNetworkPolicy
        metadata: {name: web-in, namespace: shop}
        spec: {stagedAction: Delete, tier: default}
        ---
        apiVersion: projectcalico.org/v3
        kind: StagedNetworkPolicy
        metadata: {name: web-in, namespace: shop}
        spec: {stagedAction: Delete, selector: all()}
    """)
    assert errors == [
        "t.yaml:9: spec.selector: Spec fields, except Tier, should all be zero-value if stagedAction is Delete"
    ]
    assert [(p.name, p.staged, p.tier) for p in objs] == [("web-in", "Delete", "default")]


def test_staged_policies_are_never_in_force():
    p = project(
        ENFORCED
        + """\
---
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  selector: app == 'web'
  ingress: [{action: Deny}]
"""
    )
    assert not p.problems.errors
    assert [x.ref for x in p.policy_set.policies] == ["NetworkPolicy/shop/db-in", "NetworkPolicy/shop/web-in"]
    assert [x.ref for x in p.policy_set.staged] == ["StagedNetworkPolicy/shop/web-in"]
    assert verdict(p.policy_set, {"app": "web"}, 80) == "allow"


def test_the_staged_view_replaces_adds_and_deletes():
    p = project(
        ENFORCED
        + """\
---
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: web-in, namespace: shop}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [443]}}]
---
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: db-in, namespace: shop}
spec: {stagedAction: Delete}
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: deny-cache}
spec:
  selector: app == 'cache'
  types: [Ingress]
"""
    )
    assert not p.problems.errors
    real, view = p.policy_set, p.staged().policy_set
    assert [x.ref for x in view.policies] == ["StagedGlobalNetworkPolicy/deny-cache", "StagedNetworkPolicy/shop/web-in"]
    assert view.staged == ()
    # web: the staged policy takes the enforced one's place
    assert (verdict(real, {"app": "web"}, 80), verdict(view, {"app": "web"}, 80)) == ("allow", "deny")
    assert (verdict(real, {"app": "web"}, 443), verdict(view, {"app": "web"}, 443)) == ("deny", "allow")
    # db: its policy deleted, nothing isolates it
    assert (verdict(real, {"app": "db"}, 22), verdict(view, {"app": "db"}, 22)) == ("deny", "allow")
    # cache: a staged policy with no enforced counterpart joins the set
    assert (verdict(real, {"app": "cache"}, 80), verdict(view, {"app": "cache"}, 80)) == ("allow", "deny")


def test_nothing_staged_has_no_view():
    assert project(ENFORCED).staged() is None


def test_applying_a_change_keeps_what_is_staged():
    staged = """\
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: db-in, namespace: shop}
spec: {stagedAction: Delete}
"""
    p = project(ENFORCED + "---\n" + staged)
    changed = p.applied(project(ENFORCED.split("---")[0]))
    assert [x.ref for x in changed.policy_set.staged] == ["StagedKubernetesNetworkPolicy/shop/db-in"]
