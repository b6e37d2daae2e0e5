"""What the soak, flood and saturation runs measured, kept for bench/RELIABILITY.md: with
``PYCLASSIFY_RELIABILITY_DIR`` set (bench/reliability.py sets it), ``record(name, figures)``
writes ``<dir>/<name>.json``; otherwise it does nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "PYCLASSIFY_RELIABILITY_DIR"


def record(name: str, figures: dict[str, Any]) -> None:
    out = os.environ.get(ENV)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=1, default=str))
