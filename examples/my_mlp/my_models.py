"""A user's own architecture for modula-sweep, outside the package: a plain MLP built from the atoms and bonds
of ``modula_cli.nn``, for both kinds of data. The arch config names it by import path
(``configs/arch/my_mlp.yaml``)."""

from __future__ import annotations

import math
from typing import Any

from modula_cli.nn import Embed, Flatten, Linear, Module, ScaledGELU, ScaledReLU, named, with_role

ACTIVATIONS = {"relu": ScaledReLU, "gelu": ScaledGELU}  # the scaled versions have sensitivity 1


def my_mlp(arch: Any, data: Any) -> Module:
    """output ∘ (act ∘ hidden) ** (depth − 1) ∘ act ∘ input, hidden layers tared to arch.hidden_mass.

    ``arch`` is this architecture's config (width and depth keep their meaning, so sweep=width and
    sweep=depth work; activation and hidden_mass are its own keys); ``data`` is the dataset. Images
    (``data.kind == "image"``): the input layer reads the flattened pixels (``data.input_shape``) and the
    output gives ``data.num_classes`` logits. Language: the input layer is a token embedding
    (``data.vocab_size`` rows) and the output gives next-token logits at every position, each from that
    position's token alone (a bigram model: no layer mixes positions)."""
    if arch.activation not in ACTIVATIONS:
        raise ValueError(f"arch.activation={arch.activation!r}; allowed: {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[arch.activation]
    if data.kind == "language":
        first, classes = with_role(Embed(arch.width, data.vocab_size), "input"), data.vocab_size
    else:
        first = with_role(Linear(arch.width, math.prod(data.input_shape)), "input") @ Flatten()
        classes = data.num_classes
    hidden = (act() @ with_role(Linear(arch.width, arch.width), "hidden")) ** (arch.depth - 1)
    if arch.depth > 1:
        hidden.tare(arch.hidden_mass)
    last = with_role(Linear(classes, arch.width), "output")
    return named(last @ hidden @ act() @ first,
                 f"MyMLP(width={arch.width}, depth={arch.depth}, {arch.activation})")
