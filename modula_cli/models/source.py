"""Which file defines a user's builder, and a hash of it: an edited model is another network (its runs get
another fingerprint). Torch-free: the command line's checks and the run identities read it."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys


def importable_from_here() -> None:
    """Console scripts do not put the working folder on ``sys.path``; a user's builder lives there."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def source_digest(path: str) -> str | None:
    """A short hash of the file that defines ``package.module:function``, found without importing it; None when
    it cannot be found (the import's own error says so when the network is built)."""
    importable_from_here()
    try:
        spec = importlib.util.find_spec(path.partition(":")[0])
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.isfile(origin):
            return None
        with open(origin, "rb") as source:
            return hashlib.sha256(source.read()).hexdigest()[:12]
    except (ImportError, ValueError, OSError):
        return None
