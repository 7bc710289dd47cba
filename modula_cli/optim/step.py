"""The paper's optimisation loop (SPEC §7) as small functions over weight lists.

base direction (SGD momentum or Adam, with the ``c_t = (1 − β)^{t/(t+1)}`` bias correction) → mode
(unnormed, normed, dualized) → ``w ← w − Δ`` → optional weight decay, all at ``η_t = lr · schedule(t)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..nn import Module, PowerIterationState, layer_roles
from ..nn.manifold import DualAscent, ManifoldState, atom_kinds
from ..nn.module import per_member
from ..nn.orthogonalize import ITER_DTYPES as ORTHO_DTYPES
from ..nn.orthogonalize import METHODS as ORTHO_METHODS
from ..nn.orthogonalize import iteration_dtype

OPTIMIZERS = ("sgd", "adam")
MODES = ("unnormed", "normed", "dualized", "manifold")
SCHEDULES = ("linear", "cosine", "constant")

# The paper's LR grids (SPEC §9), powers of two: 2^-6 … 2^2, and 2^-13 … 2^-3 for unnormed Adam.
LR_EXPONENTS = {("adam", "unnormed"): range(-13, -2)}
DEFAULT_EXPONENTS = range(-6, 3)


def lr_grid(optimizer: str, mode: str) -> list[float]:
    return [2.0**e for e in LR_EXPONENTS.get((optimizer, mode), DEFAULT_EXPONENTS)]


# Single-run defaults when optim.lr is null: middles of the paper's grids (SPEC §9).
DEFAULT_LR = {
    ("sgd", "unnormed"): 2.0**-3, ("sgd", "normed"): 2.0**-2, ("sgd", "dualized"): 2.0**-2,
    ("adam", "unnormed"): 2.0**-8, ("adam", "normed"): 2.0**-2, ("adam", "dualized"): 2.0**-2,
    ("sgd", "manifold"): 2.0**-2, ("adam", "manifold"): 2.0**-2,
}


# Manifold mode's defaults (issue 26, measured in docs/manifold.md): the temperatures (readout, attention
# scores) free, every other layer on its manifold with a learned radius.
MANIFOLD_FREE = ("output", "attn.q", "attn.k")
MANIFOLD_SCALED = ("embed.token", "embed.position", "attn.v", "attn.out", "mlp.in", "mlp.out", "input", "hidden")


@dataclass
class OptimConfig:
    name: str = "adam"
    mode: str = "normed"
    lr: float | list[float] | None = None  # a list: one packed run per LR
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 0.0
    wd: float = 0.0
    schedule: str = "linear"
    warmup_steps: int = 0
    warmup_fraction: float | None = None  # a fraction of the run's steps instead (stretches with its length)
    ortho: str = "polar_express"
    ortho_steps: int | None = None
    ortho_dtype: str = "auto"  # the iteration's dtype: auto = bfloat16 on CUDA, float32 elsewhere
    power_iterations: int = 2
    # manifold mode: the dual ascent of the tangent direction (SPEC §10; defaults measured, docs/manifold.md)
    manifold_iterations: int = 0
    manifold_step: float = 1.0
    manifold_tolerance: float = 1e-3
    manifold_warm_start: bool = True
    # manifold mode: the layers (by role) whose radius is learned, and those trained off the manifold (dualized)
    manifold_scaled: list[str] = field(default_factory=lambda: list(MANIFOLD_SCALED))
    manifold_free: list[str] = field(default_factory=lambda: list(MANIFOLD_FREE))

    @property
    def lrs(self) -> list[float]:
        """The learning rate(s): several when packed, the mode's default when unset."""
        if self.lr is None:
            return [DEFAULT_LR[(self.name, self.mode)]]
        return [float(x) for x in self.lr] if isinstance(self.lr, (list, tuple)) else [float(self.lr)]

    @property
    def packed(self) -> bool:
        return isinstance(self.lr, (list, tuple))

    @property
    def base_lr(self) -> float:
        return self.lrs[0]


