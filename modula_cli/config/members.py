"""The members of a run: one configuration, or several trained together as a packed run (one per
combination of the listed LRs and seeds, stacked on a leading axis). Each member has its own LR, seed,
config, folder and fingerprint, and is in every way the separate run with those values."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, open_dict

from ..analysis.results import knobs_of
from ..optim import OptimConfig
from .identity import fingerprint


def seeds_of(cfg: DictConfig) -> tuple[list[int], bool]:
    """``train.seed``: its seeds, and whether they are a packed list."""
    seed = cfg.train.seed
    packed = isinstance(seed, (list, tuple, ListConfig))
    return ([int(s) for s in seed] if packed else [int(seed)]), packed


@dataclass(frozen=True)
class Member:
    lr: float
    seed: int
    cfg: DictConfig
    run_dir: Path
    fingerprint: str
    packed: dict[str, Any] = field(default_factory=dict)  # the packed settings' values: {"optim.lr": 0.25, …}

    @property
    def knobs(self) -> dict:
        return knobs_of(self.cfg, self.lr, self.seed)


def default_member_dir(run_dir: Path) -> Callable[[dict[str, Any]], Path]:
    """``<run_dir>/lr=0.25,seed=1`` for a packed run launched outside a sweep."""
    return lambda packed: run_dir / ",".join(f"{key.split('.')[-1]}={value!r}" for key, value in packed.items())


@dataclass(frozen=True)
class Members:
    items: tuple[Member, ...]
    packed: bool

    @classmethod
    def of(cls, cfg: DictConfig, opt: OptimConfig, run_dir: Path,
           member_dir: Callable[[dict[str, Any]], Path] | None = None) -> Members:
        """A single run is its own member; ``optim.lr=[…]`` and / or ``train.seed=[…]`` pack one member per
        (LR, seed), each in the folder ``member_dir(packed values)`` (a sweep passes the folder a separate run
        would get), else ``<run_dir>/lr=<lr>,seed=<seed>``."""
        seeds, seeds_packed = seeds_of(cfg)
        if not (opt.packed or seeds_packed):
            return cls((Member(opt.base_lr, seeds[0], cfg, run_dir, fingerprint(cfg)),), packed=False)
        folder = member_dir or default_member_dir(run_dir)
        items = []
        for lr, seed in itertools.product(opt.lrs, seeds):
            member_cfg = copy.deepcopy(cfg)
            with open_dict(member_cfg):  # exactly the separate run's config (an unset LR stays unset)
                if opt.packed:
                    member_cfg.optim.lr = lr
                member_cfg.train.seed = seed
            packed = {**({"optim.lr": lr} if opt.packed else {}), **({"train.seed": seed} if seeds_packed else {})}
            items.append(Member(lr, seed, member_cfg, folder(packed), fingerprint(member_cfg), packed))
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

    @property
    def seeds(self) -> list[int]:
        """The distinct seeds, in order: one initialisation and one batch stream each."""
        return list(dict.fromkeys(m.seed for m in self.items))

    def seed_index(self, device: torch.device) -> torch.Tensor:
        """For each member, the position of its seed in ``seeds`` (picks its batch from the stacked ones)."""
        seeds = self.seeds
        return torch.tensor([seeds.index(m.seed) for m in self.items], device=device)

    def lrs(self, device: torch.device) -> torch.Tensor | None:
        """One LR per stacked network (packed), else ``None`` (the optimiser's own LR)."""
        return torch.tensor([m.lr for m in self.items], device=device) if self.packed else None
