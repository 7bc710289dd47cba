"""The members of a run: one configuration, or several trained together as a packed run (one per LR,
stacked on a leading axis). Each member has its own LR, seed, config, folder and fingerprint."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, open_dict

from .identity import fingerprint
from .optim import OptimConfig
from .results import knobs_of


@dataclass(frozen=True)
class Member:
    lr: float
    seed: int
    cfg: DictConfig
    run_dir: Path
    fingerprint: str

    @property
    def knobs(self) -> dict:
        return knobs_of(self.cfg, self.lr, self.seed)


@dataclass(frozen=True)
class Members:
    items: tuple[Member, ...]
    packed: bool

    @classmethod
    def of(cls, cfg: DictConfig, opt: OptimConfig, run_dir: Path,
           member_dir: Callable[[float], Path] | None = None) -> Members:
        """A single run is its own member; ``optim.lr=[…]`` packs one member per LR, each in the folder
        ``member_dir(lr)`` (a sweep passes the folder a separate run would get), else ``<run_dir>/lr=<lr>``."""
        seed = int(cfg.train.seed)
        if not opt.packed:
            return cls((Member(opt.base_lr, seed, cfg, run_dir, fingerprint(cfg)),), packed=False)
        folder = member_dir or (lambda lr: run_dir / f"lr={lr!r}")
        items = []
        for lr in opt.lrs:
            member_cfg = copy.deepcopy(cfg)
            with open_dict(member_cfg):
                member_cfg.optim.lr = lr
            items.append(Member(lr, seed, member_cfg, folder(lr), fingerprint(member_cfg)))
        return cls(tuple(items), packed=True)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.items)

    @property
    def run_dirs(self) -> list[Path]:
        return [m.run_dir for m in self.items]

    @property
    def fingerprint(self) -> str:
        return "|".join(m.fingerprint for m in self.items)

    def lrs(self, device: torch.device) -> torch.Tensor | None:
        """One LR per stacked network (packed), else ``None`` (the optimiser's own LR)."""
        return torch.tensor([m.lr for m in self.items], device=device) if self.packed else None
