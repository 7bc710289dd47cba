"""``modula-sweep``: the Hydra application. Without multirun it trains one configuration; with a sweep
preset (``sweep=width``) or ``-m`` it launches the grid, one run directory per point, and ends with the
transfer report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from .config import CONFIG_DIR
from .config.resolvers import register_config
from .config.validate import ConfigError, check_config
from .plumbing.atomic import remove_if_empty
from .plumbing.threads import configure_threads

if TYPE_CHECKING:
    from .results.summary import Outcome

log = logging.getLogger(__name__)
register_config()


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> Outcome:
    hydra_cfg = HydraConfig.get()
    run_dir, overrides = Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task)
    if hydra_cfg.mode == RunMode.MULTIRUN:  # the grid was validated before the first job
        from .sweep.job import sweep_job

        return sweep_job(cfg, run_dir, overrides)
    try:
        check_config(cfg, overrides)
    except ConfigError as error:
        remove_if_empty(run_dir, up_to=Path.cwd())  # Hydra made it (and outputs/runs/) before the check
        raise SystemExit(f"modula-sweep: {error}") from None
    from .run.trainer import run_or_exit  # training's libraries load once the config is known to be good

    configure_threads(cfg.train.threads)
    outcome = run_or_exit(cfg, run_dir, overrides)
    if outcome.packed:
        statuses = [member["status"] for member in outcome.members]
        log.info("%s: packed run of %d: %s", run_dir.name, len(statuses),
                 ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses))))
        return outcome
    summary = outcome.summary
    loss, test = summary.get("train_loss"), summary.get("test_loss")
    shown = run_dir.relative_to(Path.cwd()) if run_dir.is_relative_to(Path.cwd()) else run_dir
    log.info("%s: %s%s, train loss %s, test loss %s", shown, summary["status"],
             " (already finished)" if outcome.skipped else "", f"{loss:.4f}" if loss is not None else "-",
             f"{test:.4f}" if test is not None else "-")
    return outcome


if __name__ == "__main__":  # python -m modula_cli.train: the same front door as the modula-sweep command
    from .cli import run

    run("modula-sweep", main)
