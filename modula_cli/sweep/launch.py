"""Sweeps: the grid validated before launch, one job per grid point, progress as runs finish, signals,
several processes sharing one sweep folder, and the report at the end of every multirun.

A launch records its planned runs in the sweep's ``sweep.json`` (with their knobs and, per job, the run
folders it trains), so progress, the closing counts and the report's pending rows all come from the files,
whichever launcher ran the jobs. The sweep folder is made absolute before any job starts, so jobs on other
machines or in other working directories (Ray workers) write where the launching process looks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import InterpolationResolutionError

from ..config.identity import short_keys
from ..config.members import sweep_member_dir
from ..config.overrides import OverrideError
from ..config.validate import ConfigError
from ..data import DataUnavailable, prepare_dataset
from ..models.variant import folder_suffix, variant_name, variant_of
from ..plumbing.signals import STOP, StopRequested
from ..plumbing.threads import configure_threads
from ..plumbing.wording import counted
from ..results.records import (BUSY, COMPLETED, COUNTED, DIVERGED, FAILED, FINISHED, INTERRUPTED, PENDING, RUNNING,
                               SKIPPED, Outcome, best_lr, is_finished, launch_counts, launch_record,
                               launch_status, launch_summaries, mark_abandoned, other_experiments, read_manifest,
                               read_summary, record_launch)
from ..run.loggers import duration_text
from ..run.trainer import train
from .eta import time_left_range
from .grid import JobComposer, grid_overrides, host_of, planned_runs
from .lr_search import SearchError
from .search import search_space

log = logging.getLogger(__name__)
LAUNCH_ENV = "MODULA_SWEEP_LAUNCH"  # the launch id, inherited by the jobs of every launcher
STOP_MARKER = ".stop"  # + ".<launch>": written into the sweep folder when the launching process gets a stop signal
LISTED = 20  # unfinished runs named one by one when a launch ends; results.csv lists every run
CLOSING_NOTES: list[str] = []  # what a launcher has to say before the closing line (why its jobs were cancelled)


def stop_marker(sweep_dir: Path, launch: str | None) -> Path:
    """The file that tells a launch's jobs to stop: one per launch, so that a stopped launch never stops
    another launch into the same folder."""
    return sweep_dir / f"{STOP_MARKER}.{launch or 'none'}"


# --- before launch: every job composed and checked, its runs planned --------------------------------------

@dataclass(frozen=True)
class Plan:
    """What a launch will train: every run folder with its knobs, and each job's overrides with its runs."""
    runs: dict[str, dict]
    jobs: list[tuple[list[str], list[str]]]


def validate_grid(config: DictConfig, prepare_data: bool = False, devices_here: bool = True) -> Plan:
    """Compose and check every job; return the plan, or raise one ConfigError listing every bad job.
    ``prepare_data``: also download or prepare once each dataset that a run still to train needs (offline: one
    line each; a finished sweep relaunched offline still reports). ``devices_here``: the jobs run on this
    machine, so ``train.device=cuda`` needs a GPU here (cluster jobs check their own node's).

    """
    composer = JobComposer(config, devices_here)
    problems: list[str] = []
    per_job: list[tuple[str, str]] = []  # (job, problem): one bad value repeats in every job it reaches
    planned: dict[str, dict] = {}
    jobs: list[tuple[list[str], list[str]]] = []
    needs: list[tuple[dict, set[str]]] = []  # each job's data group and the runs it trains
    folders: dict[str, str] = {}  # each variant's sweep-folder suffix: one launch, one variant
    grid = grid_overrides(config)
    for job in grid:
        try:
            job_cfg = composer.compose(job)
            variant = variant_of(job_cfg)
            folders.setdefault(folder_suffix(variant), variant_name(variant))
            runs = planned_runs(job, job_cfg)
            planned.update(runs)
            jobs.append((list(job), sorted(runs)))
            needs.append((OmegaConf.to_container(job_cfg.data, resolve=True), set(runs)))
        except ConfigError as error:
            per_job += [(" ".join(job), issue) for issue in error.problems]
        except OverrideError as error:
            per_job.append((" ".join(job), str(error)))
        except Exception as error:  # noqa: BLE001 - composition errors are problems to report too
            per_job.append((" ".join(job), str(error).splitlines()[0]))
    problems += grid_problems(per_job, len(grid))
    if len(folders) > 1:  # run folders do not name the variant: its sweep folder does
        problems.append(f"this launch sweeps {len(folders)} variants ({', '.join(sorted(folders.values()))}); each "
                        f"variant sweeps into a folder of its own: launch them one at a time")
    if not problems and prepare_data:
        done = finished_runs(config, planned)
        datasets = {json.dumps(data, sort_keys=True, default=str): data for data, runs in needs if runs - done}
        problems += _unavailable(list(datasets.values()))
    if problems:
        raise ConfigError(problems)
    return Plan(planned, jobs)


