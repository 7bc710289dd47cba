"""The module algebra of docs/design.md, "Combining modules": ``Module``, whose operators compose (``@``), sum
(``+``), scale (``*``, ``/``) and repeat (``**``) modules, with every class that they build (the combinators
Composite and TupleModule, the bonds Identity, Add and Mul, and their bases) in one file, as jxbz/modula's
abstract.py has them: apart, they would import each other. What a module is, apart from its operators, is
``base.ModuleBase``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from torch import Tensor

from .base import ModuleBase
from .shapes import chain_features, common_features


class Module(ModuleBase):
    """A module that combines with others by the operators of docs/design.md, "Combining modules"; every
    atom, bond and compound is one."""

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
