"""Bonds (docs/design.md, "Bonds"): weightless modules. Each is a small class with its sensitivity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .checks import require_positive_ints
from .module import Bond


def _dims(dims: int | Sequence[int]) -> tuple[int, ...]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not dims or any(d >= 0 for d in dims):
        raise ValueError(f"normalisation dims must be trailing (negative) dimensions, got {dims}")
    # RMSDivide and LayerNorm normalise over the span from the first dim to the last: a gap would be filled
    if sorted(dims) != list(range(-len(dims), 0)):
        raise ValueError(f"normalisation dims must be the last ones without a gap (-1, or -2 and -1, …), got {dims}")
    return tuple(sorted(dims))


class Abs(Bond):
    def apply(self, x):
        return x.abs()


class ReLU(Bond):
    _sensitivity = 1 / math.sqrt(2)

    def apply(self, x):
        return F.relu(x)


class GELU(Bond):
    _sensitivity = 1 / math.sqrt(2)

    def apply(self, x):
        return F.gelu(x)


class ScaledReLU(Bond):
    def apply(self, x):
        return math.sqrt(2) * F.relu(x)


class ScaledGELU(Bond):
    def apply(self, x):
        return math.sqrt(2) * F.gelu(x)


class MeanSubtract(Bond):
    def __init__(self, dims: int | Sequence[int] = -1):
        self.dims = _dims(dims)

    def apply(self, x):
        return x - x.mean(dim=self.dims, keepdim=True)


class RMSDivide(Bond):
    def __init__(self, dims: int | Sequence[int] = -1, eps: float = 1e-12):
        self.dims, self.eps = _dims(dims), eps

    def apply(self, x):
        return F.rms_norm(x, x.shape[len(x.shape) + self.dims[0]:], eps=self.eps)


class LayerNorm(Bond):
    """``RMSDivide ∘ MeanSubtract`` over trailing dims, without learnable gain or bias."""

    def __init__(self, dims: int | Sequence[int] = -1, eps: float = 1e-12):
        self.dims, self.eps = _dims(dims), eps

    def apply(self, x):
        return F.layer_norm(x, x.shape[len(x.shape) + self.dims[0]:], eps=self.eps)


class FunctionalAttention(Bond):
    """``softmax(q kᵀ · scale + mask) v`` on (batch, heads, tokens, d); scale defaults to 1/d_q.

    ``input_scale`` s multiplies each of q, k and v first (``Mul(s)`` before it: sensitivity s), computed as
    logits × s² and output × s: one product of the output instead of three of the inputs."""

    shape_preserving = False

    def __init__(self, causal: bool = True, scale: float | None = None, input_scale: float = 1.0):
        if not isinstance(input_scale, (int, float)) or isinstance(input_scale, bool) or not 0 < input_scale < math.inf:
            raise ValueError(f"FunctionalAttention needs a positive, finite input_scale, got {input_scale!r}")
        self.causal, self.scale, self.input_scale = causal, scale, float(input_scale)
        self._sensitivity = self.input_scale

    def apply(self, x):
        q, k, v = x
        scale = (self.scale if self.scale is not None else 1.0 / q.shape[-1]) * self.input_scale**2
        # Extra leading axes (packed members) fold into the batch axis: the fused kernels take 4-D input.
        lead = q.shape[:-3]
        q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=scale)
        out = out if self.input_scale == 1.0 else self.input_scale * out
        return out.reshape(*lead, *out.shape[1:])

    def describe(self) -> str:
        if self.input_scale == 1.0:
            return "FunctionalAttention"
        return f"FunctionalAttention(q, k, v × {self.input_scale:.4g})"


class AddHeads(Bond):
    """(batch, tokens, heads·d) → (batch, heads, tokens, d)."""

    shape_preserving = False

    def __init__(self, num_heads: int):
        require_positive_ints("AddHeads", num_heads=num_heads)
        self.num_heads = num_heads

    def apply(self, x):
        *lead, tokens, channels = x.shape
        return x.reshape(*lead, tokens, self.num_heads, channels // self.num_heads).transpose(-3, -2)


class RemoveHeads(Bond):
    """(batch, heads, tokens, d) → (batch, tokens, heads·d)."""

    shape_preserving = False

    def apply(self, x):
        x = x.transpose(-3, -2)
        return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


class Flatten(Bond):
    """Flattens the last ``trailing_dims`` axes (an image's C, H, W), keeping every leading axis."""

    shape_preserving = False

    def __init__(self, trailing_dims: int = 3):
        self.trailing_dims = trailing_dims

    def apply(self, x):
        return x.flatten(start_dim=-self.trailing_dims)


class AvgPool(Bond):
    """Average pool of (…, C, H, W) to (…, C, 1, 1)."""

    def apply(self, x):
        return x.mean(dim=(-2, -1), keepdim=True)


class Enumerate(Bond):
    """Token positions 0 … T−1 of a (…, T) input, shaped (1, …, 1, T) to broadcast over its leading axes."""

    shape_preserving = False

    def apply(self, x):
        return torch.arange(x.shape[-1], device=x.device).reshape(*([1] * (x.ndim - 1)), x.shape[-1])
