"""The maps of the optimiser on a network's weight list (docs/design.md, "Normalising and dualising a
network") and the rule between stored and effective weights that they all follow ("Stored and effective
weights").

An atom computes with its effective weight W but may store W / forward_scale (the paper variant). Every map
is written for W and converts where it is written: the stored weights in through ``effective_weights`` (or the
atom's own ``effective``), what it computes (weights or changes of them) out through ``stored_weights`` (or
``stored``). Gradients and base-optimiser directions enter unconverted: each map normalises them atom by
atom, so their scale, which is all that the forward factor changes, cannot matter.
tests/test_stored_weights.py checks every map under non-unit factors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from .duality import dualize_atoms
from .groups import atom_groups, map_groups
from .manifold import DualAscent, ManifoldState, manifold_update, onto_manifold
from .packed import per_member

if TYPE_CHECKING:
    from .spectral import PowerIterationState

Weights = list[Tensor]


class ScaledAtom(Protocol):
    """An atom's rule between its two forms (``Atom.effective`` and ``Atom.stored``)."""

    def effective(self, stored: Tensor) -> Tensor: ...

    def stored(self, effective: Tensor) -> Tensor: ...


def effective_weights(atoms: Sequence[ScaledAtom], stored: Sequence[Tensor]) -> list[Tensor]:
    """Stored weights (or changes of them) in tree order → the effective ones."""
    return _converted(atoms, stored, lambda atom, pieces: atom.effective(pieces))


def stored_weights(atoms: Sequence[ScaledAtom], effective: Sequence[Tensor]) -> list[Tensor]:
    """Effective weights (or changes of them) in tree order → what the atoms store."""
    return _converted(atoms, effective, lambda atom, pieces: atom.stored(pieces))


def _converted(atoms: Sequence[ScaledAtom], pieces: Sequence[Tensor], convert) -> list[Tensor]:
    """``convert`` applied once per group of equal atoms whose factor is not 1 (the rest pass as they are)."""
    out = list(pieces)
    for group in atom_groups(atoms, pieces, [1.0] * len(pieces)):
        if getattr(group.atom, "forward_scale", 1.0) != 1.0:
            group.unstack(convert(group.atom, group.stack(pieces)), out)
    return out


def decayed(atoms: Sequence[Any], w: Sequence[Tensor], shares: Sequence[float], strength: float | Tensor) -> Weights:
    """Each atom's weights decayed at ``strength`` × its share (by its own rule: ``regularize_piece``), equal atoms
    in one call."""
    decay = lambda atom, pieces, strengths: atom.stored(  # noqa: E731
        atom.regularize_piece(atom.effective(pieces), per_member(strengths, pieces)))
    return map_groups(atoms, w, shares, strength, decay, zero_idle=False)


class WeightMaps:
    """The maps, as methods of every ``Module``: they need only its atoms in tree order and their shares of a
    target norm, which ``Module`` provides."""

    def atom_list(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def target_shares(self) -> list[float]:
        raise NotImplementedError

    # ``target_norm`` may be a tensor of shape (K,) when every weight tensor carries a leading axis of K
    # stacked networks (a packed LR sweep): each network then gets its own target.

    def dualize(self, g: Sequence[Tensor], target_norm: float | Tensor = 1.0, method: str = "polar_express",
                steps: int | None = None, iter_dtype: torch.dtype | None = None) -> Weights:
        """Duality map of the modular norm: one tensor per atom, whole update of modular norm τ."""
        atoms = self.atom_list()
        return stored_weights(atoms, dualize_atoms(atoms, g, self.target_shares(), target_norm, method, steps,
                                                   iter_dtype))

    def normalize(self, u: Sequence[Tensor], target_norm: float | Tensor = 1.0,
                  state: PowerIterationState | None = None) -> Weights:
        """Rescale each atom's piece to its share of τ (exact spectral norms, or power iteration); equal atoms
        in one call (``groups``)."""
        atoms, shares = self.atom_list(), self.target_shares()
        if len(u) != len(atoms):
            raise ValueError(f"normalize: expected {len(atoms)} update tensors, got {len(u)}")
        out: list[Tensor | None] = [None] * len(atoms)
        for group in atom_groups(atoms, u, shares):
            stacked, atom = group.stack(u), group.atom
            if group.idle:
                group.unstack(torch.zeros_like(stacked), out)
                continue
            norms = None
            if state is not None and (matrices := atom.matrices(stacked)) is not None:
                # one warm-started power iteration per group, each atom from its own vector
                norms = state.stacked_norms(group.indices, matrices)
                norms = norms.reshape(-1, norms.shape[-1])  # members folded, as the pieces are
            pieces, targets = group.folded(stacked, target_norm)
            group.unstack(atom.stored(atom.normalize_piece(pieces, targets, norms)).reshape(stacked.shape), out)
        return out  # type: ignore[return-value]

    def manifold_update(self, w: Sequence[Tensor], u: Sequence[Tensor], target_norm: float | Tensor,
                        settings: DualAscent, state: ManifoldState, kinds: Sequence[str] | None = None,
                        free_dualize: dict | None = None) -> Weights:
        """Manifold mode (docs/design.md): the change Δ that moves each atom along its manifold by its share of τ
        (matrices: manifold Muon then retraction; embedding rows: hyperspherical descent). ``kinds``: how
        each atom is held (``manifold.KINDS``: fixed radius, learned radius, or free under the duality map)."""
        atoms = self.atom_list()
        return stored_weights(atoms, manifold_update(atoms, effective_weights(atoms, w), u, self.target_shares(),
                                                     target_norm, settings, state, kinds, free_dualize))

    def onto_manifold(self, w: Sequence[Tensor]) -> Weights:
        """Each matrix on its scaled Stiefel manifold, each embedding row at RMS 1 (to float precision)."""
        atoms = self.atom_list()  # initial weights: each a tensor of its own, not a view of a group's
        return [atom.stored(piece) for atom, piece in zip(atoms, onto_manifold(atoms, effective_weights(atoms, w)))]

    def regularize(self, w: Sequence[Tensor], strength: float | Tensor) -> Weights:
        """Weight decay split like a target norm: each atom's weights shrink by (1 − strength × its share);
        an atom that ``renormalize_each_step`` is put back on its sphere instead, whatever the strength."""
        return decayed(self.atom_list(), w, self.target_shares(), strength)

    def renormalized(self, w: Sequence[Tensor]) -> dict[int, Tensor]:
        """Without weight decay, ``regularize`` changes only the atoms that ``renormalize_each_step``: their
        new weights, by index (the optimiser calls this after every step, so the rest is not touched)."""
        atoms = self.atom_list()
        indices = [i for i, atom in enumerate(atoms) if atom.renormalize_each_step]
        back = lambda atom, pieces, _: atom.stored(atom.regularize_piece(atom.effective(pieces), 0.0))  # noqa: E731
        moved = map_groups([atoms[i] for i in indices], [w[i] for i in indices], [1.0] * len(indices), 0.0, back)
        return dict(zip(indices, moved))

    def project(self, w: Sequence[Tensor]) -> Weights:
        """Put every atom's weights back on their unit ball, as at initialisation."""
        return [atom.stored(atom.project_piece(atom.effective(piece)))
                for atom, piece in zip(self.atom_list(), w, strict=True)]
