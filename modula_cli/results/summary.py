"""A run's ``summary.json``: what it is, how it is written (atomically) and read (as possibly corrupt, foreign
or half written: such a summary means "not finished", a warning names the file, and the run is trained again),
and what a run or a sweep job came to (``Outcome``)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ..plumbing import atomic
from ..plumbing.locks import HOST, held_here, holding, is_held, owner_of, silent_for
from ..plumbing.wording import duration_text
from .files import SUMMARY_FILE, read_json
from .status import FAILED, FINISHED, INTERRUPTED, PACKED, RUNNING, STATUSES

log = logging.getLogger(__name__)
SCHEMA_VERSION = 2


class Summary(TypedDict, total=False):
    """A run's ``summary.json`` (schema 2), as written by ``summary_record`` and read by ``read_summary``."""
    schema: int
    status: str                  # one of STATUSES
    run: str                     # the run folder's name
    arch: str                    # the series: arch, data, optimizer, mode, variant (``knobs_of``)
    data: str
    optimizer: str
    mode: str
    variant: str
    width: int                   # the knobs the config sets (KNOB_KEYS)
    depth: int
    block_depth: int
    blocks_mass: float
    heads: int
    context: int
    batch_size: int
    steps: int
    wd: float
    lr: float
    seed: int
    settings: dict[str, Any]     # every number-changing setting but lr and seed (``experiment_settings``)
    train_loss: float | None     # final: mean of the last arch.loss_window steps (completed runs)
    test_loss: float | None
    test_acc: float | None       # image data
    last_logged_train_loss: float | None
    steps_done: int
    wall_time_s: float
    throughput: float
    throughput_unit: str         # tokens/s or samples/s
    device: str
    world_size: int
    threads: int                 # the CPU threads it trained with (train.threads; a cluster job's CPUs)
    packed_with: int             # members trained together (1: a separate run)
    overrides: list[str]
    launch: str | None           # the sweep launch that trained it
    host: str                    # the host its last process trained on
    job: str | None              # the cluster job that process ran in ("slurm:12_3", "ray:<task id>")
    resumed_from: int            # the step its last process resumed from (absent: it started from step 0)
    ortho_dtype: str             # dualized mode's iteration dtype
    error: str                   # failed runs
    traceback: str
    ended: str                   # an interrupted run whose process was killed: how it ended (its job's state)
    fingerprint: str
    written_at: float
    skipped: bool                # in memory only: finished before, not trained again


@dataclass(frozen=True)
class Outcome:
    """What ``train`` (or a sweep job) came to: each member's summary (one for an unpacked run), or, when no
    run summary stands for it, the job's status (``BUSY``; in a sweep also pending, interrupted, failed)."""
    status: str
    members: tuple[Summary, ...] = ()
    packed: bool = False
    holder: str | None = None  # BUSY: the process that holds the run
    error: str | None = None   # a failed job's error

    @classmethod
    def of(cls, summaries: list[Summary], packed: bool) -> Outcome:
        return cls(PACKED if packed else summaries[0]["status"], tuple(summaries), packed)

    @property
    def summary(self) -> Summary:
        """An unpacked run's summary."""
        if self.packed or len(self.members) != 1:
            raise ValueError(f"a {self.status} outcome of {len(self.members)} members has no single summary")
        return self.members[0]

    @property
    def skipped(self) -> bool:
        """Every member had finished before (nothing was trained)."""
        return bool(self.members) and all(member.get("skipped") for member in self.members)

    @property
    def train_loss(self) -> float | None:
        return None if self.packed or len(self.members) != 1 else self.members[0].get("train_loss")


def summary_record(status: str, run_dir: Path, knobs: dict, fingerprint: str, **fields: Any) -> Summary:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; allowed: {', '.join(STATUSES)}")
    return {"schema": SCHEMA_VERSION, "status": status, "run": run_dir.name, **knobs, **fields,
            "fingerprint": fingerprint, "written_at": time.time()}


def write_summary(run_dir: Path, summary: Summary) -> None:
    atomic.write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str))


