"""The learning-rate schedule: ``η_t = lr · factor(t)``."""

from __future__ import annotations

import math

SCHEDULES = ("linear", "cosine", "constant")


def schedule_factor(kind: str, t: int, total: int, warmup: int = 0) -> float:
    """Multiplier of the base LR at step t (0-based) of ``total``; linear decays to 0 over the run. Past the
    end (the paper variant's extra iteration, t = total) it is 0 whatever the schedule."""
    if t >= total:
        return 0.0
    if t < warmup:
        return (t + 1) / warmup
    progress = (t - warmup) / (total - warmup)  # warmup <= t < total: at least one step after warm-up
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "constant":
        return 1.0
    raise ValueError(f"unknown schedule {kind!r}; allowed: {', '.join(SCHEDULES)}")
