"""Packed networks: K networks stacked on a leading member axis, each with its own per-network values."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .groups import same_shapes


def per_member(value: float | Tensor, like: Tensor) -> float | Tensor:
    """A per-network value of shape (K,) reshaped to broadcast over ``like`` (K, …); floats pass through."""
    if isinstance(value, Tensor) and value.ndim == 1:
        value = value.reshape(value.shape + (1,) * (like.ndim - 1)).to(like.device)
        return value if value.dtype == torch.bool else value.to(like.dtype)
    return value


def member_wise(tensors: list[Tensor], value: Tensor, combine: Callable[[Tensor, Tensor], Tensor]) -> list[Tensor]:
    """``combine(tensor, its member's entry of value)`` for each tensor (K, …) with ``value`` (K,): one call per
    shape on the tensors of that shape stacked, not one per tensor."""
    out: list[Tensor] = [None] * len(tensors)  # type: ignore[list-item]
    for indices, stacked in same_shapes(tensors):  # (tensors, K, …) with (1, K, 1, …)
        for index, piece in zip(indices, combine(stacked, per_member(value, stacked[0]).unsqueeze(0)).unbind(0)):
            out[index] = piece
    return out


def scaled_members(tensors: list[Tensor], factor: Tensor) -> list[Tensor]:
    """Each tensor (K, …) times its member's factor."""
    return member_wise(tensors, factor, torch.mul)


def kept_members(tensors: list[Tensor], keep: Tensor) -> list[Tensor]:
    """Each tensor (K, …) with the members not in ``keep`` (bool, (K,)) set to 0, whatever they held (NaN too)."""
    return member_wise(tensors, keep, lambda stacked, kept: torch.where(kept, stacked, torch.zeros_like(stacked)))
