"""An LR search's space: the sweep's axes split into the LR axis (its grid sets the lattice's step and middle),
the seeds (every LR gets all of them), the scale axis (the first swept knob of ``SCALE_KNOBS``) and the rest,
each combination a series of its own; and each job's arguments for an LR of a scale."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from ..config.hydra_internals import split_sweep
from ..config.identity import KNOB_KEYS, run_name
from ..config.members import pack_arguments
from ..config.schema import SweepConfig
from ..plumbing.settings import checked
from ..results.knobs import SCALE_KNOBS
from .lr_search import Lattice, SearchError, SearchSettings

LR_KEY, SEED_KEY = "optim.lr", "train.seed"


@dataclass(frozen=True)
class Series:
    """One series of the search: its fixed overrides, and its scales in order (override values)."""

    overrides: tuple[str, ...]
    scales: tuple[str, ...]


@dataclass(frozen=True)
class SearchSpace:
    lattice: Lattice
    settings: SearchSettings
    start: float                   # the first scale's starting point, grid steps from the grid's first LR
    seeds: tuple[str, ...]         # the seed override's values ("0", "1", "2"), or () for the config's seed
    scale_key: str | None          # "arch.width", or None: every series has one scale
    series: tuple[Series, ...]
    fixed: tuple[str, ...]         # overrides every job has (not swept)
    pack: bool

    def positions(self) -> list[float]:
        """Each scale's position for the transfer law the next start follows: log2 of its value, or its index
        when a value is not a positive number (weight decay 0)."""
        scales = self.series[0].scales
        try:
            values = [float(v) for v in scales]
        except ValueError:
            values = []
        if values and all(v > 0 for v in values):
            return [math.log2(v) for v in values]
        return [float(i) for i in range(len(scales))]

    def job_arguments(self, series: Series, scale: str, ks: Sequence[int],
                      seeds: Sequence[str] | None = None) -> list[list[str]]:
        """The jobs that train LRs ``ks`` at one scale of one series, with ``seeds`` (default: every seed)."""
        arguments = [*self.fixed, *series.overrides]
        if self.scale_key is not None:
            arguments.append(f"{self.scale_key}={scale}")
        arguments.append(f"{LR_KEY}={','.join(repr(self.lattice.lr(k)) for k in sorted(ks))}")
        seeds = self.seeds if seeds is None else seeds
        if seeds:
            arguments.append(f"{SEED_KEY}={','.join(seeds)}")
        if self.pack:
            arguments = pack_arguments(arguments)
        return split_sweep(OverridesParser.create().parse_overrides(arguments))

    def label(self, series: Series) -> str:
        """The series as its run folders name it, without the scale, LR and seed (``arch=gpt,mode=normed``):
        launches of different series into one folder keep their own entries in ``search.json``."""
        return run_name([o for o in (*self.fixed, *series.overrides)
                         if o.lstrip("+~").partition("=")[0] not in (LR_KEY, SEED_KEY)])  # one seed or several

    def describe(self, grid_runs: int) -> str:
        """What the search will do, in one line, against the grid it replaces."""
        seeds = max(1, len(self.seeds))
        scales = len(self.series) * len(self.series[0].scales)
        most = scales * self.settings.budget * seeds
        return (f"the grid is {grid_runs} runs; the search trains at most {self.settings.budget} LRs per scale "
                f"× {seeds} seed{'s' if seeds != 1 else ''} × {scales} scale{'s' if scales != 1 else ''} "
                f"(≤ {most} runs), stopping each scale once its optimum's 95 % interval is ≤ "
                f"{self.settings.resolution:g} grid step{'s' if self.settings.resolution != 1 else ''} wide")

    def grid_runs(self) -> int:
        """Runs the full grid trains per scale."""
        return len(self.lattice.grid) * max(1, len(self.seeds))


def search_arguments(config: DictConfig) -> list[str]:
    """The sweep's overrides as the basic sweeper reads them: the sweeper's params, then the command line."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    return params + list(config.hydra.overrides.task)


def search_space(config: DictConfig) -> SearchSpace:
    """The search's axes and settings from the sweep's overrides; SearchError (one line per problem) for a
    search that cannot run: no LR axis, an uneven grid, bad settings, a start outside the bounds."""
    parsed = OverridesParser.create().parse_overrides(search_arguments(config))
    final = {o.get_key_element(): o for o in parsed}  # a key given twice: the last wins, as in Hydra's sweeper
    swept = {key: o for key, o in final.items() if o.is_sweep_override()}
    fixed = tuple(o.input_line for key, o in final.items() if not o.is_sweep_override() and key != LR_KEY)
    if LR_KEY not in swept:
        raise SearchError([f"sweep.search=true needs an LR axis to search (sweep {LR_KEY}, e.g. {LR_KEY}=0.125,0.25,0.5"
                           f" or a preset such as sweep=width)"])
    lrs = [float(v) for v in swept[LR_KEY].sweep_string_iterator()]
    sweep = config.sweep
    problems, values = checked("sweep", sweep, SweepConfig)  # the schema's allowed values, before any is used
    substeps = values.get("search_substeps", 1)
    lattice = Lattice.of_grid(lrs, substeps)
    bounds = []
    for name in ("search_low", "search_high"):
        value = values.get(name)
        # a bound on a lattice point keeps it; one between points keeps the points inside it
        if value is not None:
            position = _position(lattice, value)
            bounds.append(math.ceil(position - 1e-4) if name == "search_low" else math.floor(position + 1e-4))
        else:
            bounds.append(None)
    budget = values.get("search_budget")
    settings = SearchSettings(per_grid=substeps, resolution=values.get("search_resolution", 0.75),
                              budget=len(lattice.grid) if budget is None else budget, low=bounds[0], high=bounds[1])
    start_lr = values.get("search_start")
    start = (len(lattice.grid) - 1) / 2 if start_lr is None else _position(lattice, start_lr) / substeps
    problems += settings.problems(round(start) * substeps, lattice)
    if problems:
        raise SearchError(problems)
    seeds = tuple(swept[SEED_KEY].sweep_string_iterator()) if SEED_KEY in swept else ()
    scale_key = next((KNOB_KEYS[knob] for knob in SCALE_KNOBS if KNOB_KEYS[knob] in swept), None)
    scales = tuple(swept[scale_key].sweep_string_iterator()) if scale_key else ("",)
    try:
        scales = tuple(sorted(scales, key=float))
    except ValueError:
        pass
    others = [o for key, o in swept.items() if key not in (LR_KEY, SEED_KEY, scale_key)]
    series = tuple(Series(tuple(job), scales) for job in split_sweep(others)) if others else (Series((), scales),)
    return SearchSpace(lattice, settings, start, seeds, scale_key, series, fixed, bool(sweep.pack))


def _position(lattice: Lattice, lr: float) -> float:
    """An LR's place on the lattice (lattice units, not rounded)."""
    return (math.log2(lr) - math.log2(lattice.grid[0])) * lattice.per_grid / lattice.grid_step
