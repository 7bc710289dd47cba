"""Jobs on other machines (SLURM, Ray): what each job carries from the launching process, and how the
launching process follows them to an honest end.

The truth about a run is its folder (``summary.json``, ``run.lock``); the truth about a job is its scheduler.
While the jobs run, the launching process polls both (``follow``): it prints ``[k of N]`` as jobs end, says
now and then how the others wait, records a run whose process died as interrupted at its last checkpoint,
and on SIGTERM / Ctrl-C stops every job (the scheduler cancels them; running ones checkpoint) and waits for
them. It returns one result per job and never raises on what clusters do to jobs (cancelled, requeued,
pre-empted, killed, a node lost): each is a run state in the report and the closing line.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hydra.core.utils import JobReturn, JobStatus

from ..config.identity import run_name
from ..data.storage import data_root
from ..plumbing.signals import STOP
from ..results.records import (COMPLETED, DIVERGED, FAILED, PENDING, Outcome, launch_record, launch_status,
                               launch_summaries, mark_abandoned)
from .launch import LAUNCH_ENV, _report_progress

log = logging.getLogger(__name__)
CWD_ENV = "MODULA_SWEEP_CWD"   # the launching process's working directory, for relative paths in a job's config
CPUS_ENV = "MODULA_JOB_CPUS"   # the CPUs a job was given, where its scheduler does not say (Ray's num_cpus)
WORD_EVERY_S = 60.0            # a line on how the jobs wait, when none has ended for this long
SETTLED = (COMPLETED, DIVERGED, FAILED)  # a run in one of these needs nothing more from its job


# --- what a job carries -------------------------------------------------------------------------------------

def job_environment() -> dict[str, str]:
    """What a job on another machine takes from the launching process: the launch id (its closing counts),
    the working directory (a relative ``data.root`` means the same there) and the data root, absolute."""
    env = {CWD_ENV: os.getcwd(), "MODULA_DATA": str(data_root(None).absolute())}
    if os.environ.get(LAUNCH_ENV):
        env[LAUNCH_ENV] = os.environ[LAUNCH_ENV]
    return env


def enter_job_environment(env: dict[str, str]) -> None:
    """In the job's process, before its config is composed: the launch's environment and working directory."""
    os.environ.update(env)
    cwd = env.get(CWD_ENV)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as error:
            raise RuntimeError(f"the launch's working directory {cwd} is not on {socket.gethostname()} ({error}): "
                               f"launch from a folder that every node mounts at the same path") from error


# --- following the jobs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobEnd:
    """How a job ended, as its scheduler tells it."""
    state: str               # "COMPLETED", "CANCELLED by 0", "FAILED, exit code 9:0", "finished", "cancelled"
    returned: Any = None     # the job's own JobReturn, when it delivered one
    error: str | None = None  # an error the job raised outside its runs


class Jobs(Protocol):
    """A launch's jobs on one scheduler, by position in the launch."""

    def poll(self) -> dict[int, JobEnd]:
        """The jobs that have ended (each may be reported again; the first report counts)."""

    def waiting(self) -> str:
        """How the others wait now: "2 running, 25 pending (Priority)"."""

    def never_starts(self) -> str | None:
        """Why the waiting jobs can never start, when no waiting helps."""

    def cancel(self) -> None:
        """Stop every job: pending ones never start, running ones checkpoint and end."""

    def name(self, index: int) -> str:
        """"SLURM job 12_3", "Ray task 3"."""


def runs_by_job(record: dict[str, Any], overrides: Sequence[Sequence[str]]) -> list[list[str]]:
    """The run folders of each job, as the launch planned them (one run named from its overrides when the
    plan does not list the job)."""
    planned = {tuple(job["overrides"]): job["runs"] for job in record.get("jobs", [])}
    return [list(planned.get(tuple(job), [run_name(list(job))])) for job in overrides]


def run_unfinished(overrides: Sequence[Sequence[str]], sweep_dir: Path, submit: Callable[[list[int]], Jobs],
                   poll_s: float, grace_s: float) -> list[JobReturn]:
    """Submit the jobs that have a run left to train (``submit`` gets their positions and returns them as
    ``Jobs``), follow them, and return a result for every job: a job whose runs all finished before the
    launch is not sent to the cluster to find that out."""
    record = launch_record(sweep_dir, os.environ.get(LAUNCH_ENV, ""))
    runs = runs_by_job(record, overrides)
    before = set(record["finished_before"])
    todo = [] if STOP.requested else [i for i, names in enumerate(runs) if not set(names) <= before]
    results = dict(zip(todo, follow(submit(todo), [overrides[i] for i in todo], sweep_dir, poll_s, grace_s)
                       if todo else []))
    for i, job in enumerate(overrides):
        if i not in results:
            finished = [{**summary, "skipped": True} for summary in launch_summaries(sweep_dir, runs[i]).values()
                        if summary is not None]
            results[i] = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
            results[i].return_value = Outcome.of(finished, packed=len(runs[i]) > 1) if finished else \
                Outcome(PENDING)
    return [results[i] for i in range(len(overrides))]


