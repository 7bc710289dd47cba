"""What a Ray task runs, in the worker: one job (``run_in_worker``: the launch's working folder, the task's id as
the job its runs record, then Hydra's job), or a task of several runs (``run_group``: each run in its own process,
with its own GPU). Ray imports this module by name in its workers; Ray itself is imported only there."""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from ..plumbing.device import use_gpu


def run_in_worker(hydra_context: HydraContext, sweep_config: DictConfig, task_function: Any,
             singleton_state: dict[Any, Any], task: str | None = None) -> JobReturn:
    """One job, in a Ray worker: the launch's working folder (``task_function`` brings its place, the sweep's
    ``PlacedTask``, whose ``enter`` goes there), the task its runs record as their job (``task``: a task of
    several names its own for its runs) as ``hydra.job.id``, then Hydra's job."""
    import ray

    task_function.place.enter()
    with open_dict(sweep_config.hydra.job):
        sweep_config.hydra.job.id = task or ray.get_runtime_context().get_task_id()
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(sweep_config)
    return run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def _run_member(results: Any, k: int, gpu: int | None, job: bytes) -> None:
    """One run of a task of several, in its own process, on the task's ``gpu``-th GPU: its JobReturn, or why it
    failed, back to the task. ``job``: ``run_in_worker``'s arguments as Ray pickles them (the task function may live in
    ``__main__``)."""
    import ctypes
    import signal

    try:  # the task's process killed (a forced cancel): this run stops too, checkpointing first
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    try:
        from ray import cloudpickle

        if gpu is not None:
            use_gpu(gpu)
        results.put((k, run_in_worker(*cloudpickle.loads(job))))
    except BaseException as error:  # noqa: BLE001 - told to the task, which tells the launch
        results.put((k, f"{type(error).__name__}: {error}"))


def run_group(hydra_context: HydraContext, sweep_configs: list[DictConfig], task_function: TaskFunction,
               singleton_state: dict[Any, Any]) -> list[Any]:
    """A Ray task of several runs (``runs_per_task``): each in its own process, with its share of the task's
    CPUs (``num_cpus`` each, its ``PlacedTask``'s) and its own GPU. A run that fails or whose process dies ends
    alone; a retry of the task runs them all again, each resuming from its checkpoint (finished ones are
    skipped). Per run: its JobReturn, or the line saying how its process ended."""
    import multiprocessing

    import ray
    from ray import cloudpickle

    gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
    task = ray.get_runtime_context().get_task_id()
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: CUDA set up after the run's GPU is chosen
    results = spawn.Queue()
    processes = []
    share = max(1, len(gpus) // len(sweep_configs))  # each run its own GPUs: num_gpus of them
    for k, sweep_config in enumerate(sweep_configs):
        first = (k * share if k * share < len(gpus) else k % len(gpus)) if gpus else None  # Ray's order: the task's
        job = cloudpickle.dumps((hydra_context, sweep_config, task_function, singleton_state, task))
        process = spawn.Process(target=_run_member, args=(results, k, first, job))
        process.start()
        processes.append(process)
    returned: dict[int, Any] = {}
    try:
        while len(returned) < len(processes):
            try:
                k, value = results.get(timeout=1.0)
                returned[k] = value
            except Exception:  # noqa: BLE001 - queue.Empty: look for a process that died without a word
                for k, process in enumerate(processes):
                    if k not in returned and not process.is_alive() and results.empty():
                        returned[k] = f"its process ended with exit code {process.exitcode} before its run did"
    finally:  # a cancel of this task: every run stops, checkpointing first
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join()
    return [returned[k] for k in range(len(processes))]
