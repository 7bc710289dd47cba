"""``modula-sweep-status FOLDER``: every launch into a sweep folder, as its files and its scheduler tell it, for
a launch whose process has left (``sweep.detach=true``, a closed laptop, a dropped SSH session).

Per launch: its runs by state, the word of the scheduler its launcher submitted to (``scheduler_of``, by the
``Jobs`` class ``sweep.json`` records) on each unfinished job (state, pending reason, node, how
often it was requeued), the time left. A run whose job the scheduler says has ended while its summary still
says ``running`` is settled as interrupted at its last checkpoint, as the launching process would have; so is a
run of a Ray or local launch whose trainer on another host has not renewed its lock for ``--lost-after``. Once
every run of every launch has ended, the report is written, once, by whichever follower sees the end first
(``sweep.json`` records it); ``--follow`` looks again until then.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..results.files import MANIFEST_FILE, MULTIRUN_FILE, TRANSFER_PLOT
from ..results.manifest import LaunchRecord, Manifest, mark_reported
from ..results.status import FINISHED, PENDING, RUNNING
from ..results.summary import Summary, mark_abandoned
from ..plumbing.locks import RENEW_S
from ..plumbing.wording import duration_text
from ..schedulers.jobs import JobWord
from ..schedulers.slurm_tasks import SlurmArray
from .progress import closing, launch_time_left

log = logging.getLogger(__name__)


# A run of a launch without scheduler ids whose trainer on another host has not renewed its lock for this long is
# lost with its host (a trainer renews it every plumbing.locks.RENEW_S): settled interrupted, resumable.
LOST_AFTER_S = 300.0
GONE = "no longer listed by its scheduler"  # a job ended so long ago that its scheduler has forgotten it


def word_of(words: dict[str, JobWord], job_id: str) -> JobWord:
    """The scheduler's word on a job; one it no longer lists has ended."""
    return words.get(job_id) or JobWord(False, GONE)


@dataclass(frozen=True)
class Scheduler:
    """A scheduler whose jobs outlive the launching process, as ``modula-sweep-status`` asks it about them."""
    job: str                                                # how it names a job: "SLURM job"
    ask: Callable[[list[str]], dict[str, JobWord]]          # each job's word, by id


def scheduler_of(record: LaunchRecord) -> Scheduler:
    """Who to ask about a launch's jobs: the ``Jobs`` class of the scheduler its launcher submitted them to, as
    ``sweep.json`` records it (``asked_by``; a launch recorded before that names SLURM by ``scheduler``). One not
    known here, or that cannot be asked, is shown by its ids and never settled on a guess."""
    jobs = (asked_by(record.asked_by) if record.asked_by else None) or \
        (SlurmArray if record.scheduler == SlurmArray.scheduler else None)
    if jobs is not None:
        return Scheduler(jobs.job_noun, jobs.ask)
    unknown = JobWord(True, f"{record.scheduler} cannot be asked from here")  # live: nothing settled on a guess
    return Scheduler(f"{record.scheduler} job", lambda ids: dict.fromkeys(ids, unknown))


def asked_by(path: str) -> Any:
    """The ``Jobs`` class at ``module:Class`` when it can be asked (``job_noun``, ``ask``); else None. Only a
    launcher's module (``modula_cli.…`` or a Hydra plugin's ``hydra_plugins.…``): sweep.json may be anyone's."""
    module, _, name = path.partition(":")
    if not module.startswith(("modula_cli.", "hydra_plugins.")):
        return None
    try:
        jobs = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        log.debug("%s: %s", path, error)
        return None
    return jobs if isinstance(getattr(jobs, "job_noun", None), str) and callable(getattr(jobs, "ask", None)) else None


def launch_ended(record: LaunchRecord, summaries: dict[str, Summary | None], words: dict[str, JobWord]) -> bool:
    """No run of the launch trains now and none of its jobs is still the scheduler's."""
    if any((summary or {}).get("status") == RUNNING for summary in summaries.values()):
        return False
    return not any(job.job_id and word_of(words, job.job_id).live for job in record.jobs)


def settle(sweep_dir: Path, record: LaunchRecord, summaries: dict[str, Summary | None],
           words: dict[str, JobWord], lost_after_s: float = LOST_AFTER_S) -> None:
    """A run left ``running`` by a job the scheduler says has ended: interrupted at its last checkpoint. A run
    of a launch without scheduler ids (local, Ray) is settled by its lock: where this host can tell, at once;
    on another host, once its trainer has not renewed the lock for ``lost_after_s`` (its host is lost)."""
    named = scheduler_of(record).job
    for job in record.jobs:
        word = words.get(job.job_id or "")
        if not job.job_id:
            for name in job.runs:
                if (summaries.get(name) or {}).get("status") == RUNNING and \
                        mark_abandoned(sweep_dir / name, lost_after_s=lost_after_s) is not None:
                    summaries.update(record.summaries(sweep_dir, [name]))
                    log.warning("%s: %s", name, (summaries.get(name) or {}).get("ended"))
            continue
        if word is not None and word.live:
            continue
        for name in job.runs:
            if (summaries.get(name) or {}).get("status") != RUNNING:
                continue
            ended = f"{named} {job.job_id}: {word_of(words, job.job_id).text}"
            if mark_abandoned(sweep_dir / name, ended, job=f"{record.scheduler}:{job.job_id}") is not None:
                summaries.update(record.summaries(sweep_dir, [name]))


