"""Gradient clipping by global norm, as ``torch.nn.utils.clip_grad_norm_`` does it, on the raw gradient before
the base optimiser and any mode's map; per member when networks are packed (each its own global norm)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..nn.groups import same_shapes
from ..nn.packed import scaled_members

# clip_grad_norm_'s guard against a zero norm, kept so that a clipped gradient is exactly torch's
EPS = 1e-6


@dataclass
class ClipRecord:
    """Per member: the last step's gradient norm before clipping, and how many steps were clipped so far (device
    tensors, read at log steps only)."""

    norm: Tensor
    clipped: Tensor

    @classmethod
    def on(cls, members: int, device: torch.device) -> ClipRecord:
        return cls(torch.zeros(members, device=device), torch.zeros(members, device=device))

    def state_dict(self) -> dict[str, Tensor]:
        return {"norm": self.norm, "clipped": self.clipped}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.norm.copy_(state["norm"])
        self.clipped.copy_(state["clipped"])


def global_norms(grads: list[Tensor], members: int | None) -> Tensor:
    """The 2-norm of all gradients together, per member (shape (members,), or (1,) for one network): as
    ``clip_grad_norm_`` computes it, the norm of the tensors' norms, in a few operations however many there are."""
    if members is None:
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float()).reshape(1)
    norms = [stacked.detach().float().reshape(len(indices), members, -1).norm(dim=-1)
             for indices, stacked in same_shapes(grads)]  # (tensors of a shape, members) each
    return torch.linalg.vector_norm(torch.cat(norms), dim=0)


def clip_gradients(grads: list[Tensor], max_norm: float, record: ClipRecord, members: int | None) -> list[Tensor]:
    """``grads`` scaled by min(1, max_norm / (norm + 1e-6)) of their member's global norm (no host sync)."""
    norms = global_norms(grads, members)
    coefficient = torch.clamp(max_norm / (norms + EPS), max=1.0)
    record.norm.copy_(norms)
    record.clipped.add_((norms > max_norm).to(record.clipped.dtype))
    if members is None:  # one network: a scalar factor
        return torch._foreach_mul(grads, coefficient[0].to(grads[0].dtype))
    return scaled_members(grads, coefficient)
