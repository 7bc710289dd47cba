"""Results on disk, in one place: the status vocabulary, the run summary (``summary.json``), the sweep
manifest (``sweep.json``) and the sweep table built from them.

Every file here is written atomically. Every file here is read as possibly corrupt, foreign or half
written by another process: such a summary means "not finished" (a warning names the file, and the run
is trained again), never a crash. Each summary records its own knob values, so nothing parses folder
names.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict

import pandas as pd
from filelock import FileLock
from omegaconf import OmegaConf

from ..config.identity import experiment_settings
from ..models.variant import HISTORICAL as HISTORICAL_VARIANT
from ..models.variant import name_of as variant_name_of
from ..plumbing import atomic
from ..plumbing.locks import HOST, held_here, holding, is_held, owner_of

log = logging.getLogger(__name__)

# --- status vocabulary ----------------------------------------------------------------------------------
COMPLETED, DIVERGED, FAILED = "completed", "diverged", "failed"
INTERRUPTED = "interrupted"  # stopped by a signal after a checkpoint: a relaunch resumes it
RUNNING = "running"          # started and not ended (or its process was killed): a relaunch resumes it
PENDING = "pending"          # planned by a launch, not started
SKIPPED = "skipped"          # finished before this launch (or by another process): counted, not retrained
STATUSES = (COMPLETED, DIVERGED, FAILED, INTERRUPTED, RUNNING, PENDING)
FINISHED = (COMPLETED, DIVERGED)
COUNTED = (COMPLETED, SKIPPED, DIVERGED, FAILED, INTERRUPTED)  # the closing line of a launch

# --- schema ------------------------------------------------------------------------------------------------
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "sweep.json"
SCHEMA_VERSION = 2
SERIES = ("arch", "data", "optimizer", "mode", "variant")
# A series of the report: one experiment. ``setting`` names what sets it apart from other experiments of the
# same arch, data, optimiser and mode in one folder ("steps=100"; "" when there is no other).
GROUP = (*SERIES, "setting")
# Each knob of a sweep table and where a run's config holds it.
KNOB_KEYS = {"width": "arch.width", "depth": "arch.depth", "block_depth": "arch.block_depth",
             "blocks_mass": "arch.blocks_mass", "heads": "arch.heads", "context": "data.context",
             "batch_size": "train.batch_size", "steps": "train.steps", "wd": "optim.wd"}
KNOBS = tuple(KNOB_KEYS)
# The axes a transfer plot can scale along, in the order the report looks for one that varies.
SCALE_KNOBS = ("width", "depth", "blocks_mass", "context", "batch_size", "steps", "wd")
COLUMNS = ("run", *SERIES, *KNOBS, "lr", "seed", "status", "train_loss", "test_loss", "test_acc", "steps_done",
           "wall_time_s", "packed_with", "error", "settings")
NUMERIC = ("lr", "seed", "train_loss", "test_loss", "test_acc", "steps_done", "wall_time_s", "packed_with", *KNOBS)


# --- a run's summary, and what training it came to ------------------------------------------------------

BUSY = "busy"      # another process is training the run (train(wait=False)): nothing was done here
PACKED = "packed"  # the status of a packed run as a whole: its members have their own


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


def knobs_of(cfg: Any, lr: float, seed: int) -> dict[str, Any]:
    """The values a sweep table is indexed by, read from one run's composed config."""
    record: dict[str, Any] = {"arch": cfg.arch.name, "data": cfg.data.name, "optimizer": cfg.optim.name,
                              "mode": cfg.optim.mode, "variant": variant_name_of(cfg)}
    for knob, key in KNOB_KEYS.items():
        value = OmegaConf.select(cfg, key)
        if value is not None:
            record[knob] = value
    return {**record, "lr": float(lr), "seed": int(seed), "settings": experiment_settings(cfg)}