@dataclass
class OptimState:
    momentum: list[Tensor]
    second_moment: list[Tensor] = field(default_factory=list)
    power: PowerIterationState | None = None
    manifold: ManifoldState | None = None
    # This step's schedule factor and EMA weights c_t(β1), c_t(β2), as device scalars: set by a fill (no
    # host sync), read as tensors so a compiled update never sees a changing Python number.
    scalars: Tensor | None = None

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "second_moment": self.second_moment,
                "power": self.power.state_dict() if self.power else None,
                "manifold": self.manifold.state_dict() if self.manifold else None}

    def load_state_dict(self, state: dict, device: torch.device | str) -> None:
        self.momentum = [t.to(device) for t in state["momentum"]]
        self.second_moment = [t.to(device) for t in state["second_moment"]]
        if state["power"] is not None and self.power is not None:
            self.power.load_state_dict(state["power"], device)
        if state.get("manifold") is not None and self.manifold is not None:
            self.manifold.load_state_dict(state["manifold"], device)


def init_state(weights: list[Tensor], cfg: OptimConfig) -> OptimState:
    zeros = lambda: [torch.zeros_like(w) for w in weights]  # noqa: E731
    return OptimState(momentum=zeros(), second_moment=zeros() if cfg.name == "adam" else [],
                      power=PowerIterationState(cfg.power_iterations) if cfg.mode == "normed" else None,
                      manifold=ManifoldState() if cfg.mode == "manifold" else None,
                      scalars=torch.zeros(3, device=weights[0].device))


def ema_weight(beta: float, t: int) -> float:
    """``c_t = (1 − β)^{t/(t+1)}``: 1 at t = 0 (the first step copies g), → 1 − β later."""
    return (1.0 - beta) ** (t / (t + 1))


# --- base directions --------------------------------------------------------------------------------