def describe(manifest: Manifest, record: LaunchRecord, summaries: dict[str, Summary | None],
             words: dict[str, JobWord]) -> list[str]:
    """The launch's lines: a header with its counts, each unfinished job's runs and the scheduler's word."""
    counts = record.counts(summaries)
    arrays = sorted({job.job_id.split("_")[0] for job in record.jobs if job.job_id})
    named = scheduler_of(record).job
    where = f"{named} {', '.join(arrays)}" if arrays else "no scheduler ids (a local or Ray launch)"
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.started))
    shown = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
    lines = [f"launch {record.id} (started {started}, {'detached, ' if record.detached else ''}{where}): "
             f"{len(record.runs)} runs: {shown or 'none'}"]
    for job in record.jobs:
        states = [record.status(name, summaries.get(name)) for name in job.runs]
        if all(state in FINISHED for state in states):
            continue
        steps = [(summaries.get(name) or {}).get("steps_done") for name in job.runs]
        at = f" at step {max(s for s in steps if s)}" if any(steps) else ""
        said = f" — {named} {job.job_id}: {word_of(words, job.job_id).text}" if job.job_id else ""
        lines.append(f"  {', '.join(job.runs)}: {'/'.join(sorted(set(states)))}{at}{said}")
    left = launch_time_left(manifest.runs, summaries, record)
    if left is not None and (counts[PENDING] or counts[RUNNING]):
        lines.append(f"  about {duration_text(left[0])} left")
    return lines


def look(sweep_dir: Path, lost_after_s: float = LOST_AFTER_S) -> tuple[bool, LaunchRecord | None]:
    """Print every launch's state once (settling runs whose job ended, or whose trainer elsewhere has been
    silent for ``lost_after_s``); whether every launch has ended, and the latest launch."""
    manifest = Manifest.read(sweep_dir)
    records = sorted((manifest.launch(i) for i in manifest.launches), key=lambda r: r.started)
    by_scheduler: dict[tuple[str | None, str | None], list[LaunchRecord]] = {}
    for record in records:
        by_scheduler.setdefault((record.scheduler, record.asked_by), []).append(record)
    words: dict[str, JobWord] = {}
    for launches in by_scheduler.values():  # each launch's jobs asked of their own scheduler, once for all
        if ids := [job.job_id for record in launches for job in record.jobs if job.job_id]:
            words.update(scheduler_of(launches[0]).ask(ids))
    all_ended = True
    print(f"{sweep_dir}: {len(records)} launch{'es' if len(records) != 1 else ''}", flush=True)
    for record in records:
        summaries = record.summaries(sweep_dir)
        settle(sweep_dir, record, summaries, words, lost_after_s)
        print(*describe(manifest, record, summaries, words), sep="\n", flush=True)
        all_ended &= launch_ended(record, summaries, words)
    return all_ended, records[-1] if records else None


def report_once(sweep_dir: Path, record: LaunchRecord) -> None:
    """The report for the sweep's end, written by the first follower that sees it (``sweep.json`` says) with the
    launch's own settings (its metric, its target, its logger: Hydra's record of the launching command)."""
    from omegaconf import OmegaConf

    from .final_report import write_sweep_report

    if record.reported:
        print(f"report: written already ({sweep_dir / TRANSFER_PLOT})", flush=True)
        return
    try:
        config = OmegaConf.load(sweep_dir / MULTIRUN_FILE)
    except (OSError, ValueError) as error:  # a folder without Hydra's record: the report's defaults
        log.debug("%s: %s", MULTIRUN_FILE, error)
        config = OmegaConf.create({})
    config.setdefault("sweep", {})
    config.sweep.setdefault("metric", "train_loss")
    if write_sweep_report(config, sweep_dir):
        mark_reported(sweep_dir, record.id)
    else:
        print(f"write it again with: modula-sweep-report {sweep_dir}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``modula-sweep-status``: the exit code is the closing line's once every run has ended, else 0."""
    parser = argparse.ArgumentParser(prog="modula-sweep-status", description=(
        "Every launch into a sweep folder: its runs by state, the scheduler's word on each unfinished job, the "
        "time left; the report once every run has ended."))
    parser.add_argument("folder", help="a sweep folder (hydra.sweep.dir of a `modula-sweep -m` launch)")
    parser.add_argument("--follow", action="store_true",
                        help="look again every --poll seconds until every run has ended, then write the report")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between looks with --follow (default 30)")
    parser.add_argument("--lost-after", type=float, default=LOST_AFTER_S, metavar="SECONDS", help=(
        "a local or Ray launch's run whose trainer on another host has not renewed its lock for this long is lost "
        f"with its host: settled interrupted, resumable by the same command (default {LOST_AFTER_S:g})"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sweep_dir = Path(args.folder).expanduser().absolute()
    if args.poll <= 0:
        parser.error(f"--poll {args.poll:g}; allowed: a number of seconds > 0")
    if not args.lost_after > 2 * RENEW_S:  # a live trainer renews every RENEW_S: never take it for lost
        parser.error(f"--lost-after {args.lost_after:g}; allowed: more than {2 * RENEW_S:g} seconds (a trainer "
                     f"renews its lock every {RENEW_S:g})")
    if not (sweep_dir / MANIFEST_FILE).is_file() or not Manifest.read(sweep_dir).launches:
        print(f"modula-sweep-status: {sweep_dir} holds no sweep launch (no readable {MANIFEST_FILE}); give the "
              f"folder a `modula-sweep -m` launch wrote into (its hydra.sweep.dir)", file=sys.stderr)
        return 1
    while True:
        ended, latest = look(sweep_dir, args.lost_after)
        if ended or not args.follow:
            break
        time.sleep(args.poll)
    if not ended:
        print("not ended yet: look again later, or follow it with --follow", flush=True)
        return 0
    report_once(sweep_dir, latest)
    return closing(sweep_dir, latest, latest.summaries(sweep_dir), None)
