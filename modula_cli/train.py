"""``modula-sweep``: the Hydra application. Without multirun it trains one configuration; with a sweep
preset (``sweep=width``) or ``-m`` it launches the grid, one run directory per point, and ends with the
transfer report."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from .config import CONFIG_DIR
from .run import Preempted, run_or_exit, train
from .sweep import register_resolvers, sweep_group

log = logging.getLogger(__name__)
register_resolvers()


def _share_local_hardware(job_number: int, parallel_jobs: int) -> None:
    """Parallel local jobs: one GPU each, round robin; without a GPU, split the CPU threads."""
    if torch.cuda.is_available():
        torch.cuda.set_device(job_number % torch.cuda.device_count())
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, parallel_jobs)))


def _sweep_job(cfg: DictConfig, run_dir: Path) -> dict:
    """One job of a multirun: failures are recorded in summary.json and do not stop the sweep."""
    hydra_cfg = HydraConfig.get()
    os.environ["MODULA_SWEEP_GROUP"] = sweep_group(hydra_cfg.sweep.dir)  # wandb groups a sweep's runs
    if "joblib" in str(hydra_cfg.launcher.get("_target_", "")):
        n_jobs = hydra_cfg.launcher.get("n_jobs") or 1
        _share_local_hardware(hydra_cfg.job.num, n_jobs if n_jobs > 0 else (os.cpu_count() or 1))
    try:
        return train(cfg, run_dir)
    except Preempted:
        raise
    except Exception as error:  # noqa: BLE001 - recorded in the run's summary.json by train()
        log.error("%s failed: %s: %s", run_dir.name, type(error).__name__, error)
        return {"status": "failed", "error": str(error)}


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> dict:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        summary = _sweep_job(cfg, run_dir)
    else:
        summary = run_or_exit(cfg, run_dir)
    if summary["status"] == "packed":
        statuses = [m["status"] for m in summary["members"]]
        log.info("%s: packed run of %d: %s", run_dir.name, len(statuses),
                 ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses))))
        return summary
    loss, test = summary.get("train_loss"), summary.get("test_loss")
    log.info("%s: %s%s, train loss %s, test loss %s", run_dir.name, summary["status"],
             " (already finished)" if summary.get("skipped") else "", f"{loss:.4f}" if loss is not None else "-",
             f"{test:.4f}" if test is not None else "-")
    return summary


if __name__ == "__main__":
    main()
