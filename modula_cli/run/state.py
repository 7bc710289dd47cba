"""Everything a resumed run needs, in one object: step, weights, optimiser and power-iteration state,
the recent losses, each member's progress and where its logs stand. Training batches depend only on
(seed, step), so the data position is the step and no RNG state is needed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..optim import OptimState
from ..results.status import DIVERGED, RUNNING


@dataclass
class RunState:
    weights: list[Tensor]
    optim: OptimState
    recent: Tensor                  # (loss_window, members): the last steps' losses, in a ring
    members: int
    step: int = 0                   # the next step to take
    elapsed: float = 0.0            # seconds spent in training steps
    statuses: list[str] = field(default_factory=list)  # per member: running, or diverged (frozen)
    stopped_at: list[int | None] = field(default_factory=list)
    initial_loss: list[float | None] = field(default_factory=list)
    last_loss: list[float | None] = field(default_factory=list)
    last_eval: list[dict] = field(default_factory=list)
    metrics_offsets: list[int | None] = field(default_factory=list)
    wandb_ids: list[str | None] = field(default_factory=list)
    buffers: list[Tensor] = field(default_factory=list)  # a torch model's running statistics (the model's own)

    def __post_init__(self) -> None:
        k = self.members
        for name, empty in (("statuses", RUNNING), ("stopped_at", None), ("initial_loss", None),
                            ("last_loss", None), ("metrics_offsets", None), ("wandb_ids", None)):
            if not getattr(self, name):
                setattr(self, name, [empty] * k)
        if not self.last_eval:
            self.last_eval = [{} for _ in range(k)]

    def active(self) -> Tensor:
        return torch.tensor([s == RUNNING for s in self.statuses], device=self.recent.device)

    def record_loss(self, step: int, loss: Tensor) -> None:
        self.recent[step % self.recent.shape[0]] = loss

    def final_loss(self, member: int) -> float:
        """Mean of the last ``loss_window`` step losses (all of them if the run was shorter)."""
        window = min(self.recent.shape[0], self.step)
        return float(self.recent[:window, member].mean())

    def diverge(self, member: int, step: int) -> None:
        self.statuses[member], self.stopped_at[member] = DIVERGED, step

    def state_dict(self) -> dict[str, Any]:
        return {"weights": [w.detach() for w in self.weights], "optim": self.optim.state_dict(),
                "recent": self.recent, "step": self.step, "elapsed": self.elapsed, "statuses": self.statuses,
                "stopped_at": self.stopped_at, "initial_loss": self.initial_loss, "last_loss": self.last_loss,
                "last_eval": self.last_eval, "metrics_offsets": self.metrics_offsets, "wandb_ids": self.wandb_ids,
                "buffers": [b.detach().clone() for b in self.buffers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved state; ``ValueError`` when it does not fit this run (shapes, member count)."""
        saved = state["weights"]
        if len(saved) != len(self.weights) or any(s.shape != w.shape for s, w in zip(saved, self.weights)):
            raise ValueError("the saved weights do not match this network's shapes")
        if len(state["statuses"]) != self.members or state["recent"].shape != self.recent.shape:
            raise ValueError("the saved state has another number of members or another loss window")
        with torch.no_grad():
            for w, s in zip(self.weights, saved):
                w.copy_(s)
        self.optim.load_state_dict(state["optim"], self.recent.device)
        self.recent.copy_(state["recent"])
        saved_buffers = state.get("buffers", [])
        if len(saved_buffers) != len(self.buffers):
            raise ValueError("the saved state has other buffers than this model")
        with torch.no_grad():
            for buffer, value in zip(self.buffers, saved_buffers):
                buffer.copy_(value)
        for name in ("step", "elapsed", "statuses", "stopped_at", "initial_loss", "last_loss", "last_eval",
                     "metrics_offsets", "wandb_ids"):
            setattr(self, name, state[name])
