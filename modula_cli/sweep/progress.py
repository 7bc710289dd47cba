"""What a launch says as it goes and when it ends: a line per job that trained (``[k of N]``, the counts so
far, the time left), then the runs that did not finish and the closing line with its exit code. Everything
comes from the sweep folder's files, whichever process or machine trained the runs."""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..plumbing.wording import counted
from ..results.files import RESULTS_FILE
from ..results.manifest import LaunchRecord, Manifest
from ..results.status import COMPLETED, COUNTED, DIVERGED, FAILED, FINISHED, INTERRUPTED, PENDING, RUNNING, SKIPPED
from ..results.summary import Outcome, Summary, best_lr
from ..plumbing.wording import duration_text
from .eta import time_left_range

log = logging.getLogger(__name__)
LISTED = 20  # unfinished runs named one by one when a launch ends; results.csv lists every run


def report_progress(sweep_dir: Path, launch: str, name: str, result: Outcome, ended: int | None = None,
                    summaries: dict[str, Summary | None] | None = None) -> None:
    """One line per job that trained: its outcome, "k of N" of the runs this launch trains (``ended``: k as
    the caller counted it, else the runs ended on disk), the counts so far, the time left (``summaries``: the
    launch's runs as already read). A job whose runs had all finished before the launch printed its skip line
    already."""
    if result.skipped:
        return
    manifest = Manifest.read(sweep_dir)
    record = manifest.launch(launch)
    summaries = summaries if summaries is not None else record.summaries(sweep_dir)
    counts = record.counts(summaries)
    ended = sum(counts[s] for s in COUNTED) - len(record.finished_before) if ended is None else ended
    left = launch_time_left(manifest.runs, summaries, record)
    round_only = " in this round" if record.search else ""  # a search's later rounds are not planned yet
    eta = "" if left is None else f" · about {duration_text(left[0])} left{round_only}"
    if left is not None and left[2] > left[1]:  # one size timed so far: how unsure the estimate is
        eta += f" ({duration_text(left[1])}–{duration_text(left[2])}: one size timed so far)"
    log.info("[%d of %d] %s: %s · so far %d completed, %d diverged, %d failed%s", ended, record.to_train, name,
             _outcome_text(result), counts[COMPLETED], counts[DIVERGED], counts[FAILED], eta)


def _outcome_text(result: Outcome) -> str:
    loss = result.train_loss
    outcome = result.status + (f", train loss {loss:.4f}" if isinstance(loss, float) else "")
    if result.packed:  # what its members came to, and the best one's loss with whose it is
        outcome = f"{counted(len(result.members), 'packed run')}: " + packed_outcome(result.members)
    if len(result.members) == 1 and result.members[0].get("ended"):  # a killed run: how its process ended
        outcome += f" ({result.members[0]['ended']})"
    resumed = {member.get("resumed_from") for member in result.members} - {None}
    if resumed and result.status != INTERRUPTED:
        outcome += f" (resumed from step {min(resumed)})"
    return outcome


def packed_outcome(members: Sequence[dict]) -> str:
    """``4 completed, 1 diverged; best lr 0.5: train loss 2.0510 (mean of 2 seeds)``: a packed job's members,
    and its best LR chosen as the report chooses it (the lowest mean over seeds of the completed runs)."""
    text = ", ".join(f"{count} {status}" for status, count in Counter(m.get("status", "?") for m in members).items())
    best = best_lr([(m.get("lr"), m.get("train_loss")) for m in members if m.get("status") == COMPLETED])
    if best is not None:
        lr, loss, seeds = best
        text += f"; best lr {lr:.4g}: train loss {loss:.4f}" + (f" (mean of {seeds} seeds)" if seeds > 1 else "")
    return text


def launch_time_left(planned: dict[str, dict], summaries: dict[str, Summary | None], record: LaunchRecord
              ) -> tuple[float, float, float] | None:
    """From the runs this launch trained (their sizes and times) to the runs it has not ended yet: the
    estimate and its range (``eta.time_left_range``)."""
    trained, remaining, starts = [], [], []
    for name, summary in summaries.items():
        status = record.status(name, summary)
        if status in FINISHED and summary.get("launch") == record.id and summary.get("wall_time_s"):
            # a packed run's time is shared by its members; a diverged run stopped early
            seconds = float(summary["wall_time_s"]) / max(1, int(summary.get("packed_with") or 1))
            trained.append(({**summary, "steps": summary.get("steps_done") or summary.get("steps")}, seconds))
            if isinstance(summary.get("written_at"), (int, float)):
                starts.append(summary["written_at"] - float(summary["wall_time_s"]))
        elif status in (PENDING, RUNNING, INTERRUPTED):
            remaining.append(planned.get(name, summary or {}))
    # the launch's pace since its first run began: its own start-up (the grid's check, the data, the first
    # job's set-up) is paid once; counted in the pace it made the first estimates 34-48 % too long
    elapsed = time.time() - max([record.started, min(starts)] if starts else [record.started])
    return time_left_range(trained, remaining, elapsed)