def read_summary(run_dir: Path, warn: bool = True) -> Summary | None:
    """The run's summary, or ``None`` when it has none or an unreadable one (which counts as not finished;
    ``warn`` says so, naming the file, for the readers that act on it)."""
    path = run_dir / SUMMARY_FILE
    summary = read_json(path, "the run counts as not finished and is trained again", warn)
    if summary is None:
        return None
    if not isinstance(summary, dict) or summary.get("status") not in STATUSES:
        if not warn:
            return None
        log.warning("%s is not a modula-sweep run summary (a JSON %s%s); the run counts as not finished and is "
                    "trained again", path, type(summary).__name__,
                    f" with status {summary.get('status')!r}" if isinstance(summary, dict) else "")
        return None
    return summary


def abandoned(run_dir: Path, summary: Summary | None) -> bool:
    """A summary that says ``running`` in a folder no live process holds: its trainer was killed (SIGKILL, out
    of memory) before it could write how it ended. Told only for a trainer on this host (where the lock probe
    is sure); one on another node is settled by its launch, which saw its job end (``mark_abandoned``)."""
    return bool(summary) and summary["status"] == RUNNING and held_here(run_dir) and not is_held(run_dir)


ABANDONED = "its process ended without a word (killed, out of memory, or its node died)"


def as_seen(run_dir: Path, summary: Summary | None) -> Summary | None:
    """The summary as a reader should take it: an abandoned ``running`` run is ``interrupted`` (a relaunch
    resumes it from its last checkpoint, the step its summary records)."""
    if abandoned(run_dir, summary):
        return {**summary, "status": INTERRUPTED, "ended": summary.get("ended") or ABANDONED}
    return summary


def mark_abandoned(run_dir: Path, why: str = ABANDONED, job: str | None = None,
                   lost_after_s: float | None = None) -> Summary | None:
    """Record an abandoned run as ``interrupted`` at the step of its last checkpoint, saying ``why``. On this
    host the lock decides (under it, so that a trainer starting now is never overwritten); ``job``: a cluster
    job the scheduler says has ended, which settles the run it held on any node; ``lost_after_s``: a holder on
    another host that has not renewed its lock for that long is gone (no scheduler to ask: a Ray or local
    launch whose launching process has left). The new summary, or None when the run was not abandoned."""
    with holding(run_dir) as held:
        summary = read_summary(run_dir, warn=False)
        if summary is None or summary["status"] != RUNNING:
            return None
        owner = owner_of(run_dir) or {}
        by_lock = held and held_here(run_dir)
        by_scheduler = job is not None and owner.get("job") == job and owner.get("host") != HOST
        silent = silent_for(run_dir) if lost_after_s is not None and owner.get("host") not in (None, HOST) else None
        by_silence = silent is not None and silent > lost_after_s
        if not (by_lock or by_scheduler or by_silence):
            return None
        if by_silence and not by_lock:
            why = (f"its trainer (pid {owner.get('pid')} on {owner.get('host')}) has not renewed its lock for "
                   f"{duration_text(silent)}, so {owner.get('host')} is taken for lost")
        settled: Summary = {**summary, "status": INTERRUPTED, "ended": why, "written_at": time.time()}
        write_summary(run_dir, settled)
        return settled


def record_failed_start(run_dir: Path, planned: dict[str, Any], error: str, launch: str | None) -> None:
    """A planned run whose job ended before the run started: ``failed``, with why (a relaunch retries it).
    ``planned``: its knobs and fingerprint, as ``sweep.json`` holds them."""
    knobs = {key: value for key, value in planned.items() if key != "fingerprint"}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(run_dir, summary_record(FAILED, run_dir, knobs, str(planned.get("fingerprint", "")), error=error,
                                          launch=launch))


def is_finished(summary: Summary | None, fingerprint: str) -> bool:
    """Finished, and by this very configuration (a changed config trains again)."""
    return bool(summary) and summary["status"] in FINISHED and summary.get("fingerprint") == fingerprint


def best_lr(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, int] | None:
    """Of (LR, loss) pairs (a packed run's members: LRs × seeds), the LR whose mean loss over its seeds is lowest,
    that mean and its number of seeds, as the report's best grid LR is chosen; None without a finite loss."""
    by_lr: dict[float, list[float]] = {}
    for lr, loss in pairs:
        if isinstance(loss, (int, float)) and math.isfinite(loss):
            by_lr.setdefault(float(lr), []).append(float(loss))
    if not by_lr:
        return None
    lr = min(by_lr, key=lambda key: sum(by_lr[key]) / len(by_lr[key]))
    return lr, sum(by_lr[lr]) / len(by_lr[lr]), len(by_lr[lr])
