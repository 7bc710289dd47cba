"""A sweep's jobs before they launch: the grid expanded as the sweeper will launch it, each job composed and
checked as it will compose itself, the runs it trains, and where the launcher runs it."""

from __future__ import annotations

import copy
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, open_dict

from ..config.hydra_internals import group_exists, split_sweep
from ..config.identity import run_name
from ..config.members import Members, pack_arguments, sweep_member_dir
from ..config.overrides import apply_overrides
from ..config.validate import check_config
from ..optim import OptimConfig


def grid_overrides(config: DictConfig) -> list[list[str]]:
    """Every job's overrides, expanded as Hydra's basic sweeper does (config params, then command line)."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    arguments = params + list(config.hydra.overrides.task)
    if config.sweep.pack:  # as the packing sweeper will launch them
        arguments = pack_arguments(arguments)
    return split_sweep(OverridesParser.create().parse_overrides(arguments))


def planned_runs(job: list[str], job_cfg: DictConfig) -> dict[str, dict]:
    """The run folders one job trains (one per (LR, seed) when packed) and the knobs of each."""
    members = Members.of(job_cfg, OptimConfig.of(job_cfg.optim), Path(run_name(job)),
                         sweep_member_dir(Path(), job))
    return {member.run_dir.name: member.identity.planned() for member in members}


class JobComposer:
    """Each job's config, composed and checked as the job will compose it. Jobs that choose the same config
    groups share one composition; each job's value overrides are then applied with ``apply_overrides``, as
    the command line's check applies them. A job's config here has no ``hydra`` node: nothing a job checks or
    plans reads it, and copying it was three quarters of the cost of each job (a paper figure's 54 jobs)."""

    def __init__(self, config: DictConfig, devices_here: bool = True):
        self.config, self.devices_here = config, devices_here
        self.loader = GlobalHydra.instance().config_loader()
        self.parser = OverridesParser.create()
        self.composed: dict[tuple[str, ...], DictConfig] = {}

    def compose(self, job: list[str]) -> DictConfig:
        """The job's config; raises ConfigError (or OverrideError) with its problems."""
        parsed = self.parser.parse_overrides(job)
        groups = tuple(o.input_line for o in parsed if group_exists(o.key_or_group))
        if groups not in self.composed:
            composed = self.loader.load_sweep_config(self.config, list(groups))
            with open_dict(composed):
                del composed["hydra"]
            self.composed[groups] = composed
        job_cfg = copy.deepcopy(self.composed[groups])
        apply_overrides([o for o in parsed if o.input_line not in groups], job_cfg)
        check_config(job_cfg, job, self.devices_here)
        return job_cfg