def follow(jobs: Jobs, overrides: Sequence[Sequence[str]], sweep_dir: Path, poll_s: float, grace_s: float
           ) -> list[JobReturn]:
    """Wait for every job, reporting as they end; on a stop, cancel them and wait up to ``grace_s`` for the
    running ones to checkpoint. Returns one completed JobReturn per job (its Outcome from the run folders)."""
    launch = os.environ.get(LAUNCH_ENV, "")
    record = launch_record(sweep_dir, launch)
    runs = runs_by_job(record, overrides)
    ended: dict[int, JobEnd] = {}
    told: set[int] = set()
    counted = _Counter(set(record["finished_before"]))
    wake = threading.Event()
    listener = lambda signum: wake.set()  # noqa: E731 - a stop ends the wait at once
    STOP.on_stop.append(listener)
    stopping_since: float | None = None
    last_word = time.monotonic()
    try:
        while True:
            for index, end in jobs.poll().items():
                ended.setdefault(index, end)
            for index, job in enumerate(overrides):
                if index not in told and _tell(jobs, index, job, runs[index], ended.get(index), sweep_dir, launch,
                                               record, counted):
                    told.add(index)
                    last_word = time.monotonic()
            if len(ended) == len(overrides):
                break
            now = time.monotonic()
            if stopping_since is None and STOP.requested:
                log.warning("stopping the sweep: its %d unfinished jobs are cancelled; running runs checkpoint "
                            "(waiting up to %.0f s for them)", len(overrides) - len(ended), grace_s)
                jobs.cancel()
                stopping_since = now
            elif stopping_since is None and (why := jobs.never_starts()):
                log.error("these jobs can never start: %s; cancelling them (change the request, or the "
                          "partition, and relaunch)", why)
                jobs.cancel()
                stopping_since = now
            elif stopping_since is not None and now - stopping_since > grace_s:
                log.warning("%d jobs have not ended %.0f s after the stop (%s); leaving them: they stop at their "
                            "next step, and a relaunch resumes them", len(overrides) - len(ended), grace_s,
                            jobs.waiting())
                break
            elif now - last_word > WORD_EVERY_S:
                log.info("waiting for %d of %d jobs: %s", len(overrides) - len(ended), len(overrides), jobs.waiting())
                last_word = now
            wake.wait(poll_s)
            wake.clear()
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting (the jobs were cancelled at the first)
        log.warning("not waiting any longer: %s", jobs.waiting())
    finally:
        STOP.on_stop.remove(listener)
    return [_job_return(job, runs[index], ended.get(index), sweep_dir) for index, job in enumerate(overrides)]


@dataclass
class _Counter:
    """The k of "[k of N]": runs of the jobs told so far (less those finished before the launch)."""
    before: set[str]
    runs: int = 0

    def add(self, names: list[str]) -> int:
        self.runs += sum(name not in self.before for name in names)
        return self.runs


def _tell(jobs: Jobs, index: int, job: Sequence[str], names: list[str], end: JobEnd | None, sweep_dir: Path,
          launch: str, record: dict[str, Any], counted: _Counter) -> bool:
    """Print a job's progress line once it has ended, or once all its runs have settled (its process may still
    be exiting); first record runs its dead process left ``running``. Whether it was told."""
    if end is not None:
        for name in names:
            mark_abandoned(sweep_dir / name, f"{jobs.name(index)}: {end.state}")
    summaries = launch_summaries(sweep_dir, names)
    statuses = [launch_status(name, summaries[name], launch, record) for name in names]
    if end is None and not all(status in SETTLED for status in statuses):
        return False
    if end is not None and end.error and not any(summaries.values()):
        log.error("%s (%s) failed before its runs started: %s", jobs.name(index), " ".join(job), end.error)
    if not all(status == PENDING for status in statuses):  # a job cancelled before it started has nothing to say
        _report_progress(sweep_dir, run_name(list(job)), _outcome(names, summaries, end), counted.add(names))
    return True


def _outcome(names: list[str], summaries: dict[str, dict | None], end: JobEnd | None) -> Outcome:
    found = [summaries[name] for name in names if summaries[name] is not None]
    if len(found) == len(names):
        return Outcome.of(found, packed=len(names) > 1)
    if end is not None and end.error:
        return Outcome(FAILED, error=end.error)
    return Outcome(PENDING)


def _job_return(job: Sequence[str], names: list[str], end: JobEnd | None, sweep_dir: Path) -> JobReturn:
    """A completed JobReturn whatever happened (Hydra's sweeper raises on a failed one): the job's Outcome."""
    returned = end.returned if end is not None else None
    if isinstance(returned, JobReturn) and returned.status == JobStatus.COMPLETED:
        return returned
    result = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
    result.return_value = _outcome(names, launch_summaries(sweep_dir, names), end)
    return result
