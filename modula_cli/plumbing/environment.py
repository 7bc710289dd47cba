"""Every environment variable the package (and its Hydra plugins) reads, each name spelled here once
(tests/test_structure.py checks that no other module spells one): the user's own settings and what whoever
starts us sets (SLURM, torchrun, W&B). We set none: what a job takes from its launch (its id, working folder,
data root, CPUs) travels in the task its launcher sends (``sweep/job_place.py``)."""

from __future__ import annotations


DATA = "MODULA_DATA"  # ours: the user's data root
# theirs: read only
SLURM_CPUS = "SLURM_CPUS_PER_TASK"  # a local launch inside an allocation (salloc): the CPUs it holds
SLURM_TASK = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")  # a SLURM task's array, index, job
SLURM_RESTART = "SLURM_RESTART_COUNT"  # how often SLURM has requeued the job: which incarnation a task is of
WORLD_SIZE, LOCAL_RANK = "WORLD_SIZE", "LOCAL_RANK"  # torchrun's
OMP_THREADS = "OMP_NUM_THREADS"  # the user's thread count: train.threads=auto honours it
WANDB_KEY, WANDB_URL = "WANDB_API_KEY", "WANDB_BASE_URL"  # W&B's credentials and server, probed before a run
HYDRA_FULL_ERROR = "HYDRA_FULL_ERROR"  # "1": Hydra's own errors with their stack traces, our one-line checks off
HF_HUB_OFFLINE, HF_DATASETS_OFFLINE = "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"  # read by HF's libraries at import
