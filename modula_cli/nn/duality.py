"""Network-level duality map: one batched orthogonalisation per matrix shape (SPEC §6)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor

from .atoms import MatrixAtom
from .module import Atom
from .orthogonalize import orthogonalize


def dualize_atoms(atoms: Sequence[Atom], grads: Sequence[Tensor], targets: Sequence[float], method: str,
                  steps: int | None) -> list[Tensor]:
    """Dualize each atom's gradient to its target norm.

    Same-shape matrices of different layers (and the k² slices of each conv kernel) share one batched
    call, each matrix normalised on its own; layers are never flattened into one matrix.
    """
    if not len(atoms) == len(grads) == len(targets):
        raise ValueError(f"dualize: expected {len(atoms)} gradient tensors, got {len(grads)}")
    out: list[Tensor | None] = [None] * len(atoms)
    groups: dict[tuple, list[tuple[int, Tensor]]] = defaultdict(list)
    for i, (atom, grad, target) in enumerate(zip(atoms, grads, targets)):
        if target == 0:
            out[i] = torch.zeros_like(grad)
        elif isinstance(atom, MatrixAtom):
            stack = atom.matrices(grad)
            groups[(tuple(stack.shape[-2:]), stack.dtype, stack.device)].append((i, stack))
        else:
            out[i] = atom.dualize_piece(grad, target)
    for members in groups.values():
        polar = orthogonalize(torch.cat([stack for _, stack in members]), method=method, steps=steps)
        for (i, _), piece in zip(members, polar.split([s.shape[0] for _, s in members])):
            out[i] = atoms[i].from_polar(piece, targets[i])
    return out  # type: ignore[return-value]
