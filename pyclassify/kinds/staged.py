"""Calico's staged policies: StagedGlobalNetworkPolicy, StagedNetworkPolicy and
StagedKubernetesNetworkPolicy (``projectcalico.org/v3``).

A staged policy is its enforced kind's spec plus ``stagedAction``; it is validated exactly as
that kind (libcalico-go converts it to the enforced kind and validates that), and is never in
force. ``PolicySet.staged_view`` judges traffic as if it were: ``Set`` (the default), ``Learn``
and ``Ignore`` put it in place of the enforced policy of the same name (felix evaluates every
staged policy but ``Delete``), ``Delete`` removes that policy; a ``Delete`` carries no spec
fields but the tier.
"""

from __future__ import annotations

from dataclasses import replace

from pyclassify.documents import Document, Problems
from pyclassify.ir import STAGED_ACTIONS, STAGED_DELETE, TIER_DEFAULT, Policy, SourceRef, Subject
from pyclassify.kinds.calico import normalize_calico_np, normalize_gnp
from pyclassify.kinds.common import expect_dict
from pyclassify.kinds.networkpolicy import normalize_networkpolicy

_ACTION = "stagedAction"


def normalize_staged_gnp(doc: Document, problems: Problems) -> list[Policy]:
    return _staged(doc, problems, normalize_gnp, namespace=None, has_tier=True)


def normalize_staged_calico_np(doc: Document, problems: Problems) -> list[Policy]:
    return _staged(doc, problems, normalize_calico_np, namespace=doc.namespace or "default", has_tier=True)


def normalize_staged_knp(doc: Document, problems: Problems) -> list[Policy]:
    return _staged(doc, problems, normalize_networkpolicy, namespace=doc.namespace or "default", has_tier=False)


def _staged(doc: Document, problems: Problems, enforced, namespace: str | None, has_tier: bool) -> list[Policy]:
    spec = expect_dict(doc, problems, ("spec",), doc.obj.get("spec"))
    if spec is None:
        return []
    action = spec.get(_ACTION)
    if action is None or action == "":
        action = "Set"  # libcalico-go's default
    elif action not in STAGED_ACTIONS:
        supported = ", ".join(f'"{a}"' for a in STAGED_ACTIONS)
        problems.error(doc, ("spec", _ACTION), f"Unsupported value: {action!r}: supported values: {supported}")
        return []
    rest = {k: v for k, v in spec.items() if k != _ACTION}
    if action == STAGED_DELETE:
        return _delete(doc, problems, rest, namespace, has_tier)
    obj = {**doc.obj, "spec": rest}
    return [replace(p, kind=doc.kind, staged=action) for p in enforced(doc.with_object(obj), problems)]


def _delete(doc: Document, problems: Problems, spec: dict, namespace: str | None, has_tier: bool) -> list[Policy]:
    """A staged Delete names the enforced policy it would remove; nothing else may be set."""
    tier = spec.get("tier") if has_tier else None
    others = (
        [k for k, v in spec.items() if k != "tier" and v not in (None, "", [], {}, False, 0)]
        if has_tier
        else [k for k, v in spec.items() if v not in (None, "", [], {}, False, 0)]
    )
    if others:
        fields = "Spec fields, except Tier," if has_tier else "Spec fields"
        problems.error(doc, ("spec", others[0]), f"{fields} should all be zero-value if stagedAction is Delete")
    if not doc.name:
        problems.error(doc, ("metadata", "name"), "Required value: name is required")
    if others or not doc.name:
        return []
    if tier is not None and not isinstance(tier, str):
        problems.error(doc, ("spec", "tier"), f"invalid tier name {tier!r}")
        return []
    return [
        Policy(
            kind=doc.kind,
            namespace=namespace,
            name=doc.name,
            tier=tier or TIER_DEFAULT,
            order=None,
            subject=Subject(),
            types=frozenset(),
            source=SourceRef(doc.file, doc.line),
            staged=STAGED_DELETE,
        )
    ]
