"""Manifold mode's retraction (docs/design.md, "Manifold mode"; docs/manifold.md): a step ε along A taken back onto
the Stiefel manifold, the polar factor of U − εA, by Newton–Schulz scaled for the spectrum the step gives it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

# The retraction's scaled Newton–Schulz (``retract``): steps, and the step sizes ε = η/r its schedule is
# tabulated for, evenly in log(1 + ε) up to ε = 100 (100 times the weight's own norm; the sweeps here take ε ≤ 2),
# where 8 steps give the polar factor to float precision (docs/manifold.md).
RETRACT_STEPS = 8
RETRACT_MAX_STEP = 100.0
RETRACT_GRID = 2048


@dataclass(frozen=True)
class RetractionSchedule:
    """Each step's coefficients of the retraction's scaled Newton–Schulz, x ← c₁x + c₃x³, tabulated by step size:
    for singular values in [ℓ, 1], α² = 3/(1 + ℓ + ℓ²), c₁ = 3α/2, c₃ = −α³/2, and [ℓ, 1] goes to [ℓ', 1] with
    ℓ' = c₁ℓ + c₃ℓ³ (Chen and Chow 2014), from ℓ = 1/(1 + ε). A table (not the recursion per matrix) so that a
    step is 4 operations on the device, not 16."""

    grid: Tensor    # log(1 + ε) of each column, ascending
    linear: Tensor  # c₁, (steps, grid)
    cubic: Tensor   # c₃, (steps, grid)

    @classmethod
    def on(cls, device: torch.device | str) -> RetractionSchedule:
        grid = torch.linspace(0, math.log1p(RETRACT_MAX_STEP), RETRACT_GRID, dtype=torch.float64)
        low, linear, cubic = torch.exp(-grid), [], []
        for _ in range(RETRACT_STEPS):
            alpha = torch.sqrt(3 / (1 + low + low * low))
            linear.append(1.5 * alpha)
            cubic.append(-0.5 * alpha**3)
            low = linear[-1] * low + cubic[-1] * low**3
        return cls(*(t.to(device, torch.float32) for t in (grid, torch.stack(linear), torch.stack(cubic))))

    def columns(self, eps: Tensor) -> Tensor:
        """Each step size's column: the first at or above it (its ℓ a hair below the true one, so [ℓ, 1] holds
        every singular value)."""
        return torch.bucketize(torch.log1p(eps), self.grid).clamp_(max=self.grid.numel() - 1)


def retract(U: Tensor, A: Tensor, eps: Tensor, schedule: RetractionSchedule | None = None) -> Tensor:
    """Back onto the Stiefel manifold after a step ε along A: the polar factor of X = U − εA, for a batch (B, m, n)
    of tall U with orthonormal columns, A with ‖A‖_op ≤ 1 and ε (B,), all in float32 (a bfloat16 iteration's
    error, 1e-2 of the weight, would be larger than a small step).

    The step bounds X's spectrum: ‖X‖ ≤ 1 + ε, and σ(X) ∈ [1, √(1+ε²)] when A is tangent. So X/(1 + ε) has its
    singular values in [ℓ, 1], ℓ = 1/(1+ε), and Newton–Schulz scaled for that interval (``RetractionSchedule``)
    converges from it in a few steps, where Polar Express from the Frobenius normalisation needs its whole table
    plus a refinement. Exact for ε ≤ ``RETRACT_MAX_STEP``; a larger step is taken as one of that size.
    ``schedule``: on U's device (made here if not given)."""
    schedule = schedule or RetractionSchedule.on(U.device)
    # A step past the table (100 times the weight's norm: a layer whose learned radius has all but vanished) is
    # taken as the table's largest, so the weight still lands on the manifold: 8 steps cannot reach it from there.
    eps = eps.clamp(max=RETRACT_MAX_STEP)
    X = (U - eps.reshape(-1, 1, 1) * A) / (1 + eps).reshape(-1, 1, 1)
    columns = schedule.columns(eps)
    linear, cubic = schedule.linear[:, columns], schedule.cubic[:, columns]  # (steps, B)
    for step in range(RETRACT_STEPS):
        # X (c₁I + c₃XᵀX): the cancellation on the small side keeps float precision
        factor = (X.mT @ X) * cubic[step].reshape(-1, 1, 1)
        factor.diagonal(dim1=-2, dim2=-1).add_(linear[step].unsqueeze(-1))
        X = X @ factor
    return X
