"""The optimiser's state: the base optimiser's moments, the mode's own state, this step's scalars."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .clip import ClipRecord
from .config import OptimConfig
from .modes import MODES


@dataclass
class StepScalars:
    """This step's numbers as device scalars: set by a fill (no host sync) and read as tensors, so a compiled
    update never sees a changing Python number; ``values`` holds them on the host for an eager step."""

    schedule: Tensor  # the learning-rate schedule's factor η_t / η
    momentum_weight: Tensor  # c_t(β1), the EMA weight of the new gradient in the momentum
    second_moment_weight: Tensor  # c_t(β2), the same for Adam's second moment
    values: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the three, as set

    @classmethod
    def on(cls, device: torch.device) -> StepScalars:
        return cls(*(torch.zeros((), device=device) for _ in range(3)))

    def set(self, schedule: float, momentum_weight: float, second_moment_weight: float) -> None:
        self.schedule.fill_(schedule)
        self.momentum_weight.fill_(momentum_weight)
        self.second_moment_weight.fill_(second_moment_weight)
        self.values = (schedule, momentum_weight, second_moment_weight)

    def ema_weights(self) -> tuple[Tensor | float, Tensor | float]:
        """c_t(β1) and c_t(β2) as an EMA reads them: host numbers in an eager step (one ``_foreach_lerp_`` each,
        which reads a tensor weight back to the host), the device scalars in a compiled one (no recompile)."""
        if torch.compiler.is_compiling():
            return self.momentum_weight, self.second_moment_weight
        return self.values[1], self.values[2]


@dataclass
class OptimState:
    momentum: list[Tensor]
    second_moment: list[Tensor]
    mode: str
    mode_state: Any = None  # what the mode's init_state made (power-iteration vectors, multipliers), or None
    scalars: StepScalars | None = None
    clip: ClipRecord | None = None  # with optim.grad_clip: each member's last norm and clipped-step count
    buffers: dict = field(default_factory=dict, repr=False)  # scratch reused between steps, never saved

    def subset(self, indices: list[int]) -> OptimState:
        """The state of the weights at ``indices`` (the same tensors: an in-place step on it is a step on this)."""
        pick = lambda tensors: [tensors[i] for i in indices] if tensors else []  # noqa: E731
        return OptimState(pick(self.momentum), pick(self.second_moment), self.mode, self.mode_state, self.scalars,
                          self.clip)

    def state_dict(self) -> dict:
        # every mode's key is present (None when not this mode's): checkpoints of any mode share one layout
        saved = {"momentum": self.momentum, "second_moment": self.second_moment,
                 **{m.state_key: None for m in MODES.values() if m.state_key}}
        if (key := MODES[self.mode].state_key) and self.mode_state is not None:
            saved[key] = self.mode_state.state_dict()
        if self.clip is not None:
            saved["clip"] = self.clip.state_dict()
        return saved

    def load_state_dict(self, state: dict, device: torch.device | str) -> None:
        self.momentum = [t.to(device) for t in state["momentum"]]
        self.second_moment = [t.to(device) for t in state["second_moment"]]
        key = MODES[self.mode].state_key
        if key and state.get(key) is not None and self.mode_state is not None:
            self.mode_state.load_state_dict(state[key], device)
        if self.clip is not None and state.get("clip") is not None:
            self.clip.load_state_dict(state["clip"])


def init_state(weights: list[Tensor], cfg: OptimConfig, members: int = 1) -> OptimState:
    """A fresh state for ``weights`` (``members`` networks packed on their leading axis, or 1)."""
    zeros = lambda: [torch.zeros_like(w) for w in weights]  # noqa: E731
    device = weights[0].device
    return OptimState(momentum=zeros(), second_moment=zeros() if cfg.name == "adam" else [], mode=cfg.mode,
                      mode_state=MODES[cfg.mode].init_state(weights, cfg), scalars=StepScalars.on(device),
                      clip=ClipRecord.on(members, device) if cfg.grad_clip is not None else None)
