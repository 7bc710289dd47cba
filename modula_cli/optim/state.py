"""The optimiser's state: the base optimiser's moments, the mode's own state, this step's scalars."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .config import OptimConfig
from .modes import MODES


@dataclass
class OptimState:
    momentum: list[Tensor]
    second_moment: list[Tensor]
    mode: str
    mode_state: Any = None  # what the mode's init_state made (power-iteration vectors, multipliers), or None
    # This step's schedule factor and EMA weights c_t(β1), c_t(β2), as device scalars: set by a fill (no
    # host sync), read as tensors so a compiled update never sees a changing Python number.
    scalars: Tensor | None = None

    def state_dict(self) -> dict:
        # every mode's key is present (None when not this mode's): checkpoints of any mode share one layout
        saved = {"momentum": self.momentum, "second_moment": self.second_moment,
                 **{m.state_key: None for m in MODES.values() if m.state_key}}
        if (key := MODES[self.mode].state_key) and self.mode_state is not None:
            saved[key] = self.mode_state.state_dict()
        return saved

    def load_state_dict(self, state: dict, device: torch.device | str) -> None:
        self.momentum = [t.to(device) for t in state["momentum"]]
        self.second_moment = [t.to(device) for t in state["second_moment"]]
        key = MODES[self.mode].state_key
        if key and state.get(key) is not None and self.mode_state is not None:
            self.mode_state.load_state_dict(state[key], device)


def init_state(weights: list[Tensor], cfg: OptimConfig) -> OptimState:
    zeros = lambda: [torch.zeros_like(w) for w in weights]  # noqa: E731
    return OptimState(momentum=zeros(), second_moment=zeros() if cfg.name == "adam" else [], mode=cfg.mode,
                      mode_state=MODES[cfg.mode].init_state(weights, cfg),
                      scalars=torch.zeros(3, device=weights[0].device))
