"""The ``optim`` settings' checks, one line per problem, run before launch."""

from __future__ import annotations

from typing import Any

from .config import OptimConfig
from .modes import MODES, unknown_mode


def validate_optim(cfg: OptimConfig, roles: tuple[str, ...] | None = None, arch: Any = None) -> list[str]:
    """Every problem of the optim settings beyond each one's type and range (the schema's, checked first by
    ``plumbing.settings.checked``), one line each: the mode (an open registry), the LR (a number or a packed
    list), settings that exclude each other, and the mode's own rules; ``roles``: the network's layer roles,
    and ``arch`` its config, when known."""
    problems = []
    if (problem := unknown_mode(cfg.mode)) is not None:
        problems.append(problem)
    problems += _lr_problems(cfg.lr)
    if cfg.warmup_fraction is not None and cfg.warmup_steps:
        problems.append(f"optim.warmup_fraction={cfg.warmup_fraction} and optim.warmup_steps="
                        f"{cfg.warmup_steps}; set one of them (the other to null / 0)")
    if cfg.mup.depth != "none" and cfg.mode != "mup":
        problems.append(f"optim.mup.depth={cfg.mup.depth} needs optim.mode=mup (got {cfg.mode}): the depth recipes "
                        f"extend μP; the modular modes weight depth through the network's masses")
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
