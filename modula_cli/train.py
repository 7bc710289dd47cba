"""``modula-sweep``: the Hydra application. Without multirun it trains one configuration."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from .config import CONFIG_DIR
from .run import run_or_exit

log = logging.getLogger(__name__)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> dict:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    summary = run_or_exit(cfg, run_dir)
    loss = summary.get("train_loss")
    log.info("%s: %s after %d steps, train loss %s, test loss %s (%s)", run_dir, summary["status"],
             summary["steps_done"], f"{loss:.4f}" if loss is not None else "-",
             f"{summary['test_loss']:.4f}" if summary.get("test_loss") is not None else "-", run_dir / "summary.json")
    return summary


if __name__ == "__main__":
    main()
