"""A user's own architecture for modula-sweep, outside the package: a plain MLP for images, built from the
atoms and bonds of ``modula_cli.nn``. The arch config names it by import path (``configs/arch/my_mlp.yaml``)."""

from __future__ import annotations

import math
from typing import Any

from modula_cli.nn import Flatten, Linear, Module, ScaledGELU, ScaledReLU, named, with_role

ACTIVATIONS = {"relu": ScaledReLU, "gelu": ScaledGELU}  # the scaled versions have sensitivity 1


def my_mlp(arch: Any, data: Any) -> Module:
    """output ∘ (act ∘ hidden) ** (depth − 1) ∘ act ∘ input ∘ Flatten, hidden layers tared to arch.hidden_mass.

    ``arch`` is this architecture's config (width and depth keep their meaning, so sweep=width and
    sweep=depth work; activation and hidden_mass are its own keys); ``data`` is the dataset, whose
    ``input_shape`` and ``num_classes`` fix the first and last layers."""
    if arch.activation not in ACTIVATIONS:
        raise ValueError(f"arch.activation={arch.activation!r}; allowed: {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[arch.activation]
    first = act() @ with_role(Linear(arch.width, math.prod(data.input_shape)), "input") @ Flatten()
    hidden = (act() @ with_role(Linear(arch.width, arch.width), "hidden")) ** (arch.depth - 1)
    if arch.depth > 1:
        hidden.tare(arch.hidden_mass)
    last = with_role(Linear(data.num_classes, arch.width), "output")
    return named(last @ hidden @ first, f"MyMLP(width={arch.width}, depth={arch.depth}, {arch.activation})")
