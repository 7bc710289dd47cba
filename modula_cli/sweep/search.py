"""``sweep.search=true``: an LR sweep that searches each scale's LRs (``lr_search``) instead of training the
whole grid, launched batch by batch through the configured Hydra launcher.

The sweep's axes split into the LR axis, the seeds, the scale axis and the rest (``search_space.py``); scales
are searched in order, a later one starting where the earlier ones put the optimum. Each round reads the
finished runs from their folders (by fingerprint, as a relaunch does), asks every series what its ready scales
train next and sends all of it out as one batch; series and scales that do not wait on each other go out
together. The search's record (``search.json``: per scale what it tried and why it
stopped, per round the planning time and the launcher's time) is written after every round, atomically.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..analysis.stats import signed
from ..plumbing import atomic
from ..plumbing.signals import STOP
from ..results.files import MULTIRUN_FILE
from ..results.manifest import add_to_launch
from ..results.search_file import write_search
from ..results.status import COMPLETED
from ..results.summary import is_finished, read_summary
from .grid import JobComposer, planned_runs
from .host import host_of
from .job_place import launch_of
from .lr_search import ScalePlan, plan_series
from .search_space import SearchSpace, Series, search_space

log = logging.getLogger(__name__)


# --- what has finished ------------------------------------------------------------------------------------

class RunBook:
    """The runs of every (series, scale, LR): their folders and fingerprints, composed as their jobs will be,
    and what each has finished with."""

    def __init__(self, space: SearchSpace, sweep_dir: Path, composer: Any, metric: str, launch: str | None,
                 rerun: bool):
        self.space, self.sweep_dir, self.composer = space, sweep_dir, composer
        self.metric, self.launch, self.rerun = metric, launch, rerun
        self.planned: dict[tuple[int, str, int], dict[str, dict]] = {}

    def runs(self, series: int, scale: str, k: int) -> dict[str, dict]:
        """{run folder: knobs with fingerprint} of one LR's seeds."""
        key = (series, scale, k)
        if key not in self.planned:
            runs: dict[str, dict] = {}
            for job in self.space.job_arguments(self.space.series[series], scale, [k]):
                runs.update(planned_runs(job, self.composer.compose(job)))
            self.planned[key] = runs
        return self.planned[key]

    def finished(self, name: str, knobs: dict) -> dict | None:
        """A run's summary if it has finished (by this configuration; under rerun, in this launch)."""
        summary = read_summary(self.sweep_dir / name, warn=False)
        if not is_finished(summary, knobs["fingerprint"]) or (self.rerun and summary.get("launch") != self.launch):
            return None
        return summary

    def unfinished_seeds(self, series: int, scale: str, k: int) -> tuple[str, ...]:
        """The seeds of one LR still to train (all of the sweep's seeds, in its order, when none finished)."""
        unfinished = {str(knobs["seed"]) for name, knobs in self.runs(series, scale, k).items()
                      if self.finished(name, knobs) is None}
        return tuple(seed for seed in self.space.seeds if seed in unfinished)

    def values(self, series: int, scale: str, k: int) -> list[float] | None:
        """The seeds' signed costs at one LR (+inf: diverged), or None until every seed has finished."""
        values = []
        for name, knobs in self.runs(series, scale, k).items():
            summary = self.finished(name, knobs)
            if summary is None:
                return None
            value = summary.get(self.metric)
            finite = summary["status"] == COMPLETED and isinstance(value, (int, float)) and math.isfinite(value)
            values.append(float(signed(value, self.metric)) if finite else math.inf)
        return values


class ScaleResults(Mapping[int, Sequence[float]]):
    """The finished LRs of one scale as the planner reads them, from the folders, once per round."""

    def __init__(self, book: RunBook, series: int, scale: str):
        self.book, self.series, self.scale = book, series, scale
        self.seen: dict[int, list[float] | None] = {}

    def _get(self, k: int) -> list[float] | None:
        if k not in self.seen:
            self.seen[k] = self.book.values(self.series, self.scale, k)
        return self.seen[k]

    def __contains__(self, k: object) -> bool:
        return isinstance(k, numbers.Integral) and self._get(int(k)) is not None

    def __getitem__(self, k: int) -> list[float]:
        values = self._get(k)
        if values is None:
            raise KeyError(k)
        return values

    def __iter__(self) -> Iterator[int]:
        return (k for k, v in self.seen.items() if v is not None)

    def __len__(self) -> int:
        return sum(v is not None for v in self.seen.values())


# --- the rounds -------------------------------------------------------------------------------------------

@dataclass
class Round:
    launch: str
    jobs: int
    runs: int
    planning_s: float
    launched_s: float = 0.0


@dataclass
class SearchRecord:
    """What ``search.json`` holds: the settings, each scale's state, each round's timing."""

    space: SearchSpace
    rounds: list[Round] = field(default_factory=list)
    scales: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocked: dict[tuple[int, str], str] = field(default_factory=dict)

    def note(self, series: Series, scale: str, plan: ScalePlan, book: RunBook, series_index: int) -> None:
        tried = sorted({*plan.step.tried, *(k for k in plan.step.run if book.values(series_index, scale, k))})
        lattice = self.space.lattice
        self.scales[f"{self.space.label(series)} | {scale}"] = {
            "series": self.space.label(series), "scale_key": self.space.scale_key, "scale": scale,
            "lrs": [lattice.lr(k) for k in tried], "runs": len(tried) * max(1, len(self.space.seeds)),
            "run_names": sorted(name for k in tried for name in book.runs(series_index, scale, k)),
            "grid_runs": self.space.grid_runs(), "grid_step": lattice.grid_step,
            "start_lr": None if plan.start is None else lattice.lr_between(plan.start),
            "state": ("waiting" if plan.waiting else "stopped" if plan.step.stop else "searching"),
            "stop": self.blocked.get((series_index, scale)) or plan.step.stop,
            "reason": "unfinished" if (series_index, scale) in self.blocked else plan.step.reason,
        }

    def write(self, sweep_dir: Path) -> None:
        """``search.json``, with the rounds of earlier launches into the folder kept."""
        settings, lattice = self.space.settings, self.space.lattice
        write_search(sweep_dir, {"grid": list(lattice.grid), "substeps": settings.per_grid,
                                 "resolution": settings.resolution, "budget": settings.budget,
                                 "low": None if settings.low is None else lattice.lr(settings.low),
                                 "high": None if settings.high is None else lattice.lr(settings.high),
                                 "seeds": list(self.space.seeds)},
                     self.scales, [vars(r) for r in self.rounds])


@dataclass
class Batch:
    """One round's jobs (each with its runs) and every run they train."""

    jobs: list[tuple[list[str], list[str]]] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)


class Search:
    """One launch's search: plans each round from the folder, records it, and never sends a run twice."""

    def __init__(self, config: DictConfig):
        self.space = search_space(config)
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.launch = launch_of(config)
        self.composer = JobComposer(config, devices_here=host_of(config.hydra.launcher).local)
        self.book = RunBook(self.space, self.sweep_dir, self.composer, config.sweep.metric, self.launch,
                            bool(config.sweep.rerun or config.train.rerun))
        self.record = SearchRecord(self.space)
        self.attempted: set[str] = set()  # the runs this launch has sent out

    def plan(self) -> Batch:
        """What every series trains next, from the runs finished now; each scale's state into the record. A
        scale whose next runs were sent out once in this launch and did not finish is not sent again."""
        batch = Batch()
        for index, series in enumerate(self.space.series):
            results = [ScaleResults(self.book, index, scale) for scale in series.scales]
            plans = plan_series(results, self.space.positions(), self.space.start, self.space.settings)
            for scale, plan in zip(series.scales, plans):
                todo = [k for k in plan.step.run if (index, scale) not in self.record.blocked]
                names = {name for k in todo for name in self.book.runs(index, scale, k)}
                if names & self.attempted:
                    self.record.blocked[(index, scale)] = ("runs did not finish in this launch (failed or "
                                                           "interrupted): the same command retries them")
                    todo = []
                self.record.note(series, scale, plan, self.book, index)
                # only the runs still to train: a pack of finished seeds would train them again
                groups: dict[tuple[str, ...], list[int]] = {}
                for k in todo:
                    groups.setdefault(self.book.unfinished_seeds(index, scale, k) if self.space.seeds else (),
                                      []).append(k)
                for seeds, ks in groups.items():
                    for job in self.space.job_arguments(series, scale, ks, seeds or None):
                        job_runs = planned_runs(job, self.composer.compose(job))
                        batch.jobs.append((job, sorted(job_runs)))
                        batch.runs.update(job_runs)
        return batch

    def rounds(self, launcher: Any) -> list[Any]:
        """Plan, record, launch, until nothing is left to send or a stop signal came; the record is written
        after every round and once more at the end (what the last round finished)."""
        returns: list[Any] = []
        next_job = 0
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        while not STOP.requested:
            began = time.perf_counter()
            batch = self.plan()
            if not batch.jobs:
                break
            add_to_launch(self.sweep_dir, self.launch, batch.runs, batch.jobs)
            self.attempted |= set(batch.runs)
            self.record.rounds.append(Round(self.launch, len(batch.jobs), len(batch.runs),
                                            round(time.perf_counter() - began, 3)))
            self.record.write(self.sweep_dir)
            log.info("LR search, round %d: %d run%s in %d job%s (%s)", len(self.record.rounds), len(batch.runs),
                     "s" if len(batch.runs) != 1 else "", len(batch.jobs), "s" if len(batch.jobs) != 1 else "",
                     _round_text(self.space, batch.jobs))
            launched = time.perf_counter()
            returns.append(launcher.launch([job for job, _ in batch.jobs], initial_job_idx=next_job))
            self.record.rounds[-1].launched_s = round(time.perf_counter() - launched, 3)
            next_job += len(batch.jobs)
        if STOP.requested:
            self.plan()  # the record only: nothing is launched after a stop
        self.record.write(self.sweep_dir)
        return returns


def search_sweep(sweeper: Any, config: DictConfig) -> list[Any]:
    """The sweeper's ``sweep`` under ``sweep.search=true``: rounds of plan → launch until every scale of every
    series has stopped, a stop signal came, or nothing more can train in this launch."""
    search = Search(config)
    search.sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(search.sweep_dir / MULTIRUN_FILE, OmegaConf.to_yaml(config))  # as Hydra's basic sweeper
    return search.rounds(sweeper.launcher)


def _round_text(space: SearchSpace, jobs: list[tuple[list[str], list[str]]]) -> str:
    scales = sorted({next((o.split("=", 1)[1] for o in job if o.startswith(f"{space.scale_key}=")), "")
                     for job, _ in jobs}, key=lambda v: (len(v), v))
    return f"{space.scale_key.split('.')[-1]} {', '.join(scales)}" if space.scale_key else "one scale"
