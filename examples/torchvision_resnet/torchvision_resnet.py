"""torchvision's own ``ResNet`` class with a width multiplier, for modula-sweep as it is (no modula_cli import).

torchvision fixes the stages' widths at 64, 128, 256 and 512 channels; ``arch.width`` replaces the 64 (each
stage keeps its ×2), so sweep=width widens every residual stage. The stem (3 → 64 channels) keeps torchvision's
size: it is μP's input layer, the first block's projection lifts it to the width.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class WideResNet(ResNet):
    """torchvision's ResNet whose stages are ``width / 64`` times as wide."""

    def __init__(self, width: int, block: str, layers: list[int], num_classes: int):
        self.width_factor = width / 64
        super().__init__(BLOCKS[block], layers, num_classes=num_classes)
        self.fc = nn.Linear(self.inplanes, num_classes)  # torchvision sizes it for 512 channels

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):  # noqa: ANN001 - torchvision's signature
        return super()._make_layer(block, round(planes * self.width_factor), blocks, stride, dilate)


def torchvision_resnet(arch: Any, data: Any) -> nn.Module:
    """The ResNet for this arch config on image data (``data.num_classes``)."""
    if arch.block not in BLOCKS:
        raise ValueError(f"arch.block={arch.block!r}; allowed: {', '.join(BLOCKS)}")
    return WideResNet(arch.width, arch.block, list(arch.layers), data.num_classes)
