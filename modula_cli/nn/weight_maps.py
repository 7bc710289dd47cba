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
    return [atom.effective(piece) for atom, piece in zip(atoms, stored, strict=True)]


def stored_weights(atoms: Sequence[ScaledAtom], effective: Sequence[Tensor]) -> list[Tensor]:
    """Effective weights (or changes of them) in tree order → what the atoms store."""
    return [atom.stored(piece) for atom, piece in zip(atoms, effective, strict=True)]


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
        """Rescale each atom's piece to its share of τ (exact spectral norms, or power iteration)."""
        atoms, shares = self.atom_list(), self.target_shares()
        if len(u) != len(atoms):
            raise ValueError(f"normalize: expected {len(atoms)} update tensors, got {len(u)}")
        norms: dict[int, Tensor] = {}
        if state is not None:  # one warm-started power iteration for all matrices of each shape
            matrices = {i: atom.matrices(piece) for i, (atom, piece, share) in enumerate(zip(atoms, u, shares))
                        if share > 0}
            norms = state.spectral_norms({i: stack for i, stack in matrices.items() if stack is not None})
        return stored_weights(atoms, [atom.normalize_piece(piece, target_norm * share, norms.get(index))
                                      if share > 0 else torch.zeros_like(piece)
                                      for index, (atom, piece, share) in enumerate(zip(atoms, u, shares))])

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
        atoms = self.atom_list()
        return stored_weights(atoms, onto_manifold(atoms, effective_weights(atoms, w)))

    def regularize(self, w: Sequence[Tensor], strength: float | Tensor) -> Weights:
        """Weight decay split like a target norm: each atom's weights shrink by (1 − strength × its share);
        an atom that ``renormalize_each_step`` is put back on its sphere instead, whatever the strength."""
        return [atom.stored(atom.regularize_piece(atom.effective(piece), per_member(strength * share, piece)))
                for atom, piece, share in zip(self.atom_list(), w, self.target_shares(), strict=True)]

    def renormalized(self, w: Sequence[Tensor]) -> dict[int, Tensor]:
        """Without weight decay, ``regularize`` changes only the atoms that ``renormalize_each_step``: their
        new weights, by index (the optimiser calls this after every step, so the rest is not touched)."""
        return {i: atom.stored(atom.regularize_piece(atom.effective(w[i]), 0.0))
                for i, atom in enumerate(self.atom_list()) if atom.renormalize_each_step}

    def project(self, w: Sequence[Tensor]) -> Weights:
        """Put every atom's weights back on their unit ball, as at initialisation."""
        return [atom.stored(atom.project_piece(atom.effective(piece)))
                for atom, piece in zip(self.atom_list(), w, strict=True)]
