"""``modula-sweep``: the Hydra application. Without multirun it trains one configuration; with a sweep
preset (``sweep=width``) or ``-m`` it launches the grid, one run directory per point, and ends with the
transfer report."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
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
from .plumbing.signals import StopRequested
from .plumbing.threads import configure_threads
from .results.files import SUMMARY_FILE

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


@contextmanager
def one_line_errors(program: str, run_dir: Path) -> Iterator[None]:
    """For the command line: ``ONE_LINE_ERRORS`` and a full disk exit with ``<program>: <message>`` (exit code 1)
    and the run folder made for this command is removed when the command left it empty."""
    from .plumbing.atomic import DiskFull
    from .run.trainer import ONE_LINE_ERRORS

    try:
        yield
    except (*ONE_LINE_ERRORS, DiskFull) as error:
        remove_if_empty(run_dir, up_to=Path.cwd())  # and outputs/runs/ when this run made it
        raise SystemExit(f"{program}: {error}") from None


def out_of_memory(error: BaseException) -> bool:
    """The device or the host could not allocate a tensor (CUDA's error, or the CPU allocator's RuntimeError)."""
    import torch

    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and re.search(r"can't allocate memory|out of memory", str(error)) is not None)


def run_or_exit(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> Outcome:
    """For the command line: a run stopped by a signal exits with 128 + signal after checkpointing; data that
    cannot be had, an architecture that does not fit the data, or a run that runs out of memory exits with one
    line."""
    from .run.trainer import train  # training's libraries load once the config is known to be good

    with one_line_errors("modula-sweep", run_dir):
        try:
            return train(cfg, run_dir, overrides=overrides)
        except (MemoryError, RuntimeError) as error:
            if not out_of_memory(error):
                raise
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise SystemExit(
                f"modula-sweep: out of memory ({reason[:160]}); arch.width={cfg.arch.get('width')}, "
                f"train.batch_size={cfg.train.batch_size}, data.context={cfg.data.get('context')}: smaller ones need "
                f"less (recorded as failed in {run_dir / SUMMARY_FILE})") from None
        except StopRequested as stop:
            if stop.trained:
                log.warning("%s: checkpointed (%s); re-run the same command with hydra.run.dir=%s to resume",
                            run_dir, stop, run_dir)
            else:
                log.warning("%s before the first step: nothing was trained", stop)
                remove_if_empty(run_dir, up_to=Path.cwd())
            raise SystemExit(stop.exit_code) from None


if __name__ == "__main__":  # python -m modula_cli.train: the same front door as the modula-sweep command
    from .cli import run

    run("modula-sweep", main)
