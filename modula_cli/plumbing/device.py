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


def use_gpu(index: int) -> None:
    """This process trains on the ``index``-th of the GPUs it sees (modulo their count): one each for a job's
    runs that share its GPUs. Nothing without a GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(index % torch.cuda.device_count())
