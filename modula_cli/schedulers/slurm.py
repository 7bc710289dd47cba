"""What the launching process needs from SLURM before it submits: the commands themselves, the partition and its
nodes, and the request fitted to them (``slurm_tasks.py`` follows what was submitted). Every call is a SLURM
command (``scontrol``, ``squeue``, ``sacct``, ``scancel``) with a time limit; the parsers take the commands'
text, so they can be checked on any output.

A request is fitted to the partition it goes to: ``auto`` settings follow what its nodes have (a GPU per
task only where the nodes have GPUs; CPUs and memory within one node), and an explicit setting that no node
of the partition can ever satisfy is refused in one line naming the setting and what the cluster has.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

AUTO = "auto"
COMMAND_TIMEOUT_S = 30
# what `auto` asks for, at most: a training run's data loader and threads, not a whole node
AUTO_CPUS, AUTO_MEM_GB = 8, 32
SETTING = "hydra.launcher"


class SlurmError(RuntimeError):
    """SLURM did not answer, or refused: the message is one line for the user."""


# --- commands -----------------------------------------------------------------------------------------------

def available() -> bool:
    """Whether SLURM's commands are on this machine's PATH."""
    return shutil.which("sbatch") is not None and shutil.which("scontrol") is not None


def command(args: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """A SLURM command's standard output; SlurmError with its first error line when it fails."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as error:
        raise SlurmError(f"{args[0]} is not installed here: run the sweep where SLURM's commands work (a login "
                         f"node)") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmError(f"`{' '.join(args)}` did not answer within {timeout:.0f} s") from error
    if done.returncode != 0:
        reason = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[0]
        raise SlurmError(f"`{' '.join(args)}`: {reason}")
    return done.stdout


# --- the cluster: partitions and nodes ------------------------------------------------------------------------

_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w:/.]*)=")


def records(text: str) -> list[dict[str, str]]:
    """``scontrol show ... -o``: one record per line of ``Key=value`` pairs (values may hold spaces)."""
    out = []
    for line in text.splitlines():
        keys = list(_KEY.finditer(line))
        if not keys:
            continue
        out.append({m[1]: line[m.end():(keys[i + 1].start() if i + 1 < len(keys) else len(line))].strip()
                    for i, m in enumerate(keys)})
    return out


