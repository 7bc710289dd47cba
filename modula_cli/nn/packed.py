"""Packed networks: K networks stacked on a leading member axis, each with its own per-network values."""

from __future__ import annotations

import torch
from torch import Tensor


def per_member(value: float | Tensor, like: Tensor) -> float | Tensor:
    """A per-network value of shape (K,) reshaped to broadcast over ``like`` (K, …); floats pass through."""
    if isinstance(value, Tensor) and value.ndim == 1:
        value = value.reshape(value.shape + (1,) * (like.ndim - 1)).to(like.device)
        return value if value.dtype == torch.bool else value.to(like.dtype)
    return value
