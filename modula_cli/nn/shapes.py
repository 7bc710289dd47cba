"""Feature sizes of combined modules, checked when a network is built (docs/design.md, "Combining modules"), so
that a composition whose shapes cannot match fails at construction rather than at the first forward pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Shaped(Protocol):
    """What the checks read of a module (``Module`` declares each)."""

    features_in: int | None
    features_out: int | None
    shape_preserving: bool

    def describe(self) -> str: ...


def common_features(sizes: list[int | None], what: str, modules: Sequence[Shaped]) -> int | None:
    """The one feature size that every known entry of ``sizes`` (one per module) agrees on, or None."""
    known = {size for size in sizes if size is not None}
    if len(known) > 1:
        names = ", ".join(f"{m.describe()} ({size})" for m, size in zip(modules, sizes) if size is not None)
        raise ValueError(f"shapes cannot compose: the {what} expect different feature sizes: {names}")
    return known.pop() if known else None


def chain_features(children: Sequence[Shaped]) -> tuple[int | None, int | None]:
    """Check adjacent feature sizes along a composition; return the chain's (in, out) sizes."""
    first_in: int | None = None
    current: int | None = None
    seen_reshape = False
    for child in children:
        if child.shape_preserving and child.features_in is None:
            continue  # passes the current size through
        if child.features_in is not None:
            if current is not None and current != child.features_in:
                raise ValueError(f"shapes cannot compose: {child.describe()} takes {child.features_in} features "
                                 f"but the module before it produces {current}")
            if current is None and not seen_reshape and first_in is None:
                first_in = child.features_in
        seen_reshape = seen_reshape or child.features_in is None
        current = child.features_out
    return first_in, current
