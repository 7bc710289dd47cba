"""The one module that uses torch's private API beyond its foreach kernels (which torch.optim itself uses):
``torch._dynamo.graph_break`` has no public equivalent in ``torch.compiler``."""

from __future__ import annotations

import torch


def graph_break() -> None:
    """Split the compiled graph here; in eager mode nothing, not even the import of ``torch._dynamo`` (3 s of CPU:
    every eager normed run's process paid it at its first step)."""
    if torch.compiler.is_compiling():
        torch._dynamo.graph_break()
