"""Kinds and API versions a person may have mistyped: an unknown version of a kind this tool
reads (``networking.k8s.io/v2``: no bundled schema defines the kind in it), or a kind one edit
away from one it reads (``NetworkPolicys``). Both are errors ("did you mean ...?"), not
documents skipped without a word: skipping would drop policy silently. Kinds nobody registered
and that resemble nothing (ConfigMap, RoleBinding, ...) are still skipped.
"""

from __future__ import annotations

from functools import lru_cache

from pyclassify.kinds import INVENTORY_KINDS, POLICY_KINDS, api_group
from pyclassify.kinds.schema import schema_versions
from pyclassify.spelling import one_edit

_ADMISSION = ("containersecurity.tigera.io", "ContainerAdmissionPolicy")


@lru_cache(maxsize=1)
def _known() -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    pairs = frozenset(POLICY_KINDS) | INVENTORY_KINDS | {_ADMISSION}
    return pairs, frozenset(kind for _, kind in pairs)


def near_kind(kind: str) -> str | None:
    """The known kind ``kind`` is probably a typo of, or None (it is one, or resembles none)."""
    pairs, kinds = _known()
    if not kind or kind in kinds:
        return None
    for known in sorted(kinds):
        if kind.lower() == known.lower() or kind.lower() in (known.lower() + "s", known.lower() + "es"):
            return known
        if len(known) >= 6 and one_edit(kind, known):
            return known
    return None


@lru_cache(maxsize=1024)  # every document asks; a cluster has a few dozen pairs
def kind_problem(api_version: str, kind: str) -> tuple[str, str] | None:
    """``(field, message)`` when ``apiVersion``/``kind`` look like a mistake, else None."""
    pairs, _ = _known()
    group = api_version.rpartition("/")[0]
    folded = api_group(api_version)
    if (folded, kind) in pairs or (group, kind) in pairs:
        # The versions of a kind are those its bundled schemas define (pyclassify.kinds.schema).
        known = schema_versions(group, kind)
        if api_version not in known:
            wanted = ", ".join(known) or "no version of it in this group"
            return "apiVersion", f"unknown version {api_version!r} of {kind}: this tool reads {wanted}"
        return None
    guess = near_kind(kind)
    if guess is not None:
        groups = sorted({(g or "core") for g, k in pairs if k == guess})
        return "kind", f"unknown kind {kind!r}: did you mean {guess} ({', '.join(groups)})?"
    return None
