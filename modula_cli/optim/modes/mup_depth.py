"""μP's depth recipes (``optim.mup.depth``): Depth-μP (Tensor Programs VI, Yang et al. 2023; Bordelon et al.
2023) and CompleteP (Dey et al., NeurIPS 2025), in the form EleutherAI/nanoGPT-mup's ``model.py`` applies them
on top of μP for width. docs/mup.md says what they do beside the modular norm.

With m_L = L / L₀ (``arch.depth`` over ``optim.mup.base_depth``), α = ½ (depth_mup) or 1 (completep) and
m_w the layer's width multiplier (μP's m_in, or m_out for a layer whose fan-in is fixed):

=================================  ===========================================
each residual branch               x + s · m_L^(−α) · f(x)  (s: ``arch.residual_scale``, 1 as nanoGPT has it)
a block layer's Adam LR            × m_L^(α−1)
a block layer's SGD LR             × m_L^(2α−1)  (Depth-μP's: constant at α = ½)
a block layer's weight decay       at its LR (× the same factor)
Adam ε                             ε / m_w outside the blocks, ε / (m_w · m_L^α) in them
a block layer's initial scale      its scale in the same network at depth L₀
=================================  ===========================================

A *block layer* is a parameter that the residual blocks repeat: one whose layer role occurs more often in the
network at depth 2·L₀ than at L₀ (embeddings, the readout and a final norm occur once at any depth). At the base
depth every depth factor is 1 and the run is μP for width, with the reference's ε / m_w (which microsoft/mup and
``mup_depth=none`` leave out). The SGD factor is derived, not taken from the
reference (which trains AdamW only): a branch multiplier m_L^(−α) shrinks a block layer's gradient by m_L^(−α)
and its effect on the output by m_L^(−α) again, and L blocks add up, so the output moves as
η · m_L^(1 − 2α): constant when η grows as m_L^(2α − 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import OmegaConf

from ...nn import Atom, Module, layer_roles
from ...nn.torch_network import TorchNetwork, shared_roles
from ..config import OptimConfig
from ..mode_settings import DEPTH_RECIPES

# the built-in networks whose blocks carry the modular norm's own depth weights, (1 − 1/L)·x + f(x)/L
MODULAR_NETWORKS = ("gpt", "resmlp", "resnet")


@dataclass(frozen=True)
class DepthRecipe:
    """One run's depth factors: α and m_L."""

    name: str
    alpha: float
    depth_mult: float

    @property
    def branch(self) -> float:
        """Each residual branch's multiplier, m_L^(−α)."""
        return self.depth_mult ** -self.alpha

    def lr(self, optimizer: str) -> float:
        """A block layer's LR factor: m_L^(α−1) for Adam, m_L^(2α−1) for SGD."""
        exponent = self.alpha - 1 if optimizer == "adam" else 2 * self.alpha - 1
        return self.depth_mult ** exponent

    @property
    def eps(self) -> float:
        """A block layer's Adam ε factor beyond the width's 1/m_w: m_L^(−α)."""
        return self.depth_mult ** -self.alpha


def depth_recipe(cfg: OptimConfig, depth: int) -> DepthRecipe:
    return DepthRecipe(cfg.mup.depth, DEPTH_RECIPES[cfg.mup.depth], depth / cfg.mup.base_depth)


def declared_residual_scale(arch: Any) -> Any:
    """The multiplier the network's residual branches read from its YAML (``arch.residual_scale``), as typed; None
    when the arch config declares none (the modular networks weight their blocks themselves)."""
    return OmegaConf.select(arch, "residual_scale", default=None) if OmegaConf.is_config(arch) else \
        getattr(arch, "residual_scale", None)


def scaled_arch(arch: Any, cfg: OptimConfig) -> Any:
    """The arch config whose network has the recipe's branch multipliers: ``residual_scale`` × m_L^(−α)."""
    recipe = depth_recipe(cfg, int(arch.depth))
    return OmegaConf.merge(arch, {"residual_scale": float(declared_residual_scale(arch)) * recipe.branch})


