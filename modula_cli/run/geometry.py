"""Per-layer geometry of a network and of its updates: what the coordinate check and ``train.layer_stats_every``
record for every atom (docs/coord_check.md says what each quantity means and what to expect).

- ``act_rms``: RMS of the atom's output on a fixed batch;
- ``delta_rms``: RMS of the change of that output since the first measurement;
- ``own_delta_rms``: RMS of the part of that change due to the atom's own weights, ``(W − W₀) x`` on its
  current input x (the rest arrived from the layers below: a layer of fixed fan-in can dominate the change
  downstream and hide a width-growing update);
- ``dir_change``: mean over the batch's feature vectors of ‖h/‖h‖ − h₀/‖h₀‖‖ (directional change, docs/design.md;
  0 = same direction, √2 = orthogonal, 2 = reversed);
- ``update_ratio``: the last update's size in the atom's own norm (exact: SVD for matrices) divided by its
  target, learning rate × the atom's share of the modular norm (docs/design.md, "Normalising and dualising a network");
- ``stable_rank``: ‖W‖_F² / ‖W‖₂² of the weight (mean over a convolution's k² slices; the table for an
  embedding); ``update_stable_rank``: the same of the last update;
- ``update_rms``: RMS entry of the last update of the atom's effective weight (``mup.coord_check``'s view of
  a parameter's step).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..nn import Atom, Module
from ..nn.torch_network import TorchNetwork

QUANTITIES = ("act_rms", "delta_rms", "own_delta_rms", "dir_change", "update_ratio", "stable_rank",
              "update_stable_rank", "update_rms")


@dataclass
class Captured:
    """Each atom's input and output in one forward pass, by atom index (detached)."""

    inputs: dict[int, Tensor] = field(default_factory=dict)
    outputs: dict[int, Tensor] = field(default_factory=dict)


@contextmanager
def captured(net: Module) -> Iterator[Captured]:
    """While inside, every forward pass of ``net`` stores each atom's input and output.

    The module tree is a pure description, so this wraps each atom's ``forward`` on the instance for
    the duration and restores it after; an atom applied twice in one pass keeps its last call."""
    seen = Captured()
    if isinstance(net, TorchNetwork):
        with _hooked(net, seen):
            yield seen
        return
    atoms = list(net.atoms())

    def recorder(index: int, atom: Atom):
        original = atom.forward

        def forward(x, w):
            y = original(x, w)
            seen.inputs[index], seen.outputs[index] = x.detach(), y.detach()
            return y
        return forward

    for index, atom in enumerate(atoms):
        atom.forward = recorder(index, atom)
    try:
        yield seen
    finally:
        for atom in atoms:
            atom.__dict__.pop("forward", None)


@contextmanager
def _hooked(net: TorchNetwork, seen: Captured) -> Iterator[None]:
    """A plain torch model's version of ``captured``: a forward hook on each module that holds parameters records
    its input and output for every parameter it holds (as ``mup.coord_check`` records each module's output)."""
    held: dict[str, list[int]] = {}
    for index, atom in enumerate(net.atom_list()):
        held.setdefault(atom.module_path, []).append(index)
    modules = dict(net.model.named_modules())

    def hook(indices: list[int]):
        def record(module, args, output):
            x = args[0] if args else None
            y = output if isinstance(output, Tensor) else next((o for o in output if isinstance(o, Tensor)), None) \
                if isinstance(output, (tuple, list)) else getattr(output, "last_hidden_state", None)
            if isinstance(x, Tensor) and isinstance(y, Tensor):
                for index in indices:
                    seen.inputs[index], seen.outputs[index] = x.detach(), y.detach()
        return record

    handles = [modules[path].register_forward_hook(hook(indices)) for path, indices in held.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def rms(x: Tensor) -> float:
    return float(x.float().pow(2).mean().sqrt())


def feature_vectors(h: Tensor, axis: int = -1) -> Tensor:
    """The output as rows of one feature vector each (token, sample or pixel), shape (rows, features)."""
    h = h.float().movedim(axis, -1)
    return h.reshape(-1, h.shape[-1])


def direction_change(h: Tensor, h0: Tensor, axis: int = -1) -> float:
    """Mean over feature vectors of ‖h/‖h‖ − h₀/‖h₀‖‖; a zero vector has no direction and counts as 0."""
    now, before = feature_vectors(h, axis), feature_vectors(h0, axis)
    unit = lambda rows: rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)  # noqa: E731
    return float((unit(now) - unit(before)).norm(dim=-1).mean())


def _matrices(atom: Atom, weight: Tensor) -> Tensor:
    stack = atom.matrices(weight)
    return (weight if stack is None else stack).float()


def stable_rank(atom: Atom, weight: Tensor) -> float:
    """‖W‖_F² / ‖W‖₂², averaged over a convolution's slices; 0 for an all-zero weight."""
    matrices = _matrices(atom, weight)
    matrices = matrices.reshape(-1, *matrices.shape[-2:])
    sigma = torch.linalg.matrix_norm(matrices, ord=2)
    frobenius = torch.linalg.matrix_norm(matrices, ord="fro")
    ranks = torch.where(sigma > 0, frobenius.pow(2) / sigma.clamp_min(1e-30).pow(2), torch.zeros_like(sigma))
    return float(ranks.mean())


def update_ratio(atom: Atom, update: Tensor, target: float) -> float:
    """‖update‖_atom / target (NaN when the target is 0: a massless atom, or a zero learning rate)."""
    return atom.atom_norm(update) / target if target > 0 else float("nan")


@torch.no_grad()
def layer_geometry(net: Module, weights: Sequence[Tensor], now: Captured, initial: Captured | None = None,
                   initial_weights: Sequence[Tensor] | None = None, updates: Sequence[Tensor] | None = None,
                   lr: float | None = None) -> list[dict[str, float]]:
    """One record per atom (weight-list order) of the quantities above. ``initial`` and ``initial_weights``:
    the pass and weights to measure change from (absent: change is 0); ``updates`` and ``lr``: the last
    step's applied update and learning rate (absent: the update columns are NaN). One network: no member
    axis."""
    shares = net.target_shares()
    records = []
    for index, (atom, weight, share) in enumerate(zip(net.atoms(), weights, shares, strict=True)):
        if index not in now.outputs:  # a torch model's parameter whose module gave no tensor to record
            records.append(dict.fromkeys(QUANTITIES, float("nan")))
            continue
        h = now.outputs[index]
        h0 = initial.outputs[index] if initial is not None else h
        x = now.inputs[index]
        x = x.float() if x.is_floating_point() else x  # inputs captured under bfloat16 autocast; ids stay ids
        # Effective weights (``Atom.effective``): the paper variant stores W / forward_scale.
        weight = atom.effective(weight.detach())
        own = (atom.apply(x, weight.float() - atom.effective(initial_weights[index]).float())
               if initial_weights is not None else torch.zeros_like(h))
        record = {"act_rms": rms(h), "delta_rms": rms(h.float() - h0.float()), "own_delta_rms": rms(own),
                  "dir_change": direction_change(h, h0, atom.feature_axis),
                  "stable_rank": stable_rank(atom, weight),
                  "update_ratio": float("nan"), "update_stable_rank": float("nan"), "update_rms": float("nan")}
        if updates is not None and lr is not None:
            record["update_ratio"] = update_ratio(atom, atom.effective(updates[index]), lr * share)
            record["update_stable_rank"] = stable_rank(atom, updates[index])
            record["update_rms"] = rms(atom.effective(updates[index]))
        records.append(record)
    return records