def grid_problems(per_job: list[tuple[str, str]], jobs: int) -> list[str]:
    """Each problem once, with the grid points it hits: ``train.steps='abc'; … (all 27 grid points)``; a problem
    of one grid point names it, ``[arch.width=128 optim.lr=4.0] …``; of several, how many and the first."""
    hit: dict[str, list[str]] = {}
    for job, problem in per_job:
        hit.setdefault(problem, []).append(job)
    lines = []
    for problem, where in hit.items():
        if len(where) == 1 and jobs > 1:
            lines.append(f"[{where[0]}] {problem}")
        elif len(where) == jobs:
            lines.append(problem + (f" (all {jobs} grid points)" if jobs > 1 else ""))
        else:
            lines.append(f"{problem} ({len(where)} of {jobs} grid points, e.g. [{where[0]}])")
    return lines


def another_experiment_line(sweep_dir: Path, planned: dict[str, dict]) -> str | None:
    """One line when the sweep folder already holds another experiment: how it differs and what that does to the
    report; when the folder holds none of this launch's own experiment, the folder that keeps it apart."""
    held = other_experiments(sweep_dir, planned)
    if not held.other:
        return None
    short = short_keys(list(held.apart))
    there = "; ".join(f"{short[key]}={', '.join(map(_setting_text, olds))} there, {_setting_text(new)} here"
                      for key, (olds, new) in held.apart.items())
    line = (f"{sweep_dir} already holds another experiment ({counted(held.other, 'run')}: {there}); the report "
            f"shows each as a series of its own and its plots gain panels")
    if held.same:  # this launch adds to its own experiment's runs there (more seeds, more scales): it belongs
        return f"{line}; this launch joins its own experiment's {counted(held.same, 'run')} there"
    suffix = re.sub(r"[^\w.+-]", "", "-".join(f"{short[key]}{_setting_text(new)}"
                                              for key, (_, new) in held.apart.items()))
    suggested = sweep_dir.with_name(f"{sweep_dir.name}-{suffix}")
    with contextlib.suppress(ValueError):
        suggested = suggested.relative_to(Path.cwd())
    return f"{line}; to keep this one apart, add hydra.sweep.dir={suggested}"


def _setting_text(value: Any) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def finished_runs(config: DictConfig, planned: dict[str, dict]) -> set[str]:
    """The planned runs finished before this launch, by this very configuration (none with sweep.rerun)."""
    if config.sweep.rerun or config.train.rerun:
        return set()
    sweep_dir = Path(config.hydra.sweep.dir)
    return {name for name, knobs in planned.items()
            if is_finished(read_summary(sweep_dir / name, warn=False), knobs["fingerprint"])}


def _unavailable(datasets: list[dict]) -> list[str]:
    """Download or prepare each dataset once, before the first job: offline, one line each instead of a
    failed run per job."""
    problems = []
    for data in datasets:
        try:
            with STOP.at_once(f"preparing data={data['name']}"):
                prepare_dataset(data["name"], **data)
        except DataUnavailable as error:
            problems.append(str(error))
    return problems


# --- one job ----------------------------------------------------------------------------------------------

@dataclass
class _Deferred:
    cfg: DictConfig
    run_dir: Path
    overrides: list[str]


_DEFERRED: list[_Deferred] = []  # runs another process was training when their turn came (this process)


