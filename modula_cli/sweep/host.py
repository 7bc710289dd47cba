"""Where a launcher runs its jobs (``Host``), as the launcher's class declares it (``HOST``). Hydra's own
launchers cannot declare it; their hosts are named here by class. Light: Hydra imports the plugins that
declare a host at every start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IN_ITS_CHILDREN = "it trains the runs in this process or its children"


@dataclass(frozen=True)
class Host:
    """Where a launcher runs its jobs, and what that asks of each job and of the launch."""
    in_process: bool = False    # in the launching process (basic launcher): a busy run is left for the end
    local: bool = False         # on this machine: the data is prepared once before the first job
    shares_cores: bool = False  # parallel jobs on this machine split its cores (or take one GPU each)
    on_stop: str = "report"     # a stopped job: "report" it interrupted; "raise" StopRequested (Hydra's submitit
    #                             plugins requeue on it); "exit" its process (our SLURM launcher: SLURM decides)
    detaches: bool = False      # its jobs outlive the launching process (sweep.detach=true)
    scheduler: str | None = None  # whose ids its jobs' hydra.job.id are: a run records its job as "slurm:12_3"
    why_attached: str = IN_ITS_CHILDREN  # else: why a launch must stay until its runs end


# Hydra's launchers, by class (the first of a launcher's classes, its own first, that declares or is named here
# decides: a subclass runs where its base does)
HYDRAS_LAUNCHERS = (
    ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", Host(in_process=True, local=True)),
    ("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", Host(local=True, shares_cores=True)),
    ("hydra_plugins.hydra_submitit_launcher.submitit_launcher.BaseSubmititLauncher", Host(on_stop="raise")),
)


def job_of(host: Host, job_id: Any) -> str | None:
    """The job a run of this host trains in, as ``run.owner`` and ``summary.json`` record it (``Jobs.owner``):
    the scheduler's name and the job's id on it (``hydra.job.id``); None where no scheduler names it."""
    return f"{host.scheduler}:{job_id}" if host.scheduler and job_id not in (None, "") else None


def host_of(launcher: Any) -> Host:
    """The host of the launcher that ``launcher`` (its config, with ``_target_``) instantiates."""
    from hydra.utils import get_class

    target = launcher.get("_target_") if launcher is not None else None
    if not target:
        return Host()
    named = dict(HYDRAS_LAUNCHERS)
    for klass in get_class(str(target)).__mro__:
        if isinstance(vars(klass).get("HOST"), Host):
            return vars(klass)["HOST"]
        if (host := named.get(f"{klass.__module__}.{klass.__qualname__}")) is not None:
            return host
    return Host()
