"""The module algebra of docs/design.md, "Modules": modules, the two combinators and the operators built on them.

A module is a pure description. Its weights live outside it, as a flat list of tensors in tree order
(one tensor per atom), so ``forward(x, w)`` is a pure function and every optimiser state belongs to the
caller. Compounds slice the weight list by their children's atom counts.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from .duality import dualize_atoms
from .manifold import DualAscent, ManifoldState, manifold_update, onto_manifold
from .packed import per_member  # noqa: F401 - re-exported: atoms and the optimiser use it from here

if TYPE_CHECKING:
    from .spectral import PowerIterationState

Weights = list[Tensor]
_Map = TypeVar("_Map", bound=Callable[..., Any])

# Every map that ``on_effective_weights`` wraps, by name: the test of the convention covers each one.
EFFECTIVE_MAPS: dict[str, tuple[str, ...]] = {}


def on_effective_weights(*weight_params: str) -> Callable[[_Map], _Map]:
    """The one place where stored and effective weights meet (docs/design.md, "Stored and effective weights").

    An atom computes with its effective weight W but may store W / forward_scale (the paper variant). Every
    map of the optimiser is written for W: the wrapped method gets the stored weights named by
    ``weight_params`` as effective ones, and what it returns (effective weights or changes of them, as a list
    in tree order or a dict by atom index) goes back to the stored form. Gradients and base-optimiser
    directions enter unconverted: each map normalises them atom by atom, so their scale, which is all that
    the forward factor changes, cannot matter. tests/test_stored_weights.py checks each registered map.
    """
    def wrap(method: _Map) -> _Map:
        positions = [list(inspect.signature(method).parameters).index(name) for name in weight_params]
        EFFECTIVE_MAPS[method.__name__] = weight_params

        @functools.wraps(method)
        def on_effective(self: Module, *args: Any, **kwargs: Any) -> Any:
            atoms = self.atom_list()
            args = list(args)
            for position, name in zip(positions, weight_params):
                if name in kwargs:
                    kwargs[name] = _effective(atoms, kwargs[name])
                else:
                    args[position - 1] = _effective(atoms, args[position - 1])
            return _stored(atoms, method(self, *args, **kwargs))
        return on_effective  # type: ignore[return-value]
    return wrap


class Module:
    """Base class: mass, sensitivity, a norm on the weights, and the recursive maps (docs/design.md,
    "Normalising and dualising a network")."""

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

    def atoms(self) -> Iterator[Atom]:
        """The atoms in weight-list order."""
        for child in self.children:
            yield from child.atoms()

    def walk(self) -> Iterator[Module]:
        """This module and every module inside it, atoms and bonds included, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def atom_list(self) -> tuple[Atom, ...]:
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
        """Fresh weights, identical for the same seed on any device (drawn on the CPU, then moved)."""
        generator = torch.Generator().manual_seed(seed)
        atoms = list(self.atoms())
        return [w.to(device=device, dtype=dtype) for w in self._initial(atoms, generator)]

    @on_effective_weights()
    def _initial(self, atoms: Sequence[Atom], generator: torch.Generator) -> Weights:
        return [atom.init_weight(generator) for atom in atoms]

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

    # ``target_norm`` may be a tensor of shape (K,) when every weight tensor carries a leading axis of K
    # stacked networks (a packed LR sweep): each network then gets its own target.

    @on_effective_weights()
    def dualize(self, g: Sequence[Tensor], target_norm: float | Tensor = 1.0, method: str = "polar_express",
                steps: int | None = None, iter_dtype: torch.dtype | None = None) -> Weights:
        """Duality map of the modular norm: one tensor per atom, whole update of modular norm τ."""
        return dualize_atoms(self.atom_list(), g, self.target_shares(), target_norm, method, steps, iter_dtype)

    @on_effective_weights()
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
        return [atom.normalize_piece(piece, target_norm * share, norms.get(index)) if share > 0
                else torch.zeros_like(piece)
                for index, (atom, piece, share) in enumerate(zip(atoms, u, shares))]

    @on_effective_weights("w")
    def manifold_update(self, w: Sequence[Tensor], u: Sequence[Tensor], target_norm: float | Tensor,
                        settings: DualAscent, state: ManifoldState, kinds: Sequence[str] | None = None,
                        free_dualize: dict | None = None) -> Weights:
        """Manifold mode (docs/design.md): the change Δ that moves each atom along its manifold by its share of τ
        (matrices: manifold Muon then retraction; embedding rows: hyperspherical descent). ``kinds``: how
        each atom is held (``manifold.KINDS``: fixed radius, learned radius, or free under the duality map)."""
        return manifold_update(self.atom_list(), w, u, self.target_shares(), target_norm, settings, state, kinds,
                               free_dualize)

    @on_effective_weights("w")
    def onto_manifold(self, w: Sequence[Tensor]) -> Weights:
        """Each matrix on its scaled Stiefel manifold, each embedding row at RMS 1 (to float precision)."""
        return onto_manifold(self.atom_list(), w)

    @on_effective_weights("w")
    def regularize(self, w: Sequence[Tensor], strength: float | Tensor) -> Weights:
        """Weight decay split like a target norm: each atom's weights shrink by (1 − strength × its share);
        an atom that ``renormalize_each_step`` is put back on its sphere instead, whatever the strength."""
        return [atom.regularize_piece(piece, per_member(strength * share, piece))
                for atom, piece, share in zip(self.atom_list(), w, self.target_shares(), strict=True)]

    def renormalized(self, w: Sequence[Tensor]) -> dict[int, Tensor]:
        """Without weight decay, ``regularize`` changes only the atoms that ``renormalize_each_step``: their
        new weights, by index (the optimiser calls this after every step, so the rest is not touched)."""
        pieces = {i: w[i] for i, atom in enumerate(self.atom_list()) if atom.renormalize_each_step}
        return self._renormalized(pieces) if pieces else {}

    @on_effective_weights("pieces")
    def _renormalized(self, pieces: dict[int, Tensor]) -> dict[int, Tensor]:
        atoms = self.atom_list()
        return {i: atoms[i].regularize_piece(piece, 0.0) for i, piece in pieces.items()}

    @on_effective_weights("w")
    def project(self, w: Sequence[Tensor]) -> Weights:
        """Put every atom's weights back on their unit ball, as at initialisation."""
        return [atom.project_piece(piece) for atom, piece in zip(self.atom_list(), w, strict=True)]

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
        shares = iter(self.target_shares())
        lines = [f"{self.describe()}  [mass {self.mass:.4g}, sensitivity {self.sensitivity:.4g}, "
                 f"{self.num_atoms} atoms; share = fraction of the target norm each atom receives]"]
        self._render(lines, "", shares)
        return "\n".join(lines)

    def _render(self, lines: list[str], prefix: str, shares: Iterator[float]) -> None:
        for i, child in enumerate(self.children):
            last = i == len(self.children) - 1
            branch, extend = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if isinstance(child, Atom):
                lines.append(f"{prefix}{branch}{child.describe()}  mass {child.mass:.4g}  "
                             f"share {next(shares):.4g}")
            elif child.num_atoms == 0:
                lines.append(f"{prefix}{branch}{child.describe()}")
            else:
                lines.append(f"{prefix}{branch}{child.describe()}  mass {child.mass:.4g}")
                child._render(lines, prefix + extend, shares)


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
    # Every map of the optimiser works on W: ``on_effective_weights`` converts, and ``effective``/``stored``
    # are its rule.
    forward_scale: float = 1.0
    renormalize_each_step: bool = False  # regularize puts the weight back on its sphere (the reference's embedding)

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

    def _render(self, lines: list[str], prefix: str, shares: Iterator[float]) -> None:
        lines.append(f"{prefix}└─ {self.describe()}  mass {self.mass:.4g}  share {next(shares):.4g}")


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

    def atoms(self) -> Iterator[Atom]:
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
    def apply(self, x):
        return x


