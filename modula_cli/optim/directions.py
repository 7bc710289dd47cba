"""The base optimisers' directions u from the gradients g, with the paper's bias correction
``c_t = (1 − β)^{t/(t+1)}`` in place of Adam's usual one (docs/design.md, "The optimisation loop")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from ..nn.groups import dense_order
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


def ema_(averages: list[Tensor], values: list[Tensor], weight: Tensor | float) -> None:
    """``a ← a + c (x − a)`` in place. A host number: one ``_foreach_lerp_``. A device scalar (a compiled step, where
    Inductor fuses these): ``_foreach_lerp_`` would read it back to the host, three multi-tensor operations do not."""
    if not isinstance(weight, Tensor):
        torch._foreach_lerp_(averages, values, weight)
        return
    change = torch._foreach_sub(values, averages)
    torch._foreach_mul_(change, weight)
    torch._foreach_add_(averages, change)


def finite_ratio(numerators: list[Tensor], denominators: list[Tensor], buffers: dict | None = None) -> list[Tensor]:
    """``n / d`` with NaN and ±inf set to 0, written into one buffer so that the clean-up is one operation
    however many tensors there are (torch has no multi-tensor ``nan_to_num``); the results are views of it.
    ``buffers``: where the buffer and its views are kept between steps (they are overwritten each call)."""
    # Compiled, Inductor fuses the clean-up into the division (and a buffer made at the first call would make
    # the second compile again); tensors of several dtypes or devices cannot share one buffer.
    held = None if torch.compiler.is_compiling() else _ratio_buffer(numerators, buffers)
    if held is None:
        ratios = torch._foreach_div(numerators, denominators)
        return [torch.nan_to_num_(r, nan=0.0, posinf=0.0, neginf=0.0) for r in ratios]
    buffer, views = held
    torch._foreach_copy_(views, numerators)
    torch._foreach_div_(views, denominators)  # exactly n / d
    buffer.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return list(views)


def _ratio_buffer(like: list[Tensor], buffers: dict | None) -> tuple[Tensor, list[Tensor]] | None:
    """One buffer and its views shaped (and laid out) as ``like``, kept in ``buffers``; None when ``like`` mixes
    dtypes or devices."""
    first = like[0]
    key = (tuple(t.shape for t in like), first.dtype, first.device)
    if buffers is not None and key in buffers:
        return buffers[key]
    if any(t.dtype != first.dtype or t.device != first.device for t in like):
        return None
    buffer = torch.empty(sum(t.numel() for t in like), dtype=first.dtype, device=first.device)
    held = buffer, [laid_out_like(piece, t) for piece, t in zip(buffer.split([t.numel() for t in like]), like)]
    if buffers is not None:
        buffers.clear()
        buffers[key] = held
    return held


def laid_out_like(piece: Tensor, like: Tensor) -> Tensor:
    """``piece`` (a flat run of ``like.numel()`` numbers) as a tensor of ``like``'s shape and, where ``like`` is a
    permuted dense tensor (a transposed matrix), its strides too (``groups.stacked`` says why)."""
    order = dense_order(like)
    if order is None:
        return piece.view(like.shape)
    return piece.view([like.shape[d] for d in order]).permute([order.index(d) for d in range(like.ndim)])


def sgd_direction(state: Moments, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
    ema_(state.momentum, grads, state.scalars.ema_weights()[0])
    return state.momentum


def adam_direction(state: Moments, grads: list[Tensor], cfg: OptimConfig,
                   eps: Sequence[float] | None = None) -> list[Tensor]:
    """``m / (√v + ε)``; ``eps``: one ε per weight in place of ``cfg.eps`` (μP's depth recipes)."""
    momentum_weight, second_moment_weight = state.scalars.ema_weights()
    ema_(state.momentum, grads, momentum_weight)
    ema_(state.second_moment, torch._foreach_mul(grads, grads), second_moment_weight)
    denominator = torch._foreach_sqrt(state.second_moment)
    if eps is not None:
        torch._foreach_add_(denominator, list(eps))
    elif cfg.eps:
        torch._foreach_add_(denominator, cfg.eps)
    # Without ε, entries with v = 0 give 0/0: the paper turns NaN/inf into 0.
    return finite_ratio(state.momentum, denominator, getattr(state, "buffers", None))


DIRECTIONS: dict[str, Callable[[Moments, list[Tensor], OptimConfig], list[Tensor]]] = {
    "sgd": sgd_direction, "adam": adam_direction}
