"""Unnormed: the base optimiser's step as it is, Δ = η · u."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...nn import Module
from ...nn.module import per_member
from ..config import OptimConfig
from .base import Mode


class Unnormed(Mode):
    name = "unnormed"
    default_lrs = {"sgd": 2.0**-3, "adam": 2.0**-8}
    lr_exponents = {"adam": range(-13, -2)}  # the paper's grid for unnormed Adam, 2^-13 … 2^-3

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        if lr.ndim:  # one LR per stacked network
            return [piece * per_member(lr, piece) for piece in u]
        return torch._foreach_mul(u, lr)
