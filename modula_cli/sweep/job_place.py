"""Where a launcher put a job, and what the job takes from its launch, carried in the job's own arguments (the
task function the launcher sends), never through the environment: the launch's id, the launching process's
working folder and data root (a job on another machine reads relative paths and the data as the launch did),
and the CPUs a scheduler gave the job. ``PlacedTask`` settles each job before it runs: the launch's id
(``sweep.launch``) and data root (``data.root``, where the job names none) in its config, its CPU threads
(``train.threads=auto``: the scheduler's CPUs, else measured once), and one GPU per parallel local job.

The sweeper wraps the multirun's task function once (``PlacedTask.of``), after the launch has started and
recorded its id (``carry_launch``); a cluster launcher places it again with the CPUs its scheduler gives each
job. A launcher that runs its jobs in the launching process (Hydra's basic) calls the same object for every
job, so a sweep's later jobs keep its first job's thread count instead of measuring the load again (which
would count the sweep's own work).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict, read_write

from ..data.storage import data_root
from ..plumbing.device import use_gpu
from ..plumbing.threads import configure_threads
from .host import host_of


def carry_launch(config: DictConfig, launch_id: str) -> None:
    """In the launching process, before the sweeper starts: the launch's id in the multirun's config
    (``sweep.launch``), where its launcher and the sweeper's ``JobPlace.here`` read it (``launch_of``)."""
    with read_write(config), open_dict(config):
        config.sweep.launch = launch_id


def launch_of(config: DictConfig) -> str:
    """The launch a multirun's (or a job's) config belongs to ("" before ``carry_launch``)."""
    return str(config.sweep.get("launch") or "") if "sweep" in config else ""


@dataclass(frozen=True)
class JobPlace:
    """What a job takes from the launch that started it."""
    launch: str            # the launch's id: the job's progress line and the closing counts are that launch's
    cwd: str               # the launching process's working folder: a relative path means the same in the job
    data_root: str         # its data root, absolute: the data a job reads where its config names none
    cpus: int | None = None  # the CPUs the job's scheduler gave it (train.threads=auto's count); None: measured
    cpus_from: str = ""    # who gave them, for the log line ("hydra.launcher.cpus_per_task")

    @classmethod
    def here(cls, config: DictConfig) -> JobPlace:
        """In the launching process: the multirun ``config``'s launch, this process's working folder and data
        root."""
        return cls(launch_of(config), os.getcwd(), str(data_root(None).absolute()))

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
        """The job takes its place: its launch and data root in its config (the root where a ``root`` it has is
        unset: a run's saved config.yaml names the folder it read), its CPU threads (the scheduler's CPUs; parallel
        local jobs share the cores; else the first job's measure), its GPU (parallel local jobs: one each)."""
        parallel = self._parallel_jobs(hydra_cfg)
        with read_write(cfg), open_dict(cfg):
            cfg.sweep.launch = self.place.launch
            if "root" in cfg.data and not cfg.data.root:
                cfg.data.root = self.place.data_root
        setting = cfg.train.threads
        if (setting, parallel) not in self.threads:
            given = (self.place.cpus, self.place.cpus_from) if self.place.cpus else None
            self.threads[(setting, parallel)] = configure_threads(setting, parallel, given=given)
        elif self.threads[(setting, parallel)] != torch.get_num_threads():  # a job may have changed them
            torch.set_num_threads(self.threads[(setting, parallel)])
        if parallel > 1:
            use_gpu(int(hydra_cfg.job.get("num") or 0))

    @staticmethod
    def _parallel_jobs(hydra_cfg: DictConfig) -> int:
        """The jobs that share this machine's cores at once (Hydra's joblib launcher's ``n_jobs``), else 1."""
        if not host_of(hydra_cfg.launcher).shares_cores:
            return 1
        n_jobs = hydra_cfg.launcher.get("n_jobs") or 1
        return n_jobs if n_jobs > 0 else (os.cpu_count() or 1)
