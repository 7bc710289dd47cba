"""A module printed as its tree (its ``repr``): a line per bond and combinator, with its mass, and per atom its
mass and the share of the target norm it receives (``Module.target_shares``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def tree_text(module: Any) -> str:
    """The header (mass, sensitivity, atoms), then the tree below it."""
    shares = iter(module.target_shares())
    lines = [f"{module.describe()}  [mass {module.mass:.4g}, sensitivity {module.sensitivity:.4g}, "
             f"{module.num_atoms} atoms; share = fraction of the target norm each atom receives]"]
    if _is_atom(module):
        _child_lines(module, lines, "", "└─ ", "   ", shares)  # an atom printed on its own: its one line
    else:
        _children_lines(module, lines, "", shares)
    return "\n".join(lines)


def _is_atom(module: Any) -> bool:
    return next(iter(module.atoms()), None) is module


def _children_lines(module: Any, lines: list[str], prefix: str, shares: Iterator[float]) -> None:
    for i, child in enumerate(module.children):
        last = i == len(module.children) - 1
        branch, extend = ("└─ ", "   ") if last else ("├─ ", "│  ")
        _child_lines(child, lines, prefix, branch, extend, shares)


def _child_lines(module: Any, lines: list[str], prefix: str, branch: str, extend: str,
                 shares: Iterator[float]) -> None:
    """This module's line in its parent's tree, then its children below it (an atom adds its share)."""
    if _is_atom(module):
        lines.append(f"{prefix}{branch}{module.describe()}  mass {module.mass:.4g}  share {next(shares):.4g}")
    elif module.num_atoms == 0:
        lines.append(f"{prefix}{branch}{module.describe()}")
    else:
        lines.append(f"{prefix}{branch}{module.describe()}  mass {module.mass:.4g}")
        _children_lines(module, lines, prefix + extend, shares)
