from .step import *  # noqa: F401,F403
from .step import MODES, OptimConfig, OptimState, init_state, lr_grid, optimizer_step, validate_optim  # noqa: F401
