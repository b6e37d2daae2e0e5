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
        key = key.strip()
        if key in labels:
            raise ValueError(f"label {key!r} is given twice ({key}={labels[key]} and {item}): give each key once")
        labels[key] = value.strip()
    return labels


#: How much of a long selector an error message shows around the problem (as ``pyclassify selector``).
EXCERPT_WIDTH = 80


def excerpt(text: str, position: int | None = None, width: int = EXCERPT_WIDTH) -> tuple[str, int | None]:
    """At most ``width`` characters of ``text`` around ``position`` (its start if None), with
    ``…`` where something was cut, and where ``position`` falls in what is shown (None if
    ``position`` is None). A hostile megabyte of selector is not echoed whole."""
    at = 0 if position is None else max(0, min(position, len(text)))
    start = max(0, at - width // 2) if len(text) > width else 0
    shown = text[start : start + width]
    prefix = "…" if start else ""
    suffix = "…" if start + width < len(text) else ""
    return prefix + shown + suffix, (None if position is None else len(prefix) + at - start)


def unencodable(text: str) -> str | None:
    """Why ``text`` cannot be handed to the engine as UTF-8 (a lone surrogate, as a JSON
    ``\\udcff`` escape or a non-UTF-8 command-line byte gives), or None if it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid UTF-8 text: {text[e.start]!r} at position {e.start} (a lone surrogate)"
    return None
