"""The optimiser (docs/design.md, "The optimisation loop"): a base direction (``directions``), a mode's map of
it to the weight change (``modes/``), a schedule, and one step that chains them (``step``)."""

from .checks import validate_optim
from .config import OptimConfig
from .directions import OPTIMIZERS, ema_weight
from .modes import MODES, Mode, lr_grid, single_lr
from .schedule import SCHEDULES, schedule_factor
from .state import OptimState, init_state
from .step import apply_update, optimizer_step

__all__ = ["MODES", "OPTIMIZERS", "SCHEDULES", "Mode", "OptimConfig", "OptimState", "apply_update",
           "ema_weight", "init_state", "lr_grid", "optimizer_step", "single_lr", "schedule_factor", "validate_optim"]