def arch_problems(cfg: OptimConfig, arch: Any) -> list[str]:
    """What keeps a recipe from applying to this arch config, one line each (before anything is built). ``arch``
    as the user typed it: a value of the wrong type is the arch schema's to name, not taken for a missing one."""
    recipe, name = cfg.mup.depth, getattr(arch, "name", "?")
    if arch.get("depth") is None:
        return [f"optim.mup.depth={recipe} needs arch.depth (the recipe scales with the number of residual "
                f"blocks); arch.name={name} has none"]
    problems = []
    if isinstance(arch.depth, int) and cfg.mup.base_depth > arch.depth:  # a mistyped depth: the schema's line
        problems.append(f"optim.mup.base_depth={cfg.mup.base_depth} is above arch.depth={arch.depth}: the depth "
                        f"recipes scale up from their base; set optim.mup.base_depth to the sweep's smallest depth "
                        f"or below")
    if declared_residual_scale(arch) is None:
        problems.append(f"optim.mup.depth={recipe}: arch.name={name} declares no arch.residual_scale, the multiplier "
                        f"on its residual branches (x + s·f(x)), so the recipe does not apply: "
                        + ("the modular networks already weight each block by 1/depth; use arch=standard_gpt"
                           if name in MODULAR_NETWORKS else "set it (1.0: nanoGPT's branches) and have the model's "
                                                            "branches read it (docs/mup.md)"))
    return problems  # a residual_scale that is not a number > 0: the arch schema's line


def block_layers(net: Module, shallow: Module, deep: Module) -> list[bool]:
    """For each atom of ``net``: is it a block layer, one whose role occurs more often in ``deep`` (depth
    2·L₀) than in ``shallow`` (L₀)? A torch model's roles are its parameter paths, block index left out."""
    fewer, more = Counter(shared_roles(shallow)), Counter(shared_roles(deep))
    return [more[role] > fewer[role] for role in shared_roles(net)]


def with_depth(rules: Sequence[Any], net: Module, resized: Callable[..., Module], cfg: OptimConfig, depth: int,
               init_rms: Callable[[Atom], float]) -> tuple[Any, ...]:
    """μP's per-layer rules (``mup.LayerRule``) with the recipe's LR, weight-decay, ε and initial-scale factors.
    ``resized(depth=n)`` builds the same network at depth n; ``init_rms``: an atom's initial RMS."""
    recipe = depth_recipe(cfg, depth)
    base = cfg.mup.base_depth
    shallow, deep = resized(depth=base), resized(depth=2 * base)
    in_blocks = block_layers(net, shallow, deep)
    if not any(in_blocks):
        raise ValueError(f"optim.mup.depth={cfg.mup.depth}: no parameter of {net.describe()} repeats with arch.depth "
                         f"(same layers at depth {base} and {2 * base}), so it has no residual blocks for the recipe "
                         f"to scale; use optim.mup.depth=none")
    start = _initial_scale_factors(net, shallow, in_blocks, init_rms)
    out = []
    for rule, block, init in zip(rules, in_blocks, start, strict=True):
        width_mult = rule.fan_in_mult if rule.fan_in_mult != 1 else rule.fan_out_mult
        if not block:
            out.append(replace(rule, eps=rule.eps / width_mult))
            continue
        factor = recipe.lr(cfg.name)
        out.append(replace(rule, lr=rule.lr * factor, decay=rule.decay * factor, init=rule.init * init,
                           eps=rule.eps / width_mult * recipe.eps))
    return tuple(out)


def _initial_scale_factors(net: Module, shallow: Module, in_blocks: list[bool],
                           init_rms: Callable[[Atom], float]) -> list[float]:
    """Each block layer's initial RMS at depth L₀ over its RMS here (GPT-2's 0.02/√(2L) on the residual outputs
    becomes depth-independent); 1 elsewhere, and on a torch model, whose initialisation is its own code's."""
    if isinstance(net, TorchNetwork):
        return [1.0] * len(in_blocks)
    at_base = {}
    for role, atom in zip(layer_roles(shallow), shallow.atom_list()):
        at_base.setdefault(role, init_rms(atom))
    return [at_base[role] / init_rms(atom) if block else 1.0
            for role, atom, block in zip(layer_roles(net), net.atom_list(), in_blocks)]
