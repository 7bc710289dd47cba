"""A nanoGPT-style GPT in plain PyTorch, for modula-sweep as it is: no modula_cli import. The arch config
names the function by import path (``configs/arch/torch_gpt.yaml``); every key of that YAML reaches it as
``arch.<key>``.

Heads keep a fixed size (``arch.head_dim``) and grow in number with the width, so the attention's 1/√d_head
stays what it is at every width (μP asks for 1/d_head when d_head grows: docs/own_model.md).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention without the fused kernel: torch.func.vmap (packed runs) batches these ops natively,
    while ``scaled_dot_product_attention`` falls back to a slow loop under it on the CPU."""

    def __init__(self, width: int, heads: int, context: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width, bias=False)
        self.c_proj = nn.Linear(width, width, bias=False)
        self.register_buffer("causal", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        scores = scores.masked_fill(~self.causal[:tokens, :tokens], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(batch, tokens, width))


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width, bias=False)
        self.c_proj = nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    """``x + s·attn(LN(x))``, then ``x + s·mlp(LN(x))``: s is ``arch.residual_scale`` (1 as nanoGPT has it), which
    μP's depth recipes set from the depth (optim.mup.depth, docs/mup.md)."""

    def __init__(self, width: int, heads: int, context: int, residual_scale: float):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(width), CausalSelfAttention(width, heads, context)
        self.ln_2, self.mlp = nn.LayerNorm(width), MLP(width)
        self.residual_scale = residual_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.residual_scale * self.attn(self.ln_1(x))
        return x + self.residual_scale * self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``depth`` pre-norm blocks, a final LayerNorm and an untied readout."""

    def __init__(self, vocab_size: int, context: int, width: int, depth: int, heads: int,
                 residual_scale: float = 1.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, width), nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads, context, residual_scale) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        for name, p in self.named_parameters():  # PyTorch's default init, the residual projections as GPT-2's
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=1 / math.sqrt(p.shape[1] * 2 * depth))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[-1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def torch_gpt(arch: Any, data: Any) -> nn.Module:
    """The GPT for this arch config and dataset (language data: ``data.vocab_size``, ``data.context``)."""
    if arch.width % arch.head_dim:
        raise ValueError(f"arch.width={arch.width} is not a multiple of arch.head_dim={arch.head_dim}")
    return GPT(data.vocab_size, data.context, arch.width, arch.depth, arch.width // arch.head_dim,
               arch.get("residual_scale", 1.0))
