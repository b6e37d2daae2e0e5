"""What the terminal can show: the symbols output uses (✓ ✗ — … →), or their ASCII spellings
where stdout's encoding cannot carry them (an ASCII or Latin-1 locale, ``PYTHONIOENCODING=ascii``)."""

from __future__ import annotations

import sys
from typing import Any


def ascii_only(stream: Any = None) -> bool:
    """Whether ``stream`` (stdout by default) cannot show the symbols the output uses (an
    ASCII or Latin-1 locale, ``PYTHONIOENCODING=ascii``): the output falls back to ASCII."""
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "✓✗—…→".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def symbol(fancy: str, plain: str) -> str:
    """``fancy`` where stdout can show it, ``plain`` (ASCII) where it cannot."""
    return plain if ascii_only() else fancy
