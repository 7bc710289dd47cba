"""The equations of docs/design.md ("Bonds", "Architectures", "Variants") written out in plain float64 tensor
algebra, independently of the code under test: the references that tests/test_nn_bonds.py and
tests/test_nn_compounds.py compare the modules with, and the helpers that go with them."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from modula_cli.nn import Module


F64 = torch.float64
EPS = 1e-12  # the normalisation bonds' documented default


def gaussian_weights(net: Module, seed: int, scale: float = 0.5) -> list[Tensor]:
    """Random float64 weights of the net's shapes: generic values (not orthogonal) catch more mistakes."""
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(t.shape, generator=g, dtype=F64) for t in net.initialize(0, dtype=F64)]


def close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-9, atol=1e-11)


def ref_gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def ref_layer_norm(x: Tensor, dims: tuple[int, ...] = (-1,)) -> Tensor:
    centred = x - x.mean(dim=dims, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(dim=dims, keepdim=True) + EPS)


def ref_rms_divide(x: Tensor, dims: tuple[int, ...] = (-1,)) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + EPS)


def split_heads(t: Tensor, heads: int) -> Tensor:
    batch, tokens, channels = t.shape
    return t.reshape(batch, tokens, heads, channels // heads).permute(0, 2, 1, 3)


def merge_heads(t: Tensor) -> Tensor:
    batch, heads, tokens, d = t.shape
    return t.permute(0, 2, 1, 3).reshape(batch, tokens, heads * d)


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Tensor:
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        tokens = q.shape[-2]
        scores = scores.masked_fill(torch.ones(tokens, tokens, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def ref_paper_attention(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, heads: int, third: str,
                        causal: bool = True) -> Tensor:
    """docs/design.md "Architectures" and "Variants": 1/d_q attention, the 1/3 on the output or on q, k, v."""
    q, k, v = (split_heads(x @ w.T, heads) for w in (wq, wk, wv))
    scale = 1.0 / q.shape[-1]
    if third == "qkv":
        out = attend(q / 3, k / 3, v / 3, scale, causal)
    else:
        out = attend(q, k, v, scale, causal) / 3
    return merge_heads(out) @ wo.T
