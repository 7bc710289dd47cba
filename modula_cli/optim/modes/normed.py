"""Normed: the base direction rescaled so that its modular norm is η (``Module.normalize``)."""

from __future__ import annotations

from torch import Tensor

from ...nn import Module, PowerIterationState
from ...plumbing.torch_internals import graph_break
from ..config import OptimConfig
from .base import Mode


class Normed(Mode):
    name = "normed"
    needs_modular_norm = True
    state_key = "power"  # the warm-started power iteration's vectors

    def init_state(self, weights: list[Tensor], cfg: OptimConfig) -> PowerIterationState:
        return PowerIterationState(cfg.normed.power_iterations)

    def runs_eagerly(self, state: PowerIterationState) -> bool:
        # the first step draws the start vectors (a CPU generator, which torch.compile cannot trace)
        return not state.vectors

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: PowerIterationState,
               cfg: OptimConfig) -> list[Tensor]:
        # Compiled, without this split Inductor recomputes the direction inside every power-iteration kernel:
        # the normed update took 2x longer (ResMLP, CPU). A no-op in eager mode.
        graph_break()
        return net.normalize(u, lr, state=state)
