"""What every module is (docs/design.md, "Modules"): mass, sensitivity, a function of an input and a weight list,
a norm on the weights and the recursive split of a target norm. The operators that combine modules, and the
classes they build, are ``module.Module``'s.

A module is a pure description. Its weights live outside it, as a flat list of tensors in tree order
(one tensor per atom), so ``forward(x, w)`` is a pure function and every optimiser state belongs to the
caller. Compounds slice the weight list by their children's atom counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Self

import torch
from torch import Tensor

from .display import tree_text
from .weight_maps import Weights, WeightMaps


class ModuleBase(WeightMaps):
    """Base class: mass, sensitivity, a norm on the weights, and the recursive split of a target norm that the
    maps of ``WeightMaps`` use (docs/design.md, "Normalising and dualising a network")."""

    children: tuple[ModuleBase, ...] = ()
    name: str | None = None

    # --- attributes -----------------------------------------------------------------------------

    @property
    def mass(self) -> float:
        raise NotImplementedError

    @property
    def sensitivity(self) -> float:
        raise NotImplementedError

    @property
    def num_atoms(self) -> int:
        return sum(child.num_atoms for child in self.children)

    # Size of the feature axis going in and out, where known (None: unknown or reshaped), used to reject
    # compositions whose shapes cannot match at construction rather than at the first forward pass.
    features_in: int | None = None
    features_out: int | None = None
    shape_preserving: bool = False  # weightless and elementwise or per-feature: passes the size on (bonds)

    def atoms(self) -> Iterator[ModuleBase]:
        """The atoms (``atom.Atom``: one weight tensor each) in weight-list order."""
        for child in self.children:
            yield from child.atoms()

    def walk(self) -> Iterator[ModuleBase]:
        """This module and every module inside it, atoms and bonds included, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def atom_list(self) -> tuple[ModuleBase, ...]:
        """``atoms()`` as a tuple, cached: the tree never changes, and the optimiser asks after every step
        (a deep network's recursive walk costs more than its flat list)."""
        cached = self.__dict__.get("_atoms_cache")
        if cached is None:
            cached = self._atoms_cache = tuple(self.atoms())
        return cached

    # --- the function ---------------------------------------------------------------------------

    def forward(self, x: Any, w: Sequence[Tensor]) -> Any:
        """The network function. Packed (K stacked networks): every weight has a leading member axis of K
        and so does ``x`` (``x.expand(K, *x.shape)`` for a shared batch); output k is network k's."""
        raise NotImplementedError

    def __call__(self, x: Any, w: Sequence[Tensor]) -> Any:
        return self.forward(x, w)

    def initialize(self, seed: int = 0, device: torch.device | str | None = None,
                   dtype: torch.dtype = torch.float32) -> Weights:
        """Fresh weights, identical for the same seed on any device (drawn on the CPU, then moved). Each atom
        draws its effective weight; the list holds what it stores."""
        generator = torch.Generator().manual_seed(seed)
        atoms = list(self.atoms())
        drawn = [atom.stored(atom.init_weight(generator)) for atom in atoms]  # tensors of their own
        return [w.to(device=device, dtype=dtype) for w in drawn]

    # --- norms and the maps the optimiser uses ----------------------------------------------------

    def norm(self, w: Sequence[Tensor]) -> float:
        """Exact modular norm (SVD-based): for checks and diagnostics, not for the training loop."""
        raise NotImplementedError

    def target_shares(self) -> list[float]:
        """Each atom's share of a target norm τ = 1 under the recursive split (docs/design.md, "Normalising and
        dualising a network").

        Cached: the optimiser asks every step, and the recursion costs more than a small net's update.
        The split depends only on the masses (the structure never changes), so they are the cache key."""
        masses = tuple(atom.mass for atom in self.atoms())
        cached = self.__dict__.get("_shares_cache")
        if cached is None or cached[0] != masses:
            cached = self._shares_cache = (masses, tuple(self._shares(1.0)))
        return list(cached[1])

    def _shares(self, target: float) -> list[float]:
        raise NotImplementedError

    def tare(self, mass: float = 1.0) -> Self:
        """Rescale every mass in the subtree by one factor so that the total becomes ``mass``."""
        if mass < 0:
            raise ValueError(f"tare: mass must be >= 0, got {mass}")
        current = self.mass
        if current == 0:
            raise ValueError(f"tare: cannot rescale the mass of a massless module {self.describe()} "
                             f"to {mass}; it has no atoms with mass")
        for atom in self.atoms():
            atom._mass *= mass / current
        return self

    # How a training mode changed this network (μP: each layer's multipliers), as that mode records it: kept
    # with the network that it describes, never read here; None for a network as built.
    _parametrisation: object | None = None

    @property
    def parametrisation(self) -> object | None:
        return self._parametrisation

    def set_parametrisation(self, parametrisation: object) -> Self:
        """Keep what a mode worked out for this network (μP's per-layer rules): its own, read back by the mode."""
        self._parametrisation = parametrisation
        return self

    # --- display ----------------------------------------------------------------------------------

    def describe(self) -> str:
        return self.name or type(self).__name__

    def __repr__(self) -> str:
        return tree_text(self)
