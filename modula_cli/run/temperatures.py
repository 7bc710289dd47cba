"""The logits' scale, logged with the training loss in every mode: their RMS on a fixed probe. (Manifold mode
adds each learned layer scale: ``optim/modes/manifold.py``.)"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..nn import Module

PROBE_SAMPLES = 4  # logits of the first evaluation batch's first samples: the same probe at every log


@torch.no_grad()
def logit_rms(net: Module, weights: Sequence[Tensor], x: Tensor, members: bool) -> Tensor:
    """RMS of the network's outputs on ``x`` (the probe), per member when ``members``."""
    logits = net(x, list(weights)).float()
    squares = logits.pow(2)
    return squares.reshape(squares.shape[0], -1).mean(dim=-1).sqrt() if members else squares.mean().sqrt()


def probe(batch: tuple[Tensor, Tensor], members: bool) -> Tensor:
    """The logit probe's inputs from an evaluation batch (with its member axis when packed)."""
    x = batch[0]
    return x[:, :PROBE_SAMPLES] if members else x[:PROBE_SAMPLES]
