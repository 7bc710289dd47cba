"""The members of a run, in one place: one configuration, or several trained together as a packed run (one per
combination of the listed LRs and seeds, stacked on a leading axis). Each member has its own LR, seed,
config, folder and fingerprint, and is in every way the separate run with those values.

Here: which settings pack (``PACKABLE``) and which of them a config lists (``packed_settings``); how a
sweep's grid packs (``pack_arguments``); each member's overrides and folder (in a sweep, the folder its
separate run would get: ``sweep_member_dir``; else ``<run>/lr=…,seed=…``); per-member LRs and seeds.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from ..optim import OptimConfig, single_lr
from ..plumbing.settings import listed
from .identity import RunIdentity, run_name

PACKABLE = ("optim.lr", "train.seed")  # the settings a packed run may list, one member per combination
MemberDir = Callable[[dict[str, Any]], Path]  # a member's packed values ({"optim.lr": 0.25, …}) → its folder


def packed_settings(cfg: DictConfig) -> list[str]:
    """The packable settings that ``cfg`` lists (``["optim.lr"]``, …): a packed run when not empty."""
    return [key for key in PACKABLE if listed(OmegaConf.select(cfg, key))]


def pack_arguments(arguments: list[str]) -> list[str]:
    """``optim.lr=0.25,0.5`` → ``optim.lr=[0.25,0.5]`` (and the same for ``train.seed``, ``range(…)``
    included); every other override is left as it is. The packing sweeper's and the grid check's rule."""
    parser = OverridesParser.create()
    packed = []
    for argument in arguments:
        override = parser.parse_override(argument)
        if override.key_or_group in PACKABLE and override.is_discrete_sweep():
            values = ",".join(override.sweep_string_iterator())
            packed.append(f"{override.get_key_element()}=[{values}]")
        else:
            packed.append(argument)
    return packed


def member_overrides(task_overrides: list[str], packed: dict[str, Any]) -> list[str]:
    """The overrides of one member of a packed run: each packed setting (``packed``: key → the member's
    value, keys from ``PACKABLE``) replaced or added, so the member's folder is its separate run's folder."""
    kept = [o for o in task_overrides if o.lstrip("+~").partition("=")[0] not in packed]
    return [*kept, *(f"{key}={value!r}" for key, value in packed.items())]


def sweep_member_dir(sweep_dir: Path, job: list[str]) -> MemberDir:
    """In a sweep, a packed member's folder is the one its separate run would get."""
    return lambda packed: sweep_dir / run_name(member_overrides(job, packed))


def default_member_dir(run_dir: Path) -> MemberDir:
    """``<run_dir>/lr=0.25,seed=1`` for a packed run launched outside a sweep."""
    return lambda packed: run_dir / ",".join(f"{key.split('.')[-1]}={value!r}" for key, value in packed.items())


@dataclass(frozen=True)
class Member:
    lr: float
    seed: int
    cfg: DictConfig
    run_dir: Path
    identity: RunIdentity
    packed: dict[str, Any] = field(default_factory=dict)  # the packed settings' values: {"optim.lr": 0.25, …}

    @property
    def fingerprint(self) -> str:
        return self.identity.fingerprint


@dataclass(frozen=True)
class Members:
    items: tuple[Member, ...]
    packed: bool

    @classmethod
    def of(cls, cfg: DictConfig, opt: OptimConfig, run_dir: Path, member_dir: MemberDir | None = None) -> Members:
        """A single run is its own member; ``optim.lr=[…]`` and / or ``train.seed=[…]`` pack one member per
        (LR, seed), each in the folder ``member_dir(packed values)`` (a sweep passes ``sweep_member_dir``),
        else ``default_member_dir``."""
        packs = packed_settings(cfg)
        lrs_packed, seeds_packed = "optim.lr" in packs, "train.seed" in packs
        lrs = [float(lr) for lr in opt.lr] if lrs_packed else \
            [single_lr(opt, OmegaConf.select(cfg, "arch.name"), OmegaConf.select(cfg, "variant.scales"))]
        seeds = [int(s) for s in cfg.train.seed] if seeds_packed else [int(cfg.train.seed)]
        if not (lrs_packed or seeds_packed):
            return cls((Member(lrs[0], seeds[0], cfg, run_dir, RunIdentity.of(cfg, lrs[0], seeds[0])),), packed=False)
        folder = member_dir or default_member_dir(run_dir)
        items = []
        for lr, seed in itertools.product(lrs, seeds):
            member_cfg = copy.deepcopy(cfg)
            with open_dict(member_cfg):  # exactly the separate run's config (an unset LR stays unset)
                if lrs_packed:
                    member_cfg.optim.lr = lr
                member_cfg.train.seed = seed
            packed = {**({"optim.lr": lr} if lrs_packed else {}), **({"train.seed": seed} if seeds_packed else {})}
            items.append(Member(lr, seed, member_cfg, folder(packed), RunIdentity.of(member_cfg, lr, seed), packed))
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

    def weights(self, by_seed: dict[int, list[torch.Tensor]]) -> list[torch.Tensor]:
        """Each member's weights from its seed's (``by_seed``), stacked on a leading member axis when packed."""
        if not self.packed:
            return by_seed[self.items[0].seed]
        return [torch.stack(per_member) for per_member in zip(*(by_seed[m.seed] for m in self.items))]

    def batch(self, by_seed: list[tuple[torch.Tensor, torch.Tensor]], seed_index: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's batch from one batch per seed (in ``seeds`` order; ``seed_index`` from ``seed_index``):
        unpacked, the batch itself; packed, with a leading member axis, a view when the members share one seed
        and a gather of the few seeds' batches otherwise."""
        if not self.packed:
            return by_seed[0]
        if len(by_seed) == 1:
            return self.shared(*by_seed[0])
        x, y = (torch.stack(parts)[seed_index] for parts in zip(*by_seed))
        return x, y

    def shared(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch for every member (a view, no copy)."""
        k = len(self.items)
        return x.expand(k, *x.shape), y.expand(k, *y.shape)

    def lrs(self, device: torch.device) -> torch.Tensor | None:
        """One LR per stacked network (packed), else ``None`` (the optimiser's own LR)."""
        return torch.tensor([m.lr for m in self.items], device=device) if self.packed else None
