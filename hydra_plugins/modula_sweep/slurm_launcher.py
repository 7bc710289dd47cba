"""``hydra/launcher=slurm``: each job one task of a SLURM array, submitted through submitit (which checkpoints
and requeues a task on SLURM's time-limit or pre-emption signal), and followed to an honest end by the
launching process (``modula_cli/sweep/cluster.py``).

Before anything is submitted the request is fitted to the partition (``modula_cli/schedulers/slurm.py``):
``auto`` CPUs, memory and GPUs follow its nodes; a request no node can satisfy is refused in one line.
Each job carries the launch's id, working directory and data root. This module is imported by Hydra's plugin
scan at every start: heavy imports wait until a launch.
"""


import contextlib
import io
import logging
import os
import re
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
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
        import submitit

        from modula_cli.results.manifest import forget_launch
        from modula_cli.schedulers import slurm_tasks
        from modula_cli.plumbing.environment import launch_of
        from modula_cli.sweep.cluster import run_unfinished
        from modula_cli.sweep.job_place import JobPlace, PlacedTask
        from modula_cli.sweep.launch import LaunchRefused

        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:  # again: the preflight's answer may have changed since (or SLURM may not answer now)
            fitted = _fit(self.request)
        except LaunchRefused as error:
            forget_launch(sweep_dir, launch_of(self.config))
            raise SystemExit(f"modula-sweep: sweep not launched, {error}") from None
        # the fitted request; self.request stays the user's, for the next round of an LR search to fit again
        self.params = {key: value for key, value in fitted.params.items() if value is not None}
        runs_per_task = int(self.params.pop("runs_per_task", 1))
        self.task_function = PlacedTask.of(self.task_function, JobPlace.here().given(
            self.params.get("cpus_per_task"), f"{SETTING}.cpus_per_task"))
        executor = slurm_executor(self.params)
        folder = Path(str(self.params["submitit_folder"]).split("%")[0])

        def submit(todo: list[int]) -> Any:
            before = set(folder.glob("*")) if folder.is_dir() else set()
            arguments = [(list(job_overrides[i]), "hydra.sweep.dir", initial_job_idx + i,
                          f"job_id_for_{initial_job_idx + i}", Singleton.get_state()) for i in todo]
            groups = [arguments[k:k + runs_per_task] for k in range(0, len(arguments), runs_per_task)]
            try:
                with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's error: said once, below
                    jobs = executor.map_array(self, *zip(*arguments)) if runs_per_task == 1 else \
                        executor.map_array(RunGroup(self), groups)
            except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedSubmissionError,
                    OSError) as error:  # no job id came back
                lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
                reason = lines[-1].replace("sbatch: error: ", "")
                if not re.search(r"timed out|unable to contact|connection refused|interrupted", reason, re.I):
                    # sbatch refused it: nothing was queued, and nothing of the launch is left
                    for path in set(folder.glob("*")) - before:
                        path.unlink(missing_ok=True)
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
                    forget_launch(sweep_dir, launch_of(self.config))
                    raise SystemExit(f"modula-sweep: sweep not launched, sbatch refused it: {reason}") from None
                raise SystemExit(f"modula-sweep: sbatch did not answer ({reason}): the jobs may have been queued "
                                 f"all the same; look for job name {self.params.get('name')!r} in squeue before "
                                 f"running the command again (it skips what finished)") from None
            log.info("submitted %d job%s as SLURM job %s (%s; logs in %s)", len(jobs), "s" if len(jobs) > 1 else "",
                     jobs[0].job_id.split("_")[0], fitted.describe(), folder)
            return _followed(jobs, [len(group) for group in groups], runs_per_task)

        return run_unfinished(job_overrides, sweep_dir, launch_of(self.config), submit, self.poll_s,
                              self.stop_grace_s, detach=bool(self.config.sweep.get("detach")),
                              adopt=None if self.config.sweep.get("rerun") else slurm_tasks.adopt)


