"""An LR search's ``search.json``: its settings, each scale's state and every round, with the rounds and scales
of earlier launches into the same folder kept. Written by the search (``sweep/search.py``), read by the report
(``analysis/search_spend.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..plumbing import atomic
from .files import SEARCH_FILE


def read_search(sweep_dir: Path) -> dict[str, Any] | None:
    """``search.json``, or None when the sweep did not search (or the file is unreadable: the report then
    leaves the search's table out and says nothing false)."""
    try:
        body = json.loads((Path(sweep_dir) / SEARCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("scales"), dict) else None


def write_search(sweep_dir: Path, settings: dict[str, Any], scales: dict[str, dict], rounds: list[dict]) -> None:
    """This launch's ``scales`` and ``rounds`` into ``search.json``: the rounds of other launches are kept, and
    so are the scales of series that other launches searched into this folder (another mode, say)."""
    launches = {r.get("launch") for r in rounds}
    before = read_search(sweep_dir) or {}
    earlier = [r for r in before.get("rounds", []) if isinstance(r, dict) and r.get("launch") not in launches]
    rounds = earlier + rounds
    body = {"settings": settings, "scales": {**before.get("scales", {}), **scales}, "rounds": rounds,
            "planning_s": round(sum(float(r.get("planning_s") or 0) for r in rounds), 3),
            "launched_s": round(sum(float(r.get("launched_s") or 0) for r in rounds), 3)}
    atomic.write_text(sweep_dir / SEARCH_FILE, json.dumps(body, indent=1))
