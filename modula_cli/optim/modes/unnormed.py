"""Unnormed: the base optimiser's step as it is, Δ = η · u."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...nn import Module
from ..config import OptimConfig
from .base import Mode, scaled


class Unnormed(Mode):
    name = "unnormed"
    default_lrs = {"sgd": 2.0**-3, "adam": 2.0**-8}
    # Plain SGD's step depends on where the constant factors sit (variant.scales): in the weights (the modular
    # variant) the ResMLP's 2^-3 diverges within 3 steps. 2^-7 is two grid steps below the lowest LR at which
    # any of 3 seeds diverged in 200 steps (2^-5), on 32 × 32 photo patches in CIFAR-10's layout; there it
    # reaches 1.71 against 1.59 at the best LR, 2^-6 (docs/results/default_lrs).
    default_lr_exceptions = {("sgd", "resmlp", "weights"): 2.0**-7}
    lr_exponents = {"adam": range(-13, -2)}  # the paper's grid for unnormed Adam, 2^-13 … 2^-3

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        return scaled(u, lr)  # one LR per stacked network, or one for all