class Add(Bond):
    """Sum of a tuple of inputs."""

    def apply(self, x):
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

    def apply(self, x):
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
        self.features_in, self.features_out = _chain_features(self.children)

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
        self.features_in = _common([c.features_in for c in children], "inputs of a tuple", children)
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


def _common(sizes: list[int | None], what: str, modules: Sequence[Module]) -> int | None:
    known = {size for size in sizes if size is not None}
    if len(known) > 1:
        names = ", ".join(f"{m.describe()} ({size})" for m, size in zip(modules, sizes) if size is not None)
        raise ValueError(f"shapes cannot compose: the {what} expect different feature sizes: {names}")
    return known.pop() if known else None


def _chain_features(children: Sequence[Module]) -> tuple[int | None, int | None]:
    """Check adjacent feature sizes along a composition; return the chain's (in, out) sizes."""
    first_in: int | None = None
    current: int | None = None
    seen_reshape = False
    for child in children:
        if isinstance(child, Bond) and child.shape_preserving and child.features_in is None:
            continue  # passes the current size through
        if child.features_in is not None:
            if current is not None and current != child.features_in:
                raise ValueError(f"shapes cannot compose: {child.describe()} takes {child.features_in} features "
                                 f"but the module before it produces {current}")
            if current is None and not seen_reshape and first_in is None:
                first_in = child.features_in
        seen_reshape = seen_reshape or child.features_in is None
        current = child.features_out
    return first_in, current


