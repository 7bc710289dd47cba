"""Plain torch models for tests/test_torch_model.py, named by import path as a user's are
(``arch.name: torch_models:conv_net``; tests/ is on sys.path). None imports modula_cli."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ConvNet(nn.Module):
    """input conv (3 → w) · hidden conv (w → w) · optional batch norm · mean pool · readout (w → classes, biased)."""

    def __init__(self, width: int, classes: int, norm: bool = False):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.body = nn.Conv2d(width, width, 3, padding=1)
        self.norm = nn.BatchNorm2d(width) if norm else nn.Identity()
        self.fc = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.body(torch.relu(self.stem(x)))))
        return self.fc(h.mean(dim=(-2, -1)))


def conv_net(arch: Any, data: Any) -> nn.Module:
    return ConvNet(arch.width, data.num_classes)


def conv_net_bn(arch: Any, data: Any) -> nn.Module:
    return ConvNet(arch.width, data.num_classes, norm=True)


class TwoHeads(nn.Module):
    """Two readouts whose fan-in grows: μP cannot tell which is the readout."""

    def __init__(self, width: int, classes: int):
        super().__init__()
        self.stem, self.a, self.b = nn.Linear(192, width), nn.Linear(width, classes), nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x.flatten(1)))
        return self.a(h) + self.b(h)


def two_heads(arch: Any, data: Any) -> nn.Module:
    return TwoHeads(arch.width, data.num_classes)


def fixed_size(arch: Any, data: Any) -> nn.Module:
    """Nothing grows with arch.width."""
    return nn.Sequential(nn.Flatten(), nn.Linear(192, 32), nn.ReLU(), nn.Linear(32, data.num_classes))


def no_matrix(arch: Any, data: Any) -> nn.Module:
    """Only a bias: nothing for Muon to orthogonalise."""

    class Bias(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(data.num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)[:, :1] * 0 + self.bias

    return Bias()


def flat_logits(arch: Any, data: Any) -> nn.Module:
    """A language model that forgets the positions: (B, T) → (B, vocab)."""

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.head = nn.Embedding(data.vocab_size, arch.width), nn.Linear(arch.width, data.vocab_size)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.head(self.wte(idx).mean(dim=1))

    return Flat()


def raises(arch: Any, data: Any) -> nn.Module:
    raise RuntimeError("out of ideas")


def tied_gpt(arch: Any, data: Any) -> nn.Module:
    """An embedding tied to the readout (GPT-2's)."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(data.vocab_size, arch.width)
            self.mix = nn.Linear(arch.width, arch.width)
            self.lm_head = nn.Linear(arch.width, data.vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.lm_head(torch.relu(self.mix(self.wte(idx))))

    return Tied()


class UnevenMLP(nn.Module):
    """A hidden layer whose sizes grow unevenly: fan-in w + 16, fan-out w (m_in ≠ m_out)."""

    def __init__(self, width: int, classes: int):
        super().__init__()
        self.stem, self.hidden = nn.Linear(192, width + 16), nn.Linear(width + 16, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(torch.relu(self.stem(x.flatten(1))))))


def uneven_mlp(arch: Any, data: Any) -> nn.Module:
    return UnevenMLP(arch.width, data.num_classes)


class ResidualMLP(nn.Module):
    """input → depth × (x + s·W₂ relu(W₁ x)) → readout: s is ``arch.residual_scale`` (μP's depth recipes)."""

    def __init__(self, width: int, depth: int, inputs: int, classes: int, residual_scale: float):
        super().__init__()
        self.embed = nn.Linear(inputs, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
                                    for _ in range(depth))
        self.head = nn.Linear(width, classes, bias=False)
        self.residual_scale = residual_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.flatten(1))
        for block in self.blocks:
            x = x + self.residual_scale * block(x)
        return self.head(x)


def residual_mlp(arch: Any, data: Any) -> nn.Module:
    return ResidualMLP(arch.width, arch.depth, int(torch.tensor(data.input_shape).prod()), data.num_classes,
                       arch.residual_scale)


def last_position(arch: Any, data: Any) -> nn.Module:
    """nanoGPT's forward without its targets parameter named: (B, T) → (B, 1, vocab), the last position only."""

    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.head = nn.Embedding(data.vocab_size, arch.width), nn.Linear(arch.width, data.vocab_size)

        def forward(self, idx: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
            h = self.wte(idx)
            return (self.head(h) if y is not None else self.head(h[:, [-1], :])), None

    return Last()


def small_vocabulary(arch: Any, data: Any) -> nn.Module:
    """A readout built with a fixed size instead of the data's vocabulary."""
    return nn.Sequential(nn.Embedding(data.vocab_size, arch.width), nn.Linear(arch.width, 50))
