"""Compounds (docs/design.md, "Architectures"): each architecture is a function that reads like its equation.

Python binds ``@`` and ``*`` equally, left to right, so every scaled term is parenthesised.
"""

from __future__ import annotations

import math

from .atoms import Conv2D, Embed, Linear
from .bonds import (GELU, Abs, AddHeads, AvgPool, Enumerate, Flatten, FunctionalAttention, LayerNorm, MeanSubtract,
                    RemoveHeads, RMSDivide, ScaledGELU)
from .checks import require_positive_ints
from .module import Identity, Module
from .roles import named
from .roles import with_role as role


def _positive_mass(owner: str, mass: float) -> None:
    if isinstance(mass, bool) or not isinstance(mass, (int, float)) or not math.isfinite(mass) or mass <= 0:
        raise ValueError(f"{owner}: blocks_mass must be a positive finite number, got {mass!r}")


def Residual(residue: Module, depth: int, blocks_mass: float) -> Module:
    """``((1 − 1/L) · Identity + (1/L) · residue) ** L``, tared to ``blocks_mass``.

    At L = 1 the identity branch has weight 0, so the block is the residue itself.
    """
    block = residue if depth == 1 else ((1 - 1 / depth) * Identity()) + ((1 / depth) * residue)
    return named((block ** depth).tare(blocks_mass), f"Residual(depth={depth})")


def ResMLP(width: int, depth: int, block_depth: int, input_dim: int, output_dim: int,
           blocks_mass: float = 1.0) -> Module:
    require_positive_ints("ResMLP", width=width, depth=depth, block_depth=block_depth, input_dim=input_dim,
                  output_dim=output_dim)
    _positive_mass("ResMLP", blocks_mass)
    initial = role(Linear(width, input_dim), "input") @ Flatten()
    residue = (MeanSubtract() @ Abs() @ role(Linear(width, width), "hidden") @ RMSDivide()) ** block_depth
    net = role(Linear(output_dim, width), "output") @ Residual(residue, depth, blocks_mass) @ initial
    return named(net, f"ResMLP(width={width}, depth={depth}, block_depth={block_depth})")


def ResNet(width: int, depth: int, block_depth: int, in_channels: int, num_classes: int,
           blocks_mass: float = 20.0, kernel_size: int = 3) -> Module:
    require_positive_ints("ResNet", width=width, depth=depth, block_depth=block_depth, in_channels=in_channels,
                  num_classes=num_classes, kernel_size=kernel_size)
    _positive_mass("ResNet", blocks_mass)
    if kernel_size % 2 == 0:
        raise ValueError(f"ResNet: kernel_size must be odd to keep the image size, got {kernel_size}")
    pad = kernel_size // 2
    chw = (-3, -2, -1)
    initial = role(Conv2D(width, in_channels, kernel_size, padding=pad), "input")
    hidden = role(Conv2D(width, width, kernel_size, padding=pad), "hidden")
    residue = (MeanSubtract(chw) @ Abs() @ hidden @ RMSDivide(chw)) ** block_depth
    final = role(Linear(num_classes, width), "output") @ Flatten() @ AvgPool()
    net = final @ Residual(residue, depth, blocks_mass) @ initial
    return named(net, f"ResNet(width={width}, depth={depth}, block_depth={block_depth})")


ATTENTION_THIRDS = ("output", "qkv")


def Attention(num_heads: int, d_embed: int, d_query: int, d_value: int, causal: bool = True,
              third: str = "output") -> Module:
    """Multi-head attention. The tuple (Q, K, V) has sensitivity 3, and a 1/3 brings the block back to 1:
    ``third="output"`` scales the attention's output; ``"qkv"`` scales each of q, k and v (attention logits
    × 1/9, output × 1/3). The reference code's ``W @ FA * 1/3 @ (Q, K, V)`` parses left to right as
    ``(((W @ FA) * 1) / 3) @ (Q, K, V)``, and ``module * scalar`` puts the scalar on the module's input side:
    between the tuple and the attention, so "qkv" (``FunctionalAttention(input_scale=1/3)``, which is
    ``FA @ Mul(1/3)`` computed without three products of q, k, v). Same masses, sensitivities and shares
    either way."""
    require_positive_ints("Attention", num_heads=num_heads, d_embed=d_embed, d_query=d_query, d_value=d_value)
    if third not in ATTENTION_THIRDS:
        raise ValueError(f"Attention: third={third!r}; allowed: {', '.join(ATTENTION_THIRDS)}")
    Q = AddHeads(num_heads) @ role(Linear(num_heads * d_query, d_embed), "attn.q")
    K = AddHeads(num_heads) @ role(Linear(num_heads * d_query, d_embed), "attn.k")
    V = AddHeads(num_heads) @ role(Linear(num_heads * d_value, d_embed), "attn.v")
    exit_ = role(Linear(d_embed, num_heads * d_value), "attn.out") @ RemoveHeads()
    if third == "qkv":
        attention = FunctionalAttention(causal, input_scale=1 / 3)
    else:
        attention = (1 / 3) * FunctionalAttention(causal)
    return named(exit_ @ attention @ (Q, K, V), f"Attention(heads={num_heads})")


