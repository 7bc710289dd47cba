"""Network-level duality map: one batched orthogonalisation per matrix shape (docs/design.md, "Fast maps")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from .orthogonalize import orthogonalize


class DualizableAtom(Protocol):
    """What the duality map needs of an atom (``module.Atom`` provides it; no import back to it)."""

    def matrices(self, weight: Tensor) -> Tensor | None: ...

    def from_polar(self, polar: Tensor, target: float | Tensor) -> Tensor: ...

    def dualize_piece(self, grad: Tensor, target: float | Tensor) -> Tensor: ...


def dualize_atoms(atoms: Sequence[DualizableAtom], grads: Sequence[Tensor], shares: Sequence[float],
                  target_norm: float | Tensor, method: str, steps: int | None,
                  iter_dtype: torch.dtype | None = None) -> list[Tensor]:
    """Dualize each atom's gradient to ``target_norm × its share``.

    Same-shape matrices of different layers (and the k² slices of each conv kernel, and the stacked
    networks of a packed sweep) share one batched call, each matrix normalised on its own; layers are
    never flattened into one matrix. ``iter_dtype`` is the polynomial iteration's dtype (None: float32).
    """
    if not len(atoms) == len(grads) == len(shares):
        raise ValueError(f"dualize: expected {len(atoms)} gradient tensors, got {len(grads)}")
    out: list[Tensor | None] = [None] * len(atoms)
    groups: dict[tuple, list[tuple[int, Tensor]]] = defaultdict(list)
    for i, (atom, grad, share) in enumerate(zip(atoms, grads, shares)):
        if share == 0:
            out[i] = torch.zeros_like(grad)
        elif (stack := atom.matrices(grad)) is not None:  # matrix atoms: orthogonalised in batches
            groups[(tuple(stack.shape[-2:]), stack.dtype, stack.device)].append((i, stack))
        else:
            out[i] = atom.dualize_piece(grad, target_norm * share)
    for members in groups.values():
        flat = [stack.reshape(-1, *stack.shape[-2:]) for _, stack in members]
        polar = orthogonalize(torch.cat(flat), method=method, steps=steps, iter_dtype=iter_dtype)
        for (i, stack), piece in zip(members, polar.split([f.shape[0] for f in flat])):
            out[i] = atoms[i].from_polar(piece.reshape(stack.shape), target_norm * shares[i])
    return out  # type: ignore[return-value]
