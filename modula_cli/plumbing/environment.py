"""Every environment variable the package (and its Hydra plugins) reads or sets, each name spelled here once
(tests/test_structure.py checks that no other module spells one). Ours go from the launching process into a
job (on this machine or another); the others are set by whoever starts us, or by us for a library."""

from __future__ import annotations

import os

from omegaconf import DictConfig, open_dict, read_write

# ours: set for a job, read in it
LAUNCH = "MODULA_SWEEP_LAUNCH"  # the launch a job belongs to (its progress line and closing counts)
JOB_CPUS = "MODULA_JOB_CPUS"    # the CPUs a job was given, where its scheduler does not say (Ray's num_cpus)
CWD = "MODULA_SWEEP_CWD"        # the launching process's working directory: relative paths mean the same there
DATA = "MODULA_DATA"            # the data root (also a user's own setting)
# theirs: read only
SLURM_CPUS = "SLURM_CPUS_PER_TASK"
SLURM_TASK = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")  # a SLURM task's array, index, job
SLURM_RESTART = "SLURM_RESTART_COUNT"  # how often SLURM has requeued the job: which incarnation a task is of
WORLD_SIZE, LOCAL_RANK = "WORLD_SIZE", "LOCAL_RANK"  # torchrun's
OMP_THREADS = "OMP_NUM_THREADS"  # the user's thread count: train.threads=auto honours it
WANDB_KEY, WANDB_URL = "WANDB_API_KEY", "WANDB_BASE_URL"  # W&B's credentials and server, probed before a run
HYDRA_FULL_ERROR = "HYDRA_FULL_ERROR"  # "1": Hydra's own errors with their stack traces, our one-line checks off
HF_HUB_OFFLINE, HF_DATASETS_OFFLINE = "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"  # read by HF's libraries at import
# theirs, set by a launcher for the process of one run
GPUS = "CUDA_VISIBLE_DEVICES"  # a run's own GPUs among its job's


def job_launch() -> str | None:
    """In a job: the launch it belongs to (None: a run outside a sweep, or a sweep's deferred run, which its
    launch trains itself and names)."""
    return os.environ.get(LAUNCH) or None


def carry_launch(config: DictConfig, launch_id: str, quoted: str) -> None:
    """Make every job of this multirun see ``launch_id`` as ``LAUNCH``, with Hydra's own ``hydra.job.env_set``
    (each job's config is composed again from ``hydra.overrides.hydra``: ``quoted`` is the id as an override
    value). The launching process reads it back with ``launch_of``."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.job.env_set[LAUNCH] = launch_id
        config.hydra.overrides.hydra.append(f"++hydra.job.env_set.{LAUNCH}={quoted}")


def launch_of(config: DictConfig) -> str:
    """In the launching process: the launch that ``carry_launch`` recorded in the multirun's config ("" before
    it)."""
    return str(config.hydra.job.get("env_set", {}).get(LAUNCH) or "")
