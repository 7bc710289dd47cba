"""The base optimisers' directions u from the gradients g, with the paper's bias correction
``c_t = (1 − β)^{t/(t+1)}`` in place of Adam's usual one (docs/design.md, "The optimisation loop")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from .config import OptimConfig


class Moments(Protocol):
    """What a direction reads and updates of the optimiser state (``state.OptimState`` or a slice of it, which the
    modes hold: the state itself imports the modes)."""

    momentum: list[Tensor]
    second_moment: list[Tensor]
    scalars: Any  # StepScalars: this step's EMA weights as device scalars


def ema_weight(beta: float, t: int) -> float:
    """``c_t = (1 − β)^{t/(t+1)}``: 1 at t = 0 (the first step copies g), → 1 − β later."""
    return (1.0 - beta) ** (t / (t + 1))


def sgd_direction(state: Moments, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
    torch._foreach_lerp_(state.momentum, grads, state.scalars.momentum_weight)
    return state.momentum


def adam_direction(state: Moments, grads: list[Tensor], cfg: OptimConfig,
                   eps: Sequence[float] | None = None) -> list[Tensor]:
    """``m / (√v + ε)``; ``eps``: one ε per weight in place of ``cfg.eps`` (μP's depth recipes)."""
    torch._foreach_lerp_(state.momentum, grads, state.scalars.momentum_weight)
    torch._foreach_lerp_(state.second_moment, torch._foreach_mul(grads, grads),
                        state.scalars.second_moment_weight)
    denominator = torch._foreach_sqrt(state.second_moment)
    if eps is not None:
        torch._foreach_add_(denominator, list(eps))
    elif cfg.eps:
        torch._foreach_add_(denominator, cfg.eps)
    direction = torch._foreach_div(state.momentum, denominator)
    # Without ε, entries with v = 0 give 0/0: the paper turns NaN/inf into 0.
    return [torch.nan_to_num_(u, nan=0.0, posinf=0.0, neginf=0.0) for u in direction]


DIRECTIONS: dict[str, Callable[[Moments, list[Tensor], OptimConfig], list[Tensor]]] = {
    "sgd": sgd_direction, "adam": adam_direction}
