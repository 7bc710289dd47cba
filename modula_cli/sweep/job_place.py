"""Where a launcher put a job, and what the job takes from its launch, carried in the job's own arguments (the
task function the launcher sends), never through the environment: the launching process's working folder and
data root (a job on another machine reads relative paths and the data as the launch did), the CPUs a scheduler
gave the job, and the GPU it trains on. ``PlacedTask`` settles each job's config from them before it runs:
its data root where it names none, ``train.threads=auto`` as a count, and its device.

The sweeper wraps the multirun's task function once (``PlacedTask.of``); a cluster launcher adds the CPUs its
scheduler gives each job. A launcher that runs its jobs in the launching process (Hydra's basic) calls the same
object for every job, so a sweep's later jobs keep its first job's thread count instead of measuring the load
again (which would count the sweep's own work).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict, read_write

from ..data.storage import data_root
from ..plumbing.device import use_gpu
from ..plumbing.threads import AUTO, configure_threads
from .host import host_of


@dataclass(frozen=True)
class JobPlace:
    """What a job takes from the launch that started it."""
    cwd: str               # the launching process's working folder: a relative path means the same in the job
    data_root: str         # its data root, absolute: the data a job reads where its config names none
    cpus: int | None = None  # the CPUs the job's scheduler gave it (train.threads=auto's count); None: measured
    cpus_from: str = ""    # who gave them, for the log line ("SLURM's cpus_per_task")

    @classmethod
    def here(cls) -> JobPlace:
        """In the launching process: its working folder and data root."""
        return cls(os.getcwd(), str(data_root(None).absolute()))

    def given(self, cpus: int | None, by: str) -> JobPlace:
        return dataclasses.replace(self, cpus=cpus if cpus and cpus >= 1 else None, cpus_from=by)

    def enter(self) -> None:
        """In the job's process, before its config is composed: the launch's working folder."""
        try:
            os.chdir(self.cwd)
        except OSError as error:
            raise RuntimeError(f"the launch's working directory {self.cwd} is not on {socket.gethostname()} "
                               f"({error}): launch from a folder that every node mounts at the same path") from error


class PlacedTask:
    """The multirun's task function as its launcher sends it to each job: the job's config settled from its
    place first. Pickled into each job's process by a cluster launcher; called again for every job by an
    in-process one, which keeps the first job's thread count."""

    def __init__(self, task: Any, place: JobPlace):
        self.task, self.place = task, place
        self.threads: dict[tuple[Any, int], int] = {}  # (train.threads, parallel jobs) → the count chosen

    @classmethod
    def of(cls, task: Any, place: JobPlace) -> PlacedTask:
        """``task`` at ``place`` (a task placed before: its function, at the new place, which chooses anew)."""
        return cls(task.task if isinstance(task, PlacedTask) else task, place)

    def __call__(self, cfg: DictConfig) -> Any:
        self.settle(cfg, HydraConfig.get())
        return self.task(cfg)

    def settle(self, cfg: DictConfig, hydra_cfg: DictConfig) -> None:
        """The job's config takes its place: the data root where it names none, the threads as a count (the
        scheduler's CPUs; parallel local jobs share the cores), the GPU (parallel local jobs: one each)."""
        parallel = self._parallel_jobs(hydra_cfg)
        with read_write(cfg), open_dict(cfg):
            if not cfg.data.get("root"):
                cfg.data.root = self.place.data_root
            setting = cfg.train.threads
            if (setting, parallel) not in self.threads:
                given = (self.place.cpus, self.place.cpus_from) if self.place.cpus and setting == AUTO else None
                self.threads[(setting, parallel)] = configure_threads(setting, parallel, given=given)
            cfg.train.threads = self.threads[(setting, parallel)]
        if parallel > 1:
            use_gpu(int(hydra_cfg.job.get("num") or 0))

    @staticmethod
    def _parallel_jobs(hydra_cfg: DictConfig) -> int:
        """The jobs that share this machine's cores at once (Hydra's joblib launcher's ``n_jobs``), else 1."""
        if not host_of(hydra_cfg.launcher).shares_cores:
            return 1
        n_jobs = hydra_cfg.launcher.get("n_jobs") or 1
        return n_jobs if n_jobs > 0 else (os.cpu_count() or 1)