def _effective(atoms: Sequence[Atom], pieces: Sequence[Tensor] | dict[int, Tensor]) -> Any:
    """Stored weights (or changes of them), a list in tree order or a dict by atom index → effective ones."""
    if isinstance(pieces, dict):
        return {index: atoms[index].effective(piece) for index, piece in pieces.items()}
    return [atom.effective(piece) for atom, piece in zip(atoms, pieces, strict=True)]


def _stored(atoms: Sequence[Atom], pieces: Sequence[Tensor] | dict[int, Tensor]) -> Any:
    """Effective weights (or changes of them), a list in tree order or a dict by atom index → stored ones."""
    if isinstance(pieces, dict):
        return {index: atoms[index].stored(piece) for index, piece in pieces.items()}
    return [atom.stored(piece) for atom, piece in zip(atoms, pieces, strict=True)]


def with_role(atom: Atom, role: str) -> Atom:
    """Name an atom's job in its network (kept by every copy ``**`` makes); see ``layer_names``."""
    atom.role = role
    return atom


def layer_roles(module: Module) -> list[str]:
    """Each atom's role: the declared one, else its kind numbered among the undeclared atoms of its own
    copy, with one ``block.`` per enclosing ``**`` (``linear1``, ``block.linear1``, ``linear2``): copies of
    one block share their roles, and no layer outside the blocks shares one with a layer inside."""
    counts: dict[tuple, int] = {}
    roles = []
    for atom in module.atoms():
        if atom.role is not None:
            roles.append(atom.role)
            continue
        kind = type(atom).__name__.lower()
        counts[(kind, atom.repeat)] = counts.get((kind, atom.repeat), 0) + 1
        roles.append("block." * len(atom.repeat) + f"{kind}{counts[(kind, atom.repeat)]}")
    return roles


def layer_names(module: Module) -> list[str]:
    """One name per atom, in weight-list order, independent of width: its role and its copy indices
    (``attn.q[2]``: block 2; ``hidden[1.0]``: block 1, layer 0). Repeated names get ``#2``, ``#3``."""
    names, seen = [], {}
    for atom, role in zip(module.atoms(), layer_roles(module)):
        name = role + (f"[{'.'.join(map(str, atom.repeat))}]" if atom.repeat else "")
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return names


def named(module: Module, name: str) -> Module:
    """Give a compound a display name (shown by ``print``); composing it later keeps it as one node."""
    module.name = name
    return module
