"""One optimiser step: base direction → the mode's map → ``w ← w − Δ`` → weight decay, at
``η_t = lr · schedule(t)`` (docs/design.md, "The optimisation loop")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..nn import Module
from ..nn.packed import kept_members
from .clip import clip_gradients
from .config import OptimConfig
from .directions import ema_weight
from .modes import MODES, single_lr
from .schedule import schedule_factor
from .state import OptimState


def optimizer_step(net: Module, weights: list[Tensor], grads: list[Tensor], state: OptimState, cfg: OptimConfig,
                   t: int, total_steps: int, base_lr: Tensor | None = None, active: Tensor | None = None,
                   update: Callable[..., Tensor] | None = None) -> Tensor:
    """One update of ``weights`` in place at step t (0-based); returns the learning rate used (a tensor).

    Packed sweeps stack K networks on a leading axis: ``base_lr`` then holds one LR per network and
    ``active`` (bool, K) freezes the networks that diverged. ``update``: ``apply_update`` compiled
    (``run.compiled``; compiled once: every per-step number reaches it as a tensor), used where the mode allows.
    """
    state.scalars.set(lr_factor(cfg, t, total_steps), ema_weight(cfg.beta1, t), ema_weight(cfg.beta2, t))
    base = single_lr(cfg) if base_lr is None else base_lr
    if update is None or MODES[cfg.mode].runs_eagerly(state.mode_state):
        update = apply_update
    return update(net, weights, grads, state, cfg, base, active)


def lr_factor(cfg: OptimConfig, t: int, total_steps: int) -> float:
    """The schedule's factor η_t / η at step t of ``total_steps``, with the warm-up and floor ``cfg`` sets."""
    warmup = cfg.warmup_steps if cfg.warmup_fraction is None else round(cfg.warmup_fraction * total_steps)
    return schedule_factor(cfg.schedule, t, total_steps, warmup, cfg.min_lr_ratio, cfg.decay_fraction,
                           cfg.decay_shape)


@torch.no_grad()
def apply_update(net: Module, weights: list[Tensor], grads: list[Tensor], state: OptimState, cfg: OptimConfig,
                 base_lr: float | Tensor, active: Tensor | None) -> Tensor:
    """(clipping →) base direction → mode map → ``w ← w − Δ`` → weight decay, with this step's scalars in
    ``state``."""
    mode = MODES[cfg.mode]
    lr = state.scalars.schedule * base_lr
    if active is not None:  # frozen members take no step and no weight decay
        lr = torch.where(active, lr, torch.zeros_like(lr))
    if state.clip is not None:
        grads = clip_gradients(grads, cfg.grad_clip, state.clip, None if active is None else active.shape[0])
    u = mode.direction(net, state, grads, cfg)
    delta = mode.update(net, weights, u, lr, state.mode_state, cfg)
    if active is not None:
        delta = kept_members(delta, active.bool())
    torch._foreach_sub_(weights, delta)
    if cfg.wd:
        decayed = mode.regularize(net, weights, lr * cfg.wd)
        if cfg.decay_on == "matrices":  # gains and biases keep their values (renormalised rows are matrices)
            decayed = [d if atom.is_matrix else w for d, w, atom in zip(decayed, weights, net.atom_list(), strict=True)]
        torch._foreach_copy_(weights, decayed)
    elif not mode.holds_norms:  # the paper variant's embeddings back on their sphere
        for index, piece in net.renormalized(weights).items():
            weights[index].copy_(piece)
    return lr


def update_restore_point(args: tuple) -> Callable[[], None]:
    """What a call of ``apply_update`` with ``args`` changes in place (the weights, the optimiser state), saved in
    host memory (a copy beside them on the device could exhaust it at a large model's first step); returns what
    puts it back (a compiled update that failed part-way then runs eagerly from the same point)."""
    weights, state = args[1], args[3]
    saved_weights = [w.detach().to("cpu", copy=True) for w in weights]
    saved_state = _on_host(state.state_dict())

    def restore() -> None:
        with torch.no_grad():
            for weight, saved in zip(weights, saved_weights, strict=True):
                weight.copy_(saved)
        state.load_state_dict(saved_state, weights[0].device)

    return restore


def _on_host(tree: Any) -> Any:
    """A copy of ``tree`` (dicts, lists, tensors) with every tensor copied to host memory."""
    if isinstance(tree, Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {key: _on_host(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_on_host(value) for value in tree)
    return tree
