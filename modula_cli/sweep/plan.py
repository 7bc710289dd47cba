"""Before a launch: every job of the grid composed and checked (each problem said once, with the grid points
it hits), the runs the launch will train planned, and, once every other check has passed, the data each run
still to train needs made ready (``prepare_data``: a download must not hide the user's mistake)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..config.identity import short_keys
from ..config.overrides import OverrideError
from ..config.validate import ConfigError
from ..data import DataUnavailable, prepare_dataset
from ..plumbing.user_code import source_digest
from ..models.variant import folder_suffix, variant_name, variant_of
from ..plumbing.signals import STOP
from ..plumbing.wording import counted
from ..results.manifest import other_experiments
from ..results.summary import is_finished, read_summary
from .grid import JobComposer, grid_overrides, planned_runs


@dataclass(frozen=True)
class Plan:
    """What a launch will train: every run folder with its knobs, each job's overrides with its runs, and each
    job's data group (resolved) with the runs that read it."""
    runs: dict[str, dict]
    jobs: list[tuple[list[str], list[str]]]
    data: list[tuple[dict, set[str]]] = field(default_factory=list)


def validate_grid(config: DictConfig, devices_here: bool = True) -> Plan:
    """Compose and check every job; return the plan, or raise one ConfigError listing every bad job.
    ``devices_here``: the jobs run on this machine, so ``train.device=cuda`` needs a GPU here (cluster jobs
    check their own node's)."""
    composer = JobComposer(config, devices_here)
    problems: list[str] = []
    per_job: list[tuple[str, str]] = []  # (job, problem): one bad value repeats in every job it reaches
    planned: dict[str, dict] = {}
    jobs: list[tuple[list[str], list[str]]] = []
    needs: list[tuple[dict, set[str]]] = []  # each job's data group and the runs it trains
    folders: dict[str, str] = {}  # each variant's sweep-folder suffix: one launch, one variant
    grid = grid_overrides(config)
    for job in grid:
        try:
            job_cfg = composer.compose(job)
            variant = variant_of(job_cfg)
            folders.setdefault(folder_suffix(variant), variant_name(variant))
            runs = planned_runs(job, job_cfg)
            planned.update(runs)
            jobs.append((list(job), sorted(runs)))
            needs.append((OmegaConf.to_container(job_cfg.data, resolve=True), set(runs)))
        except ConfigError as error:
            per_job += [(" ".join(job), issue) for issue in error.problems]
        except OverrideError as error:
            per_job.append((" ".join(job), str(error)))
        except Exception as error:  # noqa: BLE001 - composition errors are problems to report too
            per_job.append((" ".join(job), str(error).splitlines()[0]))
    problems += grid_problems(per_job, len(grid))
    if len(folders) > 1:  # run folders do not name the variant: its sweep folder does
        problems.append(f"this launch sweeps {len(folders)} variants ({', '.join(sorted(folders.values()))}); each "
                        f"variant sweeps into a folder of its own: launch them one at a time")
    if problems:
        raise ConfigError(problems)
    return Plan(planned, jobs, needs)


def prepare_data(config: DictConfig, plan: Plan) -> None:
    """Download or prepare once each dataset that a run still to train needs, before the first job; ConfigError
    with one line per dataset that cannot be had (offline), instead of a failed run per job. A finished sweep
    relaunched offline still reports: its runs need nothing."""
    done = finished_runs(config, plan.runs)
    datasets = {json.dumps(data, sort_keys=True, default=str): data for data, runs in plan.data if runs - done}
    if problems := _unavailable(list(datasets.values())):
        raise ConfigError(problems)


def grid_problems(per_job: list[tuple[str, str]], jobs: int) -> list[str]:
    """Each problem once, with the grid points it hits: ``train.steps='abc'; … (all 27 grid points)``; a problem
    of one grid point names it, ``[arch.width=128 optim.lr=4.0] …``; of several, how many and the first."""
    hit: dict[str, list[str]] = {}
    for job, problem in per_job:
        hit.setdefault(problem, []).append(job)
    lines = []
    for problem, where in hit.items():
        if len(where) == 1 and jobs > 1:
            lines.append(f"[{where[0]}] {problem}")
        elif len(where) == jobs:
            lines.append(problem + (f" (all {jobs} grid points)" if jobs > 1 else ""))
        else:
            lines.append(f"{problem} ({len(where)} of {jobs} grid points, e.g. [{where[0]}])")
    return lines


def another_experiment_line(sweep_dir: Path, planned: dict[str, dict]) -> str | None:
    """One line when the sweep folder already holds another experiment: how it differs and what that does to the
    report; when the folder holds none of this launch's own experiment, the folder that keeps it apart."""
    held = other_experiments(sweep_dir, planned)
    if not held.other:
        return None
    short = short_keys(list(held.apart))
    there = "; ".join(f"{short[key]}={', '.join(map(_setting_text, olds))} there, {_setting_text(new)} here"
                      for key, (olds, new) in held.apart.items())
    line = (f"{sweep_dir} already holds another experiment ({counted(held.other, 'run')}: {there}); the report "
            f"shows each as a series of its own and its plots gain panels")
    if held.same:  # this launch adds to its own experiment's runs there (more seeds, more scales): it belongs
        return f"{line}; this launch joins its own experiment's {counted(held.same, 'run')} there"
    suffix = re.sub(r"[^\w.+-]", "", "-".join(f"{short[key]}{_setting_text(new)}"
                                              for key, (_, new) in held.apart.items()))
    suggested = sweep_dir.with_name(f"{sweep_dir.name}-{suffix}")
    with contextlib.suppress(ValueError):
        suggested = suggested.relative_to(Path.cwd())
    return f"{line}; to keep this one apart, add hydra.sweep.dir={suggested}"


def _setting_text(value: Any) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def finished_runs(config: DictConfig, planned: dict[str, dict]) -> set[str]:
    """The planned runs finished before this launch, by this very configuration (none with sweep.rerun)."""
    if config.sweep.rerun or config.train.rerun:
        return set()
    sweep_dir = Path(config.hydra.sweep.dir)
    return {name for name, knobs in planned.items()
            if is_finished(read_summary(sweep_dir / name, warn=False), knobs["fingerprint"])}


def edited_model_note(config: DictConfig, planned: dict[str, dict]) -> str | None:
    """The runs of this plan that an earlier version of the user's model file finished: they train again (an edited
    model is another network, ``identity.numeric_settings``), said once, naming the file's module."""
    sweep_dir = Path(config.hydra.sweep.dir)
    edited: dict[str, int] = {}
    for name, knobs in planned.items():
        summary = read_summary(sweep_dir / name, warn=False)
        settings = (summary or {}).get("settings") or {}
        if not summary or summary.get("fingerprint") == knobs["fingerprint"] or "arch.source" not in settings:
            continue
        path = str(settings.get("arch.name", ""))
        if source_digest(path) not in (None, settings["arch.source"]):
            module = path.partition(":")[0]
            edited[module] = edited.get(module, 0) + 1
    if not edited:
        return None
    return "; ".join(f"{counted(n, 'run')} here finished with an earlier version of {module} (its file changed): "
                     f"trained again, their results replaced" for module, n in edited.items())


def _unavailable(datasets: list[dict]) -> list[str]:
    """Download or prepare each dataset once, before the first job: offline, one line each instead of a
    failed run per job."""
    problems = []
    for data in datasets:
        try:
            with STOP.at_once(f"preparing data={data['name']}"):
                prepare_dataset(data["name"], **data)
        except DataUnavailable as error:
            problems.append(str(error))
    return problems
