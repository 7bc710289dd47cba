"""The optimisation modes: how the base optimiser's direction u becomes the weight change Δ (w ← w − Δ).

A mode is one file here holding everything that differs between modes: its update map, its state (kept
in the optimiser state and its checkpoints), the projection of the initial weights onto its constraint set,
the settings only it reads (left out of every other mode's fingerprint), its checks, and what it adds to
the train log and the summary. A new mode is a ``Mode`` subclass in a new file, registered in ``MODES``.
"""

from __future__ import annotations

import difflib
from typing import Any

from omegaconf import OmegaConf

from ...nn import Module
from ...nn.torch_network import TorchNetwork
from ..config import OptimConfig
from .base import Mode
from .dualized import Dualized
from .manifold import Manifold
from .mup import Mup
from .muon import Muon
from .normed import Normed
from .unnormed import Unnormed

MODES: dict[str, Mode] = {mode.name: mode for mode in (Unnormed(), Normed(), Dualized(), Manifold(), Mup(), Muon())}


class Rebuild:
    """The run's architecture at other sizes (``modes.base.Resizer``), each built as a run of that size would
    build it: μP compares its network with the same one at the base width (and depth) to see which sizes grow."""

    BASES = {"width": "base_width", "depth": "base_depth"}  # the μP setting (optim.mup.*) that asked for each size

    def __init__(self, arch: Any, data: Any, variant: Any, cfg: OptimConfig):
        self.arch, self.data, self.variant, self.cfg = arch, data, variant, cfg

    def __call__(self, **sizes: int) -> Module:
        from ...models import ModelError, build_model  # here: the command line's checks import modes without torch

        if missing := [key for key in sizes if key not in self.arch]:
            raise ModelError(f"optim.mode={self.cfg.mode} needs arch.{missing[0]}; arch.name={self.arch.name} has "
                             f"none")
        shown = ", ".join(f"{key} {value}" for key, value in sizes.items())
        asked = ", ".join(f"optim.mup.{self.BASES[key]}={getattr(self.cfg.mup, self.BASES[key])}" for key in sizes)
        try:
            arch = MODES[self.cfg.mode].architecture(OmegaConf.merge(self.arch, sizes), self.cfg)
            return build_model(arch, self.data, self.variant)
        except ValueError as error:  # the user typed another size: say which one failed and why
            raise ModelError(f"optim.mode={self.cfg.mode} builds the network again at {shown} ({asked}) to see which "
                             f"sizes grow, and it cannot be built there: {error}") from None


def build_network(arch: Any, data: Any, variant: Any, cfg: OptimConfig) -> Module:
    """The network a run of mode ``cfg.mode`` trains: the architecture's, then the mode's changes to it (μP's
    multipliers, from the same architecture built at its base width and depth)."""
    from ...models import ModelError, build_model  # here: the command line's checks import modes without torch

    mode = MODES[cfg.mode]
    try:
        trained = mode.architecture(arch, cfg)
    except ValueError as error:
        raise ModelError(str(error)) from None
    net = build_model(trained, data, variant)
    if mode.needs_modular_norm and isinstance(net, TorchNetwork):
        plain = ", ".join(name for name, m in MODES.items() if not m.needs_modular_norm)
        raise ModelError(f"optim.mode={cfg.mode} needs the modular norm's tree of masses and sensitivities, and "
                         f"arch.name={arch.name} returns a plain torch.nn.Module; its modes: {plain} (or build it "
                         f"from modula_cli.nn's atoms, docs/extending.md)")
    try:
        return mode.network(net, Rebuild(arch, data, variant, cfg), cfg)
    except ValueError as error:  # a network the mode's rules do not cover: one line, before any step
        raise ModelError(str(error)) from None


def unknown_mode(mode: Any) -> str | None:
    """The one line for an ``optim.mode`` that is not a registered mode (None for one that is)."""
    if mode in MODES:
        return None
    guess = difflib.get_close_matches(str(mode), list(MODES), n=1) or \
        [name for name in MODES if name.lower() == str(mode).lower()]
    return f"optim.mode={mode!r}; {f'did you mean {guess[0]}? ' if guess else ''}allowed: {', '.join(MODES)}"


def lr_grid(optimizer: str, mode: str) -> list[float]:
    """The paper's LR grid for an optimiser in a mode (powers of two); ValueError naming a mode that is not one
    (a sweep preset's ``${lr_grid:…}`` reaches here before any config check)."""
    if (problem := unknown_mode(mode)) is not None:
        raise ValueError(problem)
    return MODES[mode].lr_grid(optimizer)


def single_lr(cfg: OptimConfig, arch: str | None = None, scales: str | None = None) -> float:
    """The LR of an unpacked run: ``optim.lr``, or the mode's default for the architecture ``arch`` (under
    ``variant.scales``) when null (a packed run's members each bring their own: ``config/members.py``)."""
    if cfg.lr is None:
        return MODES[cfg.mode].default_lr(cfg.name, arch, scales)
    return float(cfg.lr[0]) if isinstance(cfg.lr, (list, tuple)) else float(cfg.lr)


__all__ = ["MODES", "Mode", "build_network", "lr_grid", "single_lr", "unknown_mode"]