class RunGroup:
    """What one job of ``runs_per_task=N`` runs in each of its N SLURM tasks: task k (SLURM_PROCID) trains the
    group's k-th grid point, on the k-th of the job's GPUs where it has several, with its own CPUs
    (``cpus_per_task``). A run that fails or diverges ends its own task only. On SLURM's pre-emption or
    time-limit signal every task checkpoints and task 0 (submitit requeues from task 0 alone) requeues the job,
    which resumes them all: task 0 stays, once its own run has ended, while another task still trains
    (``schedulers/sibling_tasks.py``)."""

    def __init__(self, launcher: SlurmLauncher) -> None:
        self.launcher = launcher

    def __call__(self, group: list[tuple]) -> JobReturn | None:
        import submitit

        env = submitit.JobEnvironment()
        if env.global_rank >= len(group):  # the last job's spare tasks, when the grid does not fill it
            return None
        from modula_cli.plumbing.device import use_gpu
        from modula_cli.plumbing.environment import SLURM_RESTART
        from modula_cli.schedulers.sibling_tasks import SiblingTasks

        use_gpu(env.local_rank)  # the job's GPUs are every task's: each run takes its own
        siblings = SiblingTasks.of_this_job(len(group), os.environ.get(SLURM_RESTART, "0"))
        with siblings.present(env.global_rank):
            returned = self.launcher(*group[env.global_rank])
        if env.global_rank == 0:  # the task that requeues the job on a pre-emption outlives the others' runs
            siblings.wait_for_siblings()
        return returned

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue the same group (each run resumes from its own checkpoint)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _followed(jobs: list[Any], sizes: list[int], runs_per_task: int) -> Any:
    """The submitted jobs as the launch follows them, by position in its list of grid points: a job of several
    runs (``runs_per_task``) is its tasks, in order (SLURM_PROCID k trains the group's k-th)."""
    from modula_cli.schedulers import slurm_tasks

    tasks = [job.task(k) if runs_per_task > 1 else job for job, size in zip(jobs, sizes) for k in range(size)]
    owners = [job for job, size in zip(jobs, sizes) for _ in range(size)]
    return slurm_tasks.SlurmArray([job.job_id for job in owners], slurm_tasks.has_accounting(),
                                  [_result_reader(task) for task in tasks], [str(task.paths.stderr) for task in tasks])


def slurm_executor(params: dict[str, Any]) -> Any:
    """submitit's SLURM executor for the fitted settings: it writes each task's sbatch script and submits it."""
    import submitit

    executor = submitit.AutoExecutor(cluster="slurm", folder=params["submitit_folder"],
                                     slurm_max_num_timeout=params.get("max_num_timeout", 0))
    executor.update_parameters(**executor_parameters(params))
    return executor


def executor_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The fitted settings as submitit's executor takes them (``slurm_``-prefixed but for the shared ones)."""
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    return {key if key in base else f"slurm_{key}": value for key, value in params.items()
            if key not in ("submitit_folder", "max_num_timeout", "runs_per_task") and value is not None}


def _result_reader(job: Any) -> Any:
    """Reads what a task returned, through submitit's own ``job.exception()`` / ``job.result()``: (JobReturn,
    None), (None, error), or (None, None) when it left no result (killed, requeued or cancelled before it could
    write one). Asked only once the scheduler says the task ended and its result file is there, so submitit
    never waits."""

    def read() -> tuple[JobReturn | None, str | None]:
        if not job.paths.result_pickle.exists():
            return None, None
        try:
            failure = job.exception()
            if failure is None:
                return job.result(), None
        except Exception:  # noqa: BLE001 - a result file cut short or unreadable: no result
            return None, None
        return None, f"{_last_line(failure)} (log: {job.paths.stderr})"

    return read


def _last_line(failure: BaseException) -> str:
    """The task's own error line: the last line of the traceback that submitit's FailedJobError quotes between
    its rulers (the whole message when it holds none)."""
    text = str(failure)
    parts = text.split("-" * 22)
    lines = [line for line in (parts[1] if len(parts) >= 3 else text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "an error"
