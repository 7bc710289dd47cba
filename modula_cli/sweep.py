"""Sweep support: the LR grids of SPEC §9, validation of a whole grid before launch, and the Hydra
callback that writes the report and the closing line at the end of every multirun."""

from __future__ import annotations

import copy
import logging
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .validate import ConfigError, config_problems

log = logging.getLogger(__name__)

# Powers of two (SPEC §9): normed / dualized and SGD 2^-6 … 2^2; unnormed Adam 2^-13 … 2^-3.
LR_EXPONENTS = {("adam", "unnormed"): range(-13, -2)}
DEFAULT_EXPONENTS = range(-6, 3)


def lr_grid(optimizer: str, mode: str) -> list[float]:
    return [2.0**e for e in LR_EXPONENTS.get((optimizer, mode), DEFAULT_EXPONENTS)]


def lr_grid_string(optimizer: str, mode: str, pack: bool = False) -> str:
    """The grid as a Hydra sweep value, ``0.015625,0.03125,…`` (one run per LR), or with ``pack`` as one
    list value ``[0.015625,0.03125,…]`` (one packed run training every LR at once)."""
    values = ",".join(repr(lr) for lr in lr_grid(optimizer, mode))
    return f"[{values}]" if pack else values


NAMED_GROUPS = ("arch", "data", "optim")
NAMED_KEYS = ("data.context", "data.name", "train.seed", "train.steps", "train.batch_size")


def run_dirname(task_overrides: list[str]) -> str:
    """A run folder named from its knob overrides (architecture, optimiser, context, seed, steps), sorted:
    the same point of a grid always gets the same folder, and paths or logging flags never enter it."""
    kept = []
    for override in task_overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in NAMED_GROUPS or key in NAMED_KEYS or key.startswith(("arch.", "optim.")):
            kept.append(f"{key}={value.replace('/', '_')}")
    return ",".join(sorted(kept)) or "default"


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("lr_grid"):
        OmegaConf.register_new_resolver("lr_grid", lr_grid_string)
    if not OmegaConf.has_resolver("run_dirname"):
        OmegaConf.register_new_resolver("run_dirname", lambda overrides: run_dirname(list(overrides)))


def grid_overrides(config: DictConfig) -> list[list[str]]:
    """Every job's overrides, expanded as Hydra's basic sweeper does (config params, then command line)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    arguments = params + list(config.hydra.overrides.task)
    overrides = OverridesParser.create().parse_overrides(arguments)
    batches = BasicSweeper.split_arguments(overrides, None)
    return [list(job) for batch in batches for job in batch]


def validate_grid(config: DictConfig) -> int:
    """Compose every job's config and check it; raise one ConfigError listing every bad job.

    Jobs that choose the same config groups share one composition; each job's value overrides are then
    applied with Hydra's own override logic (so unknown keys fail exactly as they would at launch).
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    loader = GlobalHydra.instance().config_loader()
    parser = OverridesParser.create()
    composed: dict[tuple[str, ...], DictConfig] = {}
    problems: list[str] = []
    jobs = grid_overrides(config)
    for job in jobs:
        try:
            parsed = parser.parse_overrides(job)
            groups = tuple(o.input_line for o in parsed if loader.repository.group_exists(o.key_or_group))
            if groups not in composed:
                composed[groups] = loader.load_sweep_config(config, list(groups))
            job_cfg = copy.deepcopy(composed[groups])
            values = [o for o in parsed if o.input_line not in groups]
            ConfigLoaderImpl._apply_overrides_to_config(values, job_cfg)
            issues = config_problems(job_cfg)
        except Exception as error:  # noqa: BLE001 - composition errors are problems to report too
            issues = [str(error).splitlines()[0]]
        problems += [f"[{' '.join(job)}] {issue}" for issue in issues]
    if problems:
        raise ConfigError(problems)
    return len(jobs)


class SweepCallback(Callback):
    """Validates the grid before any job starts; after the last job writes the report, prints the counts
    of completed, skipped, diverged and failed runs, and exits non-zero only when some run failed."""

    def __init__(self) -> None:
        self.started = time.time()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time()
        try:
            jobs = validate_grid(config)
        except ConfigError as error:  # Hydra turns callback exceptions into warnings: exit instead
            raise SystemExit(f"sweep not launched, {error}") from error
        log.info("sweep of %d runs into %s", jobs, config.hydra.sweep.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from .report import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        counts = launch_counts(sweep_dir, self.started)
        try:
            write_report(sweep_dir)
            if config.logger.name == "wandb":
                log_report_to_wandb(config, sweep_dir)
        except Exception as error:  # noqa: BLE001 - a report problem must not hide the runs' results
            log.warning("report not written: %s", error)
        print(f"sweep finished: {counts['completed']} completed, {counts['skipped']} skipped, "
              f"{counts['diverged']} diverged, {counts['failed']} failed  ({sweep_dir})", flush=True)
        if counts["failed"]:
            sys.exit(1)


def launch_counts(sweep_dir: Path, started: float) -> dict[str, int]:
    """Status of each run; a finished run whose summary predates this launch counts as skipped."""
    import json

    counts = {"completed": 0, "skipped": 0, "diverged": 0, "failed": 0, "interrupted": 0}
    for summary_path in sweep_dir.glob("*/summary.json"):
        try:
            status = json.loads(summary_path.read_text()).get("status")
        except json.JSONDecodeError:
            continue
        if status in ("completed", "diverged") and summary_path.stat().st_mtime < started:
            counts["skipped"] += 1
        elif status in counts:
            counts[status] += 1
    return counts


def sweep_group(sweep_dir: str | Path) -> str:
    """The wandb group of a sweep's runs and report: its last two folders, e.g. ``quick-gpt_shakespeare``."""
    return "-".join(Path(sweep_dir).parts[-2:])


def log_report_to_wandb(config: DictConfig, sweep_dir: Path) -> None:
    try:
        import wandb

        run = wandb.init(project=config.logger.project, entity=config.logger.entity,
                         group=config.logger.group or sweep_group(sweep_dir), name=f"{sweep_dir.name}-report",
                         job_type="report", dir=str(sweep_dir), mode=config.logger.mode or None)
        run.log({name: wandb.Image(str(sweep_dir / f"{name}.png")) for name in ("transfer", "scale")})
        run.log({"optimal_lr": wandb.Table(dataframe=__import__("pandas").read_csv(sweep_dir / "optimal_lr.csv"))})
        run.finish()
    except Exception as error:  # noqa: BLE001
        log.warning("report not logged to wandb: %s", error)
