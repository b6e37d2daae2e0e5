"""The Calico selector language (and Kubernetes LabelSelectors), from the Rust engine.

The language lives once, in Rust (``rust/core/src/selector``); this module is its public face.

>>> s = Selector("a == 'b' && has(c)")
>>> s.canonical
'(a == "b" && has(c))'
>>> s.matches({"a": "b", "c": "1"})
True
"""

from __future__ import annotations

from pyclassify._engine import (
    MAX_DEPTH,
    MAX_LABEL_LEN,
    MAX_SELECTOR_LEN,
    LabelRestriction,
    Selector,
    SelectorError,
    tokenize,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_LABEL_LEN",
    "MAX_SELECTOR_LEN",
    "LabelRestriction",
    "Selector",
    "SelectorError",
    "parse_labels",
    "tokenize",
]


def parse_labels(text: str) -> dict[str, str]:
    """Reads ``k=v,k2=v2`` (the CLI's ``--labels``); an empty string is no labels."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels
