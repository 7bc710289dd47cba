"""Jobs on other machines (SLURM, Ray): how the launching process follows them to an honest end (what each job
takes from the launch: ``job_place.py``).

The truth about a run is its folder (``summary.json``, ``run.lock``, ``run.owner``); the truth about a job is
its scheduler. While the jobs run, the launching process polls both (``Follower``): it prints ``[k of N]`` as
jobs end, says now and then how the others wait, records a run whose job ended under it as interrupted at its
last checkpoint and the runs of a job that died before they started as failed, and on SIGTERM / Ctrl-C stops
every job (pending ones never start; training ones checkpoint) and waits for them. It returns one result per
job and never raises on what clusters do to jobs (cancelled, requeued, pre-empted, killed, a node lost):
each is a run state in the report and the closing lines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from ..config.identity import job_label, run_name
from ..plumbing.signals import STOP
from ..plumbing.wording import counted
from ..results.manifest import LaunchRecord, Manifest, add_note, read_launch, record_submission
from ..results.status import COMPLETED, DIVERGED, FAILED, PENDING, RUNNING, SKIPPED
from ..results.summary import Outcome, is_finished, mark_abandoned, record_failed_start
from ..schedulers.jobs import JobEnd, Jobs
from .job_place import launch_of
from .progress import report_progress

log = logging.getLogger(__name__)
WORD_EVERY_S = 60.0            # a line on how the jobs wait, when none has ended for this long
SETTLED = (COMPLETED, DIVERGED, FAILED)  # a run in one of these needs nothing more from its job


# --- following the jobs -----------------------------------------------------------------------------------

def runs_by_job(record: LaunchRecord, overrides: Sequence[Sequence[str]]) -> list[list[str]]:
    """The run folders of each job, as the launch planned them (one run named from its overrides when the
    plan does not list the job)."""
    return [list(record.runs_of(job) or [run_name(list(job))]) for job in overrides]


Adopt = Callable[[Sequence[str]], list[tuple[list[int], Jobs]]]


def run_unfinished(overrides: Sequence[Sequence[str]], sweep_dir: Path, launch: str,
                   submit: Callable[[list[int]], Jobs], poll_s: float, grace_s: float,
                   detach: bool = False, adopt: Adopt | None = None) -> list[JobReturn]:
    """Submit the jobs that have a run left to train (``submit`` gets their positions and returns them as
    ``Jobs``), follow them (unless ``detach``: their ids recorded, they are left to run), and return a result
    for every job: a job whose runs all finished before the launch is not sent to the cluster to find that out
    (nor any after a stop). Runs that an earlier launch's jobs still hold on the scheduler (``adopt`` finds
    them) are not submitted again: followed to their end first, or, when detaching, left to those jobs."""
    held = follow_earlier(sweep_dir, launch, adopt, poll_s, grace_s, detach) if adopt is not None else set()
    todo, results = unfinished_jobs(overrides, sweep_dir, launch, held)
    followed: list[JobReturn] = []
    if todo:
        jobs = submit(todo)
        if ids := jobs.scheduler_ids():
            asker = type(jobs)  # what modula-sweep-status asks about them once this process has gone
            record_submission(sweep_dir, launch, jobs.scheduler,
                              {tuple(overrides[i]): ids[k] for k, i in enumerate(todo)}, detach,
                              f"{asker.__module__}:{asker.__qualname__}" if hasattr(asker, "ask") else None)
        followed = [_completed(overrides[i], Outcome(PENDING)) for i in todo] if detach else \
            Follower(jobs, [overrides[i] for i in todo], sweep_dir, launch, poll_s, grace_s).follow()
    results.update(zip(todo, followed))
    return [results[i] for i in range(len(overrides))]


def unfinished_jobs(overrides: Sequence[Sequence[str]], sweep_dir: Path, launch: str, held: set[str] = frozenset()
                    ) -> tuple[list[int], dict[int, JobReturn]]:
    """The positions of the jobs that have a run left to train (none after a stop), and for every other job its
    result, read from its runs' summaries: a job whose runs all finished before the launch (or that ``held``, an
    earlier launch's jobs, train) is answered without sending it anywhere."""
    record = read_launch(sweep_dir, launch)
    runs = runs_by_job(record, overrides)
    before = set(record.finished_before) | held
    todo = [] if STOP.requested else [i for i, names in enumerate(runs) if not set(names) <= before]
    return todo, {i: _completed(job, _outcome(runs[i], record.summaries(sweep_dir, runs[i]), None, skipped=True))
                  for i, job in enumerate(overrides) if i not in todo}


class UnfinishedJobsOnly:
    """Any launcher, behind it only the jobs that have a run left to train: a job whose runs all finished before
    this launch is answered from its summaries instead of sent to a process, a cluster or this process only to
    find them finished (a relaunch of a finished sweep starts nothing). The SLURM and Ray launchers do the same
    themselves (``run_unfinished``); the sweeper puts every launcher behind this one."""

    def __init__(self, launcher: Any, config: DictConfig):
        self.launcher, self.config = launcher, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        sweep_dir, launch = Path(self.config.hydra.sweep.dir), launch_of(self.config)
        todo, results = unfinished_jobs(job_overrides, sweep_dir, launch)
        if todo:
            launched = self.launcher.launch([job_overrides[i] for i in todo], initial_job_idx=initial_job_idx)
            results.update(zip(todo, launched))
        return [results[i] for i in range(len(job_overrides))]


def follow_earlier(sweep_dir: Path, launch: str, adopt: Adopt, poll_s: float, grace_s: float, detach: bool
                   ) -> set[str]:
    """Earlier launches of this folder whose jobs the scheduler still holds (a detached launch, or one whose
    launching process died): followed to their end, or, when this launch detaches too, left to run. The runs
    this launch must not submit again: those held (detaching), or those finished by the end of the follow.
    (Not asked with sweep.rerun=true, which retrains what finished.)"""
    manifest = Manifest.read(sweep_dir)
    planned_here = set(manifest.launch(launch).runs)
    held: set[str] = set()
    for launch_id in sorted(manifest.launches, key=lambda i: manifest.launch(i).started):
        record = manifest.launch(launch_id)
        jobs = [job for job in record.jobs if job.job_id and set(job.runs) & planned_here]  # what this launch plans
        if launch_id == launch or not jobs:
            continue
        summaries = record.summaries(sweep_dir)

        def finished_there(name: str) -> bool:  # by that launch, of this very configuration (a failed run retries)
            summary = summaries.get(name) or {}
            return summary.get("launch") == launch_id and \
                is_finished(summary, (manifest.runs.get(name) or {}).get("fingerprint"))

        done = {name for job in jobs for name in job.runs if finished_there(name)}
        held |= done  # trained by that launch, maybe since this one planned: not sent again to find that out
        jobs = [job for job in jobs if not set(job.runs) <= done]
        if not jobs or STOP.requested:
            continue
        for positions, scheduled in adopt([job.job_id for job in jobs]):
            mine = [jobs[p] for p in positions]
            runs = sorted(name for job in mine for name in job.runs)
            arrays = ", ".join(sorted({job.job_id.split("_")[0] for job in mine}))
            if detach:
                log.info("launch %s's SLURM job %s still holds %s: not submitted again", launch_id, arrays,
                         counted(len(runs), "run"))
                held.update(runs)
                continue
            log.info("launch %s's SLURM job %s still holds %s: following it instead of submitting them again",
                     launch_id, arrays, counted(len(runs), "run"))
            Follower(scheduled, [job.overrides for job in mine], sweep_dir, launch_id, poll_s, grace_s).follow()
            summaries.update(record.summaries(sweep_dir, runs))
            held.update(name for name in runs if finished_there(name))
    return held


class Follower:
    """Follows one launch's jobs on their scheduler and its runs in their folders, to the end of every job
    (or of a stop's grace)."""

    def __init__(self, jobs: Jobs, overrides: Sequence[Sequence[str]], sweep_dir: Path, launch: str,
                 poll_s: float, grace_s: float):
        self.jobs, self.overrides, self.sweep_dir, self.launch = jobs, overrides, sweep_dir, launch
        self.poll_s, self.grace_s = poll_s, grace_s
        manifest = Manifest.read(sweep_dir)
        self.planned = manifest.runs
        self.record = manifest.launch(launch)
        self.runs = runs_by_job(self.record, overrides)
        self.before = set(self.record.finished_before)
        self.ended: dict[int, JobEnd] = {}
        self.told: set[int] = set()
        self.counted = 0          # the k of "[k of N]": runs of the jobs told so far
        self.stopping_since: float | None = None
        self.troubled = False     # a file problem was said (once)
        self.hosts: dict[str, str] = {}  # the host each run of this launch trains on, as its summary says

    def follow(self) -> list[JobReturn]:
        wake = threading.Event()
        try:
            with STOP.telling(lambda signum: wake.set()):  # a stop ends the wait at once
                self._poll_until_ended(wake)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, and leave nothing of the launch behind
            log.warning("not waiting any longer: cancelling what is left (%s)", self.jobs.waiting())
            self.jobs.cancel()
        return [self._result(i) for i in range(len(self.overrides))]

    def _poll_until_ended(self, wake: threading.Event) -> None:
        last_word = time.monotonic()
        while True:
            self.ended.update(self.jobs.poll())
            summaries = self.record.summaries(self.sweep_dir)  # once per poll
            self._tell_moves(summaries)
            if any([self._tell(i, summaries) for i in range(len(self.overrides)) if i not in self.told]):
                last_word = time.monotonic()
            if len(self.ended) == len(self.overrides) or not self._keep_waiting(summaries):
                return
            if time.monotonic() - last_word > WORD_EVERY_S:
                log.info("waiting for %d of %d jobs: %s", len(self.overrides) - len(self.ended),
                         len(self.overrides), self.jobs.waiting())
                last_word = time.monotonic()
            wake.wait(self.poll_s if self.stopping_since is None else min(self.poll_s, 1.0))  # a stop: soon
            wake.clear()

    def _tell_moves(self, summaries: dict[str, dict | None]) -> None:
        """Say where a job's runs went when it started again on another host (a lost node, a requeue)."""
        for index, names in enumerate(self.runs):
            moved, move = [], None
            for name in names:
                summary = summaries.get(name) or {}
                host = summary.get("host")
                if summary.get("launch") != self.launch or summary.get("status") != RUNNING or not host:
                    continue
                before, self.hosts[name] = self.hosts.get(name), host
                if before is not None and before != host:
                    moved.append(name)
                    move = (before, host, summary.get("resumed_from", 0))
            if move is not None:
                log.warning("%s moved from %s to %s, resuming from step %d: %s", self.jobs.name(index), *move,
                            ", ".join(moved))

    def _keep_waiting(self, summaries: dict[str, dict | None]) -> bool:
        """Stop the jobs on a stop (or when they can never start); False once a stop's grace is over."""
        now = time.monotonic()
        if self.stopping_since is None:
            if STOP.requested:
                left = sum(i not in self.ended and i not in self.told for i in range(len(self.overrides)))
                log.warning("stopping the sweep: its %d unfinished jobs end (pending ones never start, training "
                            "ones checkpoint first); waiting up to %.0f s", left, self.grace_s)
            elif why := self.jobs.never_starts():
                log.error("these jobs can never start: %s; cancelling them", why)
                add_note(self.sweep_dir, self.launch, f"the jobs were cancelled: {why}; change the request "
                                                      f"(hydra.launcher) or the partition, and run the command again")
            else:
                return True
            self.stopping_since = now
        if now - self.stopping_since > self.grace_s:
            log.warning("%d jobs had not ended %.0f s after the stop (%s); cancelling them", len(self.overrides) -
                        len(self.ended), self.grace_s, self.jobs.waiting())
            self.jobs.cancel()
            return False
        self.jobs.stop(self._training(summaries))
        return True

    def _training(self, summaries: dict[str, dict | None]) -> set[int]:
        return {i for i, names in enumerate(self.runs)
                if any((summaries.get(n) or {}).get("status") == RUNNING and (summaries.get(n) or {}).get("launch")
                       == self.launch for n in names)}

    def _tell(self, index: int, summaries: dict[str, dict | None]) -> bool:
        """Print a job's progress line once it has ended, or once all its runs have settled (its process may
        still be exiting). First: runs its job left ``running`` are interrupted at their checkpoint; the runs
        of a job that died before they started are failed. Whether it was told."""
        try:
            return self._tell_job(index, summaries)
        except OSError as error:  # a shared file system's hiccup: said once, tried again at the next poll
            if not self.troubled:
                log.warning("could not read or write the run folders (%s: %s); trying again", type(error).__name__,
                            error)
            self.troubled = True
            return False

    def _tell_job(self, index: int, summaries: dict[str, dict | None]) -> bool:
        names, end = self.runs[index], self.ended.get(index)
        if end is not None:
            for name in names:
                how = f"{self.jobs.name(index)}: {end.state}" + (f" ({end.error})" if end.error else "")
                if mark_abandoned(self.sweep_dir / name, how, job=self.jobs.owner(index)) is not None:
                    summaries.update(self.record.summaries(self.sweep_dir, [name]))
        statuses = [self.record.status(name, summaries.get(name)) for name in names]
        if end is None and not all(status in SETTLED for status in statuses):
            return False
        self.told.add(index)
        if all(status == PENDING for status in statuses):
            if end is None or end.cancelled or self.stopping_since is not None:
                return False  # never started: cancelled, or stopped before it could
            self._failed_start(index, end, names)
            summaries.update(self.record.summaries(self.sweep_dir, names))
        self.counted += sum(name not in self.before for name in names)
        outcome = Outcome(SKIPPED) if all(status == SKIPPED for status in statuses) else \
            _outcome(names, summaries, end)  # SKIPPED: trained by another launch meanwhile
        report_progress(self.sweep_dir, self.launch, job_label(list(self.overrides[index])), outcome, self.counted,
                        summaries)
        return True

    def _failed_start(self, index: int, end: JobEnd, names: list[str]) -> None:
        """A job that ended before its runs started (its node's environment, its setup, memory, a lost node):
        its runs are failed, saying how (a relaunch retries them)."""
        returned = end.returned.return_value if isinstance(end.returned, JobReturn) \
            and end.returned.status == JobStatus.COMPLETED else None
        if isinstance(returned, Outcome) and returned.error:  # refused on its node (e.g. no GPU there)
            why = f"{self.jobs.name(index)}: {returned.error}"
        elif end.returned is not None:  # it ran and returned, yet its runs left nothing where the launch looks
            why = f"{self.jobs.name(index)} finished, but its runs wrote nothing into {self.sweep_dir}"
        else:
            why = f"{self.jobs.name(index)} ended {end.state} before its runs started" + \
                (f": {end.error}" if end.error else "")
        why += f" (log: {end.log})" if end.log else ""
        log.error("%s", why)
        for name in names:
            record_failed_start(self.sweep_dir / name, self.planned.get(name, {}), why, self.launch)

    def _result(self, index: int) -> JobReturn:
        """A completed JobReturn whatever happened (Hydra's sweeper raises on a failed one): the job's Outcome."""
        end = self.ended.get(index)
        if end is not None and isinstance(end.returned, JobReturn) and end.returned.status == JobStatus.COMPLETED:
            return end.returned
        names = self.runs[index]
        return _completed(self.overrides[index], _outcome(names, self.record.summaries(self.sweep_dir, names), end))


def _outcome(names: list[str], summaries: dict[str, dict | None], end: JobEnd | None, skipped: bool = False
             ) -> Outcome:
    found = [{**summaries[name], "skipped": True} if skipped else summaries[name]
             for name in names if summaries.get(name) is not None]
    if len(found) == len(names):
        return Outcome.of(found, packed=len(names) > 1)
    if end is not None and end.error:
        return Outcome(FAILED, error=end.error)
    return Outcome(PENDING)


def _completed(job: Sequence[str], outcome: Outcome) -> JobReturn:
    result = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
    result.return_value = outcome
    return result
