"""The training loss of a network on a batch, for one network or a packed stack of them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .module import Module


def losses_and_hits(net: Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    members: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy and correct-prediction count of each network on one batch, shape (K,) each.

    ``members=K``: the weights and the batch carry a leading member axis (a packed run; a batch the
    members share is an ``expand`` view, no copy), and every atom applies its K weights in one batched
    call."""
    count = members or 1
    logits = net(x, weights).float()
    logits = logits.reshape(-1, logits.shape[-1])
    targets = y.reshape(-1)
    loss = F.cross_entropy(logits, targets, reduction="none").view(count, -1).mean(dim=1)
    return loss, (logits.argmax(-1) == targets).view(count, -1).sum(dim=1)


def grads_of(losses: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    # Members share no weight, so the gradient of the summed loss is each member's own gradient.
    return list(torch.autograd.grad(losses.sum(), weights))