def _check_heads(owner: str, width: int, num_heads: int) -> None:
    if width % num_heads != 0:
        raise ValueError(f"{owner}: width {width} is not divisible by num_heads {num_heads}; "
                         f"choose a width that is a multiple of num_heads")


def GPT(vocab_size: int, context: int, num_heads: int, width: int, depth: int,
        blocks_mass: float = 5.0, attention_third: str = "output") -> Module:
    require_positive_ints("GPT", vocab_size=vocab_size, context=context, num_heads=num_heads, width=width, depth=depth)
    _positive_mass("GPT", blocks_mass)
    _check_heads("GPT", width, num_heads)
    d_head = width // num_heads
    token = (1 / 2) * role(Embed(width, vocab_size), "embed.token")
    position = (1 / 2) * (role(Embed(width, context), "embed.position") @ Enumerate())
    initial = (token + position).tare(1.0)

    def residual(residue: Module) -> Module:
        return ((1 - 1 / (2 * depth)) * Identity()) + ((1 / (2 * depth)) * residue)

    att_block = residual(Attention(num_heads, width, d_head, d_head, third=attention_third) @ LayerNorm())
    mlp = role(Linear(width, 4 * width), "mlp.out") @ ScaledGELU() @ role(Linear(4 * width, width), "mlp.in")
    mlp_block = residual(mlp @ LayerNorm())
    blocks = named(((mlp_block @ att_block) ** depth).tare(blocks_mass), f"Blocks(depth={depth})")
    net = role(Linear(vocab_size, width), "output") @ LayerNorm() @ blocks @ initial
    return named(net, f"GPT(width={width}, depth={depth}, heads={num_heads}, context={context})")


def StandardGPT(vocab_size: int, context: int, num_heads: int, width: int, depth: int,
                residual_scale: float = 1.0) -> Module:
    """nanoGPT-style baseline: Gaussian init 0.02 (0.02/√(2L) on residual outputs), 1/√d_q attention,
    plain residual sums ``x + s · f(LN(x))`` (s = ``residual_scale``, 1 as nanoGPT has it; μP's depth recipes
    set it) and no forward scale factors. LayerNorms carry no gain and embeddings are not tied (our weights
    are one tensor per atom). Train it with unnormed optimisers.
    """
    require_positive_ints("StandardGPT", vocab_size=vocab_size, context=context, num_heads=num_heads, width=width,
                  depth=depth)
    _check_heads("StandardGPT", width, num_heads)
    if isinstance(residual_scale, bool) or not isinstance(residual_scale, (int, float)) or \
            not math.isfinite(residual_scale) or residual_scale <= 0:
        raise ValueError(f"StandardGPT: residual_scale must be a positive finite number, got {residual_scale!r}")
    d_head = width // num_heads
    std, out_std = 0.02, 0.02 / math.sqrt(2 * depth)

    def head(n_out: int, name: str) -> Module:
        return AddHeads(num_heads) @ role(Linear(n_out, width, init_std=std), name)

    attention = role(Linear(width, width, init_std=out_std), "attn.out") @ RemoveHeads() \
        @ FunctionalAttention(causal=True, scale=1 / math.sqrt(d_head)) \
        @ (head(width, "attn.q"), head(width, "attn.k"), head(width, "attn.v"))
    mlp = role(Linear(width, 4 * width, init_std=out_std), "mlp.out") @ GELU() \
        @ role(Linear(4 * width, width, init_std=std), "mlp.in")
    def residual(branch: Module) -> Module:
        return Identity() + (branch if residual_scale == 1 else residual_scale * branch)

    block = residual(mlp @ LayerNorm()) @ residual(attention @ LayerNorm())
    initial = role(Embed(width, vocab_size, init_std=std), "embed.token") \
        + (role(Embed(width, context, init_std=std), "embed.position") @ Enumerate())
    blocks = named(block ** depth, f"Blocks(depth={depth})")
    net = role(Linear(vocab_size, width, init_std=std), "output") @ LayerNorm() @ blocks @ initial
    return named(net, f"StandardGPT(width={width}, depth={depth}, heads={num_heads}, context={context})")
