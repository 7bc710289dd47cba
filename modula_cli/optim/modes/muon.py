"""Muon as practised (Keller Jordan 2024; ``torch.optim.Muon``): every hidden weight matrix takes the Nesterov
momentum of its gradient, orthogonalised by Newton–Schulz and scaled per shape; embeddings, the readout, gains
and biases take the base optimiser (Adam) at ``optim.muon.adam_ratio`` times the LR (1: one LR for both, the
value a study at width 64 chose, docs/own_model.md). Each layer on its own: no masses, no
tree, so it runs on a plain torch model as on the built-in networks (docs/own_model.md).

A hidden matrix of fan-out A and fan-in B (a convolution's kernel flattened into B, as Keller Jordan's code
does) moves by ``lr · scale(A, B) · NS₅(m)`` with ``optim.muon.scale``:

=================  =========================  ==========================================
rule               scale(A, B)                where it comes from
=================  =========================  ==========================================
original           √max(1, A/B)               Keller Jordan's Muon
match_rms_adamw    0.2 · √max(A, B)           Moonshot's: the update's RMS is AdamW's
spectral           √(A/B)                     the modular norm's dual of one linear layer
=================  =========================  ==========================================

Momentum and weight decay are ``torch.optim.Muon``'s: ``m ← μm + (1−μ)g``, the step orthogonalises
``(1−μ)g + μm`` (Nesterov), and the weight first shrinks by ``lr · wd``. Newton–Schulz is Keller Jordan's
quintic (3.4445, −4.7750, 2.0315) for ``optim.muon.ns_steps`` steps, normalised by the Frobenius norm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...nn import Embed, MatrixAtom, Module
from ...nn.groups import atom_groups
from ...nn.weight_maps import decayed
from ...nn.orthogonalize import iteration_dtype, orthogonalize
from ...nn.packed import per_member
from ...nn.torch_network import TorchNetwork, TorchParameter
from ..config import OptimConfig
from ..mode_settings import MUON_SCALES
from ..directions import DIRECTIONS
from .base import Mode, scaled

READOUT_ROLE = "output"


def muon_scale(rule: str, fan_out: int, fan_in: int) -> float:
    """The per-shape factor of ``optim.muon.scale`` (``torch.optim.Muon``'s ``adjust_lr_fn``)."""
    if rule == "original":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if rule == "match_rms_adamw":
        return 0.2 * math.sqrt(max(fan_out, fan_in))
    if rule == "spectral":
        return math.sqrt(fan_out / fan_in)
    raise ValueError(f"optim.muon.scale={rule!r}; allowed: {', '.join(MUON_SCALES)}")


@dataclass(frozen=True)
class MuonLayer:
    """One weight's part in Muon: a hidden matrix (fan-out, fan-in, its scale) or the base optimiser's."""

    hidden: bool
    fan_out: int = 0
    fan_in: int = 0
    scale: float = 0.0


@dataclass(frozen=True)
class MuonParametrisation:
    layers: tuple[MuonLayer, ...]
    adam_ratio: float  # the base optimiser's LR / the swept LR, for every layer that is not a hidden matrix

    @property
    def hidden(self) -> list[int]:
        return [i for i, layer in enumerate(self.layers) if layer.hidden]

    @property
    def others(self) -> list[int]:
        return [i for i, layer in enumerate(self.layers) if not layer.hidden]


def hidden_matrices(net: Module) -> list[tuple[int, int] | None]:
    """Each atom's (fan-out, fan-in) when it is a hidden matrix, else None: on the built-in networks every matrix
    but the readout (role "output"); on a torch model every parameter of two or more dimensions but embedding
    tables and the readout (``readout_of``)."""
    atoms = net.atom_list()
    if isinstance(net, TorchNetwork):
        if not any(a.is_matrix and not a.embedding for a in atoms):
            return [None] * len(atoms)
        readout = set(readout_of(net))
        return [(a.fan_out, a.fan_in) if a.is_matrix and not a.embedding and i not in readout else None
                for i, a in enumerate(atoms)]
    return [(atom.d_out, math.prod(atom_shape(atom)[1:])) if isinstance(atom, MatrixAtom) and atom.role != READOUT_ROLE
            else None for atom in atoms]


def readout_of(net: TorchNetwork, growing: set[int] | None = None) -> list[int]:
    """The indices of the readout's parameters (its weight and bias): the module ``arch.readout`` names, else the
    one matrix (not an embedding) whose fan-out is the number of logits and, when ``growing`` (the indices of
    parameters whose fan-in grows with width and fan-out does not) is given, among those. ValueError, one line,
    when it is not one."""
    atoms: list[TorchParameter] = list(net.atom_list())
    if net.readout_name is not None:
        tied_to = {path.rpartition(".")[0]: first for first, paths in net.tied.items() for path in paths}
        named = tied_to.get(net.readout_name, f"{net.readout_name}.").rpartition(".")[0]  # a tied readout: its owner
        chosen = [i for i, a in enumerate(atoms) if a.module_path in (net.readout_name, named)]
        if not chosen:
            modules = sorted({a.module_path for a in atoms if a.is_matrix})
            raise ValueError(f"arch.readout={net.readout_name!r} holds no parameter of the model; modules with a "
                             f"matrix: {', '.join(modules)}")
        return chosen
    candidates = [i for i, a in enumerate(atoms) if a.is_matrix and not a.embedding and a.fan_out == net.logits
                  and (growing is None or i in growing)]
    if not candidates and net.tied:  # the readout shares the embedding's table (GPT-2's tie): that parameter
        return [i for i, a in enumerate(atoms) if a.role in net.tied]
    if len(candidates) != 1:
        found = ", ".join(atoms[i].module_path for i in candidates) or "none"
        raise ValueError(f"cannot tell the readout of {net.describe()} (matrices with {net.logits} outputs"
                         f"{' whose fan-in grows with width' if growing is not None else ''}: {found}); name its "
                         f"module in the arch YAML, e.g. readout: lm_head")
    module = atoms[candidates[0]].module_path
    return [i for i, a in enumerate(atoms) if a.module_path == module]


class Muon(Mode):
    """Muon on the hidden matrices, the base optimiser on the rest (``optim.muon.*``)."""

    name = "muon"
    own_block = "muon"
    default_lrs = {"sgd": 2.0**-6, "adam": 2.0**-6}
    lr_exponents: ClassVar[dict[str, range]] = {"sgd": range(-12, 1), "adam": range(-12, 1)}

    def network(self, net: Module, resize: Any, cfg: OptimConfig) -> Module:
        try:
            shapes = hidden_matrices(net)
        except ValueError as error:
            raise ValueError(f"optim.mode=muon: {error}") from None
        if not any(shapes):
            raise ValueError(f"optim.mode=muon: {net.describe()} has no hidden matrix for Muon to orthogonalise "
                             f"(every parameter is an embedding, the readout, a gain or a bias); use "
                             f"optim.mode=unnormed")
        layers = tuple(MuonLayer(True, *shape, muon_scale(cfg.muon.scale, *shape)) if shape else MuonLayer(False)
                       for shape in shapes)
        return net.set_parametrisation(MuonParametrisation(layers, float(cfg.muon.adam_ratio)))

    def direction(self, net: Module, state: Any, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
        prepared = parametrisation_of(net)
        u: list[Tensor] = [None] * len(grads)  # type: ignore[list-item]
        if others := prepared.others:  # the base optimiser on its own slice of the state
            for index, piece in zip(others, DIRECTIONS[cfg.name](state.subset(others), [grads[i] for i in others],
                                                                 cfg)):
                u[index] = piece
        hidden = prepared.hidden
        momentum = [state.momentum[i] for i in hidden]
        hidden_grads = [grads[i] for i in hidden]
        torch._foreach_lerp_(momentum, hidden_grads, 1 - cfg.muon.momentum)
        nesterov = torch._foreach_lerp(hidden_grads, momentum, cfg.muon.momentum)  # (1−μ)g + μm
        for index, piece in zip(hidden, nesterov):
            u[index] = piece
        return u

    def update(self, net: Module, weights: list[Tensor], u: list[Tensor], lr: Tensor, state: Any,
               cfg: OptimConfig) -> list[Tensor]:
        prepared = parametrisation_of(net)
        atoms = net.atom_list()
        delta: list[Tensor] = [None] * len(atoms)  # type: ignore[list-item]
        others = prepared.others
        for index, step in zip(others, scaled([u[i] for i in others], lr * prepared.adam_ratio)):
            delta[index] = step
        hidden = prepared.hidden
        hidden_u, hidden_steps = [u[i] for i in hidden], [None] * len(hidden)
        iter_dtype = iteration_dtype(cfg.ortho.dtype, weights[0].device)
        # equal hidden matrices (of one scale) in one batched call: a GPT's blocks share their shapes
        for group in atom_groups([atoms[i] for i in hidden], hidden_u, [prepared.layers[i].scale for i in hidden]):
            stacked = group.stack(hidden_u)
            polar = orthogonalize(as_matrix(group.atom, stacked), method="muon", steps=cfg.muon.ns_steps,
                                  iter_dtype=iter_dtype, margin=0.0)
            step = group.atom.stored(from_matrix(group.atom, polar))
            folded, steps = group.folded(step, lr)  # lr × each layer's scale
            step = (folded * per_member(steps, folded)).reshape(step.shape)
            if cfg.wd:  # torch.optim.Muon's decay, before the step and at the unscaled LR: w ← w(1 − lr·wd)
                weight = group.stack([weights[i] for i in hidden])
                decay = per_member(lr * cfg.wd, weight[0])  # (K, 1, …) for packed members: behind the layers' axis
                step = step + weight * (decay.unsqueeze(0) if decay.ndim else decay)
            group.unstack(step, hidden_steps)
        for index, step in zip(hidden, hidden_steps):
            delta[index] = step
        return delta

    def regularize(self, net: Module, weights: list[Tensor], strength: Tensor) -> list[Tensor]:
        # the hidden matrices decayed with their step (``update``); the rest at the base optimiser's LR
        prepared = parametrisation_of(net)
        atoms, others, out = net.atom_list(), prepared.others, list(weights)
        moved = decayed([atoms[i] for i in others], [weights[i] for i in others], [prepared.adam_ratio] * len(others),
                        strength)
        for index, piece in zip(others, moved):
            out[index] = piece
        return out

    def summary_fields(self, cfg: OptimConfig, device: torch.device) -> dict[str, Any]:
        return {"muon_scale": cfg.muon.scale}


def parametrisation_of(net: Module) -> MuonParametrisation:
    if not isinstance(prepared := net.parametrisation, MuonParametrisation):
        raise RuntimeError("optim.mode=muon on a network that Muon.network did not prepare")
    return prepared


def as_matrix(atom: Any, weight: Tensor) -> Tensor:
    """A weight (or its change) as (…, fan-out, fan-in): a kernel flattened into the fan-in."""
    if isinstance(atom, TorchParameter):
        return atom.as_matrix(weight)
    if isinstance(atom, Embed):
        raise ValueError("an embedding is not one of Muon's matrices")
    lead = weight.shape[:weight.ndim - len(atom_shape(atom))]
    return weight.reshape(*lead, atom.d_out, -1)


def from_matrix(atom: Any, matrix: Tensor) -> Tensor:
    if isinstance(atom, TorchParameter):
        return atom.from_matrix(matrix)
    return matrix.reshape(*matrix.shape[:-2], *atom_shape(atom))


def atom_shape(atom: MatrixAtom) -> tuple[int, ...]:
    k = getattr(atom, "kernel_size", None)
    return (atom.d_out, atom.d_in) if k is None else (atom.d_out, atom.d_in, k, k)
