"""μP, the maximal update parametrisation (Yang & Hu 2021; Tensor Programs V, Yang et al. 2022): the base
optimiser's step with a learning rate, an initial scale and an output multiplier per layer, each set by how the
layer's shape has grown from a base network (``optim.mup.base_width``). docs/mup.md explains it beside the
modular norm.

The rules follow Tensor Programs V's Table 3 in the form that the ``mup`` package (microsoft/mup) implements,
where the base network is trained exactly as in the standard parametrisation and every multiplier is 1 there.
A layer's fan-in and fan-out each either grow with width (multiplier m = size / base size) or stay fixed:

========================  ====================  ===================  ======================  ====================
layer (which sizes grow)  initial scale (RMS)   output multiplier    Adam LR                 SGD LR
========================  ====================  ===================  ======================  ====================
hidden (fan-in, fan-out)  base · m_in^(-1/2)    1                    η / m_in                η · m_out / m_in
input (fan-out: embed)    base                  1                    η                       η · m_out
readout (fan-in only)     base · m_in^(-1)      1 / m_in             η                       η · m_in
fixed (neither)           base                  1                    η                       η
========================  ====================  ===================  ======================  ====================

"base" is the same layer's initial RMS in the base network, so a network that already scales its
initialisation as 1/√fan-in (the modular networks' orthogonal matrices) keeps it, and one that does not (the
standard GPT's fixed 0.02) is brought to it. The readout's scale is that of its effective weight (stored
weight × multiplier): the stored weight starts at the base's scale, as ``mup``'s ``MuReadout`` after
``set_base_shapes`` (its 1/√fan-in start × √m_in). Attention logits scale as 1/d_head: a network whose
attention uses an explicit c/√d_head (the standard GPT's) gets c·√d₀/d_head, equal to it at the base width;
the default 1/d_head (the modular GPT's) is left as it is. Options: ``optim.mup.readout_zero`` (the readout starts
at 0), ``mup_query_zero`` (the query starts at 0).

μP sets every atom's constant factor itself (1, and the readout's multiplier): ``variant.scales`` does not
apply; the variant's other choices (where the attention's 1/3 sits, unit embedding rows) do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ...nn import FunctionalAttention, Module, layer_names, layer_roles
from ...nn.torch_network import TorchNetwork
from ...nn.weight_maps import decayed
from ..config import OptimConfig
from ..directions import DIRECTIONS, adam_direction
from .base import Resizer, scaled_each
from .muon import readout_of
from .mup_depth import arch_problems, scaled_arch, with_depth
from .mup_rules import (QUERY_ROLE, READOUT_ROLE, LayerRule, MupError, MupParametrisation, init_rms, layer_rule,
                        shape_rule)
from .unnormed import Unnormed

LINEAR_OR_CONV = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                  nn.ConvTranspose3d)


@dataclass(frozen=True)
class TorchMup:
    """μP on a plain torch model: each parameter's rule (weight-list order), and the modules whose input is
    multiplied by a factor (a readout tied to the embedding: ``mup``'s MuSharedReadout)."""
    rules: list[LayerRule]
    input_scales: dict[str, float]


def torch_rules(net: TorchNetwork, base: TorchNetwork, twice: TorchNetwork, cfg: OptimConfig) -> TorchMup:
    """μP on a plain torch model as ``mup`` does it to a model whose readout is a ``MuReadout``: each parameter's
    LR from its growth (``shape_rule``), its initialisation the model's own except the readout's, scaled by
    √m_in (``MuReadout._rescale_parameters`` after ``set_base_shapes``) and every linear or convolution bias by
    √(its layer's m_in) (``rescale_linear_bias``), and the readout's input multiplied by 1/m_in (here: its
    weight, the same function). Which layers grow is read between the base and twice it.

    A readout that shares the embedding's table (GPT-2's and nanoGPT's tie) is ``mup``'s ``MuSharedReadout``: the
    readout's input is divided by the table's width multiplier (a hook on the readout module, so the embedding's
    use of the table is left as it is), and the table keeps the model's own initialisation and its LR as an
    embedding (a vector-like parameter to ``MuAdam``/``MuSGD``). ``set_base_shapes`` would also multiply the shared
    table by √m (its ``rescale_params``, meant for a readout drawn at 1/√fan-in, and followed in ``mup``'s usage by
    a re-initialisation): on an embedding's width-independent draw that would make the input layer grow with
    width, so it is not done (docs/mup.md, "A tied embedding and readout")."""
    atoms, base_atoms, twice_atoms = net.atom_list(), base.atom_list(), twice.atom_list()
    names = [a.role for a in atoms]
    if names != [a.role for a in base_atoms] or names != [a.role for a in twice_atoms]:
        raise MupError(f"optim.mode=mup: {net.describe()} has other parameters at width {cfg.mup.base_width} than "
                       f"at this width; μP needs the same parameters at every width (only their sizes may change)")
    if all(a.shape == b.shape for a, b in zip(twice_atoms, base_atoms)):
        raise MupError(f"optim.mode=mup: no parameter of {net.describe()} changes size with arch.width; μP scales "
                       f"the layers that grow with it (map your width key to arch.width, e.g. n_embd: ${{.width}})")
    if cfg.mup.query_zero:
        raise MupError("optim.mup.query_zero=true: a torch model's attention query sits inside its own code; set it "
                       "to zero in the model, or leave mup_query_zero false")
    growing = {i for i, (a, b) in enumerate(zip(twice_atoms, base_atoms))
               if a.is_matrix and not a.embedding and a.fan_in != b.fan_in and a.fan_out == b.fan_out}
    try:
        readout = set(readout_of(net, growing))
    except ValueError as error:
        raise MupError(f"optim.mode=mup: {error}") from None
    if stray := [atoms[i].role for i in sorted(growing - readout)]:
        raise MupError(f"optim.mode=mup: {', '.join(stray)} map{'s' if len(stray) == 1 else ''} a width-sized input "
                       f"to a fixed-size output, which μP allows only for the readout ("
                       f"{atoms[min(readout)].module_path}); make its output grow with width")
    weight_of = {atom.module_path: i for i, atom in enumerate(atoms) if atom.local_name == "weight"}
    input_scales = _tied_readout_scales(net, base, readout, cfg)
    rules = []
    for index, (atom, base_atom) in enumerate(zip(atoms, base_atoms)):
        kind, m_in, m_out, lr = shape_rule((atom.fan_out, atom.fan_in), (base_atom.fan_out, base_atom.fan_in),
                                           cfg.name)
        if index in readout and atom.role in net.tied:  # the shared table: an embedding, its readout's input scaled
            rules.append(LayerRule(kind, m_in, m_out, lr, 1.0, 1.0))
        elif index in readout:  # weight and bias: the readout's input width multiplier
            m = atoms[min(readout)].fan_in / base_atoms[min(readout)].fan_in
            rules.append(LayerRule(kind, m_in, m_out, lr, 0.0 if cfg.mup.readout_zero else m**0.5,
                                   1 / m if atom.is_matrix else 1.0))
        elif atom.local_name == "bias" and isinstance(atom.module, LINEAR_OR_CONV) and atom.module_path in weight_of:
            # mup's rescale_linear_bias: PyTorch draws a bias ∝ 1/√fan-in, μP wants it of order 1
            weight = weight_of[atom.module_path]
            rules.append(LayerRule(kind, m_in, m_out, lr, (atoms[weight].fan_in / base_atoms[weight].fan_in)**0.5,
                                   1.0))
        else:
            rules.append(LayerRule(kind, m_in, m_out, lr, 1.0, 1.0))
    return TorchMup(rules, input_scales)


def _tied_readout_scales(net: TorchNetwork, base: TorchNetwork, readout: set[int], cfg: OptimConfig
                         ) -> dict[str, float]:
    """The readout modules that use the embedding's table, each with its input's factor 1/m (m: the table's width
    multiplier), as ``mup``'s MuSharedReadout; empty for an untied readout."""
    atoms, base_atoms = net.atom_list(), base.atom_list()
    tied = [i for i in sorted(readout) if atoms[i].role in net.tied]
    if not tied:
        return {}
    table = atoms[tied[0]]
    if cfg.mup.readout_zero:
        raise MupError(f"optim.mup.readout_zero=true: the readout shares {table.role} with the embedding, which a "
                       f"zero start would zero too (mup's MuSharedReadout leaves the shared table as drawn); leave "
                       f"optim.mup.readout_zero false, or untie them")
    holders = [path.rpartition(".")[0] for path in net.tied[table.role]]
    readouts = [net.readout_name] if net.readout_name in holders else [h for h in holders if h != table.module_path]
    m = table.fan_out / base_atoms[tied[0]].fan_out  # the table's width (an embedding's fan-out)
    return {module: 1 / m for module in readouts}


def modules(module: Module) -> Iterator[Module]:
    """Every module of the tree, depth first (an atom used twice appears twice)."""
    yield module
    for child in module.children:
        yield from modules(child)


def refuse_stray_readouts(net: Module, base: Module, optimizer: str = "adam", named: Module | None = None
                          ) -> list[LayerRule]:
    """Each atom's rule, after refusing a layer whose fan-in grows and fan-out does not but is not the network's
    readout (role "output"): μP gives the readout alone a 1/width multiplier (``mup`` asserts the same of
    its ``MuReadout``). ``named``: the network whose layers the refusal names (default ``net``)."""
    atoms, base_atoms = net.atom_list(), base.atom_list()
    if len(atoms) != len(base_atoms) or any(type(a) is not type(b) for a, b in zip(atoms, base_atoms)):
        raise MupError(f"the base network has {len(base_atoms)} layers and this one {len(atoms)}: μP needs the "
                       f"same layers at every width (only their sizes may change)")
    rules = [layer_rule(atom, base_atom, optimizer) for atom, base_atom in zip(atoms, base_atoms)]
    named = named or net
    names, roles = layer_names(named), layer_roles(named)
    if stray := [f"{name} {atom.describe()}" for name, atom, role, rule in zip(names, named.atom_list(), roles, rules)
                 if rule.kind == "readout" and role != READOUT_ROLE]:
        verb = "maps" if len(stray) == 1 else "map"
        raise MupError(f"optim.mode=mup: {', '.join(stray)} {verb} a width-sized input to a fixed-size output, "
                       f"which μP allows only for the readout; give the readout with_role(…, {READOUT_ROLE!r}) "
                       f"(or make the output grow with width)")
    return rules


def parametrise(net: Module, base: Module, optimizer: str) -> list[LayerRule]:
    """Set μP's multipliers on ``net`` (its atoms' constant factors, its attention's logit scale) from the base
    network of the same architecture, and return each atom's rule (weight-list order; ``refuse_stray_readouts``
    first). An attention with an explicit logit scale is taken to write it as c/√d_head (nanoGPT's form, the
    standard GPT's); the default scale (None) is already 1/d_head."""
    rules = refuse_stray_readouts(net, base, optimizer)
    atoms = net.atom_list()
    for atom, rule in zip(atoms, rules):
        atom.forward_scale = rule.output
    bonds = [m for m in modules(net) if isinstance(m, FunctionalAttention)]
    base_bonds = [m for m in modules(base) if isinstance(m, FunctionalAttention)]
    for bond, base_bond in zip(bonds, base_bonds, strict=True):
        if bond.scale is not None and base_bond.scale is not None:  # c/√d → c²/d / (c/√d₀): √d₀/d for c = 1
            bond.scale = bond.scale**2 / base_bond.scale
    return rules


class Mup(Unnormed):
    """μP: the unnormed step with each layer's LR multiplier; the same LR grid and defaults as unnormed."""

    name = "mup"
    own_block = "mup"
    # μP's SGD moves the ResMLP's input and readout m× faster than unnormed SGD (the variant does not matter:
    # μP sets the constant factors itself), and unnormed SGD's 2^-3 diverges within 2 steps. 2^-8 is two grid
    # steps below the lowest LR at which any of 3 seeds diverged in 200 steps (2^-6), on 32 × 32 photo patches
    # in CIFAR-10's layout; there it reaches 1.81 against 1.70 at the best LR, 2^-7 (docs/results/default_lrs).
    default_lr_exceptions = {("sgd", "resmlp", None): 2.0**-8}

    def architecture(self, arch: Any, cfg: OptimConfig) -> Any:
        if cfg.mup.depth == "none":
            return arch
        if problems := arch_problems(cfg, arch):
            raise MupError("; ".join(problems))
        return scaled_arch(arch, cfg)

    def network(self, net: Module, resize: Resizer, cfg: OptimConfig) -> Module:
        base = resize(width=cfg.mup.base_width)
        if isinstance(net, TorchNetwork):
            prepared = torch_rules(net, base, resize(width=2 * cfg.mup.base_width), cfg)
            rules = tuple(prepared.rules)
            for atom, rule in zip(net.atom_list(), rules):
                atom.forward_scale = rule.output
            for module, factor in prepared.input_scales.items():
                net.scale_input(module, factor)
            zero_roles: frozenset[str] = frozenset()
        else:
            # which layers grow is seen only beside another width: at the base width itself, compare 2× base
            refuse_stray_readouts(resize(width=2 * cfg.mup.base_width), base, named=net)
            rules = tuple(parametrise(net, base, cfg.name))
            zero_roles = frozenset(role for role, zero in ((READOUT_ROLE, cfg.mup.readout_zero),
                                                           (QUERY_ROLE, cfg.mup.query_zero)) if zero)
        if cfg.mup.depth != "none":
            rules = with_depth(rules, net, resize, cfg, int(resize.arch.depth), init_rms)
        return net.set_parametrisation(MupParametrisation(rules, zero_roles))

    def direction(self, net: Module, state: Any, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
        # a depth recipe shrinks ε with the layer's gradients (its reference's groups); ε = 0: nothing to shrink
        if cfg.name == "adam" and cfg.eps and (factors := _prepared(net).eps_factors) is not None:
            return adam_direction(state, grads, cfg, eps=[cfg.eps * factor for factor in factors])
        return DIRECTIONS[cfg.name](state, grads, cfg)

    def initial_weights(self, net: Module, weights: list[Tensor]) -> list[Tensor]:
        prepared = _prepared(net)
        return [torch.zeros_like(w) if role in prepared.zero_roles else w * rule.init
                for w, rule, role in zip(weights, prepared.rules, layer_roles(net), strict=True)]

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        return scaled_each(u, lr, [rule.lr for rule in rules_of(net)])

    def regularize(self, net: Module, weights: list[Tensor], strength: Tensor) -> list[Tensor]:
        # decoupled decay at the global LR for every layer, not split by the modular norm's shares: what mup's
        # MuAdamW (lr/m · wd·m) amounts to; each atom's own rule still applies (the paper variant's unit
        # embedding rows go back on their sphere)
        return decayed(net.atom_list(), weights, [rule.decay for rule in rules_of(net)], strength)

    def problems(self, cfg: OptimConfig, roles: tuple[str, ...] | None, arch: Any = None) -> list[str]:
        problems = []
        base = cfg.mup.base_width  # an integer >= 1: the schema's check comes first
        if arch is not None and "width" not in arch:
            problems.append(f"optim.mode=mup needs arch.width (μP scales each layer from the base width); "
                            f"arch.name={arch.name} has none")
        elif arch is not None and isinstance(arch.width, int) and arch.width < base:
            problems.append(f"optim.mup.base_width={base} is above arch.width={arch.width}: μP scales up from its "
                            f"base; set optim.mup.base_width to the sweep's smallest width or below")
        if cfg.mup.depth != "none" and arch is not None:
            problems += arch_problems(cfg, arch)
        if roles is not None:
            for key, role in (("readout_zero", READOUT_ROLE), ("query_zero", QUERY_ROLE)):
                if getattr(cfg.mup, key) and role not in roles:
                    problems.append(f"optim.mup.{key}=true: no layer has the role {role!r} (roles: {', '.join(roles)})")
        return problems

    def summary_fields(self, cfg: OptimConfig, device: torch.device) -> dict[str, Any]:
        depth = {"mup_depth": cfg.mup.depth, "mup_base_depth": cfg.mup.base_depth} if cfg.mup.depth != "none" else {}
        return {"mup_base_width": cfg.mup.base_width, **depth}


def _prepared(net: Module) -> MupParametrisation:
    if not isinstance(prepared := net.parametrisation, MupParametrisation):
        raise RuntimeError("optim.mode=mup on a network that Mup.network did not prepare")
    return prepared


def rules_of(net: Module) -> list[LayerRule]:
    """Each atom's μP rule, in weight-list order, as ``Mup.network`` set them."""
    return list(_prepared(net).rules)
