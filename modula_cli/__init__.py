"""modula-sweep: learning-rate transfer sweeps. ``modula_cli.optimizer(model, config)`` is the swept optimiser for
your own training loop (``swept_optimizer.py``); the rest is the command line's. Loaded on first use, so the
command line's checks import no torch."""

from .plumbing.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {"optimizer": ".swept_optimizer", "SweptOptimizer": ".swept_optimizer"})
__all__ = ["SweptOptimizer", "optimizer"]