def summary_record(status: str, run_dir: Path, knobs: dict, fingerprint: str, **fields: Any) -> Summary:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; allowed: {', '.join(STATUSES)}")
    return {"schema": SCHEMA_VERSION, "status": status, "run": run_dir.name, **knobs, **fields,
            "fingerprint": fingerprint, "written_at": time.time()}


def write_summary(run_dir: Path, summary: Summary) -> None:
    atomic.write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str))


def _read_json(path: Path, what: str, warn: bool = True) -> Any:
    """Parsed JSON, ``None`` when missing; a warning naming the file when it cannot be read."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        if warn:
            log.warning("%s is corrupt (%s: %s); %s", path, type(error).__name__, str(error)[:80], what)
        return None


def read_summary(run_dir: Path, warn: bool = True) -> Summary | None:
    """The run's summary, or ``None`` when it has none or an unreadable one (which counts as not finished;
    ``warn`` says so, naming the file, for the readers that act on it)."""
    path = run_dir / SUMMARY_FILE
    summary = _read_json(path, "the run counts as not finished and is trained again", warn)
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


def mark_abandoned(run_dir: Path, why: str = ABANDONED, job: str | None = None) -> Summary | None:
    """Record an abandoned run as ``interrupted`` at the step of its last checkpoint, saying ``why``. On this
    host the lock decides (under it, so that a trainer starting now is never overwritten); ``job``: a cluster
    job the scheduler says has ended, which settles the run it held on any node. The new summary, or None
    when the run was not abandoned."""
    with holding(run_dir) as held:
        summary = read_summary(run_dir, warn=False)
        if summary is None or summary["status"] != RUNNING:
            return None
        owner = owner_of(run_dir) or {}
        by_lock = held and held_here(run_dir)
        by_scheduler = job is not None and owner.get("job") == job and owner.get("host") != HOST
        if not (by_lock or by_scheduler):
            return None
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


# --- the sweep manifest: which runs each launch planned, with their knobs -------------------------------

def read_manifest(sweep_dir: Path) -> dict[str, Any]:
    manifest = _read_json(sweep_dir / MANIFEST_FILE, "its planned runs are ignored (finished runs still count)")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("runs"), dict):
        return {"runs": {}, "launches": {}}
    manifest.setdefault("launches", {})
    return manifest


def record_launch(sweep_dir: Path, launch_id: str, runs: dict[str, dict], finished_before: Sequence[str] = (),
                  jobs: Sequence[tuple[Sequence[str], Sequence[str]]] = ()) -> None:
    """Add a launch's planned runs to ``sweep.json`` (several launches may share one sweep folder), with the
    ones that had finished before it (skipped, not counted in its progress) and, per job, its overrides and
    the runs it trains (so that a launcher can follow jobs on other machines by their run folders)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(sweep_dir / ".sweep.lock")):
        manifest = read_manifest(sweep_dir)
        manifest["runs"].update(runs)
        manifest["launches"][launch_id] = {"started": time.time(), "runs": sorted(runs),
                                           "finished_before": sorted(finished_before), "axes": swept_axes(runs),
                                           "jobs": [{"overrides": list(job), "runs": sorted(names)}
                                                    for job, names in jobs]}
        atomic.write_text(sweep_dir / MANIFEST_FILE, json.dumps(manifest, indent=1))


