"""Network-level duality map: one batched orthogonalisation per matrix shape (docs/design.md, "Fast maps")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from .groups import AtomGroup, atom_groups
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
    batches: dict[tuple, list[tuple[AtomGroup, list[Tensor]]]] = defaultdict(list)
    for group in atom_groups(atoms, grads, shares):
        first = grads[group.indices[0]]
        if group.idle:
            group.unstack(torch.zeros_like(group.stack(grads)), out)
        elif (matrices := group.atom.matrices(first)) is not None:  # orthogonalised in batches by shape
            slices = [group.atom.matrices(grads[i]).reshape(-1, *matrices.shape[-2:]) for i in group.indices]
            batches[(tuple(matrices.shape[-2:]), matrices.dtype, matrices.device)].append((group, slices))
        else:
            stacked = group.stack(grads)
            pieces, targets = group.folded(stacked, target_norm)
            group.unstack(group.atom.dualize_piece(pieces, targets).reshape(stacked.shape), out)
    for members in batches.values():
        # one copy into the batch (the concatenation); each group's part of the result is a view of it
        flat = [piece for _, slices in members for piece in slices]
        polar = orthogonalize(torch.cat(flat) if len(flat) > 1 else flat[0], method=method, steps=steps,
                              iter_dtype=iter_dtype)
        sizes = [sum(piece.shape[0] for piece in slices) for _, slices in members]
        for (group, _), part in zip(members, polar.split(sizes)):
            shape = (len(group.indices), *group.atom.matrices(grads[group.indices[0]]).shape)
            pieces, targets = group.folded(part.reshape(shape), target_norm)
            result = group.atom.from_polar(pieces, targets)
            group.unstack(result.reshape(len(group.indices), *grads[group.indices[0]].shape), out)
    return out  # type: ignore[return-value]
