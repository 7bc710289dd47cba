"""The ``optim`` settings' checks, one line per problem, run before launch."""

from __future__ import annotations

from typing import Any

from ..nn.orthogonalize import ITER_DTYPES as ORTHO_DTYPES
from ..nn.orthogonalize import METHODS as ORTHO_METHODS
from .config import OptimConfig
from .directions import OPTIMIZERS
from .modes import MODES, unknown_mode
from .schedule import SCHEDULES


def validate_optim(cfg: OptimConfig, roles: tuple[str, ...] | None = None, arch: Any = None) -> list[str]:
    """Every problem of the optim settings beyond their types (``plumbing.settings.checked``), one line each; ``roles``:
    the network's layer roles, and ``arch`` its config, when known."""
    problems = []
    if cfg.name not in OPTIMIZERS:
        problems.append(f"optim.name={cfg.name!r}; allowed: {', '.join(OPTIMIZERS)}")
    if (problem := unknown_mode(cfg.mode)) is not None:
        problems.append(problem)
    problems += _lr_problems(cfg.lr)
    for key in ("beta1", "beta2"):
        if not 0 <= getattr(cfg, key) < 1:
            problems.append(f"optim.{key}={getattr(cfg, key)}; must be in [0, 1)")
    if cfg.eps < 0 or cfg.wd < 0:
        problems.append(f"optim.eps={cfg.eps}, optim.wd={cfg.wd}; both must be >= 0")
    problems += _schedule_problems(cfg)
    if cfg.ortho not in ORTHO_METHODS:
        problems.append(f"optim.ortho={cfg.ortho!r}; allowed: {', '.join(ORTHO_METHODS)}")
    if cfg.ortho_dtype not in ORTHO_DTYPES:
        problems.append(f"optim.ortho_dtype={cfg.ortho_dtype!r}; allowed: {', '.join(ORTHO_DTYPES)}")
    if cfg.ortho_steps is not None and cfg.ortho_steps < 1:
        problems.append(f"optim.ortho_steps={cfg.ortho_steps}; must be >= 1 or null")
    if not cfg.manifold_step > 0 or not cfg.manifold_tolerance > 0:
        problems.append(f"optim.manifold_step={cfg.manifold_step}, optim.manifold_tolerance="
                        f"{cfg.manifold_tolerance}; both must be > 0")
    if cfg.mode in MODES:
        problems += MODES[cfg.mode].problems(cfg, roles, arch)
    return problems


def _lr_problems(lr: Any) -> list[str]:
    if lr is None:
        return []
    lrs = lr if isinstance(lr, (list, tuple)) else [lr]
    bad = [x for x in lrs if not isinstance(x, (int, float)) or isinstance(x, bool) or not x > 0]
    if bad or not lrs:
        hint = next((_hint(x) for x in bad if isinstance(x, str) and _hint(x)), "")
        return [f"optim.lr={lr}; every learning rate must be a number > 0{hint}"]
    if len({float(x) for x in lrs}) < len(lrs):  # two members would share one run folder
        return [f"optim.lr={lr}; a packed list must not repeat a learning rate"]
    return []


def _hint(text: str) -> str:
    """How to write an expression the config cannot compute: a power as ``2^-3``, a fraction as a decimal."""
    if "**" in text:
        return f" (write powers as {text.replace('**', '^')})"
    numerator, slash, denominator = text.partition("/")
    try:
        value = float(numerator) / float(denominator) if slash else None
    except (ValueError, ZeroDivisionError):
        value = None
    return f" (write fractions as decimals: {value!r})" if value is not None else ""


def _schedule_problems(cfg: OptimConfig) -> list[str]:
    problems = []
    if cfg.schedule not in SCHEDULES:
        problems.append(f"optim.schedule={cfg.schedule!r}; allowed: {', '.join(SCHEDULES)}")
    if cfg.warmup_fraction is not None:
        if not isinstance(cfg.warmup_fraction, (int, float)) or not 0 <= cfg.warmup_fraction < 1:
            problems.append(f"optim.warmup_fraction={cfg.warmup_fraction}; must be in [0, 1) or null")
        elif cfg.warmup_steps:
            problems.append(f"optim.warmup_fraction={cfg.warmup_fraction} and optim.warmup_steps="
                            f"{cfg.warmup_steps}; set one of them (the other to null / 0)")
    return problems