def sweep_job(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> Outcome:
    """One job of a multirun. Failures are recorded in the run's summary.json and never stop the sweep;
    after a stop signal no run starts. A run busy in another process is, with jobs that run in this
    process, left for the end of the sweep (other runs go first; an LR search waits for it), else waited for."""
    hydra_cfg = HydraConfig.get()
    STOP.watch(stop_marker(Path(hydra_cfg.sweep.dir), os.environ.get(LAUNCH_ENV)))
    if STOP.requested:
        return Outcome(PENDING)  # the launching process was told to stop: start nothing more
    host = host_of(hydra_cfg.launcher)
    if host.shares_cores:
        n_jobs = hydra_cfg.launcher.get("n_jobs") or 1
        _share_local_hardware(cfg, hydra_cfg.job.num, n_jobs if n_jobs > 0 else (os.cpu_count() or 1))
    else:
        configure_threads(cfg.train.threads)
    # a search needs a busy run's result before its next round: it waits for the other process to finish it
    wait = not host.in_process or OmegaConf.select(cfg, "sweep.search", default=False) is True
    result = _train_job(cfg, run_dir, overrides, wait=wait, on_stop=host.on_stop)
    if result.status == BUSY:
        log.info("%s is being trained by %s; it will be checked again at the end of this sweep",
                 run_dir.name, result.holder)
        _DEFERRED.append(_Deferred(cfg, run_dir, overrides))
    else:
        report_progress(Path(hydra_cfg.sweep.dir), run_dir.name, result)
    return result


def _train_job(cfg: DictConfig, run_dir: Path, overrides: list[str], wait: bool, on_stop: str = "report"
               ) -> Outcome:
    sweep_dir = run_dir.parent
    try:
        return train(cfg, run_dir, member_dir=sweep_member_dir(sweep_dir, overrides),
                     overrides=overrides, sweep_dir=sweep_dir, launch=os.environ.get(LAUNCH_ENV), wait=wait)
    except StopRequested as stop:
        if on_stop == "exit":  # checkpointed; SLURM says what follows (cancelled, requeued, pre-empted)
            log.warning("%s: checkpointed after %s; this job ends", run_dir.name, stop)
            raise SystemExit(stop.exit_code) from None
        if on_stop == "raise":
            raise  # Hydra's submitit plugins requeue on it
        return Outcome(INTERRUPTED)  # checkpointed; the sweep stops after this job
    except Exception as error:  # noqa: BLE001 - recorded in the run's summary.json by train()
        log.error("%s failed: %s: %s", run_dir.name, type(error).__name__, error)
        return Outcome(FAILED, error=str(error))


_SIGNALS = ExitStack()  # the sweep's signal handlers, from the first job to the report


def _share_local_hardware(cfg: DictConfig, job_number: int, parallel_jobs: int) -> None:
    """Parallel local jobs: one GPU each, round robin; without a GPU, split the CPU threads."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(job_number % torch.cuda.device_count())
    else:
        configure_threads(cfg.train.threads, parallel_jobs)


def report_progress(sweep_dir: Path, name: str, result: Outcome, ended: int | None = None,
                    summaries: dict[str, dict | None] | None = None) -> None:
    """One line per job that trained: its outcome, "k of N" of the runs this launch trains (``ended``: k as
    the caller counted it, else the runs ended on disk), the counts so far, the time left (``summaries``: the
    launch's runs as already read). A job whose runs had all finished before the launch printed its skip line
    already."""
    launch = os.environ.get(LAUNCH_ENV)
    if not launch or result.skipped:
        return
    manifest = read_manifest(sweep_dir)
    record = launch_record(sweep_dir, launch, manifest)
    summaries = summaries if summaries is not None else launch_summaries(sweep_dir, record["runs"])
    counts = launch_counts(sweep_dir, launch, record, summaries)
    before = len(record["finished_before"])
    ended = sum(counts[s] for s in COUNTED) - before if ended is None else ended
    left = _time_left(manifest["runs"], summaries, launch, record)
    round_only = " in this round" if record["search"] else ""  # a search's later rounds are not planned yet
    eta = "" if left is None else f" · about {duration_text(left[0])} left{round_only}"
    if left is not None and left[2] > left[1]:  # one size timed so far: how unsure the estimate is
        eta += f" ({duration_text(left[1])}–{duration_text(left[2])}: one size timed so far)"
    loss = result.train_loss
    outcome = result.status + (f", train loss {loss:.4f}" if isinstance(loss, float) else "")
    if result.packed:  # what its members came to, and the best one's loss with whose it is
        outcome = f"{counted(len(result.members), 'packed run')}: " + packed_outcome(result.members)
    if len(result.members) == 1 and result.members[0].get("ended"):  # a killed run: how its process ended
        outcome += f" ({result.members[0]['ended']})"
    resumed = {member.get("resumed_from") for member in result.members} - {None}
    if resumed and result.status != INTERRUPTED:
        outcome += f" (resumed from step {min(resumed)})"
    log.info("[%d of %d] %s: %s · so far %d completed, %d diverged, %d failed%s", ended, len(record["runs"]) - before,
             name, outcome, counts[COMPLETED], counts[DIVERGED], counts[FAILED], eta)


def packed_outcome(members: Sequence[dict]) -> str:
    """``4 completed, 1 diverged; best lr 0.5: train loss 2.0510 (mean of 2 seeds)``: a packed job's members,
    and its best LR chosen as the report chooses it (the lowest mean over seeds of the completed runs)."""
    text = ", ".join(f"{count} {status}" for status, count in Counter(m.get("status", "?") for m in members).items())
    best = best_lr([(m.get("lr"), m.get("train_loss")) for m in members if m.get("status") == COMPLETED])
    if best is not None:
        lr, loss, seeds = best
        text += f"; best lr {lr:.4g}: train loss {loss:.4f}" + (f" (mean of {seeds} seeds)" if seeds > 1 else "")
    return text


def _time_left(planned: dict[str, dict], summaries: dict[str, dict | None], launch: str,
               record: dict[str, Any]) -> tuple[float, float, float] | None:
    """From the runs this launch trained (their sizes and times) to the runs it has not ended yet: the
    estimate and its range (``eta.time_left_range``)."""
    trained, remaining, starts = [], [], []
    for name, summary in summaries.items():
        status = launch_status(name, summary, launch, record)
        if status in FINISHED and summary.get("launch") == launch and summary.get("wall_time_s"):
            # a packed run's time is shared by its members; a diverged run stopped early
            seconds = float(summary["wall_time_s"]) / max(1, int(summary.get("packed_with") or 1))
            trained.append(({**summary, "steps": summary.get("steps_done") or summary.get("steps")}, seconds))
            if isinstance(summary.get("written_at"), (int, float)):
                starts.append(summary["written_at"] - float(summary["wall_time_s"]))
        elif status in (PENDING, RUNNING, INTERRUPTED):
            remaining.append(planned.get(name, summary or {}))
    # the launch's pace since its first run began: its own start-up (the grid's check, the data, the first
    # job's set-up) is paid once; counted in the pace it made the first estimates 34-48 % too long
    elapsed = time.time() - max([record["started"], min(starts)] if starts else [record["started"]])
    return time_left_range(trained, remaining, elapsed)


# --- the whole multirun -------------------------------------------------------------------------------------

class LaunchRefused(Exception):
    """The launcher cannot run this sweep where it would send it (a request no node can satisfy, a cluster
    that does not answer): said in one line per problem before anything is written or submitted."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else "\n  - " + "\n  - ".join(problems))


def _preflight(launcher: DictConfig) -> None:
    """A launcher that sends jobs to a cluster checks its request against what the cluster offers (its
    ``preflight``, which raises LaunchRefused and logs what it resolved)."""
    from hydra.utils import get_class

    target = launcher.get("_target_")
    check = getattr(get_class(target), "preflight", None) if target else None
    if check is not None:
        check(launcher)


def _hydra_quoted(text: str) -> str:
    """``text`` as one quoted Hydra override value."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pin_sweep_dir(config: DictConfig) -> Path:
    """The sweep folder, absolute, for this process and every job (whatever its working directory or the
    values it overrides): each job's config is composed again from ``hydra.overrides.hydra``."""
    sweep_dir = Path(config.hydra.sweep.dir).absolute()
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = str(sweep_dir)
        config.hydra.overrides.hydra.append(f"hydra.sweep.dir={_hydra_quoted(str(sweep_dir))}")
    return sweep_dir


class SweepHooks:
    """What ``callback.SweepCallback`` does for Hydra. Before any job: validates the grid and the launcher's
    request, records the launch and takes over SIGTERM / SIGINT. After the last job: trains the runs that were
    busy elsewhere (unless stopped), settles runs whose process was killed, writes the report, names the
    unfinished runs and prints the counts; exits 128 + signal after a stop, 1 when some run failed or did not
    finish, else 0."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        host = host_of(config.hydra.launcher)
        searching = config.sweep.get("search") is True
        try:
            space = search_space(config) if searching else None
            plan = validate_grid(config, prepare_data=host.local, devices_here=host.local)
            _preflight(config.hydra.launcher)
        except (ConfigError, LaunchRefused, SearchError) as error:  # Hydra makes callback exceptions warnings: exit
            raise SystemExit(f"modula-sweep: sweep not launched, {error}") from None
        except InterpolationResolutionError as error:  # a value the grid is computed from (a preset's ${lr_grid:…})
            cause = re.sub(r"^\w+ raised while resolving interpolation: ", "", str(error).splitlines()[0])
            raise SystemExit(f"modula-sweep: sweep not launched, {ConfigError([cause])}") from None
        except StopRequested as stop:  # while preparing the data: nothing launched, nothing trained
            print(f"modula-sweep: sweep not launched, {stop} while preparing the data; nothing was trained",
                  file=sys.stderr)
            raise SystemExit(stop.exit_code) from None
        except Exception as error:  # noqa: BLE001 - the launcher's check broke: never launch without it
            raise SystemExit(f"modula-sweep: sweep not launched, the launcher's check failed: "
                             f"{type(error).__name__}: {error}") from None
        launch = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        os.environ[LAUNCH_ENV] = launch
        sweep_dir = _pin_sweep_dir(config)
        if space is None:
            before = sorted(finished_runs(config, plan.runs))
            record_launch(sweep_dir, launch, plan.runs, before, plan.jobs)
        else:  # the search records its runs batch by batch (search.py)
            record_launch(sweep_dir, launch, {}, [], [])
        marker = stop_marker(sweep_dir, launch)
        _SIGNALS.enter_context(STOP.installed())  # not on self: launchers pickle their callbacks
        # Hydra's launcher announces every job ("#N : overrides", also those a stop skips): each run's progress
        # bar and its closing line say it better, in one format
        logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)
        # Jobs in other processes or on other machines learn of a stop from a marker in the sweep folder.
        STOP.on_stop[:] = [lambda signum: marker.write_text(str(signum))]
        _DEFERRED.clear()
        CLOSING_NOTES.clear()
        if space is not None:
            log.info("LR search into %s: %s", sweep_dir, space.describe(len(plan.runs)))
            return
        log.info("sweep of %d run%s into %s%s", len(plan.runs), "s" if len(plan.runs) != 1 else "", sweep_dir,
                 f": {len(before)} finished before (skipped; sweep.rerun=true retrains), "
                 f"{len(plan.runs) - len(before)} to train" if before else "")
        if line := another_experiment_line(sweep_dir, plan.runs):
            log.warning(line)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir, launch = Path(config.hydra.sweep.dir), os.environ.get(LAUNCH_ENV, "")
        for deferred in _DEFERRED:
            if STOP.requested:
                break
            result = _train_job(deferred.cfg, deferred.run_dir, deferred.overrides, wait=True)
            report_progress(sweep_dir, deferred.run_dir.name, result)
        record = launch_record(sweep_dir, launch)
        for name in record["runs"]:  # a job process killed mid-run (SIGKILL, out of memory) left "running"
            mark_abandoned(sweep_dir / name)
        _write_sweep_report(config, sweep_dir)
        summaries = launch_summaries(sweep_dir, record["runs"])
        counts = launch_counts(sweep_dir, launch, record, summaries)
        stopped = STOP.signum
        _SIGNALS.close()
        STOP.on_stop.clear()
        if stopped is None or host_of(config.hydra.launcher).local:  # a cluster's job that starts late after a
            stop_marker(sweep_dir, launch).unlink(missing_ok=True)        # stop still finds the marker, and stops
        code = _closing(sweep_dir, launch, record, summaries, counts, stopped)
        if code:
            raise SystemExit(code)


def _unfinished_lines(sweep_dir: Path, launch: str, record: dict[str, Any],
                      summaries: dict[str, dict | None]) -> list[str]:
    """One line per run of this launch that did not finish, with its state and the step a relaunch resumes
    from; at most LISTED of them: the interrupted first (they hold training to resume), then the failed, then
    those not started, each in the order of its folder name with numbers as numbers (width 32 before 128)."""
    lines: list[tuple[tuple, str]] = []
    for name, summary in summaries.items():
        status = launch_status(name, summary, launch, record)
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
        lines.append(((rank, _natural(name)), f"  {name}: {what}"))
    lines = [line for _, line in sorted(lines)]
    if len(lines) > LISTED:
        lines = lines[:LISTED] + [f"  … and {len(lines) - LISTED} more ({sweep_dir / 'results.csv'} lists every run)"]
    return lines


def _natural(name: str) -> list:
    """A folder name's sort key with its numbers as numbers: ``width=32`` before ``width=128``."""
    return [(0, float(part), "") if re.fullmatch(r"\d+(\.\d+)?(e-?\d+)?", part) else (1, 0.0, part)
            for part in re.split(r"(\d+(?:\.\d+)?(?:e-?\d+)?)", name) if part]


def _closing(sweep_dir: Path, launch: str, record: dict[str, Any], summaries: dict[str, dict | None],
             counts: dict[str, int], stopped: int | None) -> int:
    """Print the unfinished runs and the closing line; the exit code: 128 + signal after a stop, 1 when a run
    failed or did not finish, else 0."""
    line = (f"{counts[COMPLETED]} completed, {counts[SKIPPED]} skipped, {counts[DIVERGED]} diverged, "
            f"{counts[FAILED]} failed")
    unfinished = counts[INTERRUPTED] + counts[PENDING] + counts[RUNNING]
    if unfinished:
        line += f", {counts[INTERRUPTED]} interrupted, {counts[PENDING]} not started"
        if counts[RUNNING]:
            line += f", {counts[RUNNING]} still running elsewhere"
    listed = _unfinished_lines(sweep_dir, launch, record, summaries)
    if listed:
        print("not finished (the same command " + ("resumes or retries them" if counts[FAILED] else "resumes them")
              + "):", *listed, sep="\n", flush=True)
    for note in CLOSING_NOTES:
        print(note, flush=True)
    if stopped is not None:
        print(f"sweep stopped by signal {stopped}: {line}  ({sweep_dir}); run the same command to resume", flush=True)
        return 128 + stopped
    if unfinished:
        print(f"sweep incomplete: {line}  ({sweep_dir}); run the same command to resume", flush=True)
        return 1
    print(f"sweep finished: {line}  ({sweep_dir})", flush=True)
    return 1 if counts[FAILED] else 0


def _write_sweep_report(config: DictConfig, sweep_dir: Path) -> None:
    """The report (one writer at a time: several processes may end a sweep of one folder together)."""
    from ..analysis.report import write_report

    try:
        with FileLock(str(sweep_dir / ".sweep.lock")):
            write_report(sweep_dir, metric=config.sweep.metric)
        if config.logger.name == "wandb":
            log_report_to_wandb(config, sweep_dir)
    except Exception as error:  # noqa: BLE001 - a report problem must not hide the runs' results
        log.warning("report not written: %s: %s", type(error).__name__, error)


def log_report_to_wandb(config: DictConfig, sweep_dir: Path) -> None:
    from ..run.loggers import sweep_group, wandb_location, wandb_mode, wandb_settings

    mode = wandb_mode(config.logger.get("mode"), sweep_dir)
    try:
        import pandas as pd
        import wandb

        run = wandb.init(project=config.logger.project, entity=config.logger.entity,
                         group=config.logger.group or sweep_group(sweep_dir), name=f"{sweep_dir.name}-report",
                         job_type="report", dir=str(sweep_dir), mode=mode,
                         settings=wandb_settings(wandb))
        if where := wandb_location(run):
            log.info("W&B report: %s", where)
        run.log({name: wandb.Image(str(sweep_dir / f"{name}.png")) for name in ("transfer", "scale")})
        run.log({name: wandb.Table(dataframe=pd.read_csv(sweep_dir / f"{name}.csv"))
                 for name in ("optimal_lr", "transfer", "curves")})
        run.finish()
    except Exception as error:  # noqa: BLE001
        log.warning("report not logged to wandb: %s", error)
