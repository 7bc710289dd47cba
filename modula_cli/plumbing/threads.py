"""CPU threads per training process (``train.threads``).

PyTorch starts as many threads as the machine has cores, whoever else is using them. On a busy machine that
oversubscribes the cores: measured on a 2-core box with two other jobs running, a 30-step GPT run took 32 s
with 2 threads and 12 s with 1. ``auto`` therefore takes the cores this process may use (its CPU affinity and
cgroup quota), less the ones of its CPU set that other processes keep busy (measured over a quarter second
from /proc/stat when the process starts; the 1-minute load average where there is no /proc); the jobs a
local launcher runs at once share the cores evenly instead (their load is each other's); never fewer than
one. Inside a cluster job, ``auto`` is the CPUs the scheduler gave the job (its launcher says how many:
``sweep/job_place.py``; a local launch inside a SLURM allocation reads ``SLURM_CPUS_PER_TASK``): a node's other
cores belong to other jobs, whose load may not have started yet. An integer sets the count; ``OMP_NUM_THREADS``
set by the user is kept under ``auto`` outside a cluster job. The count is chosen by whoever holds the run or the
sweep's jobs (``configure_threads`` remembers nothing).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import torch

from . import environment

log = logging.getLogger(__name__)
AUTO = "auto"


def allocation_cpus() -> tuple[int, str] | None:
    """The CPUs of the SLURM allocation this process runs in, and the variable that says so (a local launch
    inside ``salloc``; a job of a launcher that does not say them: Hydra's own submitit, or ours asked with
    ``cpus_per_gpu``); None outside one."""
    value = os.environ.get(environment.SLURM_CPUS, "")
    return (int(value), environment.SLURM_CPUS) if value.isdigit() and int(value) >= 1 else None


def threads_problem(value: object) -> str | None:
    if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"train.threads={value!r}; allowed: auto, or an integer >= 1"


def _affinity() -> set[int]:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    cores = len(_affinity())
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _cpu_times(cpus: set[int]) -> tuple[float, float] | None:
    """(busy, total) jiffies since boot of the CPUs ``cpus``, from /proc/stat (Linux); None elsewhere."""
    busy = total = 0.0
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            name, *values = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                fields = [float(v) for v in values]
                idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
                busy, total = busy + sum(fields) - idle, total + sum(fields)
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total else None


def busy_cores(window_s: float = 0.25) -> float:
    """Cores of this process's CPU set that other processes keep busy now: measured over ``window_s`` from
    /proc/stat (this process is idle meanwhile; on a shared node only its own cores count), else the 1-minute
    load average (which lags: a job that just ended still counts)."""
    cpus = _affinity()
    before = _cpu_times(cpus)
    if before is not None:
        time.sleep(window_s)
        after = _cpu_times(cpus)
        if after is not None and after[1] > before[1]:
            return (after[0] - before[0]) / (after[1] - before[1]) * len(cpus)
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def auto_threads(parallel_jobs: int = 1, cores: int | None = None, busy: float | None = None,
                 span: int | None = None) -> int:
    """``cores`` usable (a cgroup quota may cap them below ``span``, the CPUs this process may run on, which
    ``busy`` of are kept busy by others). Parallel local jobs split the cores without subtracting ``busy``:
    at their start the load is mostly each other's."""
    cores = usable_cores() if cores is None else cores
    if parallel_jobs > 1:
        return max(1, cores // parallel_jobs)
    busy = busy_cores() if busy is None else busy
    span = len(_affinity()) if span is None else span
    return max(1, min(cores, round(span - busy)))


def configure_threads(setting: object, parallel_jobs: int = 1, given: tuple[int, str] | None = None) -> int:
    """Set this process's PyTorch threads from ``train.threads``; returns the count. ``given``: the CPUs a
    scheduler gave this job and who says so (its launcher's word), which ``auto`` takes."""
    given = (given or allocation_cpus()) if setting == AUTO else None
    if given is not None:  # shared evenly by the jobs a local launcher runs at once inside the cluster job
        count = max(1, given[0] // parallel_jobs)
        why = f"{given[1]}={given[0]}: the CPUs this job was given" + (
            f", {parallel_jobs} jobs at once" if parallel_jobs > 1 else "")
    elif setting == AUTO and (told := os.environ.get(environment.OMP_THREADS)):
        count = max(1, int(told)) if told.isdigit() else torch.get_num_threads()
        why = environment.OMP_THREADS
    elif setting == AUTO and parallel_jobs > 1:
        count, why = auto_threads(parallel_jobs), f"{usable_cores()} cores, {parallel_jobs} jobs at once"
    elif setting == AUTO:
        busy = busy_cores()
        count = auto_threads(busy=busy)
        why = f"{usable_cores()} cores, {busy:.1f} busy with other work"
    else:
        count, why = int(setting), "train.threads"
    if count != torch.get_num_threads():
        torch.set_num_threads(count)
    log.info("CPU threads: %d (%s; train.threads=N to choose)", count, why)
    return count
