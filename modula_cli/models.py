"""Architecture registry: ``arch.name`` → a function of the arch config and the dataset.

A new architecture is one function here plus one YAML file in ``configs/arch/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .nn import GPT, Module, ResMLP, ResNet, StandardGPT


def _language(arch: Any, data: Any) -> None:
    if data.kind != "language":
        raise ValueError(f"arch={arch.name} needs a language dataset (shakespeare, tinystories, openwebtext), "
                         f"got {data.name}")


def _image(arch: Any, data: Any) -> None:
    if data.kind != "image":
        raise ValueError(f"arch={arch.name} needs an image dataset (cifar10), got {data.name}")


def gpt(arch: Any, data: Any) -> Module:
    _language(arch, data)
    return GPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
               depth=arch.depth, blocks_mass=arch.blocks_mass)


def standard_gpt(arch: Any, data: Any) -> Module:
    _language(arch, data)
    return StandardGPT(vocab_size=data.vocab_size, context=data.context, num_heads=arch.heads, width=arch.width,
                       depth=arch.depth)


def resmlp(arch: Any, data: Any) -> Module:
    _image(arch, data)
    return ResMLP(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  input_dim=math.prod(data.input_shape), output_dim=data.num_classes, blocks_mass=arch.blocks_mass)


def resnet(arch: Any, data: Any) -> Module:
    _image(arch, data)
    return ResNet(width=arch.width, depth=arch.depth, block_depth=arch.block_depth,
                  in_channels=data.input_shape[0], num_classes=data.num_classes, blocks_mass=arch.blocks_mass,
                  kernel_size=arch.kernel_size)


ARCHITECTURES: dict[str, Callable[[Any, Any], Module]] = {
    "gpt": gpt, "standard_gpt": standard_gpt, "resmlp": resmlp, "resnet": resnet,
}
LANGUAGE_ARCHS = ("gpt", "standard_gpt")


def build_model(arch: Any, data: Any) -> Module:
    if arch.name not in ARCHITECTURES:
        raise ValueError(f"unknown arch {arch.name!r}; allowed: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch.name](arch, data)