def unfinished_lines(sweep_dir: Path, record: LaunchRecord, summaries: dict[str, Summary | None]) -> list[str]:
    """One line per run of this launch that did not finish, with its state and the step a relaunch resumes
    from; at most LISTED of them: the interrupted first (they hold training to resume), then the failed, then
    those not started, each in the order of its folder name with numbers as numbers (width 32 before 128)."""
    lines: list[tuple[tuple, str]] = []
    for name, summary in summaries.items():
        status = record.status(name, summary)
        if status in (COMPLETED, DIVERGED, SKIPPED):
            continue
        rank = 2
        if status == PENDING:
            what = "not started"
        elif status == FAILED:
            error = str((summary or {}).get("error") or "see its summary.json").strip().splitlines()
            what, rank = f"failed: {error[0] if error else 'see its summary.json'}", 1
        else:
            rank = 0
            step = (summary or {}).get("steps_done")
            what = f"{status}" + (f" at step {step}" if step else " before its first checkpoint")
            if (summary or {}).get("ended"):
                what += f" ({summary['ended']})"
        lines.append(((rank, natural(name)), f"  {name}: {what}"))
    lines = [line for _, line in sorted(lines)]
    if len(lines) > LISTED:
        lines = lines[:LISTED] + [f"  … and {len(lines) - LISTED} more ({sweep_dir / RESULTS_FILE} lists every run)"]
    return lines


def natural(name: str) -> list:
    """A folder name's sort key with its numbers as numbers: ``width=32`` before ``width=128``."""
    return [(0, float(part), "") if re.fullmatch(r"\d+(\.\d+)?(e-?\d+)?", part) else (1, 0.0, part)
            for part in re.split(r"(\d+(?:\.\d+)?(?:e-?\d+)?)", name) if part]


def detached_closing(sweep_dir: Path, record: LaunchRecord) -> int:
    """The closing lines of a launch that submitted its jobs and leaves them running: how to follow them."""
    submitted = [job for job in record.jobs if job.job_id]
    runs = sum(len(job.runs) for job in submitted)
    jobs = {job.job_id for job in submitted}  # a job of several runs (runs_per_task) counts once
    arrays = sorted({job_id.split("_")[0] for job_id in jobs})
    follow = f"Follow them (and get the report once they end) with:\n  modula-sweep-status {sweep_dir}"
    if not submitted:
        print(f"sweep submitted nothing: its runs finished before or are held by an earlier launch's jobs. "
              f"{follow}", flush=True)
        return 0
    print(f"sweep submitted: {counted(runs, 'run')} in {counted(len(jobs), 'SLURM job')} "
          f"({'array' if len(arrays) == 1 else 'arrays'} {', '.join(arrays)}), training without this process. "
          f"{follow}", flush=True)
    return 0


def closing(sweep_dir: Path, record: LaunchRecord, summaries: dict[str, Summary | None], stopped: int | None
            ) -> int:
    """Print the unfinished runs, what the launcher noted, and the closing line; the exit code: 128 + signal
    after a stop, 1 when a run failed or did not finish, else 0."""
    counts = record.counts(summaries)
    line = (f"{counts[COMPLETED]} completed, {counts[SKIPPED]} skipped, {counts[DIVERGED]} diverged, "
            f"{counts[FAILED]} failed")
    unfinished = counts[INTERRUPTED] + counts[PENDING] + counts[RUNNING]
    if unfinished:
        line += f", {counts[INTERRUPTED]} interrupted, {counts[PENDING]} not started"
        if counts[RUNNING]:
            line += f", {counts[RUNNING]} still running elsewhere"
    listed = unfinished_lines(sweep_dir, record, summaries)
    if listed:
        print("not finished (the same command " + ("resumes or retries them" if counts[FAILED] else "resumes them")
              + "):", *listed, sep="\n", flush=True)
    for note in record.notes:
        print(note, flush=True)
    if stopped is not None:
        print(f"sweep stopped by signal {stopped}: {line}  ({sweep_dir}); run the same command to resume", flush=True)
        return 128 + stopped
    if unfinished:
        print(f"sweep incomplete: {line}  ({sweep_dir}); run the same command to resume", flush=True)
        return 1
    print(f"sweep finished: {line}  ({sweep_dir})", flush=True)
    return 1 if counts[FAILED] else 0
