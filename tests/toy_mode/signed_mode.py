"""A mode added the way docs/extending.md ("Your own mode") says, from outside the package: its settings block and
its ``Mode`` subclass, registered, and nothing else (tests/test_new_mode.py). Its update is the sign of the base
direction, each entry a step of ``optim.signed.step`` × the LR (signSGD's map, Bernstein et al. 2018)."""

from __future__ import annotations

import torch
from torch import Tensor

from modula_cli.optim.mode_settings import settings_block
from modula_cli.plumbing.settings import setting


@settings_block("signed", "the signed mode's settings (a toy of the tests)")
class SignedSettings:
    step: float = setting(1.0, "signed: each entry's step, × the LR", above=0)


from modula_cli.optim.modes import MODES, Mode  # noqa: E402 - after the block: the optim schema is built from BLOCKS


class Signed(Mode):
    name = "signed"
    own_block = "signed"

    def update(self, net, weights: list[Tensor], u: list[Tensor], lr: Tensor, state, cfg) -> list[Tensor]:
        return [lr * cfg.signed.step * torch.sign(x) for x in u]


MODES[Signed.name] = Signed()
