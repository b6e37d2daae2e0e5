"""Which known name a mistyped one probably meant, for the "did you mean ...?" of errors: the
same but for case, one edit away (insertion, deletion, substitution, swap of neighbours), or
close by ``difflib``'s measure."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def one_edit(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by one insertion, deletion, substitution or swap of two
    neighbouring characters."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i in range(len(short)) if short[i] != long[i]), len(short))
    return short[i:] == long[i + 1 :]


def suggestion(key: Any, known: Iterable[str]) -> str | None:
    """The known field ``key`` is most likely a mistake for: the same but for case, one edit
    away, or close by ``difflib``'s measure; None when nothing is close."""
    if not isinstance(key, str):
        return None
    known = sorted(known)
    lower = key.lower()
    for name in known:
        if name.lower() == lower:
            return name
    for name in known:
        if len(name) >= 3 and one_edit(key, name):
            return name
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return close[0] if close else None
