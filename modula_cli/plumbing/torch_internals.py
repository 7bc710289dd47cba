"""The one module that uses torch's private API beyond its foreach kernels (which torch.optim itself uses):
``torch._dynamo.graph_break`` has no public equivalent in ``torch.compiler``."""

from __future__ import annotations

import torch


def graph_break() -> None:
    """Split the compiled graph here (a no-op in eager mode)."""
    torch._dynamo.graph_break()
