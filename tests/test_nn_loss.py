"""The training loss (modula_cli/nn/loss.py): each network's mean cross-entropy and count of hits on a batch, one
network or packed members, against the formula computed position by position; the gradients of the members' summed
loss."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from modula_cli.nn import Linear
from modula_cli.nn.loss import grads_of, losses_and_hits
from nn_reference import F64


def ref_cross_entropy(logits: Tensor, targets: Tensor) -> tuple[float, int]:
    """Mean of log Σ exp(z) − z_target over positions, and the count of argmax hits, one position at a time."""
    rows, labels = logits.reshape(-1, logits.shape[-1]).tolist(), targets.reshape(-1).tolist()
    total, hits = 0.0, 0
    for row, label in zip(rows, labels):
        top = max(row)
        total += top + math.log(sum(math.exp(z - top) for z in row)) - row[label]
        hits += int(row.index(top) == label)
    return total / len(rows), hits


def test_losses_and_hits_of_one_network():
    net = Linear(5, 3)  # logits (batch 2, tokens 4, vocab 5): no axis size repeats
    g = torch.Generator().manual_seed(0)
    w = [torch.randn(5, 3, generator=g, dtype=F64)]
    x = torch.randn(2, 4, 3, generator=g, dtype=F64)
    logits = x @ w[0].T
    y = logits.argmax(-1)
    y[0, 1] = (y[0, 1] + 1) % 5  # three misses out of eight
    y[1, 0] = (y[1, 0] + 2) % 5
    y[1, 3] = (y[1, 3] + 4) % 5
    loss, hits = losses_and_hits(net, w, x, y)
    expected_loss, expected_hits = ref_cross_entropy(logits, y)
    assert expected_hits == 5
    assert loss.shape == (1,) and hits.shape == (1,)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6) and hits.item() == 5


def test_losses_and_hits_of_packed_members():
    K = 3
    net = Linear(5, 3)
    g = torch.Generator().manual_seed(1)
    w = [torch.randn(K, 5, 3, generator=g, dtype=F64)]
    x = torch.randn(2, 4, 3, generator=g, dtype=F64)
    y = torch.randint(0, 5, (2, 4), generator=g)
    loss, hits = losses_and_hits(net, w, x.expand(K, *x.shape), y.expand(K, *y.shape), members=K)
    assert loss.shape == (K,) and hits.shape == (K,)
    for k in range(K):
        expected_loss, expected_hits = ref_cross_entropy(x @ w[0][k].T, y)
        assert loss[k].item() == pytest.approx(expected_loss, rel=1e-6) and hits[k].item() == expected_hits
    assert len(set(loss.tolist())) == K  # members differ, so a mix-up of members shows


def test_grads_of_sums_the_member_losses():
    a = torch.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    b = torch.tensor([2.0, -1.0, 4.0], requires_grad=True)
    losses = torch.stack([(a ** 2).sum(), (3 * b).sum() + (a[0, 0] * b[0])])
    ga, gb = grads_of(losses, [a, b])
    assert torch.equal(ga, torch.tensor([[2.0 + 2.0, -4.0], [1.0, 6.0]]))  # 2a, plus b[0] at a[0, 0]
    assert torch.equal(gb, torch.tensor([3.0 + 1.0, 3.0, 3.0]))  # 3, plus a[0, 0] at b[0]
