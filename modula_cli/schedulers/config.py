"""The launchers' settings (``hydra/launcher=slurm``, ``hydra/launcher=ray_cluster``), as Hydra's submitit plugin
keeps its own: one dataclass each, stored in Hydra's ConfigStore as the schema that ``configs/hydra/launcher/``'s
files extend. The launchers (``hydra_plugins/modula_sweep/``) are built from them. Light: Hydra's plugin scan
imports this at every start."""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

SLURM_OWN = ("poll_s", "stop_grace_s")  # the SLURM launcher's settings that are not submitit's


@dataclass
class SlurmLauncherConf(SlurmQueueConf):
    """submitit's SLURM settings, with requests that follow the cluster (``auto``) and the launcher's own."""

    _target_: str = "hydra_plugins.modula_sweep.slurm_launcher.SlurmLauncher"
    cpus_per_task: Any = "auto"   # auto: 8, at most what one node of the partition has
    gpus_per_node: Any = "auto"   # auto: one per task where the partition's nodes have GPUs, else none
    mem_gb: Any = "auto"          # auto: the node's memory in proportion to the CPUs asked for, at most 32 GB
    runs_per_task: Any = 1        # grid points per job, each its own SLURM task (auto: one per GPU of a node)
    poll_s: float = 10.0          # how often the launching process looks at the queue and the run folders
    stop_grace_s: float = 120.0   # after a stop, how long to wait for running tasks to checkpoint and end


ConfigStore.instance().store(group="hydra/launcher", name="_slurm_schema", node=SlurmLauncherConf,
                             provider="modula_sweep")


@dataclass
class RayOptions:
    init: dict[str, Any] = field(default_factory=lambda: {"address": "auto", "log_to_driver": False})
    remote: dict[str, Any] = field(default_factory=lambda: {"num_cpus": "auto", "num_gpus": "auto",
                                                             "max_retries": 3})


@dataclass
class RayLauncherConf:
    _target_: str = "hydra_plugins.modula_sweep.ray_launcher.RayClusterLauncher"
    ray: RayOptions = field(default_factory=RayOptions)
    runs_per_task: Any = 1        # grid points per Ray task, each in its own process with its CPUs and GPU
                                  # (ray.remote's num_cpus / num_gpus are per run); auto: one per GPU of a node
    poll_s: float = 2.0           # how often the launching process looks at the tasks and the run folders
    stop_grace_s: float = 120.0   # after a stop, how long to wait for running tasks to checkpoint and end


ConfigStore.instance().store(group="hydra/launcher", name="_ray_schema", node=RayLauncherConf,
                             provider="modula_sweep")
