"""Warm-started power iteration for the spectral norms that ``normalize`` needs (docs/design.md, "Fast maps").

The state belongs to the caller (the optimiser), never to a module: it can be checkpointed and reused
between steps, where the previous singular vector makes two iterations enough.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor


class PowerIterationState:
    """Right singular vector estimates, one per atom index, for matrices or batches of matrices."""

    def __init__(self, iterations: int = 2, seed: int = 0):
        if iterations < 1:
            raise ValueError(f"power iteration needs at least 1 iteration, got {iterations}")
        self.iterations = iterations
        self.seed = seed
        self.vectors: dict[int, Tensor] = {}

    def spectral_norms(self, matrices: dict[int, Tensor]) -> dict[int, Tensor]:
        """σ_max estimates of several atoms' matrices, keyed by atom index. Atoms whose matrices have the
        same shape iterate together in one batched call (a deep net has many equal layers, and a small
        one is otherwise bound by per-layer launch overhead); each keeps its own vector."""
        groups: dict[tuple, list[int]] = defaultdict(list)
        for index, matrix in matrices.items():
            groups[(tuple(matrix.shape), matrix.device)].append(index)
        sigmas = {}
        for indices in groups.values():
            stacked = torch.stack([matrices[i] for i in indices]) if len(indices) > 1 else matrices[indices[0]][None]
            sigmas.update(zip(indices, self.stacked_norms(indices, stacked).unbind()))
        return sigmas

    def stacked_norms(self, indices: Sequence[int], matrices: Tensor) -> Tensor:
        """σ_max of a stack (atoms, …, m, n) of the matrices of the atoms at ``indices``, one atom per entry of
        the leading axis, each iterating from its own vectors: shape (atoms, …)."""
        A = matrices.float()
        v = torch.stack([self._vector(i, A[j]) for j, i in enumerate(indices)]).unsqueeze(-1)  # column vectors
        for _ in range(self.iterations):
            u = A @ v
            u = u / u.norm(dim=-2, keepdim=True).clamp_min(1e-30)
            v = A.mT @ u
            sigma = v.norm(dim=-2, keepdim=True)
            v = v / sigma.clamp_min(1e-30)
        for i, vector in zip(indices, v.squeeze(-1).unbind()):
            self.vectors[i] = vector
        return sigma.squeeze(-1).squeeze(-1)

    def _vector(self, index: int, A: Tensor) -> Tensor:
        v = self.vectors.get(index)
        if v is None or v.shape != (*A.shape[:-2], A.shape[-1]) or v.device != A.device:
            # One start vector per atom, shared by every slice and stacked network, so a packed sweep
            # starts exactly where its separate runs start.
            generator = torch.Generator().manual_seed(self.seed + index)
            v = torch.randn(A.shape[-1], generator=generator).to(A.device)
            v = (v / v.norm()).expand(*A.shape[:-2], A.shape[-1]).contiguous()
        return v

    def state_dict(self) -> dict:
        return {"iterations": self.iterations, "seed": self.seed,
                "vectors": {k: v.cpu() for k, v in self.vectors.items()}}

    def load_state_dict(self, state: dict, device: torch.device | str | None = None) -> None:
        self.iterations = state["iterations"]
        self.seed = state["seed"]
        self.vectors = {int(k): v.to(device) for k, v in state["vectors"].items()}


def exact_spectral_norm(matrix: Tensor) -> Tensor:
    """σ_max over the last two dimensions, by SVD."""
    return torch.linalg.matrix_norm(matrix.float(), ord=2)
