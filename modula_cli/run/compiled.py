"""``train.compile``: a run's two hot functions (the model step, the optimiser update) through torch.compile, the
first call's cost said in the run's log, and a function that fails to compile run eagerly with one line that
names it (never a traceback: the eager step computes the same numbers)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

# given a call's arguments, saves what the call changes in place and returns what puts it back
RestorePoint = Callable[[tuple], Callable[[], None]]


class Compiled:
    """``fn`` compiled on its first call. If that call fails (Dynamo or Inductor cannot compile it), what the call
    changed is put back (``restore_point``) and ``fn`` runs eagerly from then on. ``what`` names it in the log."""

    def __init__(self, fn: Callable[..., Any], what: str, restore_point: RestorePoint | None = None):
        self.fn, self.what, self.restore_point = fn, what, restore_point
        self.compiled = torch.compile(fn)
        self.eager = False  # the compile failed: fn itself runs
        self.first_call_s: float | None = None

    def __call__(self, *args: Any) -> Any:
        if self.eager:
            return self.fn(*args)
        if self.first_call_s is not None:
            return self.compiled(*args)
        restore = self.restore_point(args) if self.restore_point is not None else None
        start = time.perf_counter()
        try:
            result = self.compiled(*args)
        except Exception as error:  # noqa: BLE001 -- whatever stopped the compiler, the eager step still runs
            if restore is not None:
                restore()
            self.eager = True
            reason = str(error).strip().splitlines()
            log.warning("train.compile: torch.compile failed on %s (%s%s); it runs eagerly", self.what,
                        type(error).__name__, f": {reason[0][:160]}" if reason else "")
            return self.fn(*args)
        self.first_call_s = time.perf_counter() - start
        log.info("train.compile: %s compiled in its first call, %.1f s", self.what, self.first_call_s)
        return result
