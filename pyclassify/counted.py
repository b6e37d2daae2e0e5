"""Counted nouns as the output says them: "1 policy", "2 policies", "0 packets".

Every line that counts things goes through ``count`` so that the noun agrees with its number.
"""

from __future__ import annotations

#: Nouns whose plural the rules below do not make.
_IRREGULAR = {"is": "are", "was": "were", "it": "they", "this": "these"}


def plural(noun: str) -> str:
    """The plural of ``noun`` (its last word): policy -> policies, address -> addresses, flow
    class -> flow classes, packet -> packets."""
    head, _, last = noun.rpartition(" ")
    lower = last.lower()
    if lower in _IRREGULAR:
        word = _IRREGULAR[lower]
    elif lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        word = last[:-1] + "ies"
    elif lower.endswith(("s", "x", "z", "ch", "sh")):
        word = last + "es"
    else:
        word = last + "s"
    return f"{head} {word}" if head else word


def count(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun`` in agreement: ``count(1, "policy")`` is "1 policy", ``count(2,
    "policy")`` "2 policies" (``many``: a plural the rules do not make)."""
    return f"{n} {noun if n == 1 else (many or plural(noun))}"