def sgd_direction(state: OptimState, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
    torch._foreach_lerp_(state.momentum, grads, state.scalars[1])
    return state.momentum


def adam_direction(state: OptimState, grads: list[Tensor], cfg: OptimConfig) -> list[Tensor]:
    torch._foreach_lerp_(state.momentum, grads, state.scalars[1])
    torch._foreach_lerp_(state.second_moment, torch._foreach_mul(grads, grads), state.scalars[2])
    denominator = torch._foreach_sqrt(state.second_moment)
    if cfg.eps:
        torch._foreach_add_(denominator, cfg.eps)
    direction = torch._foreach_div(state.momentum, denominator)
    # Without ε, entries with v = 0 give 0/0: the paper turns NaN/inf into 0.
    return [torch.nan_to_num_(u, nan=0.0, posinf=0.0, neginf=0.0) for u in direction]


BASE_DIRECTIONS: dict[str, Callable[..., list[Tensor]]] = {"sgd": sgd_direction, "adam": adam_direction}


# --- modes --------------------------------------------------------------------------------------------

def unnormed(net: Module, w: list[Tensor], u: list[Tensor], lr: Tensor, state: OptimState,
             cfg: OptimConfig) -> list[Tensor]:
    if lr.ndim:  # one LR per stacked network
        return [piece * per_member(lr, piece) for piece in u]
    return torch._foreach_mul(u, lr)


def normed(net: Module, w: list[Tensor], u: list[Tensor], lr: Tensor, state: OptimState,
           cfg: OptimConfig) -> list[Tensor]:
    return net.normalize(u, lr, state=state.power)


def dualized(net: Module, w: list[Tensor], u: list[Tensor], lr: Tensor, state: OptimState,
             cfg: OptimConfig) -> list[Tensor]:
    return net.dualize(u, lr, method=cfg.ortho, steps=cfg.ortho_steps,
                       iter_dtype=iteration_dtype(cfg.ortho_dtype, w[0].device))


def manifold(net: Module, w: list[Tensor], u: list[Tensor], lr: Tensor, state: OptimState,
             cfg: OptimConfig) -> list[Tensor]:
    settings = DualAscent(cfg.manifold_iterations, cfg.manifold_step, cfg.manifold_tolerance, cfg.manifold_warm_start)
    if state.manifold.kinds is None:
        state.manifold.kinds = atom_kinds(layer_roles(net), cfg.manifold_scaled, cfg.manifold_free)
    free_dualize = {"method": cfg.ortho, "steps": cfg.ortho_steps,
                    "iter_dtype": iteration_dtype(cfg.ortho_dtype, w[0].device)}
    return net.manifold_update(w, u, lr, settings, state.manifold, state.manifold.kinds, free_dualize)


# Each maps the base direction u to the change Δ of the weights w (w ← w − Δ).
MODE_MAPS: dict[str, Callable[..., list[Tensor]]] = {"unnormed": unnormed, "normed": normed, "dualized": dualized,
                                                     "manifold": manifold}


# --- schedules ------------------------------------------------------------------------------------------

def schedule_factor(kind: str, t: int, total: int, warmup: int = 0) -> float:
    """Multiplier of the base LR at step t (0-based) of ``total``; linear decays to 0 over the run. Past the
    end (the paper variant's extra iteration, t = total) it is 0 whatever the schedule."""
    if t >= total:
        return 0.0
    if t < warmup:
        return (t + 1) / warmup
    progress = (t - warmup) / max(1, total - warmup)
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "constant":
        return 1.0
    raise ValueError(f"unknown schedule {kind!r}; allowed: {', '.join(SCHEDULES)}")


def optimizer_step(net: Module, weights: list[Tensor], grads: list[Tensor], state: OptimState, cfg: OptimConfig,
                   t: int, total_steps: int, base_lr: Tensor | None = None, active: Tensor | None = None,
                   compile: bool = False) -> Tensor:
    """One update of ``weights`` in place at step t (0-based); returns the learning rate used (a tensor).

    Packed sweeps stack K networks on a leading axis: ``base_lr`` then holds one LR per network and
    ``active`` (bool, K) freezes the networks that diverged. ``compile`` runs the update through
    ``torch.compile`` (compiled once: every per-step number reaches it as a tensor).
    """
    warmup = cfg.warmup_steps if cfg.warmup_fraction is None else round(cfg.warmup_fraction * total_steps)
    factor = schedule_factor(cfg.schedule, t, total_steps, warmup)
    for slot, value in enumerate((factor, ema_weight(cfg.beta1, t), ema_weight(cfg.beta2, t))):
        state.scalars[slot].fill_(value)
    base = cfg.base_lr if base_lr is None else base_lr
    # A normed first step draws the power-iteration start vectors (a CPU generator, which torch.compile
    # cannot trace), so it runs eagerly; the compiled update then sees a filled state.
    first_normed = state.power is not None and not state.power.vectors
    update = _compiled_update() if compile and not first_normed else apply_update
    return update(net, weights, grads, state, cfg, base, active)


@torch.no_grad()
def apply_update(net: Module, weights: list[Tensor], grads: list[Tensor], state: OptimState, cfg: OptimConfig,
                 base_lr: float | Tensor, active: Tensor | None) -> Tensor:
    """base direction → mode map → ``w ← w − Δ`` → weight decay, with this step's scalars in ``state``."""
    lr = state.scalars[0] * base_lr
    if active is not None:  # frozen members take no step and no weight decay
        lr = torch.where(active, lr, torch.zeros_like(lr))
    u = BASE_DIRECTIONS[cfg.name](state, grads, cfg)
    if cfg.mode == "normed":
        # Compiled, without this split Inductor recomputes the direction inside every power-iteration
        # kernel: the normed update took 2x longer (ResMLP, CPU). A no-op in eager mode.
        torch._dynamo.graph_break()
    delta = MODE_MAPS[cfg.mode](net, weights, u, lr, state, cfg)
    if active is not None:
        delta = [torch.where(per_member(active, d).bool(), d, torch.zeros_like(d)) for d in delta]
    torch._foreach_sub_(weights, delta)
    if cfg.wd:
        decayed = net.regularize(weights, lr * cfg.wd)
        torch._foreach_copy_(weights, decayed)
    elif cfg.mode != "manifold":  # the paper variant's embeddings back on their sphere (manifold: already held)
        for index, piece in net.renormalized(weights).items():
            weights[index].copy_(piece)
    return lr


@functools.cache
def _compiled_update() -> Callable[..., Tensor]:
    return torch.compile(apply_update)


def validate_optim(cfg: OptimConfig) -> list[str]:
    problems = []
    if cfg.name not in OPTIMIZERS:
        problems.append(f"optim.name={cfg.name!r}; allowed: {', '.join(OPTIMIZERS)}")
    if cfg.mode not in MODES:
        problems.append(f"optim.mode={cfg.mode!r}; allowed: {', '.join(MODES)}")
    if cfg.lr is not None:
        lrs = cfg.lr if isinstance(cfg.lr, (list, tuple)) else [cfg.lr]
        bad = [lr for lr in lrs if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0]
        if bad or not lrs:
            problems.append(f"optim.lr={cfg.lr}; every learning rate must be a number > 0")
        elif len({float(lr) for lr in lrs}) < len(lrs):  # two members would share one run folder
            problems.append(f"optim.lr={cfg.lr}; a packed list must not repeat a learning rate")
    for key in ("beta1", "beta2"):
        if not 0 <= getattr(cfg, key) < 1:
            problems.append(f"optim.{key}={getattr(cfg, key)}; must be in [0, 1)")
    if cfg.eps < 0 or cfg.wd < 0:
        problems.append(f"optim.eps={cfg.eps}, optim.wd={cfg.wd}; both must be >= 0")
    if cfg.schedule not in SCHEDULES:
        problems.append(f"optim.schedule={cfg.schedule!r}; allowed: {', '.join(SCHEDULES)}")
    if cfg.warmup_steps < 0:
        problems.append(f"optim.warmup_steps={cfg.warmup_steps}; must be >= 0")
    if cfg.warmup_fraction is not None:
        if not isinstance(cfg.warmup_fraction, (int, float)) or not 0 <= cfg.warmup_fraction < 1:
            problems.append(f"optim.warmup_fraction={cfg.warmup_fraction}; must be in [0, 1) or null")
        elif cfg.warmup_steps:
            problems.append(f"optim.warmup_fraction={cfg.warmup_fraction} and optim.warmup_steps={cfg.warmup_steps}; "
                            f"set one of them (the other to null / 0)")
    if cfg.ortho not in ORTHO_METHODS:
        problems.append(f"optim.ortho={cfg.ortho!r}; allowed: {', '.join(ORTHO_METHODS)}")
    if cfg.ortho_dtype not in ORTHO_DTYPES:
        problems.append(f"optim.ortho_dtype={cfg.ortho_dtype!r}; allowed: {', '.join(ORTHO_DTYPES)}")
    if cfg.ortho_steps is not None and cfg.ortho_steps < 1:
        problems.append(f"optim.ortho_steps={cfg.ortho_steps}; must be >= 1 or null")
    if cfg.power_iterations < 1:
        problems.append(f"optim.power_iterations={cfg.power_iterations}; must be >= 1")
    if cfg.mode == "manifold" and cfg.wd:
        problems.append(f"optim.wd={cfg.wd} with optim.mode=manifold; the weights keep a fixed norm there, so "
                        f"weight decay must be 0")
    if isinstance(cfg.manifold_iterations, bool) or not isinstance(cfg.manifold_iterations, int) \
            or cfg.manifold_iterations < 0:
        problems.append(f"optim.manifold_iterations={cfg.manifold_iterations}; must be an integer >= 0")
    if not cfg.manifold_step > 0 or not cfg.manifold_tolerance > 0:
        problems.append(f"optim.manifold_step={cfg.manifold_step}, optim.manifold_tolerance="
                        f"{cfg.manifold_tolerance}; both must be > 0")
    return problems
