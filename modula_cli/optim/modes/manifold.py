"""Manifold: every layer held on a fixed-norm manifold (Stiefel for matrices, spheres for embedding rows)
and moved along its tangent space, except the layers named free (trained as in dualized mode) and with the
radius of the layers named scaled learned beside their direction (docs/design.md, docs/manifold.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ...models import role_problems
from ...nn import Module, layer_roles
from ...nn.manifold import DualAscent, ManifoldState, atom_kinds
from ..config import OptimConfig
from .base import Mode
from .dualized import dualize_settings


class Manifold(Mode):
    name = "manifold"
    needs_modular_norm = True
    own_block = "manifold"
    state_key = "manifold"  # the dual ascent's multipliers, and each atom's kind once known
    holds_norms = True

    def init_state(self, weights: list[Tensor], cfg: OptimConfig) -> ManifoldState:
        return ManifoldState()

    def runs_eagerly(self, state: ManifoldState) -> bool:
        # the first step fills the state (each atom's kind, the multipliers): compiled from the second, the step
        # compiles once instead of twice
        return state.kinds is None

    def initial_weights(self, net: Module, weights: list[Tensor]) -> list[Tensor]:
        return net.onto_manifold(weights)  # a Gaussian initialisation is not on the manifold

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: ManifoldState,
               cfg: OptimConfig) -> list[Tensor]:
        settings = DualAscent(cfg.manifold.iterations, cfg.manifold.step, cfg.manifold.tolerance,
                              cfg.manifold.warm_start)
        if state.kinds is None:
            state.kinds = atom_kinds(layer_roles(net), cfg.manifold.scaled, cfg.manifold.free)
        return net.manifold_update(weights, u, lr, settings, state, state.kinds,
                                   dualize_settings(cfg, weights[0].device))

    def problems(self, cfg: OptimConfig, roles: tuple[str, ...] | None, arch: Any = None) -> list[str]:
        problems = []
        if cfg.wd:
            problems.append(f"optim.wd={cfg.wd} with optim.mode=manifold; each weight's size is held on its manifold "
                            f"(a fixed radius, or a radius it learns), never decayed, so weight decay must be 0")
        problems += role_problems("optim.manifold.scaled", cfg.manifold.scaled, roles)
        problems += role_problems("optim.manifold.free", cfg.manifold.free, roles)
        if both := sorted(set(cfg.manifold.scaled) & set(cfg.manifold.free)):  # lists: their type is checked first
            problems.append(f"optim.manifold.scaled and optim.manifold.free both name {', '.join(both)}; "
                            f"a layer is either scaled on the manifold or free of it")
        return problems

    def logged(self, net: Module, weights: list[Tensor], state: ManifoldState, packed: bool
               ) -> dict[str, list[float]]:
        """The dual ascent (averaged over the steps since the last log) and each learned scale."""
        means = state.means()
        fields = {} if means is None else {"tangency": means[0], "dual_iterations": means[1]}
        if state.kinds is not None:
            scales = role_scales(net, weights, state.kinds, packed)
            fields.update({name: value.reshape(-1).tolist() for name, value in scales.items()})
        return fields


def layer_scale(atom, weight: Tensor, members: bool) -> Tensor:
    """RMS singular value of a matrix atom's slices relative to its polar scale, or RMS of an embedding's row
    norms at unit RMS; per member (shape (K,)) when ``members``, else 0-d. 1 on the manifold; exactly the
    learned radius r of a scaled layer; for a free layer, how far its norm has grown."""
    weight = atom.effective(weight.detach()).float()
    if (stack := atom.matrices(weight)) is not None:
        columns = min(stack.shape[-2:])
        squares = stack.pow(2).sum(dim=(-2, -1)) / columns / atom.polar_scale**2  # (…, slices)
    else:
        squares = weight.pow(2).mean(dim=-1)  # (…, rows): a row at RMS 1 has scale 1
    squares = squares.reshape(squares.shape[0], -1) if members else squares.reshape(-1)
    return squares.mean(dim=-1).sqrt()


@torch.no_grad()
def role_scales(net: Module, weights: Sequence[Tensor], kinds: Sequence[str], members: bool) -> dict[str, Tensor]:
    """``scale/<role>`` of every role whose layers are not held at a fixed radius (mean over its layers)."""
    by_role: dict[str, list[Tensor]] = defaultdict(list)
    for atom, weight, role, kind in zip(net.atom_list(), weights, layer_roles(net), kinds, strict=True):
        if kind != "fixed":
            by_role[role].append(layer_scale(atom, weight, members))
    return {f"scale/{role}": torch.stack(values).mean(dim=0) for role, values in by_role.items()}
