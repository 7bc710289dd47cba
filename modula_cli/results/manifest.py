"""A sweep folder's ``sweep.json``: every run its launches planned (with their knobs), and per launch a
``LaunchRecord``: when it started, its runs, those finished before it, its jobs with their runs, and what its
launcher had to say. Several launches (and processes) share one folder: writers take ``SWEEP_LOCK`` and
write atomically; readers take a missing, corrupt or foreign file as an empty manifest."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from filelock import FileLock

from ..plumbing import atomic
from .files import MANIFEST_FILE, MULTIRUN_FILE, SUMMARY_FILE, SWEEP_LOCK, read_json
from .knobs import SERIES_KEYS, swept_axes
from .status import COUNTED, FINISHED, PENDING, RUNNING, SKIPPED
from .summary import Summary, as_seen, read_summary

Jobs = Sequence[tuple[Sequence[str], Sequence[str]]]  # per job: its overrides and the runs it trains


@dataclass(frozen=True)
class JobRuns:
    """One job of a launch: its overrides, the run folders it trains and, once submitted to a scheduler, its id
    there ("213_0": what ``modula-sweep-status`` and a relaunch ask the scheduler about)."""
    overrides: tuple[str, ...]
    runs: tuple[str, ...]
    job_id: str | None = None


@dataclass(frozen=True)
class LaunchRecord:
    """What one launch planned, as ``sweep.json`` records it (an unknown launch: nothing, started now)."""
    id: str
    started: float
    runs: tuple[str, ...] = ()
    finished_before: tuple[str, ...] = ()
    jobs: tuple[JobRuns, ...] = ()
    search: bool = False           # its runs are known round by round: the time left is the round's
    axes: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()    # what its launcher said for the closing lines (why its jobs were cancelled)
    scheduler: str | None = None   # where its jobs were submitted ("slurm"), once they were
    asked_by: str | None = None    # the Jobs class that can be asked about them later ("module:Class"), if any
    detached: bool = False         # its launching process submitted and left (sweep.detach=true)
    reported: bool = False         # the report after its last run was written (by whichever follower saw it)

    @classmethod
    def from_json(cls, launch_id: str, raw: Any) -> LaunchRecord:
        raw = raw if isinstance(raw, dict) else {}
        jobs = tuple(JobRuns(tuple(job.get("overrides", ())), tuple(job.get("runs", ())),
                             job["job_id"] if isinstance(job.get("job_id"), str) else None)
                     for job in raw.get("jobs", ()) if isinstance(job, dict))
        started = raw.get("started")
        return cls(launch_id, float(started) if isinstance(started, (int, float)) else time.time(),
                   tuple(raw.get("runs", ())), tuple(raw.get("finished_before", ())), jobs, bool(raw.get("search")),
                   tuple(raw["axes"]) if isinstance(raw.get("axes"), list) else None, tuple(raw.get("notes", ())),
                   raw["scheduler"] if isinstance(raw.get("scheduler"), str) else None,
                   raw["asked_by"] if isinstance(raw.get("asked_by"), str) else None, raw.get("detached") is True,
                   raw.get("reported") is True)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"started": self.started, "runs": sorted(self.runs),
                                "finished_before": sorted(self.finished_before),
                                "jobs": [{"overrides": list(job.overrides), "runs": list(job.runs),
                                          **({"job_id": job.job_id} if job.job_id else {})} for job in self.jobs]}
        if self.axes is not None:
            body["axes"] = list(self.axes)
        if self.search:
            body["search"] = True
        if self.notes:
            body["notes"] = list(self.notes)
        for key in ("scheduler", "asked_by", "detached", "reported"):
            if getattr(self, key):
                body[key] = getattr(self, key)
        return body

    @property
    def to_train(self) -> int:
        """The runs this launch trains: its planned ones less those finished before it."""
        return len(self.runs) - len(self.finished_before)

    def runs_of(self, overrides: Sequence[str]) -> tuple[str, ...] | None:
        """The runs of the job with these overrides, as planned (None: the launch did not plan that job)."""
        return next((job.runs for job in self.jobs if job.overrides == tuple(overrides)), None)

    def summaries(self, sweep_dir: Path, names: Sequence[str] | None = None) -> dict[str, Summary | None]:
        """Each planned run's summary (``names``: these only) as a reader takes it (``as_seen``; ``None``: not
        started, or unreadable: the trainer warns, once)."""
        return {name: as_seen(sweep_dir / name, read_summary(sweep_dir / name, warn=False))
                for name in (self.runs if names is None else names)}

    def status(self, name: str, summary: Summary | None) -> str:
        """A run's status as this launch sees it: finished before the launch, or by another process since it
        started, is ``skipped``; anything else an earlier launch left (a run ``sweep.rerun=true`` will retrain,
        a failed run to retry) is ``pending`` until this launch gets to it."""
        if summary is None:
            return PENDING
        if summary.get("launch") == self.id:
            return summary["status"]
        if name in self.finished_before:
            return SKIPPED
        if float(summary.get("written_at") or 0) >= self.started:  # another process, during this launch
            return SKIPPED if summary["status"] in FINISHED else summary["status"]
        return PENDING

    def counts(self, summaries: dict[str, Summary | None]) -> dict[str, int]:
        """How the planned runs stand, each by ``status``."""
        counts = dict.fromkeys((*COUNTED, PENDING, RUNNING), 0)
        for name, summary in summaries.items():
            counts[self.status(name, summary)] += 1
        return counts


@dataclass
class Manifest:
    """``sweep.json``: the knobs of every planned run, and each launch's record."""
    runs: dict[str, dict] = field(default_factory=dict)
    launches: dict[str, dict] = field(default_factory=dict)  # as on disk: a newer writer's fields survive

    @classmethod
    def read(cls, sweep_dir: Path) -> Manifest:
        body = read_json(sweep_dir / MANIFEST_FILE, "its planned runs are ignored (finished runs still count)")
        if not isinstance(body, dict) or not isinstance(body.get("runs"), dict):
            return cls()
        launches = body.get("launches")
        return cls(body["runs"], launches if isinstance(launches, dict) else {})

    def launch(self, launch_id: str) -> LaunchRecord:
        return LaunchRecord.from_json(launch_id, self.launches.get(launch_id))

    def put(self, record: LaunchRecord) -> None:
        self.launches[record.id] = {**self.launches.get(record.id, {}), **record.to_json()}

    def write(self, sweep_dir: Path) -> None:
        atomic.write_text(sweep_dir / MANIFEST_FILE, json.dumps({"runs": self.runs, "launches": self.launches},
                                                                indent=1))

    @classmethod
    @contextmanager
    def updating(cls, sweep_dir: Path) -> Iterator[Manifest]:
        """The manifest read and written back under the sweep folder's lock (several launches share it)."""
        with FileLock(str(sweep_dir / SWEEP_LOCK)):
            manifest = cls.read(sweep_dir)
            yield manifest
            manifest.write(sweep_dir)


