"""What every optimisation mode provides (``modes/__init__.py`` registers them)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from ...nn import Module
from ...nn.packed import scaled_members
from ..config import OptimConfig
from ..directions import DIRECTIONS

# The paper's LR grids are powers of two, 2^-6 … 2^2 unless a mode says otherwise for an optimiser.
DEFAULT_EXPONENTS = range(-6, 3)


class Resizer(Protocol):
    """The run's architecture built again at other sizes: ``resize(width=32)``, ``resize(depth=4)``."""

    arch: Any  # the arch config the run's network is built from

    def __call__(self, **sizes: int) -> Module: ...


class Mode:
    """One mode. Subclasses set ``name`` and ``update``; every other hook has the do-nothing default."""

    name: ClassVar[str]
    # the single-run LR when optim.lr is null (the middle of the paper's grid), and the grid's exponents
    default_lrs: ClassVar[dict[str, float]] = {"sgd": 2.0**-2, "adam": 2.0**-2}
    # where that default does not train an architecture: (optimiser, arch.name, variant.scales or None for
    # either) → its LR, each chosen from evidence (docs/results/default_lrs)
    default_lr_exceptions: ClassVar[dict[tuple[str, str, str | None], float]] = {}
    lr_exponents: ClassVar[dict[str, range]] = {}
    # its block of settings (optim.<block>, mode_settings.py) when only it reads them: other modes' fingerprints
    # leave them out. (optim.normed and optim.ortho are in every fingerprint, as they were before the blocks.)
    own_block: ClassVar[str | None] = None
    # its state's key in the optimiser state and its checkpoints (None: stateless)
    state_key: ClassVar[str | None] = None
    # the mode holds every weight on its own constraint set: the paper variant's embedding renormalisation
    # (which would undo it) is skipped
    holds_norms: ClassVar[bool] = False
    # the mode reads the modular norm's tree of masses and sensitivities, which a plain torch model has not
    needs_modular_norm: ClassVar[bool] = False

    def default_lr(self, optimizer: str, arch: str | None = None, scales: str | None = None) -> float:
        """The LR of a run with ``optim.lr=null``: the optimiser's, unless the architecture (under the variant's
        ``scales``) has its own."""
        for key in ((optimizer, arch, scales), (optimizer, arch, None)):
            if key in self.default_lr_exceptions:
                return self.default_lr_exceptions[key]
        return self.default_lrs[optimizer]

    def lr_grid(self, optimizer: str) -> list[float]:
        return [2.0**e for e in self.lr_exponents.get(optimizer, DEFAULT_EXPONENTS)]

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        """The weight change Δ for base direction ``u`` at learning rate ``lr`` (a tensor: one per member when
        packed); ``state`` is what ``init_state`` made."""
        raise NotImplementedError

    def architecture(self, arch: Any, cfg: OptimConfig) -> Any:
        """The arch config whose network this mode trains (μP's depth recipes scale its residual branches)."""
        return arch

    def network(self, net: Module, resize: Resizer, cfg: OptimConfig) -> Module:
        """The network this mode trains, from the one the architecture built (μP sets its multipliers);
        ``resize(width=n)`` builds the same architecture at width n."""
        return net

    def direction(self, net: Module, state: Any, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
        """The base optimiser's direction u from the gradients (``optim.name``'s: SGD's momentum, Adam's ratio);
        a mode with its own per-layer optimiser (Muon) replaces it where it applies."""
        return DIRECTIONS[cfg.name](state, grads, cfg)

    def regularize(self, net: Module, weights: list[Tensor], strength: Tensor) -> list[Tensor]:
        """Weight decay at ``strength`` (LR × optim.wd): split over the network as a step is."""
        return net.regularize(weights, strength)

    def init_state(self, weights: list[Tensor], cfg: OptimConfig) -> Any:
        return None

    def runs_eagerly(self, state: Any) -> bool:
        """This step cannot go through torch.compile (e.g. it draws random numbers on a CPU generator)."""
        return False

    def initial_weights(self, net: Module, weights: list[Tensor]) -> list[Tensor]:
        """The initial weights moved onto the mode's constraint set (unconstrained modes: unchanged)."""
        return weights

    def problems(self, cfg: OptimConfig, roles: tuple[str, ...] | None, arch: Any = None) -> list[str]:
        """Problems of the mode's own settings, one line each. ``roles``: the network's layer roles, or None
        while they are not known (a user's network is checked again once built); ``arch``: the arch config,
        when known."""
        return []

    def logged(self, net: Module, weights: list[Tensor], state: Any, packed: bool) -> dict[str, list[float]]:
        """Extra train-log fields, one value per member (a host sync: called at log steps only)."""
        return {}

    def summary_fields(self, cfg: OptimConfig, device: torch.device) -> dict[str, Any]:
        """Extra fields of each run's summary.json."""
        return {}


def scaled(pieces: list[Tensor], factor: Tensor) -> list[Tensor]:
    """Each piece times ``factor``: one multi-tensor operation for a 0-d factor, per piece for one factor per
    packed member ((K,))."""
    if factor.ndim == 0:
        return list(torch._foreach_mul(pieces, factor)) if pieces else []
    return scaled_members(pieces, factor)


def scaled_each(pieces: list[Tensor], lr: Tensor, factors: list[float]) -> list[Tensor]:
    """``piece × lr × factor`` for each piece, one operation per distinct factor (a network has few)."""
    if len(pieces) != len(factors):
        raise ValueError(f"expected {len(factors)} update tensors, one per layer, got {len(pieces)}")
    out: list[Tensor] = [None] * len(pieces)  # type: ignore[list-item]
    by_factor: dict[float, list[int]] = {}
    for index, factor in enumerate(factors):
        by_factor.setdefault(factor, []).append(index)
    for factor, indices in by_factor.items():
        for index, piece in zip(indices, scaled([pieces[i] for i in indices], lr * factor)):
            out[index] = piece
    return out
