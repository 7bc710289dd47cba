"""The scales a run learns besides its directions, logged with the training loss: the logits' RMS on a fixed
probe (every mode), and in manifold mode each learned-radius or free layer's scale, averaged over the layers
sharing its role (``scale/attn.q``: the blocks' q matrices). A scale is the RMS singular value of the
layer's matrices (or the RMS of its embedding rows) relative to the manifold's, so 1 at initialisation and
exactly the learned radius r of a ``scaled`` layer; for a ``free`` layer it is how far its norm has grown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor

from ..nn import Module, layer_roles

PROBE_SAMPLES = 4  # logits of the first evaluation batch's first samples: the same probe at every log


def layer_scale(atom, weight: Tensor, members: bool) -> Tensor:
    """RMS singular value of a matrix atom's slices relative to its polar scale, or RMS of an embedding's row
    norms at unit RMS; per member (shape (K,)) when ``members``, else 0-d."""
    weight = atom.effective(weight.detach()).float()
    if (stack := atom.matrices(weight)) is not None:
        columns = min(stack.shape[-2:])
        squares = stack.pow(2).sum(dim=(-2, -1)) / columns / atom.polar_scale**2  # (…, slices)
    else:
        squares = weight.pow(2).mean(dim=-1)  # (…, rows): a row at RMS 1 has scale 1
    squares = squares.reshape(squares.shape[0], -1) if members else squares.reshape(-1)
    return squares.mean(dim=-1).sqrt()


def role_scales(net: Module, weights: Sequence[Tensor], kinds: Sequence[str], members: bool
                ) -> dict[str, Tensor]:
    """``scale/<role>`` of every role whose layers are not held at a fixed radius (mean over its layers)."""
    by_role: dict[str, list[Tensor]] = defaultdict(list)
    for atom, weight, role, kind in zip(net.atom_list(), weights, layer_roles(net), kinds, strict=True):
        if kind != "fixed":
            by_role[role].append(layer_scale(atom, weight, members))
    return {f"scale/{role}": torch.stack(values).mean(dim=0) for role, values in by_role.items()}


@torch.no_grad()
def logit_rms(net: Module, weights: Sequence[Tensor], x: Tensor, members: bool) -> Tensor:
    """RMS of the network's outputs on ``x`` (the probe), per member when ``members``."""
    logits = net(x, list(weights)).float()
    squares = logits.pow(2)
    return squares.reshape(squares.shape[0], -1).mean(dim=-1).sqrt() if members else squares.mean().sqrt()


def probe(batch: tuple[Tensor, Tensor], members: bool) -> Tensor:
    """The logit probe's inputs from an evaluation batch (with its member axis when packed)."""
    x = batch[0]
    return x[:, :PROBE_SAMPLES] if members else x[:PROBE_SAMPLES]
