"""Every environment variable the package (and its Hydra plugins) reads, each name spelled here once
(tests/test_structure.py checks that no other module spells one): the user's own settings and what whoever
starts us sets (SLURM, torchrun, W&B). We set none for ourselves: what a job takes from its launch travels in
its own arguments (``sweep/job_place.py``) and config. The launch's id is the one value that rides Hydra's
own per-job channel (``hydra.job.env_set``), read back from the job's config, not from the environment."""

from __future__ import annotations

from omegaconf import DictConfig, open_dict, read_write

# ours: the launch a job belongs to (its progress line and closing counts), in each job's hydra.job.env_set
LAUNCH = "MODULA_SWEEP_LAUNCH"
DATA = "MODULA_DATA"            # the user's data root
# theirs: read only
SLURM_CPUS = "SLURM_CPUS_PER_TASK"  # a local launch inside an allocation (salloc): the CPUs it holds
SLURM_TASK = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")  # a SLURM task's array, index, job
SLURM_RESTART = "SLURM_RESTART_COUNT"  # how often SLURM has requeued the job: which incarnation a task is of
WORLD_SIZE, LOCAL_RANK = "WORLD_SIZE", "LOCAL_RANK"  # torchrun's
OMP_THREADS = "OMP_NUM_THREADS"  # the user's thread count: train.threads=auto honours it
WANDB_KEY, WANDB_URL = "WANDB_API_KEY", "WANDB_BASE_URL"  # W&B's credentials and server, probed before a run
HYDRA_FULL_ERROR = "HYDRA_FULL_ERROR"  # "1": Hydra's own errors with their stack traces, our one-line checks off
HF_HUB_OFFLINE, HF_DATASETS_OFFLINE = "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"  # read by HF's libraries at import


def job_launch(hydra_cfg: DictConfig) -> str | None:
    """In a job: the launch it belongs to, from the job's own Hydra config (None: a multirun that no launch
    started, as a test's)."""
    return str(hydra_cfg.job.get("env_set", {}).get(LAUNCH) or "") or None


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
    return job_launch(config.hydra) or ""