def add_to_launch(sweep_dir: Path, launch_id: str, runs: dict[str, dict],
                  jobs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> None:
    """Add a batch's runs and jobs to a launch already recorded (an LR search plans batch by batch)."""
    with FileLock(str(sweep_dir / ".sweep.lock")):
        manifest = read_manifest(sweep_dir)
        manifest["runs"].update(runs)
        launch = manifest["launches"].setdefault(launch_id, {"started": time.time(), "runs": [], "finished_before": [],
                                                             "jobs": []})
        launch["runs"] = sorted({*launch.get("runs", []), *runs})
        launch["jobs"] = [*launch.get("jobs", []), *({"overrides": list(job), "runs": sorted(names)}
                                                     for job, names in jobs)]
        launch["axes"] = swept_axes({name: manifest["runs"][name] for name in launch["runs"]
                                     if name in manifest["runs"]})
        launch["search"] = True  # its runs are known round by round: the time left is the round's
        atomic.write_text(sweep_dir / MANIFEST_FILE, json.dumps(manifest, indent=1))


def forget_launch(sweep_dir: Path, launch_id: str) -> None:
    """Take back a launch that submitted nothing (its submission was refused): its planned runs leave
    ``sweep.json`` unless another launch plans them or they have a folder; an emptied sweep folder goes."""
    manifest_path = sweep_dir / MANIFEST_FILE
    with FileLock(str(sweep_dir / ".sweep.lock")):
        manifest = read_manifest(sweep_dir)
        if manifest["launches"].pop(launch_id, None) is None:
            return
        kept = {name for launch in manifest["launches"].values() for name in launch.get("runs", [])}
        manifest["runs"] = {name: knobs for name, knobs in manifest["runs"].items()
                            if name in kept or (sweep_dir / name).is_dir()}
        if manifest["launches"] or manifest["runs"]:
            atomic.write_text(manifest_path, json.dumps(manifest, indent=1))
        else:
            manifest_path.unlink(missing_ok=True)
    (sweep_dir / ".sweep.lock").unlink(missing_ok=True)
    if {p.name for p in sweep_dir.iterdir()} <= {"multirun.yaml"}:  # Hydra's record of this launch alone
        (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
    atomic.remove_if_empty(sweep_dir)


def swept_axes(runs: dict[str, dict]) -> list[str]:
    """The scale knobs a launch sweeps: those its planned runs take several values of."""
    return [knob for knob in SCALE_KNOBS
            if len({json.dumps(knobs.get(knob), default=str) for knobs in runs.values()}) > 1]


SERIES_KEYS = ("arch.name", "data.name", "optim.name", "optim.mode")  # settings that name a series, not an experiment


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


class FolderExperiments(NamedTuple):
    """What a sweep folder already holds besides a launch's planned runs (``other_experiments``)."""
    same: int                               # runs of the launch's own experiment (a launch adding seeds joins them)
    other: int                              # runs of other experiments
    apart: dict[str, tuple[list, Any]]      # per differing setting: (its values there, its value here)


def other_experiments(sweep_dir: Path, planned: dict[str, dict]) -> FolderExperiments:
    """The runs on disk in the sweep folder besides a launch's planned ones, told apart by experiment: the
    launch's own, or another, whose settings differ beyond what the launch sweeps (a preset run again with
    ``train.steps=150``). Other modes and optimisers are other series of one comparison, not other
    experiments."""
    def fixed(settings: dict[str, Any], ignored: set[str]) -> dict[str, str]:
        return {k: json.dumps(v, sort_keys=True, default=str) for k, v in settings.items() if k not in ignored}

    ours = [knobs["settings"] for knobs in planned.values() if isinstance(knobs.get("settings"), dict)]
    if not ours:
        return FolderExperiments(0, 0, {})
    keys = {key for settings in ours for key in settings}
    swept = {key for key in keys if len({json.dumps(s.get(key), default=str) for s in ours}) > 1}
    ignored = swept | set(SERIES_KEYS)
    here = [fixed(settings, ignored) for settings in ours]
    apart: dict[str, tuple[list, Any]] = {}
    same = other = 0
    for name, knobs in read_manifest(sweep_dir)["runs"].items():
        settings = knobs.get("settings")
        if name in planned or not isinstance(settings, dict) or not (sweep_dir / name / SUMMARY_FILE).is_file():
            continue
        there = fixed(settings, ignored)
        if there in here:
            same += 1
            continue
        other += 1
        for key in sorted(set(there) | set(here[0])):
            if there.get(key) != here[0].get(key):
                values = apart.setdefault(key, ([], ours[0].get(key)))[0]
                if settings.get(key) not in values:
                    values.append(settings.get(key))
                    values.sort(key=lambda v: (not isinstance(v, (int, float)), v if isinstance(v, (int, float))
                                               else str(v)))
    return FolderExperiments(same, other, apart)


def launch_record(sweep_dir: Path, launch_id: str, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a launch planned: ``{"started": time, "runs": [folder names], "finished_before": [folder names]}``
    (empty if unknown)."""
    manifest = manifest if manifest is not None else read_manifest(sweep_dir)
    record = manifest["launches"].get(launch_id, {})
    return {"started": record.get("started", time.time()), "runs": list(record.get("runs", [])),
            "finished_before": list(record.get("finished_before", [])), "jobs": list(record.get("jobs", [])),
            "search": bool(record.get("search"))}


def launch_summaries(sweep_dir: Path, runs: list[str]) -> dict[str, dict | None]:
    """Each planned run's summary as a reader takes it (``as_seen``; ``None``: not started, or unreadable:
    the trainer warns, once)."""
    return {name: as_seen(sweep_dir / name, read_summary(sweep_dir / name, warn=False)) for name in runs}


def launch_counts(sweep_dir: Path, launch_id: str, record: dict[str, Any] | None = None,
                  summaries: dict[str, dict | None] | None = None) -> dict[str, int]:
    """How this launch's planned runs stand (``record`` and ``summaries``: as already read, else read here),
    each by ``launch_status``."""
    record = record if record is not None else launch_record(sweep_dir, launch_id)
    if summaries is None:
        summaries = launch_summaries(sweep_dir, record["runs"])
    counts = dict.fromkeys((*COUNTED, PENDING, RUNNING), 0)
    for name, summary in summaries.items():
        counts[launch_status(name, summary, launch_id, record)] += 1
    return counts


def launch_status(name: str, summary: dict | None, launch_id: str, record: dict[str, Any]) -> str:
    """A run's status as this launch sees it: finished before the launch, or by another process since it
    started, is ``skipped``; anything else an earlier launch left (a run ``sweep.rerun=true`` will retrain, a
    failed run to retry) is ``pending`` until this launch gets to it."""
    if summary is None:
        return PENDING
    if summary.get("launch") == launch_id:
        return summary["status"]
    if name in record["finished_before"]:
        return SKIPPED
    if float(summary.get("written_at") or 0) >= record["started"]:  # another process, during this launch
        return SKIPPED if summary["status"] in FINISHED else summary["status"]
    return PENDING


# --- the sweep table -----------------------------------------------------------------------------------

def collect(sweep_dir: Path) -> pd.DataFrame:
    """One row per run: every folder with a summary, and every planned run without one (``pending``)."""
    manifest = read_manifest(sweep_dir)
    rows: dict[str, dict] = {}
    for folder in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        summary = as_seen(folder, read_summary(folder))
        if summary is not None:
            settings = summary.get("settings") or _settings_from_config(folder)
            rows[folder.name] = {**summary, "run": folder.name, "settings": settings}
    for name, knobs in manifest["runs"].items():
        if name not in rows:
            rows[name] = {**knobs, "run": name, "status": PENDING}
    frame = pd.DataFrame([{k: row.get(k) for k in COLUMNS} for row in rows.values()], columns=list(COLUMNS))
    # which knobs the launches swept (None: no launch recorded it; the report then infers the scale knob)
    launches = [launch for launch in manifest["launches"].values() if "axes" in launch]
    frame["axes"] = ",".join(sorted({axis for launch in launches for axis in launch["axes"]})) if launches else None
    frame["variant"] = frame["variant"].fillna(HISTORICAL_VARIANT)  # recorded by runs since variants exist
    for column in NUMERIC:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _settings_from_config(run_dir: Path) -> dict[str, Any] | None:
    """A summary written before summaries recorded their settings: read them from the run's config.yaml."""
    try:
        return experiment_settings(OmegaConf.load(run_dir / "config.yaml"))
    except Exception:  # noqa: BLE001 - missing or unreadable: the run's series is told by its knobs alone
        return None


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {status: int((frame["status"] == status).sum()) for status in STATUSES}
