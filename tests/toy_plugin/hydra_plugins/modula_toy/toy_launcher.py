"""A launcher from outside the package, as docs/extending.md ("A launcher") describes one: a Hydra plugin (in a
``hydra_plugins/<name>/`` package on the path, Hydra's rule) whose scheduler ("toy") runs a launch's jobs one
after another on a thread of the launching process; the sweep's follower
(``modula_cli.sweep.cluster.run_unfinished``) does the rest. ``test_launchers.py`` puts ``tests/toy_plugin`` on
the path, names it in a config file (``hydra/launcher/toy.yaml`` in a ``--config-dir``) and runs a
sweep through it."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, run_job
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from modula_cli.schedulers.jobs import JobEnd, JobWord
from modula_cli.sweep.host import Host, job_of


class ThreadJobs:
    """The ``Jobs`` of one launch on the toy scheduler: futures of a one-thread pool."""

    scheduler = "toy"

    def __init__(self, futures: list[Future], ids: list[str]):
        self.futures, self.ids, self.told = futures, ids, set()

    def poll(self) -> dict[int, JobEnd]:
        ended = {}
        for index, future in enumerate(self.futures):
            if index in self.told or not future.done():
                continue
            self.told.add(index)
            if future.cancelled():
                ended[index] = JobEnd("cancelled", cancelled=True)
            elif (error := future.exception()) is not None:
                ended[index] = JobEnd("failed", error=f"{type(error).__name__}: {error}")
            else:
                ended[index] = JobEnd("finished", returned=future.result())
        return ended

    def waiting(self) -> str:
        running = sum(future.running() for future in self.futures)
        queued = sum(not future.done() and not future.running() for future in self.futures)
        return f"{running} running, {queued} queued"

    def never_starts(self) -> str | None:
        return None

    def stop(self, training: set[int]) -> None:
        for future in self.futures:  # a queued job never starts; the running one sees the stop itself
            future.cancel()

    def cancel(self) -> None:
        self.stop(set())

    def name(self, index: int) -> str:
        return f"toy job {self.ids[index]}"

    def owner(self, index: int) -> str:
        return job_of(ToyLauncher.HOST, self.ids[index])

    def scheduler_ids(self) -> list[str] | None:
        return None  # its jobs end with the launching process

    job_noun = "toy job"

    @staticmethod
    def ask(job_ids: list[str]) -> dict[str, JobWord]:
        """Asked once its launch has gone (modula-sweep-status), every job has ended with it."""
        return {job_id: JobWord(False, "ended with its launch") for job_id in job_ids}


class ToyLauncher(Launcher):
    HOST = Host(local=True, why_attached="the toy scheduler's jobs are threads of the launch",
                scheduler=ThreadJobs.scheduler)

    def __init__(self, poll_s: float = 0.2, stop_grace_s: float = 30.0) -> None:
        self.poll_s, self.stop_grace_s = float(poll_s), float(stop_grace_s)
        self.pool = ThreadPoolExecutor(max_workers=1)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        from modula_cli.sweep.job_place import launch_of
        from modula_cli.sweep.cluster import run_unfinished

        def run(index: int) -> JobReturn:
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(job_overrides[index]))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = f"t{initial_job_idx + index}"
                sweep_config.hydra.job.num = initial_job_idx + index
            HydraConfig.instance().set_config(sweep_config)
            return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                           job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

        def submit(todo: list[int]) -> ThreadJobs:
            return ThreadJobs([self.pool.submit(run, index) for index in todo],
                              [f"t{initial_job_idx + index}" for index in todo])

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        return run_unfinished(job_overrides, sweep_dir, launch_of(self.config), submit, self.poll_s,
                              self.stop_grace_s)

