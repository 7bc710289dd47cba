"""The atom level (docs/design.md, "Modules"): a module with exactly one weight tensor. The concrete atoms are
in ``atoms.py``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from .module import Module


class Atom(Module):
    """A module with exactly one weight tensor and hand-declared attributes.

    ``role`` names what the atom does in its network ("attn.q", "hidden"), the same at every width and
    depth; ``repeat`` is its copy index under each enclosing ``**``. Both only label diagnostics."""

    role: str | None = None
    repeat: tuple[int, ...] = ()
    feature_axis: int = -1  # the axis of the output that holds one feature vector (channels for convolutions)
    # Where the atom's constant factor lives. 1: folded into the stored weight (the modular variant). Else the
    # stored weight is W / forward_scale and the forward pass multiplies it back (or the output, where that is
    # smaller), as the paper's reference code does: the same function and the same normed or dualized steps,
    # but a plain optimiser's step moves W further: forward_scale times with Adam (its step ignores the
    # gradient's scale), forward_scale² with SGD (the stored weight's gradient is forward_scale times W's).
    # Every map of the optimiser works on W and converts with ``effective``/``stored``, which are the rule
    # (``weight_maps`` applies them to a weight list).
    forward_scale: float = 1.0
    renormalize_each_step: bool = False  # regularize puts the weight back on its sphere (the reference's embedding)
    is_matrix: bool = False  # a weight of two or more dimensions (optim.decay_on=matrices decays only these)

    def __init__(self, mass: float = 1.0, sensitivity: float = 1.0):
        self._mass = float(mass)
        self._sensitivity = float(sensitivity)

    @property
    def mass(self) -> float:
        return self._mass

    @property
    def sensitivity(self) -> float:
        return self._sensitivity

    @property
    def num_atoms(self) -> int:
        return 1

    def atoms(self) -> Iterator[Atom]:
        yield self

    def forward(self, x: Any, w: Sequence[Tensor]) -> Any:
        if self.forward_scale == 1.0:
            return self.apply(x, w[0])
        # The same function either way (``apply`` is linear in its weight); the factor goes where it costs
        # least, usually on the weight: on a GPT's activations it took 4 % of the step (docs/performance.md).
        if self.factor_on_weight(x, w[0]):
            return self.apply(x, self.effective(w[0]))
        return self.forward_scale * self.apply(x, w[0])

    def factor_on_weight(self, x: Any, weight: Tensor) -> bool:
        """Multiply the constant factor into the weight rather than the output: the weight is the smaller.
        An atom that knows its output's size says so (matrices, embeddings); the input stands in for it here."""
        return weight.numel() <= x.numel()

    def apply(self, x: Any, weight: Tensor) -> Any:
        """The atom's function of its effective weight W (``forward`` applies it to the stored one)."""
        raise NotImplementedError

    def effective(self, stored: Tensor) -> Tensor:
        """The weight the atom computes with, from the stored one."""
        return stored if self.forward_scale == 1.0 else stored * self.forward_scale

    def stored(self, effective: Tensor) -> Tensor:
        """What the atom stores for an effective weight (or a change of one)."""
        return effective if self.forward_scale == 1.0 else effective / self.forward_scale

    @property
    def natural_scale(self) -> float:
        """The atom's constant factor: the output scale of a weight with unit singular values (matrices) or
        unit rows (embeddings); 1 for an atom without one (Gaussian initialisation)."""
        return 1.0

    def init_weight(self, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def atom_norm(self, weight: Tensor) -> float:
        raise NotImplementedError

    def norm(self, w: Sequence[Tensor]) -> float:
        return self.atom_norm(self.effective(w[0]))

    def regularize_piece(self, weight: Tensor, strength: float | Tensor) -> Tensor:
        """Weight decay of the effective weight by ``strength`` (a float, or per member)."""
        return weight * (1.0 - strength)

    def _shares(self, target: float) -> list[float]:
        return [target if self.mass > 0 else 0.0]

    def normalize_piece(self, update: Tensor, target: float | Tensor, norms: Tensor | None = None) -> Tensor:
        """``target · update / ||update||_atom``; a zero update stays zero. ``norms``: precomputed
        spectral norms of a matrix atom's slices (power iteration), else computed exactly."""
        raise NotImplementedError

    def project_piece(self, weight: Tensor) -> Tensor:
        raise NotImplementedError

    def matrices(self, weight: Tensor) -> Tensor | None:
        """The weight as a batch of matrices measured in the operator norm (matrix atoms), else None."""
        return None
