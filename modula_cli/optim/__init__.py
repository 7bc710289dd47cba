"""The optimiser (docs/design.md, "The optimisation loop"): a base direction (``directions``), a mode's map of
it to the weight change (``modes/``), a schedule, and one step that chains them (``step``). Names load on
first use (``plumbing/lazy.py``): the command line's checks read ``optim.config`` without importing torch."""

from ..plumbing.lazy import exports_of, lazy_exports

_EXPORTS = exports_of({
    ".checks": ("validate_optim",),
    ".config": ("OPTIMIZERS", "OptimConfig"),
    ".directions": ("ema_weight",),
    ".modes": ("MODES", "Mode", "build_network", "lr_grid", "single_lr"),
    ".schedule": ("SCHEDULES", "schedule_factor"),
    ".state": ("OptimState", "init_state"),
    ".step": ("apply_update", "optimizer_step"),
})
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