def read_launch(sweep_dir: Path, launch_id: str) -> LaunchRecord:
    return Manifest.read(sweep_dir).launch(launch_id)


def _jobs(jobs: Jobs) -> tuple[JobRuns, ...]:
    return tuple(JobRuns(tuple(job), tuple(sorted(names))) for job, names in jobs)


def record_launch(sweep_dir: Path, launch_id: str, runs: dict[str, dict], finished_before: Sequence[str] = (),
                  jobs: Jobs = ()) -> None:
    """Add a launch's planned runs to ``sweep.json`` (several launches may share one sweep folder), with the
    ones that had finished before it (skipped, not counted in its progress) and, per job, its overrides and
    the runs it trains (so that a launcher can follow jobs on other machines by their run folders)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with Manifest.updating(sweep_dir) as manifest:
        manifest.runs.update(runs)
        manifest.launches.pop(launch_id, None)
        manifest.put(LaunchRecord(launch_id, time.time(), tuple(runs), tuple(finished_before), _jobs(jobs),
                                  axes=tuple(swept_axes(runs))))


def add_to_launch(sweep_dir: Path, launch_id: str, runs: dict[str, dict], jobs: Jobs) -> None:
    """Add a batch's runs and jobs to a launch already recorded (an LR search plans batch by batch)."""
    with Manifest.updating(sweep_dir) as manifest:
        manifest.runs.update(runs)
        record = manifest.launch(launch_id)
        names = tuple(sorted({*record.runs, *runs}))
        axes = swept_axes({name: manifest.runs[name] for name in names if name in manifest.runs})
        manifest.put(LaunchRecord(record.id, record.started, names, record.finished_before,
                                  record.jobs + _jobs(jobs), True, tuple(axes), record.notes))


def record_submission(sweep_dir: Path, launch_id: str, scheduler: str, job_ids: dict[tuple[str, ...], str],
                      detached: bool, asked_by: str | None = None) -> None:
    """The scheduler's id of each submitted job (by its overrides), so that ``modula-sweep-status`` and a
    relaunch can ask the scheduler about them after the launching process is gone (``asked_by``: its ``Jobs``
    class, ``module:Class``)."""
    with Manifest.updating(sweep_dir) as manifest:
        record = manifest.launch(launch_id)
        jobs = tuple(JobRuns(job.overrides, job.runs, job_ids.get(job.overrides, job.job_id)) for job in record.jobs)
        manifest.put(LaunchRecord(**{**vars(record), "jobs": jobs, "scheduler": scheduler, "asked_by": asked_by,
                                     "detached": record.detached or detached}))


def mark_reported(sweep_dir: Path, launch_id: str) -> bool:
    """Record that the report after this launch's last run is written; False when another process did first."""
    with Manifest.updating(sweep_dir) as manifest:
        record = manifest.launch(launch_id)
        if record.reported:
            return False
        manifest.put(LaunchRecord(**{**vars(record), "reported": True}))
        return True


def add_note(sweep_dir: Path, launch_id: str, note: str) -> None:
    """What a launcher has to say before the launch's closing line (why it cancelled the jobs)."""
    with Manifest.updating(sweep_dir) as manifest:
        record = manifest.launch(launch_id)
        manifest.put(LaunchRecord(**{**vars(record), "notes": (*record.notes, note)}))


def forget_launch(sweep_dir: Path, launch_id: str) -> None:
    """Take back a launch that submitted nothing (its submission was refused): its planned runs leave
    ``sweep.json`` unless another launch plans them or they have a folder; an emptied sweep folder goes."""
    with FileLock(str(sweep_dir / SWEEP_LOCK)):
        manifest = Manifest.read(sweep_dir)
        if manifest.launches.pop(launch_id, None) is None:
            return
        kept = {name for launch in manifest.launches for name in manifest.launch(launch).runs}
        manifest.runs = {name: knobs for name, knobs in manifest.runs.items()
                         if name in kept or (sweep_dir / name).is_dir()}
        if manifest.launches or manifest.runs:
            manifest.write(sweep_dir)
        else:
            (sweep_dir / MANIFEST_FILE).unlink(missing_ok=True)
    (sweep_dir / SWEEP_LOCK).unlink(missing_ok=True)
    if {p.name for p in sweep_dir.iterdir()} <= {MULTIRUN_FILE}:  # Hydra's record of this launch alone
        (sweep_dir / MULTIRUN_FILE).unlink(missing_ok=True)
    atomic.remove_if_empty(sweep_dir)


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
    for name, knobs in Manifest.read(sweep_dir).runs.items():
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
