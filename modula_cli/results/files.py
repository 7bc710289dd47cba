"""The names of the files a sweep folder holds, one constant each, and the tolerant JSON reader every format
here shares: any file may be missing, corrupt, foreign, or half written by another process."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"   # in a run folder: how the run stands (``summary.Summary``)
MANIFEST_FILE = "sweep.json"    # in a sweep folder: every launch's planned runs (``manifest.Manifest``)
SEARCH_FILE = "search.json"     # in a sweep folder: an LR search's rounds and each scale's state
SWEEP_LOCK = ".sweep.lock"      # serialises writers of the sweep folder's shared files (manifest, report)
STOP_MARKER = ".stop"           # + ".<launch>": a launch's jobs stop when it appears (``stop_marker``)
RESULTS_FILE = "results.csv"    # the report's table of every run


def stop_marker(sweep_dir: Path, launch: str | None) -> Path:
    """The file that tells a launch's jobs to stop: one per launch, so that a stopped launch never stops
    another launch into the same folder."""
    return sweep_dir / f"{STOP_MARKER}.{launch or 'none'}"


def read_json(path: Path, what: str, warn: bool = True) -> Any:
    """Parsed JSON, ``None`` when missing; a warning naming the file and ``what`` follows when it cannot be
    read."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        if warn:
            log.warning("%s is corrupt (%s: %s); %s", path, type(error).__name__, str(error)[:80], what)
        return None
