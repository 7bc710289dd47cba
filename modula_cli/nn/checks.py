"""Argument checks shared by the library and the config validation (one definition of each rule)."""

from __future__ import annotations

from typing import Any


def positive_int_problem(key: str, value: Any, minimum: int = 1) -> str | None:
    """``None`` when ``value`` is an integer >= ``minimum`` (bools are not integers here), else the problem."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"{key}={value!r}; must be an integer >= {minimum}"
    return None


def require_positive_ints(owner: str, **values: Any) -> None:
    """Raise ``ValueError`` naming the first argument of ``owner`` that is not a positive integer."""
    for key, value in values.items():
        if positive_int_problem(key, value) is not None:
            raise ValueError(f"{owner}: {key} must be a positive integer, got {value!r}")
