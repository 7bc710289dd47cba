"""Atoms that compute alike, stacked: a map runs once per group of equal atoms, not once per layer
(docs/design.md, "Fast maps").

A deep network repeats a few kinds of layer: a GPT of depth 8 has 8 equal query matrices. Their weights (or
gradients, or updates) stack on a new leading axis, which every atom's piece methods already read as packed
members (``per_member``): one call on the stack computes every layer's piece, each with its own target. So the
number of operations of a map grows with the kinds of layer, not with depth.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

# what only labels an atom, or what its share of a target already carries: not part of how it computes
_LABELS = frozenset({"role", "repeat", "_mass", "_sensitivity"})


def batch_key(atom: Any) -> Hashable:
    """Equal for atoms whose piece maps compute alike: the same class and the same settings, apart from labels
    (and what the class names as labels in ``map_labels``)."""
    labels = _LABELS | frozenset(getattr(atom, "map_labels", ()))
    try:
        settings = tuple(sorted((k, v) for k, v in vars(atom).items() if k not in labels))
        hash(settings)
    except TypeError:  # an unhashable setting: the atom stays alone
        return id(atom)
    return type(atom), settings


@dataclass(frozen=True)
class AtomGroup:
    """Equal atoms (``indices`` in tree order) with equally shaped pieces; ``atom`` computes for all of them.
    ``idle``: their shares of a target are 0 (massless atoms): their pieces of a step are zeros."""

    atom: Any
    indices: tuple[int, ...]
    shares: tuple[float, ...]
    idle: bool = False
    tag: Hashable = None  # the mode's tag of these atoms (``atom_groups``' tags)

    def stack(self, pieces: Sequence[Tensor]) -> Tensor:
        """The group's pieces on a new leading axis: (atoms, …), each in its own layout (``stacked``)."""
        return stacked([pieces[i] for i in self.indices])

    def folded(self, stacked: Tensor, target_norm: float | Tensor) -> tuple[Tensor, Tensor]:
        """A stack with its packed members folded into the leading axis, (atoms · members, …), as the atoms'
        piece methods read members, and each entry's target: τ × its atom's share, per member."""
        shares = torch.tensor(self.shares, dtype=torch.float32, device=stacked.device)
        if isinstance(target_norm, Tensor) and target_norm.ndim == 1:
            targets = shares[:, None] * target_norm.to(stacked.device)[None, :]
            return stacked.reshape(-1, *stacked.shape[2:]), targets.reshape(-1)
        return stacked, shares * target_norm

    def unstack(self, stacked: Tensor, out: list) -> None:
        """Each atom's piece of a stacked result (atoms, …) into ``out``, as views."""
        for index, piece in zip(self.indices, stacked.unbind(0), strict=True):
            out[index] = piece


def atom_groups(atoms: Sequence[Any], pieces: Sequence[Tensor], shares: Sequence[float],
                tags: Sequence[Hashable] | None = None) -> list[AtomGroup]:
    """The atoms grouped by ``batch_key``, their pieces' shape, dtype and device, whether their share is 0 and
    their ``tags`` (how a mode treats each), in order of first index."""
    groups: dict[Hashable, list[int]] = {}
    for index, (atom, piece, share) in enumerate(zip(atoms, pieces, shares, strict=True)):
        key = (batch_key(atom), tuple(piece.shape), piece.dtype, piece.device, share == 0,
               None if tags is None else tags[index])
        groups.setdefault(key, []).append(index)
    return [AtomGroup(atoms[indices[0]], tuple(indices), tuple(shares[i] for i in indices), shares[indices[0]] == 0,
                      None if tags is None else tags[indices[0]]) for indices in groups.values()]


def map_groups(atoms: Sequence[Any], pieces: Sequence[Tensor], shares: Sequence[float],
               target_norm: float | Tensor, piece_map: Callable[[Any, Tensor, Tensor], Tensor],
               zero_idle: bool = True) -> list[Tensor]:
    """``piece_map(atom, pieces, targets)`` once per group of equal atoms on their folded stack; each atom's
    result, as a view of its group's. Atoms of share 0 get zeros (``zero_idle``) or a target of 0."""
    out: list[Tensor | None] = [None] * len(atoms)
    for group in atom_groups(atoms, pieces, shares):
        stacked = group.stack(pieces)
        if group.idle and zero_idle:
            result = torch.zeros_like(stacked)
        else:
            folded, targets = group.folded(stacked, target_norm)
            result = piece_map(group.atom, folded, targets).reshape(stacked.shape)
        group.unstack(result, out)
    return out  # type: ignore[return-value]


def same_shapes(tensors: Sequence[Tensor]) -> list[tuple[list[int], Tensor]]:
    """The tensors of each shape (and dtype and device) stacked on a new leading axis, with their indices."""
    by_shape: dict[tuple, list[int]] = {}
    for index, tensor in enumerate(tensors):
        by_shape.setdefault((tuple(tensor.shape), tensor.dtype, tensor.device), []).append(index)
    return [(indices, stacked([tensors[i] for i in indices])) for indices in by_shape.values()]


def dense_order(tensor: Tensor) -> list[int] | None:
    """The order of its dimensions in which a permuted dense tensor (a transposed matrix) is contiguous; None for
    a contiguous tensor, or one with gaps."""
    order = sorted(range(tensor.ndim), key=lambda d: tensor.stride(d), reverse=True)
    if tensor.is_contiguous() or not tensor.permute(order).is_contiguous():
        return None
    return order


def stacked(tensors: Sequence[Tensor]) -> Tensor:
    """Equally shaped tensors on a new leading axis, each entry laid out as the tensors are (a stack of transposed
    matrices stays transposed): an elementwise operation between tensors of different layouts does not
    vectorise (5× slower on a CPU), and the results of a map meet the weights they update."""
    first = tensors[0]
    if len(tensors) == 1:
        return first.unsqueeze(0)
    order = dense_order(first)
    if order is None or any(t.stride() != first.stride() for t in tensors):
        return torch.stack(list(tensors))
    together = torch.stack([t.permute(order) for t in tensors])  # contiguous
    return together.permute(0, *[1 + order.index(d) for d in range(first.ndim)])
