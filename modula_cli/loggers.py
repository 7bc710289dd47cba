"""Run loggers. ``metrics.jsonl`` is always written; wandb is optional and can never stop training."""

from __future__ import annotations

import json
import logging
import netrc
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class JsonlLogger:
    """Appends one JSON object per line; ``offset()`` is the resume point stored in checkpoints."""

    def __init__(self, path: Path, truncate_at: int | None = None):
        self.path = path
        if truncate_at is not None and path.exists():
            with open(path, "r+b") as handle:
                handle.truncate(truncate_at)
        elif truncate_at is None and path.exists():
            path.unlink()
        self.handle = open(path, "a")

    def log(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(record) + "\n")

    def offset(self) -> int:
        self.handle.flush()
        return self.handle.tell()

    def close(self) -> None:
        self.handle.close()


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


class WandbLogger:
    """Mirrors metrics to Weights & Biases; any wandb error turns it off with a warning."""

    def __init__(self, project: str, entity: str | None, group: str | None, name: str, config: dict,
                 run_dir: Path, mode: str | None = None, tags: list[str] | None = None, resume_id: str | None = None):
        self.run = None
        try:
            import wandb

            mode = mode or ("online" if _has_wandb_credentials() else "offline")
            self.run = wandb.init(project=project, entity=entity, group=group, name=name, config=config,
                                  dir=str(run_dir), mode=mode, tags=tags or None, id=resume_id, resume="allow",
                                  reinit="finish_previous")
        except Exception as error:  # noqa: BLE001 - a logging backend must never stop training
            log.warning("wandb disabled: %s", error)

    @property
    def run_id(self) -> str | None:
        return getattr(self.run, "id", None)

    def log(self, record: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in record.items() if k != "step"}, step=record.get("step"))
        except Exception as error:  # noqa: BLE001
            log.warning("wandb disabled after a logging error: %s", error)
            self.run = None

    def summary(self, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.summary.update(summary)
        except Exception as error:  # noqa: BLE001
            log.warning("wandb summary not written: %s", error)

    def close(self) -> None:
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as error:  # noqa: BLE001
                log.warning("wandb finish failed: %s", error)
