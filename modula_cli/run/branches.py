"""Horizons for the price of one run: under a WSD schedule, runs that differ only in ``train.steps`` share their
stable phase, so a sweep trains it once and branches each horizon's cool-down from it (Hägele et al. 2024).

Until its cool-down starts, a WSD run's every step is the same whatever its horizon: the batches depend on (seed,
step) alone, the schedule's factor is the warm-up's or 1. So a run of a sweep saves a *trunk* of its state where its
own cool-down starts (the state, and the metrics lines it logged so far), under ``<sweep>/.trunks/<key>/``, the key
hashing every setting that changes the numbers except ``train.steps`` (and with the warm-up's length in steps, so
runs whose warm-up differs never share). A run of a longer horizon then starts from the latest trunk at or before
its own cool-down, instead of from step 0: the same numbers, bit for bit, as training it from the start.
Horizons in ascending order (as a sweep's grid lists them) train the stable phase once in all; in another order
a run finds no trunk and trains from the start.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..config.identity import trunk_fingerprint
from ..optim.schedule import decay_start
from ..plumbing import atomic
from ..results.files import METRICS_FILE, TRUNKS_FOLDER
from . import checkpoint
from .context import RunContext

log = logging.getLogger(__name__)
STATE_FILE = "state.pt"


def cooldown_start(ctx: RunContext) -> int | None:
    """The step at which this run's WSD cool-down starts, when its stable phase can be shared: a WSD run of a
    sweep (``train.branch``), on one process; else None."""
    opt, train = ctx.opt, ctx.train
    if opt.schedule != "wsd" or not train.branch or ctx.world > 1:
        return None
    return max(warmup_steps(opt, train.steps), decay_start(train.steps, opt.decay_fraction))


def warmup_steps(opt: Any, steps: int) -> int:
    return opt.warmup_steps if opt.warmup_fraction is None else round(opt.warmup_fraction * steps)


class Trunks:
    """The trunks of one stable phase: a folder per step (``step=<n>/``) with the state and each member's metrics."""

    def __init__(self, folder: Path, key: str):
        self.folder, self.key = folder, key

    @classmethod
    def of(cls, ctx: RunContext, sweep_dir: Path) -> Trunks:
        key = trunk_fingerprint([m.cfg for m in ctx.members], warmup_steps(ctx.opt, ctx.train.steps))
        return cls(sweep_dir / TRUNKS_FOLDER / key, key)

    def latest(self, upto: int) -> Path | None:
        """The folder of the latest trunk at or before step ``upto`` (a complete one: its state is written last)."""
        steps = []
        for folder in self.folder.glob("step=*") if self.folder.is_dir() else []:
            try:
                steps.append((int(folder.name.partition("=")[2]), folder))
            except ValueError:
                continue
        usable = [(step, folder) for step, folder in steps if step <= upto and (folder / STATE_FILE).is_file()]
        return max(usable)[1] if usable else None

    def save(self, state: dict[str, Any], step: int, metrics: list[Path], offsets: list[int | None]) -> None:
        """The state at ``step`` and each member's metrics up to where the state stands, as one folder put in
        place at once (a second run saving the same trunk finds it there and leaves it)."""
        target = self.folder / f"step={step}"
        if (target / STATE_FILE).is_file():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".step={step}.", dir=self.folder))
        try:
            for k, (source, offset) in enumerate(zip(metrics, offsets)):
                data = source.read_bytes()[:offset] if offset is not None and source.exists() else b""
                (tmp / f"{k}-{METRICS_FILE}").write_bytes(data)
            checkpoint.save(tmp / STATE_FILE, state, self.key)
            try:
                tmp.rename(target)
            except OSError:  # another run put the same trunk in place first
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def load(self, folder: Path, metrics: list[Path], device: torch.device) -> dict[str, Any] | None:
        """The trunk's state, with each member's metrics copied to its run folder (and the state's offsets set to
        them); None when the state cannot be used (it is moved aside, as a bad checkpoint is)."""
        state = checkpoint.load(folder / STATE_FILE, self.key, device)
        if state is None:
            return None
        offsets = []
        for k, path in enumerate(metrics):
            data = (folder / f"{k}-{METRICS_FILE}").read_bytes()
            atomic.write_with(path, lambda tmp, data=data: tmp.write_bytes(data))
            offsets.append(len(data))
        state["metrics_offsets"], state["wandb_ids"] = offsets, [None] * len(metrics)
        return state
