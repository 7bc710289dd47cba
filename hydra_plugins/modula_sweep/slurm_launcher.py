"""``hydra/launcher=slurm``: each job one task of a SLURM array, submitted through submitit (which checkpoints
and requeues a task on SLURM's time-limit or pre-emption signal), and followed to an honest end by the
launching process (``modula_cli/sweep/cluster.py``).

Before anything is submitted the request is fitted to the partition (``modula_cli/schedulers/slurm.py``):
``auto`` CPUs, memory and GPUs follow its nodes; a request no node can satisfy is refused in one line. The
submission and what a job of several runs runs are the wing's (``modula_cli/schedulers/slurm_submit.py``); this
adapter fits, submits and hands the jobs to the follower. Each job carries, in its task function
(``sweep/job_place.py``), the launch's working directory, data root and the CPUs it asked for; its config carries
the launch's id. This module is imported by Hydra's plugin scan at every start: heavy imports wait until a launch.
"""


import logging
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from omegaconf import DictConfig, OmegaConf

from modula_cli.schedulers.config import SLURM_OWN as OWN
from modula_cli.schedulers.slurm import SETTING
from modula_cli.schedulers.slurm_tasks import SlurmArray
from modula_cli.sweep.host import Host

log = logging.getLogger(__name__)


def _fit(launcher: Any) -> Any:
    """The request fitted to the cluster; LaunchRefused when it cannot run there."""
    from modula_cli.schedulers import slurm
    from modula_cli.sweep.launch import LaunchRefused

    params = OmegaConf.to_container(launcher, resolve=True) if OmegaConf.is_config(launcher) else dict(launcher)
    if not slurm.available():
        raise LaunchRefused(["hydra/launcher=slurm: SLURM's commands (sbatch, scontrol) are not on this machine; "
                             "launch from a login node of the cluster"])
    try:
        fitted = slurm.fit(params, slurm.cluster_partitions())
    except slurm.SlurmError as error:
        raise LaunchRefused([f"hydra/launcher=slurm: SLURM does not answer: {error}"]) from None
    if fitted.problems:
        raise LaunchRefused(fitted.problems)
    return fitted


class SlurmLauncher(BaseSubmititLauncher):
    _EXECUTOR = "slurm"
    # each job its own process on a node; SLURM decides what a stopped one does; its jobs outlive the launch
    HOST = Host(on_stop="exit", detaches=True, scheduler=SlurmArray.scheduler)  # hydra.job.id: submitit's "12_3"

    def __init__(self, **params: Any) -> None:
        own = {key: params.pop(key) for key in OWN if key in params}
        super().__init__(**params)
        self.request = dict(self.params)  # as asked (auto included): each launch fits it to the cluster anew
        self.poll_s = float(own.get("poll_s", 10.0))
        self.stop_grace_s = float(own.get("stop_grace_s", 120.0))

    @staticmethod
    def preflight(launcher: DictConfig) -> None:
        """Before the launch writes anything: the request fits the partition (else LaunchRefused)."""
        fitted = _fit({k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items() if k not in OWN})
        for note in fitted.notes:
            log.warning("SLURM: %s", note)
        log.info("SLURM: %s", fitted.describe())

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        # in the job's process, on a node: the launch's working folder first (submitit's __call__ sets
        # hydra.job.id, the job its runs record)
        self.task_function.place.enter()
        return super().__call__(*args, **kwargs)

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        from modula_cli.plumbing.wording import counted
        from modula_cli.results.manifest import forget_launch
        from modula_cli.schedulers import slurm_tasks
        from modula_cli.schedulers.slurm_submit import SbatchRefused, SbatchUnanswered, slurm_executor, submit_array
        from modula_cli.sweep.cluster import run_unfinished
        from modula_cli.sweep.job_place import JobPlace, PlacedTask, launch_of
        from modula_cli.sweep.launch import LaunchRefused

        assert self.config is not None
        sweep_dir, launch = Path(str(self.config.hydra.sweep.dir)), launch_of(self.config)
        try:  # again: the preflight's answer may have changed since (or SLURM may not answer now)
            fitted = _fit(self.request)
        except LaunchRefused as error:
            forget_launch(sweep_dir, launch)
            raise SystemExit(f"modula-sweep: sweep not launched, {error}") from None
        # the fitted request; self.request stays the user's, for the next round of an LR search to fit again
        self.params = {key: value for key, value in fitted.params.items() if value is not None}
        runs_per_task = int(self.params.pop("runs_per_task", 1))
        self.task_function = PlacedTask.of(self.task_function, JobPlace.here(self.config).given(
            self.params.get("cpus_per_task"), f"{SETTING}.cpus_per_task"))
        executor = slurm_executor(self.params)
        folder = Path(str(self.params["submitit_folder"]).split("%")[0])

        def submit(todo: list[int]) -> Any:
            arguments = [(list(job_overrides[i]), "hydra.sweep.dir", initial_job_idx + i,
                          f"job_id_for_{initial_job_idx + i}", Singleton.get_state()) for i in todo]
            try:
                jobs = submit_array(executor, self, arguments, runs_per_task, folder)
            except SbatchRefused as refused:  # nothing was queued, and nothing of the launch is left
                forget_launch(sweep_dir, launch)
                raise SystemExit(f"modula-sweep: sweep not launched, sbatch refused it: {refused}") from None
            except SbatchUnanswered as silence:
                raise SystemExit(f"modula-sweep: sbatch did not answer ({silence}): the jobs may have been queued "
                                 f"all the same; look for job name {self.params.get('name')!r} in squeue before "
                                 f"running the command again (it skips what finished)") from None
            log.info("submitted %s as SLURM job %s (%s; logs in %s)", counted(len(set(jobs.job_ids)), "job"),
                     jobs.array, fitted.describe(), folder)
            return jobs

        return run_unfinished(job_overrides, sweep_dir, launch, submit, self.poll_s, self.stop_grace_s,
                              detach=bool(self.config.sweep.get("detach")),
                              adopt=None if self.config.sweep.get("rerun") else slurm_tasks.adopt)
