"""The module algebra of docs/design.md, "Modules": the Module base and its operators, with every class that
they build (the combinators Composite and TupleModule, the bonds Identity, Add and Mul, and their bases) in one
file, as jxbz/modula's abstract.py has them: apart, they would import each other.

A module is a pure description. Its weights live outside it, as a flat list of tensors in tree order
(one tensor per atom), so ``forward(x, w)`` is a pure function and every optimiser state belongs to the
caller. Compounds slice the weight list by their children's atom counts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from .display import tree_text
from .shapes import chain_features, common_features
from .weight_maps import Weights, WeightMaps, stored_weights


class Module(WeightMaps):
    """Base class: mass, sensitivity, a norm on the weights, and the recursive split of a target norm that the
    maps of ``WeightMaps`` use (docs/design.md, "Normalising and dualising a network")."""

    children: tuple[Module, ...] = ()
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

    def atoms(self) -> Iterator[Module]:
        """The atoms (``atom.Atom``: one weight tensor each) in weight-list order."""
        for child in self.children:
            yield from child.atoms()

    def walk(self) -> Iterator[Module]:
        """This module and every module inside it, atoms and bonds included, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def atom_list(self) -> tuple[Module, ...]:
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
        drawn = stored_weights(atoms, [atom.init_weight(generator) for atom in atoms])
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

    def tare(self, mass: float = 1.0) -> Module:
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

    def set_parametrisation(self, parametrisation: object) -> Module:
        """Keep what a mode worked out for this network (μP's per-layer rules): its own, read back by the mode."""
        self._parametrisation = parametrisation
        return self

    # --- operators (docs/design.md, "Combining modules"): Composite or Tuple plus the Add and Mul bonds -------

    def __matmul__(self, other: Module | tuple | list) -> Module:
        if isinstance(other, (tuple, list)):
            other = TupleModule(*other)
        if not isinstance(other, Module):
            return NotImplemented
        return Composite(other, self)

    def __rmatmul__(self, other: tuple | list) -> Module:
        if isinstance(other, (tuple, list)):
            return Composite(self, TupleModule(*other))
        return NotImplemented

    def __add__(self, other: Module) -> Module:
        if not isinstance(other, Module):
            return NotImplemented
        return Add() @ (self, other)

    def __mul__(self, scalar: float) -> Module:
        if not isinstance(scalar, (int, float)):
            return NotImplemented
        return self @ Mul(scalar)

    def __rmul__(self, scalar: float) -> Module:
        if not isinstance(scalar, (int, float)):
            return NotImplemented
        return Mul(scalar) @ self

    def __truediv__(self, scalar: float) -> Module:
        if not isinstance(scalar, (int, float)):
            return NotImplemented
        if scalar == 0:
            raise ValueError(f"cannot divide module {self.describe()} by 0")
        return self * (1.0 / scalar)

    def __pow__(self, power: int) -> Module:
        if isinstance(power, bool) or not isinstance(power, int) or power < 0:
            raise ValueError(f"module power must be a non-negative integer, got {power!r}")
        if power == 0:
            return Identity()
        # Independent copies: each has its own atoms, so its own weights and its own mass under tare. Each
        # atom remembers which copy it is in (outer powers first), so diagnostics can name it "attn.q[2]".
        copies = [copy.deepcopy(self) for _ in range(power)]
        for index, duplicate in enumerate(copies):
            for atom in {id(atom): atom for atom in duplicate.atoms()}.values():  # an atom used twice: once
                atom.repeat = (index, *atom.repeat)
        return Composite(*copies)

    # --- display ----------------------------------------------------------------------------------

    def describe(self) -> str:
        return self.name or type(self).__name__

    def __repr__(self) -> str:
        return tree_text(self)


class Bond(Module):
    """A module without weights: mass 0."""

    _sensitivity: float = 1.0
    shape_preserving: bool = True  # elementwise or per-feature bonds keep the feature size

    @property
    def mass(self) -> float:
        return 0.0

    @property
    def sensitivity(self) -> float:
        return self._sensitivity

    @property
    def num_atoms(self) -> int:
        return 0

    def atoms(self) -> Iterator[Module]:
        return iter(())

    def forward(self, x: Any, w: Sequence[Tensor]) -> Any:
        return self.apply(x)

    def apply(self, x: Any) -> Any:
        raise NotImplementedError

    def norm(self, w: Sequence[Tensor]) -> float:
        return 0.0

    def _shares(self, target: float) -> list[float]:
        return []


# The bonds the operators are built from (docs/design.md, "Combining modules"): sums and scalar multiples.

class Identity(Bond):
    def apply(self, x: Any) -> Any:
        return x


class Add(Bond):
    """Sum of a tuple of inputs."""

    def apply(self, x: Any) -> Any:
        total = x[0]
        for term in x[1:]:
            total = total + term
        return total


