"""Architecture registry: ``arch.name`` → a function of the arch config and the dataset, and the kind of
dataset it reads.

A new architecture is one function here plus one YAML file in ``configs/arch/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .nn import GPT, Module, ResMLP, ResNet, StandardGPT


def gpt(arch: Any, data: Any) -> Module:
    return GPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
               depth=arch.depth, blocks_mass=arch.blocks_mass)


def standard_gpt(arch: Any, data: Any) -> Module:
    return StandardGPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
                       depth=arch.depth)


def resmlp(arch: Any, data: Any) -> Module:
    return ResMLP(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  input_dim=math.prod(data.input_shape), output_dim=data.num_classes, blocks_mass=arch.blocks_mass)


def resnet(arch: Any, data: Any) -> Module:
    return ResNet(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  in_channels=data.input_shape[0], num_classes=data.num_classes, blocks_mass=arch.blocks_mass,
                  kernel_size=arch.kernel_size)


@dataclass(frozen=True)
class Architecture:
    build: Callable[[Any, Any], Module]
    data_kind: str  # the dataset kind it reads: "language" or "image" (see data.DATASETS)


ARCHITECTURES: dict[str, Architecture] = {
    "gpt": Architecture(gpt, "language"), "standard_gpt": Architecture(standard_gpt, "language"),
    "resmlp": Architecture(resmlp, "image"), "resnet": Architecture(resnet, "image"),
}


def build_model(arch: Any, data: Any) -> Module:
    if arch.name not in ARCHITECTURES:
        raise ValueError(f"unknown arch {arch.name!r}; allowed: {', '.join(ARCHITECTURES)}")
    entry = ARCHITECTURES[arch.name]
    if data.kind != entry.data_kind:
        raise ValueError(f"arch={arch.name} needs a {entry.data_kind} dataset, got {data.name} ({data.kind})")
    return entry.build(arch, data)
