"""The report at the end of every multirun, written once however many processes end a sweep of one folder
together, and logged to Weights & Biases when the sweep logs there."""

from __future__ import annotations

import logging
from pathlib import Path

from filelock import FileLock
from omegaconf import DictConfig

from ..config.schema import LoggerConfig
from ..plumbing.settings import typed
from ..results.files import CURVES_FILE, OPTIMAL_FILE, SCALE_PLOT, SWEEP_LOCK, TRANSFER_FILE, TRANSFER_PLOT

log = logging.getLogger(__name__)


def write_sweep_report(config: DictConfig, sweep_dir: Path) -> bool:
    """The report (one writer at a time: several processes may end a sweep of one folder together); whether it
    was written."""
    from ..analysis.targets import TargetError
    from ..analysis.report import write_report

    try:
        with FileLock(str(sweep_dir / SWEEP_LOCK)):
            try:
                write_report(sweep_dir, metric=config.sweep.metric, target=config.sweep.get("target"))
            except TargetError:  # a preset's target this folder's runs do not vary (the launch said so)
                write_report(sweep_dir, metric=config.sweep.metric)
        logger = typed(LoggerConfig, config.get("logger") or {})
        if logger.name == "wandb":
            log_report_to_wandb(logger, sweep_dir)
    except Exception as error:  # noqa: BLE001 - a report problem must not hide the runs' results
        log.warning("report not written: %s: %s", type(error).__name__, error)
        return False
    return True


def log_report_to_wandb(logger: LoggerConfig, sweep_dir: Path) -> None:
    from ..run.loggers import sweep_group, wandb_location, wandb_mode, wandb_settings

    mode = wandb_mode(logger.mode, sweep_dir)
    try:
        import pandas as pd
        import wandb

        run = wandb.init(project=logger.project, entity=logger.entity, group=logger.group or sweep_group(sweep_dir),
                         name=f"{sweep_dir.name}-report",
                         job_type="report", dir=str(sweep_dir), mode=mode,
                         settings=wandb_settings(wandb))
        if where := wandb_location(run):
            log.info("W&B report: %s", where)
        run.log({Path(name).stem: wandb.Image(str(sweep_dir / name)) for name in (TRANSFER_PLOT, SCALE_PLOT)})
        run.log({Path(name).stem: wandb.Table(dataframe=pd.read_csv(sweep_dir / name))
                 for name in (OPTIMAL_FILE, TRANSFER_FILE, CURVES_FILE)})
        run.finish()
    except Exception as error:  # noqa: BLE001
        log.warning("report not logged to wandb: %s", error)
