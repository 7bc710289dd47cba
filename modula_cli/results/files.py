"""The names of the files a run folder and a sweep folder hold, one constant each (the only place each is
spelled; tests/test_structure.py checks it), and the tolerant JSON reader every format here shares: any file
may be missing, corrupt, foreign, or half written by another process. A file that one room alone writes and
reads keeps its constant there: ``run.lock`` and ``run.owner`` in ``plumbing/locks.py``, ``checkpoint.pt`` in
``run/checkpoint.py``, ``layer_stats.jsonl`` in ``run/loggers.py``, the coordinate check's files in
``coord/check.py``, a prepared dataset's in ``data/storage.py``."""

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
CONFIG_FILE = "config.yaml"     # in a run folder: the run's (a member's) resolved config
METRICS_FILE = "metrics.jsonl"  # in a run folder: one record per logged step
TRUNKS_FOLDER = ".trunks"       # in a sweep folder: WSD stable phases its horizons branch from (run/branches.py)
MULTIRUN_FILE = "multirun.yaml" # in a sweep folder: Hydra's record of the launching command (Hydra names it)
# the report, in a sweep folder (or where --out says)
RESULTS_FILE = "results.csv"    # every run, one row each
CURVES_FILE = "curves.csv"      # the mean curve of each series and scale over LRs
OPTIMAL_FILE = "optimal_lr.csv" # per series and scale: the best LR and the fitted optimum with its interval
TRANSFER_FILE = "transfer.csv"  # the transfer table
LAW_FILE = "law.csv"            # the transfer law and its prediction at the target
SPEND_FILE = "search.csv"       # an LR search's spend against the grid
SCALE_FILE = "scale.csv"        # what scale.png draws
TRANSFER_PLOT = "transfer.png"
SCALE_PLOT = "scale.png"
REPORT_FILES = (RESULTS_FILE, CURVES_FILE, OPTIMAL_FILE, TRANSFER_FILE, LAW_FILE, TRANSFER_PLOT, SCALE_PLOT,
                SCALE_FILE)  # what every report writes, in the order its closing line lists them


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