def minutes(text: str) -> float:
    """A SLURM time limit in minutes: ``UNLIMITED`` / ``INFINITE`` → inf; ``D-HH:MM:SS``, ``HH:MM:SS``,
    ``MM:SS``, ``MM``, ``D-HH``, ``D-HH:MM``."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return math.inf
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        return int(days) * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    if len(parts) == 3:
        return parts[0] * 60 + parts[1] + parts[2] / 60
    if len(parts) == 2:
        return parts[0] + parts[1] / 60
    return float(parts[0])


def gpu_count(gres: str) -> int:
    """GPUs in a node's ``Gres`` (``gpu:4``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:2``; ``(null)``: 0)."""
    total = 0
    for entry in re.split(r",(?![^(]*\))", gres or ""):
        entry = re.sub(r"\(.*\)$", "", entry.strip())
        if entry.split(":")[0] != "gpu":
            continue
        count = entry.rsplit(":", 1)[-1]
        total += int(count) if count.isdigit() else 1
    return total


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    state: str

    @property
    def usable(self) -> bool:
        """Not down, drained or failed now (it may be later)."""
        return not re.search(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|INVALID", self.state)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[Node, ...]
    max_time_min: float = math.inf
    max_mem_per_node_mb: float = math.inf
    max_cpus_per_node: float = math.inf
    max_nodes: float = math.inf
    state: str = "UP"
    default: bool = False


def _number(text: str | None, default: float = math.inf) -> float:
    return float(text) if text and text.isdigit() else default


def partitions(partition_text: str, node_text: str) -> dict[str, Partition]:
    """The partitions of ``scontrol show partition -o`` with their nodes from ``scontrol show node -o``."""
    nodes: dict[str, list[Node]] = {}
    for record in records(node_text):
        cpus = record.get("CPUEfctv") or record.get("CPUTot") or "0"
        node = Node(record.get("NodeName", "?"), int(_number(cpus, 0)), int(_number(record.get("RealMemory"), 0)),
                    gpu_count(record.get("Gres", "")), record.get("State", ""))
        for name in record.get("Partitions", "").split(","):
            if name:
                nodes.setdefault(name, []).append(node)
    found = {}
    for record in records(partition_text):
        name = record.get("PartitionName", "?")
        found[name] = Partition(name, tuple(nodes.get(name, ())), minutes(record.get("MaxTime", "UNLIMITED")),
                                _number(record.get("MaxMemPerNode")), _number(record.get("MaxCPUsPerNode")),
                                _number(record.get("MaxNodes")), record.get("State", "UP"),
                                record.get("Default") == "YES")
    return found


def cluster_partitions() -> dict[str, Partition]:
    """Every partition (hidden ones too: ``-a``) with its nodes."""
    return partitions(command(["scontrol", "-a", "-o", "show", "partition"]),
                      command(["scontrol", "-a", "-o", "show", "node"]))


# --- fitting a request to the partition ------------------------------------------------------------------------

@dataclass
class Fit:
    """The launcher's settings with ``auto`` resolved for one partition, or the problems that stop it."""
    params: dict[str, Any]
    partition: str | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``partition cpu, 1 CPU per task, 11 GB and no GPU per node``."""
        gpus = self.params.get("gpus_per_node") or 0
        mem = self.params.get("mem_gb")
        runs = self.params.get("runs_per_task") or 1
        return (f"partition {self.partition}, " + (f"{runs} runs per job (a task each), " if runs > 1 else "") +
                f"{self.params.get('cpus_per_task') or 'default'} CPU per task, "
                + (f"{mem} GB" if mem else "default memory") + " and " + (f"{gpus} GPU" if gpus else "no GPU")
                + " per node")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _gres_gpus(gres: Any) -> int:
    return gpu_count(str(gres)) if gres else 0


def fit(params: Mapping[str, Any], cluster: Mapping[str, Partition]) -> Fit:
    """Resolve ``auto`` and check the request against the partition's limits and nodes. A list of partitions
    (``gpu,gpu-long``: SLURM runs the job in the first that can) fits when one of them does."""
    params = dict(params)
    listed = [one.strip() for one in str(params.get("partition") or "").split(",") if one.strip()]
    if len(listed) > 1:
        fits = [fit({**params, "partition": one}, cluster) for one in listed]
        fitting = next((f for f in fits if not f.problems), None)
        if fitting is None:
            return Fit(params, params["partition"], [f"no partition of {params['partition']} can run it: " +
                                                     "; ".join(f.problems[0] for f in fits)])
        return Fit({**fitting.params, "partition": params["partition"]}, params["partition"], [], fitting.notes)
    part, problems = _partition(params, cluster)
    if part is None or problems:
        return Fit(params, part.name if part else params.get("partition"), problems)
    runs, problem = _runs_per_task(params, part)
    if problem:
        return Fit(params, part.name, [problem])
    if runs > 1:  # one SLURM task per run, all in one job: sized for all of them
        params["tasks_per_node"] = runs
    tasks = params["tasks_per_node"]
    several = f" × runs_per_task={runs}" if runs > 1 else f" × tasks_per_node={tasks}"
    gpus, nodes, problem = _fit_gpus(params, part)
    if problem:
        return Fit(params, part.name, [problem])
    cpu_limit = int(min(max(n.cpus for n in nodes), part.max_cpus_per_node))
    cpus = params.get("cpus_per_task")
    if cpus == AUTO and _asked_otherwise(params, "cpus_per_gpu"):
        cpus = None  # sbatch takes one form of a request: the user's
    elif cpus == AUTO:
        cpus = max(1, min(AUTO_CPUS, cpu_limit // tasks))
    elif cpus is not None and cpus * tasks > cpu_limit:
        problems.append(f"{SETTING}.cpus_per_task={cpus}" + (several if tasks > 1 else "") +
                        f" needs {cpus * tasks} CPUs on one node, but the nodes of partition {part.name} have at "
                        f"most {cpu_limit}; set {SETTING}.cpus_per_task={max(1, cpu_limit // tasks)} or less (or auto)")
    nodes = [n for n in nodes if n.cpus >= (cpus or 1) * tasks] or nodes
    mem = None if params.get("mem_gb") == AUTO and _asked_otherwise(params, "mem_per_gpu", "mem_per_cpu", "mem") \
        else params.get("mem_gb")
    mem, problem = _fit_memory(mem, part, nodes, (cpus or 1) * tasks, tasks)
    problems += [problem] if problem else []
    problems += _limit_problems(params, part)
    resolved = {**params, "partition": part.name, "cpus_per_task": cpus, "gpus_per_node": gpus or None,
                "mem_gb": mem, "runs_per_task": runs}
    return Fit(resolved, part.name, problems, _notes(part, nodes))


def _partition(params: Mapping[str, Any], cluster: Mapping[str, Partition]) -> tuple[Partition | None, list[str]]:
    """The partition the request goes to (the default one for ``partition: null``) and the problems of the
    request's types."""
    name = params.get("partition")
    listing = ", ".join(sorted(cluster)) or "none"
    if name is None:
        name = next((p.name for p in cluster.values() if p.default), None)
        if name is None:
            return None, [f"this cluster has no default partition: set {SETTING}.partition (one of {listing})"]
    if name not in cluster:
        return None, [f"{SETTING}.partition={name} is not a partition of this cluster (partitions: {listing})"]
    part = cluster[name]
    problems = [f"partition {name} has no nodes"] if not part.nodes else []
    if part.state.startswith("INACTIVE"):
        problems.append(f"partition {name} is INACTIVE: it accepts no jobs")
    problems += [f"{SETTING}.{key}={params.get(key)!r}; allowed: auto, or an integer >= 0"
                 for key in ("cpus_per_task", "gpus_per_node", "mem_gb")
                 if not (params.get(key) is None or params.get(key) == AUTO or _is_count(params.get(key)))]
    problems += [f"{SETTING}.{key}={params.get(key)!r}; allowed: an integer >= 1"
                 for key in ("tasks_per_node", "nodes", "timeout_min")
                 if not (_is_count(params.get(key)) and params[key] >= 1)]
    return part, problems


def _runs_per_task(params: Mapping[str, Any], part: Partition) -> tuple[int, str | None]:
    """Grid points per job (``auto``: one per GPU of the partition's biggest GPU node, else 1), or the problem:
    a count that is not one, several runs beside several tasks per run, more runs than a node has GPUs."""
    runs = params.get("runs_per_task", 1)
    most = max((n.gpus for n in part.nodes), default=0)
    if runs == AUTO:  # a run of several tasks (one process per GPU) fills its job alone
        return (1 if params.get("tasks_per_node", 1) > 1 else max(1, most)), None
    if not (_is_count(runs) and runs >= 1):
        return 1, f"{SETTING}.runs_per_task={runs!r}; allowed: auto, or an integer >= 1"
    if runs > 1 and params.get("tasks_per_node", 1) > 1:
        return 1, (f"{SETTING}.runs_per_task={runs} with tasks_per_node={params['tasks_per_node']}: a run of several "
                   f"tasks (one process per GPU) trains alone in its job; set one of them to 1")
    asked_gpus = params.get("gpus_per_node")
    per_run = 1 if asked_gpus == AUTO and most else (0 if asked_gpus in (AUTO, None, 0) else None)
    if runs > 1 and per_run and runs > most:
        return 1, (f"{SETTING}.runs_per_task={runs} × 1 GPU, but the nodes of partition {part.name} have at most "
                   f"{most} GPUs; set {SETTING}.runs_per_task={most} or less (or auto)")
    return runs, None


def _asked_otherwise(params: Mapping[str, Any], *keys: str) -> bool:
    """Whether the request sets one of ``keys`` itself or through ``additional_parameters`` (sbatch refuses
    two forms of one request, e.g. ``--mem`` with ``--mem-per-gpu``)."""
    extra = {str(k).replace("-", "_"): v for k, v in (params.get("additional_parameters") or {}).items()}
    return any(params.get(key) or extra.get(key) for key in keys)


def _fit_gpus(params: Mapping[str, Any], part: Partition) -> tuple[int, list[Node], str | None]:
    """GPUs per node (``auto``: one per task where the partition has GPUs, unless asked for another way), the
    nodes that have them, or the problem when none has."""
    tasks = params["tasks_per_node"]
    other = (params.get("gpus_per_task") or 0) * tasks + _gres_gpus(params.get("gres"))
    gpus = params.get("gpus_per_node")
    if gpus == AUTO:
        extra = {"additional_parameters": params.get("additional_parameters")}
        elsewhere = other or _asked_otherwise(extra, "gres", "gpus", "gpus_per_task", "gpus_per_node")
        gpus = tasks if any(n.gpus for n in part.nodes) and not elsewhere else 0
    wanted = (gpus or 0) + other
    nodes = [n for n in part.nodes if n.gpus >= wanted]
    if nodes:
        return gpus or 0, nodes, None
    asked = [key for key in ("gpus_per_node", "gpus_per_task", "gres") if params.get(key) and params[key] != AUTO]
    setting = "gpus_per_node" if gpus else asked[0]
    most = max(n.gpus for n in part.nodes)
    total = f" ({wanted} GPU{'s' if wanted > 1 else ''} per node in all)" if len(asked) > 1 or tasks > 1 else ""
    have = f"the nodes of partition {part.name} have at most {most} GPUs" if most else \
        f"no node of partition {part.name} has a GPU"
    if setting == "gpus_per_node":
        fix = f"set {SETTING}.gpus_per_node={most} or less (or auto)" if most else \
            f"set {SETTING}.gpus_per_node=0 (or auto)"
    elif setting == "gpus_per_task":
        fix = f"set {SETTING}.gpus_per_task={most // tasks} or less" if most // tasks else \
            f"remove it: {SETTING}.gpus_per_task=null"
    else:
        fix = f"ask for gpu:{most} or less in {SETTING}.gres" if most else f"remove it: {SETTING}.gres=null"
    return 0, [], f"{SETTING}.{setting}={params.get(setting)}{total}, but {have}; {fix}"


def _fit_memory(mem: Any, part: Partition, nodes: list[Node], cpus: int, tasks: int = 1) -> tuple[Any, str | None]:
    """Memory per node in GB (``auto``: the node's memory in proportion to the CPUs asked for, so that tasks
    share a node, at most AUTO_MEM_GB per task), or the problem when it is more than a node has."""
    node_mb = min(max(n.memory_mb for n in nodes), part.max_mem_per_node_mb)
    if mem == AUTO:
        biggest = max(nodes, key=lambda n: n.memory_mb)
        share = biggest.memory_mb * cpus / max(1, biggest.cpus)
        return max(1, int(min(AUTO_MEM_GB * 1024 * tasks, share, node_mb) // 1024)), None
    if mem is not None and mem * 1024 > node_mb:
        return mem, (f"{SETTING}.mem_gb={mem} is more than a node of partition {part.name} has ({node_mb / 1024:.1f} "
                     f"GB at most); set {SETTING}.mem_gb={max(1, int(node_mb // 1024))} or less (or auto)")
    return mem, None


def _limit_problems(params: Mapping[str, Any], part: Partition) -> list[str]:
    problems = []
    if params["timeout_min"] > part.max_time_min:
        problems.append(f"{SETTING}.timeout_min={params['timeout_min']} exceeds the time limit of partition "
                        f"{part.name} ({part.max_time_min:g} minutes); set {SETTING}.timeout_min="
                        f"{int(part.max_time_min)} or less")
    if params["nodes"] > min(len(part.nodes), part.max_nodes):
        problems.append(f"{SETTING}.nodes={params['nodes']}: partition {part.name} has "
                        f"{int(min(len(part.nodes), part.max_nodes))} node(s) for one job")
    return problems


def _notes(part: Partition, nodes: list[Node]) -> list[str]:
    """What will make the jobs wait although they fit."""
    if not part.state.startswith("UP"):
        return [f"partition {part.name} is {part.state}: jobs wait until it is UP"]
    if not any(n.usable for n in nodes):
        return [f"the nodes of partition {part.name} that fit this request are down or drained now "
                f"({', '.join(sorted({n.state for n in nodes}))}): jobs wait until one returns"]
    return []
