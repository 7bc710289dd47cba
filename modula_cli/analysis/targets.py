"""A target the user names for the transfer law's prediction (``--target width=4096``, ``sweep.target``):
parsed and checked against the axes a sweep varies, in one line when it cannot be used. No pandas: the
launch checks ``sweep.target`` before anything trains."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..results.knobs import SCALE_KNOBS

Target = dict[str, float]


class TargetError(ValueError):
    """A target the sweep cannot predict at (one line)."""


def parse_target(text: str, name: str = "--target") -> Target:
    """``"width=4096,steps=20000"`` (also ``width:4096+steps:20000``, as ``sweep.target`` writes it without
    quotes) → {"width": 4096.0, "steps": 20000.0}; TargetError on anything else."""
    target: Target = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,+]", str(text)))):
        axis, _, value = (p.strip() for p in part.replace(":", "=", 1).partition("="))
        if not axis or not value:
            raise TargetError(f"{name} {text}: write axis=value pairs, e.g. width=4096 or width=4096,steps=20000")
        if axis in target:
            raise TargetError(f"{name} {text}: names {axis} twice; name each axis once")
        target[axis] = _number(axis, value, name)
    if not target:
        raise TargetError(f"{name} is empty: name a scale, e.g. width=4096")
    return target


def _number(axis: str, value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not number > 0 or not math.isfinite(number):
        raise TargetError(f"{name} {axis}={value}: a scale is a positive number")
    return number


def checked_target(target: Mapping[str, Any] | None, axes: Sequence[str], where: str = "this sweep",
                   name: str = "--target") -> Target:
    """The target as numbers, for a sweep that varies ``axes`` (scale knobs, first the one its series run
    along); TargetError naming the bad axis or value and what is allowed."""
    if not target:
        return {}
    named = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in target.items())
    unknown = [axis for axis in target if axis not in SCALE_KNOBS]
    if unknown:
        raise TargetError(f"{name} {named}: {unknown[0]} is not a scale axis; allowed: {', '.join(SCALE_KNOBS)}")
    if not axes:
        raise TargetError(f"{name} {named}: {where} has runs at one scale only; a law needs a sweep over a scale "
                          f"axis ({', '.join(SCALE_KNOBS)})")
    values = {axis: _number(axis, value, name) for axis, value in target.items()}
    varied = " and ".join(axes)
    missing = [axis for axis in values if axis not in axes]
    if missing:
        raise TargetError(f"{name} {named}: {where} varies {varied}, not {missing[0]}; name "
                          f"{' or '.join(axes)}")
    if axes[0] not in values:
        raise TargetError(f"{name} {named}: {where} varies {varied}; a target names {axes[0]}"
                          + (f" (and {axes[1]} for the joint law)" if len(axes) > 1 else ""))
    return values
