"""Dualized: the base direction through the network's duality map at modular norm η (``Module.dualize``:
orthogonalised matrices, ``optim.ortho.method``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...nn import Module
from ...nn.orthogonalize import iteration_dtype
from ..config import OptimConfig
from .base import Mode


def dualize_settings(cfg: OptimConfig, device: torch.device) -> dict[str, Any]:
    """``Module.dualize``'s keyword arguments from the optim settings (shared with manifold's free layers)."""
    ortho = cfg.ortho
    return {"method": ortho.method, "steps": ortho.steps, "iter_dtype": iteration_dtype(ortho.dtype, device)}


class Dualized(Mode):
    name = "dualized"
    needs_modular_norm = True

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        return net.dualize(u, lr, **dualize_settings(cfg, weights[0].device))

    def summary_fields(self, cfg: OptimConfig, device: torch.device) -> dict[str, Any]:
        # optim.ortho.dtype=auto depends on the device, like its kernels
        dtype = iteration_dtype(cfg.ortho.dtype, device) or torch.float32
        return {"ortho_dtype": str(dtype).removeprefix("torch.")}
