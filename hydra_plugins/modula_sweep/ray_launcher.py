"""``hydra/launcher=ray_cluster``: each job one task on an existing Ray cluster (``ray start --head``), followed to
an honest end by the launching process (``modula_cli/sweep/cluster.py``).

Before anything is submitted the task's request is fitted to the cluster's alive nodes
(``modula_cli/schedulers/ray_cluster.py``). Each task carries, in its task function (``sweep/job_place.py``), the
launch's working directory and data root (a Ray worker runs wherever ``ray start`` ran) and the CPUs it was given
(its ``train.threads``); its config carries the launch's id. This module
is imported by Hydra's plugin scan at every start: Ray itself is imported only when a launch uses it.
"""

import logging
import socket
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

import modula_cli.schedulers.config  # noqa: F401 - stores this launcher's schema (_ray_schema) in Hydra's ConfigStore
from modula_cli.schedulers.ray_cluster import RayTasks
from modula_cli.sweep.host import Host

log = logging.getLogger(__name__)


def _connect(init: dict[str, Any]) -> None:
    """Join the Ray cluster (once per process); LaunchRefused when Ray is missing or no cluster answers."""
    from modula_cli.plumbing.signals import STOP
    from modula_cli.sweep.launch import LaunchRefused

    try:
        import ray
    except ImportError:
        raise LaunchRefused(["hydra/launcher=ray_cluster needs Ray: pip install -e \".[ray]\""]) from None
    if not ray.is_initialized():
        try:
            _probe(init.get("address"))  # ray.init waits minutes for a head that is gone: ask in seconds first
            ray.init(**{"log_to_driver": False, **init})
        except (ConnectionError, RuntimeError, ValueError, OSError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise LaunchRefused([f"hydra/launcher=ray_cluster: no Ray cluster answers at address="
                                 f"{init.get('address')} ({first}); start one with `ray start --head` (or "
                                 f"scripts/cluster/ray_up.sh), or set hydra.launcher.ray.init.address"]) from None
    STOP.reclaim()  # ray.init installs a SIGTERM handler that exits at once: a stop must checkpoint first


def _probe(address: Any, timeout_s: float = 5.0) -> None:
    """ConnectionError unless the cluster's head (its GCS port) accepts a connection within ``timeout_s``."""
    if not address or str(address).startswith("ray://"):  # a local instance, or Ray Client: ray.init says
        return
    from modula_cli.schedulers.ray_internals import bootstrap_address  # "auto": RAY_ADDRESS, ray start's

    host, _, port = bootstrap_address(str(address)).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s):
        pass


def _fit(ray_options: Any, runs_per_task: Any = 1) -> Any:
    from modula_cli.schedulers import ray_cluster
    from modula_cli.sweep.launch import LaunchRefused

    options = OmegaConf.to_container(ray_options, resolve=True) if OmegaConf.is_config(ray_options) \
        else dict(ray_options)
    _connect(dict(options.get("init") or {}))
    fitted = ray_cluster.fit(dict(options.get("remote") or {}), ray_cluster.alive_nodes(), runs_per_task)
    if fitted.problems:
        raise LaunchRefused(fitted.problems)
    return fitted


class RayClusterLauncher(Launcher):
    HOST = Host(why_attached="Ray ends a driver's tasks when the driver exits", scheduler=RayTasks.scheduler)

    def __init__(self, ray: Any, runs_per_task: Any = 1, poll_s: float = 2.0, stop_grace_s: float = 120.0) -> None:
        self.ray_options = ray
        self.runs_per_task = runs_per_task
        self.poll_s, self.stop_grace_s = float(poll_s), float(stop_grace_s)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    @staticmethod
    def preflight(launcher: DictConfig) -> None:
        """Before the launch writes anything: a Ray cluster answers and one of its nodes can hold a task."""
        log.info("Ray: %s", _fit(launcher.ray, launcher.get("runs_per_task", 1)).describe())

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        from modula_cli.schedulers import ray_cluster, ray_jobs
        from modula_cli.results.manifest import forget_launch
        from modula_cli.sweep.cluster import run_unfinished
        from modula_cli.sweep.job_place import JobPlace, PlacedTask, launch_of
        from modula_cli.sweep.launch import LaunchRefused

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:  # joins the cluster; again: it may have changed since the preflight
            fitted = _fit(self.ray_options, self.runs_per_task)
        except LaunchRefused as error:
            forget_launch(sweep_dir, launch_of(self.config))
            raise SystemExit(f"modula-sweep: sweep not launched, {error}") from None
        import ray
        runs = fitted.runs
        options = {key: value for key, value in fitted.task_options.items() if value is not None}
        placed = PlacedTask.of(self.task_function, JobPlace.here(self.config).given(
            max(1, int(fitted.options.get("num_cpus") or 1)), "hydra.launcher.ray.remote.num_cpus"))
        remote = ray.remote(**options)(ray_jobs.run_in_worker if runs == 1 else ray_jobs.run_group)

        def config_of(i: int) -> DictConfig:
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(job_overrides[i]))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = f"job_id_for_{initial_job_idx + i}"
                sweep_config.hydra.job.num = initial_job_idx + i
            return sweep_config

        def submit(todo: list[int]) -> Any:
            groups = [todo[k:k + runs] for k in range(0, len(todo), runs)]
            refs = [remote.remote(self.hydra_context, config_of(group[0]) if runs == 1 else
                                  [config_of(i) for i in group], placed, Singleton.get_state())
                    for group in groups]
            log.info("submitted %d task%s to the Ray cluster (%s; their logs: /tmp/ray/session_latest/logs/worker-*)",
                     len(refs), "s" if len(refs) > 1 else "", fitted.describe())
            members = None if runs == 1 else [(g, k) for g, group in enumerate(groups) for k in range(len(group))]
            return ray_cluster.RayTasks(refs, members)

        return run_unfinished(job_overrides, sweep_dir, launch_of(self.config), submit, self.poll_s, self.stop_grace_s)
