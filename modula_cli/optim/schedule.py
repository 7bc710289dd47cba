"""The learning-rate schedule: ``η_t = lr · factor(t)``.

After the warm-up, every schedule decays from 1 to ``min_lr_ratio``: ``linear`` and ``cosine`` over the rest
of the run, ``constant`` never, and ``wsd`` (warm-up, stable, decay: Hägele et al. 2024, MiniCPM) holds 1 until
its last ``decay_fraction`` of the steps, then cools down in ``decay_shape``.
"""

from __future__ import annotations

import math

SCHEDULES = ("linear", "cosine", "constant", "wsd")
# The cool-down's shape from 1 to 0 over progress p ∈ [0, 1]; "1-sqrt" is Hägele et al.'s best.
DECAY_SHAPES = {
    "linear": lambda p: 1.0 - p,
    "cosine": lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
    "1-sqrt": lambda p: 1.0 - math.sqrt(p),
}


def decay_start(total: int, decay_fraction: float) -> int:
    """The first step of WSD's cool-down: the last ``decay_fraction`` of ``total`` steps cool down (at least one)."""
    return total - max(1, round(decay_fraction * total))


def schedule_factor(kind: str, t: int, total: int, warmup: int = 0, min_ratio: float = 0.0,
                    decay_fraction: float = 0.2, decay_shape: str = "1-sqrt") -> float:
    """Multiplier of the base LR at step t (0-based) of ``total``. Past the end (the paper variant's extra
    iteration, t = total) it is 0 whatever the schedule."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; allowed: {', '.join(SCHEDULES)}")
    if t >= total:
        return 0.0
    if t < warmup:
        return (t + 1) / warmup
    if kind == "constant":
        return 1.0
    if kind == "wsd":
        start = max(warmup, decay_start(total, decay_fraction))
        if t < start:
            return 1.0
        shape, progress = DECAY_SHAPES[decay_shape], (t - start) / (total - start)
    else:
        shape, progress = DECAY_SHAPES[kind], (t - warmup) / (total - warmup)  # at least one step after warm-up
    # as linear decay always has: the cool-down's first step at 1, its last one step's worth above the floor
    return min_ratio + (1.0 - min_ratio) * shape(progress)
