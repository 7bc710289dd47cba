"""A launch's jobs submitted to SLURM through submitit, and read back: the executor for a fitted request (it
writes each task's sbatch script), the array submitted (``submit_array``: a refusal by sbatch leaves nothing
behind), ``RunGroup``, what each task of a job of several runs runs, and the submitted jobs as the launch
follows them (``followed``: an ``slurm_tasks.SlurmArray``). submitit is imported only when a launch submits."""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..plumbing.device import use_gpu
from ..plumbing.environment import SLURM_RESTART
from .sibling_tasks import SiblingTasks
from .slurm_tasks import SlurmArray, has_accounting

# what sbatch says when it did not answer, rather than refused: the jobs may have been queued all the same
UNANSWERED = re.compile(r"timed out|unable to contact|connection refused|interrupted", re.I)
OWN_SETTINGS = ("submitit_folder", "max_num_timeout", "runs_per_task")  # ours, not sbatch's


class SbatchRefused(Exception):
    """sbatch refused the array: nothing was queued, and the files submitit wrote for it are gone."""


class SbatchUnanswered(Exception):
    """sbatch gave no answer: the jobs may have been queued all the same."""


def slurm_executor(params: dict[str, Any]) -> Any:
    """submitit's SLURM executor for the fitted settings: it writes each task's sbatch script and submits it."""
    import submitit

    executor = submitit.AutoExecutor(cluster="slurm", folder=params["submitit_folder"],
                                     slurm_max_num_timeout=params.get("max_num_timeout", 0))
    executor.update_parameters(**executor_parameters(params))
    return executor


def executor_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The fitted settings as submitit's executor takes them (``slurm_``-prefixed but for the shared ones)."""
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    return {key if key in base else f"slurm_{key}": value for key, value in params.items()
            if key not in OWN_SETTINGS and value is not None}


def submit_array(executor: Any, task: Callable[..., Any], arguments: list[tuple], runs_per_task: int,
                 folder: Path) -> SlurmArray:
    """Submit one task per argument tuple (``runs_per_task`` > 1: one job per group of that many, each run a task
    of it, ``RunGroup``) and return them as the launch follows them. ``SbatchRefused`` (after removing the files
    written for it) or ``SbatchUnanswered``, with sbatch's reason, when no job id came back."""
    import submitit

    before = set(folder.glob("*")) if folder.is_dir() else set()
    groups = [arguments[k:k + runs_per_task] for k in range(0, len(arguments), runs_per_task)]
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's error: said once, by the caller
            jobs = executor.map_array(task, *zip(*arguments)) if runs_per_task == 1 else \
                executor.map_array(RunGroup(task), groups)
    except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedSubmissionError, OSError) as error:
        lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
        reason = lines[-1].replace("sbatch: error: ", "")
        if UNANSWERED.search(reason):
            raise SbatchUnanswered(reason) from None
        for path in set(folder.glob("*")) - before:
            path.unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise SbatchRefused(reason) from None
    return followed(jobs, [len(group) for group in groups], runs_per_task)


class RunGroup:
    """What one job of ``runs_per_task=N`` runs in each of its N SLURM tasks: task k (SLURM_PROCID) trains the
    group's k-th grid point (``task``, the launcher's per-job call), on the k-th of the job's GPUs where it has
    several, with its own CPUs (``cpus_per_task``). A run that fails or diverges ends its own task only. On
    SLURM's pre-emption or time-limit signal every task checkpoints and task 0 (submitit requeues from task 0
    alone) requeues the job, which resumes them all: task 0 stays, once its own run has ended, while another
    task still trains (``sibling_tasks.py``)."""

    def __init__(self, task: Callable[..., Any]) -> None:
        self.task = task

    def __call__(self, group: list[tuple]) -> Any:
        import submitit

        env = submitit.JobEnvironment()
        if env.global_rank >= len(group):  # the last job's spare tasks, when the grid does not fill it
            return None
        use_gpu(env.local_rank)  # the job's GPUs are every task's: each run takes its own
        siblings = SiblingTasks.of_this_job(len(group), os.environ.get(SLURM_RESTART, "0"))
        with siblings.present(env.global_rank):
            returned = self.task(*group[env.global_rank])
        if env.global_rank == 0:  # the task that requeues the job on a pre-emption outlives the others' runs
            siblings.wait_for_siblings()
        return returned

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue the same group (each run resumes from its own checkpoint)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def followed(jobs: list[Any], sizes: list[int], runs_per_task: int) -> SlurmArray:
    """The submitted jobs as the launch follows them, by position in its list of grid points: a job of several
    runs (``runs_per_task``) is its tasks, in order (SLURM_PROCID k trains the group's k-th)."""
    tasks = [job.task(k) if runs_per_task > 1 else job for job, size in zip(jobs, sizes) for k in range(size)]
    owners = [job for job, size in zip(jobs, sizes) for _ in range(size)]
    return SlurmArray([job.job_id for job in owners], has_accounting(),
                      [_result_reader(task) for task in tasks], [str(task.paths.stderr) for task in tasks])


def _result_reader(job: Any) -> Callable[[], tuple[Any, str | None]]:
    """Reads what a task returned, through submitit's own ``job.exception()`` / ``job.result()``: (its return,
    None), (None, error), or (None, None) when it left no result (killed, requeued or cancelled before it could
    write one). Asked only once the scheduler says the task ended and its result file is there, so submitit
    never waits."""

    def read() -> tuple[Any, str | None]:
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
