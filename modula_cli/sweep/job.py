"""The job a multirun runs for each grid point, in whichever process its launcher gives it (its config already
settled there: ``job_place.PlacedTask``): train the grid point's runs, never let a failure stop the sweep, start
nothing after a stop, and say how it went."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ..config.identity import job_label
from ..config.members import sweep_member_dir
from ..config.schema import searches
from ..plumbing.signals import STOP, StopRequested
from ..results.files import stop_marker
from ..results.status import BUSY, FAILED, INTERRUPTED, PENDING
from ..results.summary import Outcome
from ..run.trainer import train
from .host import host_of, job_of
from .job_place import launch_of
from .progress import report_progress

log = logging.getLogger(__name__)


def sweep_job(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> Outcome:
    """One job of a multirun. Failures are recorded in the run's summary.json and never stop the sweep;
    after a stop signal no run starts. A run busy in another process is, with jobs that run in the launching
    process, left for the end of the sweep (``BUSY``: the launch trains it after the other runs; an LR search
    waits for it), else waited for."""
    hydra_cfg = HydraConfig.get()
    sweep_dir, launch = Path(hydra_cfg.sweep.dir), launch_of(cfg) or None
    STOP.watch(stop_marker(sweep_dir, launch))
    if STOP.requested:
        return Outcome(PENDING)  # the launching process was told to stop: start nothing more
    host = host_of(hydra_cfg.launcher)
    # a search needs a busy run's result before its next round: it waits for the other process to finish it
    wait = not host.in_process or searches(cfg)
    result = train_job(cfg, run_dir, overrides, launch, wait=wait, on_stop=host.on_stop,
                       job=job_of(host, hydra_cfg.job.get("id")))
    if result.status == BUSY:
        log.info("%s is being trained by %s; it will be checked again at the end of this sweep",
                 run_dir.name, result.holder)
    elif launch:
        report_progress(sweep_dir, launch, job_label(overrides), result)
    return result


def train_job(cfg: DictConfig, run_dir: Path, overrides: list[str], launch: str | None, wait: bool,
              on_stop: str = "report", job: str | None = None) -> Outcome:
    """Train one grid point's runs for ``launch`` (in the scheduler's ``job``, where one names it); a stop
    checkpoints and then reports, raises or exits as the launcher needs (``on_stop``), and an error is the job's
    ``failed`` outcome."""
    sweep_dir = run_dir.parent
    try:
        return train(cfg, run_dir, member_dir=sweep_member_dir(sweep_dir, overrides),
                     overrides=overrides, sweep_dir=sweep_dir, launch=launch, wait=wait, job=job)
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
