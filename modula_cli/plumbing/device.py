"""Which torch device ``train.device`` names."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> torch.device:
    import torch  # here, not at the top: the command line's checks read DEVICES without torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device if device in DEVICES else "cpu")