class Mul(Bond):
    """``scalar · x``; a tuple input is multiplied entry by entry."""

    def __init__(self, scalar: float):
        if not isinstance(scalar, (int, float)) or isinstance(scalar, bool) or scalar == 0:
            raise ValueError(f"Mul needs a nonzero number, got {scalar!r}")
        self.scalar = float(scalar)
        self._sensitivity = abs(self.scalar)

    def apply(self, x: Any) -> Any:
        if isinstance(x, (tuple, list)):
            return tuple(self.scalar * part for part in x)
        return self.scalar * x

    def describe(self) -> str:
        return f"Mul({self.scalar:.4g})"


class Compound(Module):
    """Shared plumbing of the two combinators: weight slicing and the mass of the children."""

    def __init__(self, *children: Module):
        if not children:
            raise ValueError(f"{type(self).__name__} needs at least one module")
        for child in children:
            if not isinstance(child, Module):
                raise ValueError(f"{type(self).__name__} takes modules, got {child!r}")
        self.children = children

    @property
    def mass(self) -> float:
        return sum(child.mass for child in self.children)

    def _slices(self, w: Sequence[Tensor]) -> Iterator[Sequence[Tensor]]:
        if len(w) != self.num_atoms:
            raise ValueError(f"{self.describe()} expects {self.num_atoms} weight tensors, got {len(w)}")
        start = 0
        for child in self.children:
            yield w[start:start + child.num_atoms]
            start += child.num_atoms


class Composite(Compound):
    """``Mn ∘ … ∘ M2 ∘ M1``; children are stored in application order (M1 first).

    The n-ary form of the binary rule: mass Σ m_i, sensitivity Π s_i, and child i receives the share
    (m_i / m) / Π_{j>i} s_j of the target, which is what nesting the binary rule gives.
    """

    def __init__(self, *children: Module):
        flat: list[Module] = []
        for child in children:
            # Flatten unnamed composites so deep stacks do not nest Python calls.
            flat.extend(child.children if type(child) is Composite and child.name is None else [child])
        super().__init__(*flat)
        self.features_in, self.features_out = chain_features(self.children)

    @property
    def sensitivity(self) -> float:
        product = 1.0
        for child in self.children:
            product *= child.sensitivity
        return product

    def forward(self, x: Any, w: Sequence[Tensor]) -> Any:
        for child, piece in zip(self.children, self._slices(w)):
            x = child.forward(x, piece)
        return x

    def _downstream_sensitivities(self) -> list[float]:
        after, result = 1.0, []
        for child in reversed(self.children):
            result.append(after)
            after *= child.sensitivity
        return result[::-1]

    def norm(self, w: Sequence[Tensor]) -> float:
        total = self.mass
        terms = [0.0]
        for child, piece, after in zip(self.children, self._slices(w), self._downstream_sensitivities()):
            if child.mass > 0:
                terms.append(after * (total / child.mass) * child.norm(piece))
        return max(terms)

    def _shares(self, target: float) -> list[float]:
        total = self.mass
        shares: list[float] = []
        for child, after in zip(self.children, self._downstream_sensitivities()):
            if total == 0 or child.mass == 0:
                shares.extend([0.0] * child.num_atoms)
            elif after == 0:
                raise ValueError(f"{self.describe()}: a zero-sensitivity module follows "
                                 f"{child.describe()}, so its share of the target is undefined")
            else:
                shares.extend(child._shares(target * (child.mass / total) / after))
        return shares

    def describe(self) -> str:
        return self.name or "Composite"


class TupleModule(Compound):
    """``(M1, M2, …)``: every child sees the same input; the output is the tuple of outputs."""

    def __init__(self, *children: Module):
        super().__init__(*children)
        self.features_in = common_features([c.features_in for c in children], "inputs of a tuple", children)
        outs = [c.features_out for c in children]
        # Known only when all branches agree, so that an Add after the tuple can pass it on.
        self.features_out = outs[0] if None not in outs and len(set(outs)) == 1 else None

    @property
    def sensitivity(self) -> float:
        return sum(child.sensitivity for child in self.children)

    def forward(self, x: Any, w: Sequence[Tensor]) -> Any:
        return tuple(child.forward(x, piece) for child, piece in zip(self.children, self._slices(w)))

    def norm(self, w: Sequence[Tensor]) -> float:
        total = self.mass
        terms = [0.0]
        for child, piece in zip(self.children, self._slices(w)):
            if child.mass > 0:
                terms.append((total / child.mass) * child.norm(piece))
        return max(terms)

    def _shares(self, target: float) -> list[float]:
        total = self.mass
        shares: list[float] = []
        for child in self.children:
            if total == 0 or child.mass == 0:
                shares.extend([0.0] * child.num_atoms)
            else:
                shares.extend(child._shares(target * child.mass / total))
        return shares

    def describe(self) -> str:
        return self.name or "Tuple"
