"""What the launching process needs from SLURM: the partition and its nodes (to fit a request before anything
is submitted), the state of a launch's array tasks (to follow them without SLURM accounting, which may be
absent) and cancelling them. Every call is a SLURM command (``scontrol``, ``squeue``, ``sacct``,
``scancel``) with a time limit; the parsers take the commands' text, so they can be checked on any output.

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
# task states in which a task is still the scheduler's (squeue lists them); any other state is an end
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
        "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED"}
# pending reasons that no waiting resolves: the request does not fit the partition's configuration
NEVER_STARTS = {"PartitionConfig", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS",
                "DependencyNeverSatisfied", "QOSMaxCpuPerNode", "QOSMaxGRESPerNode", "QOSMaxMemoryPerNode",
                "MaxCpuPerAccount", "MaxGRESPerAccount", "MaxMemPerLimit"}
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
    return partitions(command(["scontrol", "show", "partition", "-o"]), command(["scontrol", "show", "node", "-o"]))


# --- fitting a request to the partition ------------------------------------------------------------------------

@dataclass
class Fit:
    """The launcher's settings with ``auto`` resolved for one partition, or the problems that stop it."""
    params: dict[str, Any]
    partition: str | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``partition cpu, 1 CPU, 1 GB, no GPU per task``."""
        gpus = self.params.get("gpus_per_node") or 0
        return (f"partition {self.partition}, {self.params.get('cpus_per_task') or 1} CPU per task, "
                f"{self.params.get('mem_gb') or '?'} GB, " + (f"{gpus} GPU" if gpus else "no GPU"))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _gres_gpus(gres: Any) -> int:
    return gpu_count(str(gres)) if gres else 0


def fit(params: Mapping[str, Any], cluster: Mapping[str, Partition]) -> Fit:
    """Resolve ``auto`` and check the request against the partition's limits and nodes."""
    params = dict(params)
    part, problems = _partition(params, cluster)
    if part is None or problems:
        return Fit(params, part.name if part else params.get("partition"), problems)
    tasks = params["tasks_per_node"]
    gpus, nodes, problem = _fit_gpus(params, part)
    if problem:
        return Fit(params, part.name, [problem])
    cpu_limit = int(min(max(n.cpus for n in nodes), part.max_cpus_per_node))
    cpus = params.get("cpus_per_task")
    if cpus == AUTO:
        cpus = max(1, min(AUTO_CPUS, cpu_limit // tasks))
    elif cpus is not None and cpus * tasks > cpu_limit:
        problems.append(f"{SETTING}.cpus_per_task={cpus}" + (f" × tasks_per_node={tasks}" if tasks > 1 else "") +
                        f" needs {cpus * tasks} CPUs on one node, but the nodes of partition {part.name} have at "
                        f"most {cpu_limit}; set {SETTING}.cpus_per_task={max(1, cpu_limit // tasks)} or less (or auto)")
    nodes = [n for n in nodes if n.cpus >= (cpus or 1) * tasks] or nodes
    mem, problem = _fit_memory(params.get("mem_gb"), part, nodes, (cpus or 1) * tasks)
    problems += [problem] if problem else []
    problems += _limit_problems(params, part)
    resolved = {**params, "partition": part.name, "cpus_per_task": cpus, "gpus_per_node": gpus or None,
                "mem_gb": mem}
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


def _fit_gpus(params: Mapping[str, Any], part: Partition) -> tuple[int, list[Node], str | None]:
    """GPUs per node (``auto``: one per task where the partition has GPUs, unless asked for another way), the
    nodes that have them, or the problem when none has."""
    tasks = params["tasks_per_node"]
    other = (params.get("gpus_per_task") or 0) * tasks + _gres_gpus(params.get("gres"))
    gpus = params.get("gpus_per_node")
    if gpus == AUTO:
        gpus = tasks if any(n.gpus for n in part.nodes) and not other else 0
    wanted = (gpus or 0) + other
    nodes = [n for n in part.nodes if n.gpus >= wanted]
    if nodes:
        return gpus or 0, nodes, None
    setting = "gpus_per_node" if gpus else "gres" if params.get("gres") else "gpus_per_task"
    most = max(n.gpus for n in part.nodes)
    asked = f"{SETTING}.{setting}={params.get(setting)}" + (
        f" ({wanted} GPUs per node in all)" if wanted != params.get(setting) else "")
    have = f"the nodes of partition {part.name} have at most {most} GPUs" if most else \
        f"no node of partition {part.name} has a GPU"
    return 0, [], (f"{asked}, but {have}; set {SETTING}.gpus_per_node=" + (f"{most} or less" if most else "0") +
                   " (or auto)")


def _fit_memory(mem: Any, part: Partition, nodes: list[Node], cpus: int) -> tuple[Any, str | None]:
    """Memory per node in GB (``auto``: the node's memory in proportion to the CPUs asked for, so that tasks
    share a node, at most AUTO_MEM_GB), or the problem when it is more than a node has."""
    node_mb = min(max(n.memory_mb for n in nodes), part.max_mem_per_node_mb)
    if mem == AUTO:
        biggest = max(nodes, key=lambda n: n.memory_mb)
        share = biggest.memory_mb * cpus / max(1, biggest.cpus)
        return max(1, int(min(AUTO_MEM_GB * 1024, share, node_mb) // 1024)), None
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


# --- a launch's tasks ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskState:
    state: str            # SLURM's state word (PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, ...), or ENDED
    reason: str = ""      # a pending task's reason; an ended task's exit code
    listed: bool = True   # squeue still lists the task (it is the scheduler's)

    @property
    def live(self) -> bool:
        return self.listed and self.state.split()[0] in LIVE

    def text(self) -> str:
        """``PENDING (Resources)``; an ended task ``FAILED, exit code 9:0``."""
        if not self.reason or self.reason == "None":
            return self.state
        return f"{self.state}, exit code {self.reason}" if ":" in self.reason else f"{self.state} ({self.reason})"


def squeue_states(text: str) -> dict[str, TaskState]:
    """``squeue -h -r -o '%i|%T|%r'``: each listed task's state and pending reason."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3:
            out[parts[0]] = TaskState(parts[1], parts[2])
    return out


def sacct_states(text: str) -> dict[str, TaskState]:
    """``sacct -X -n -P -o JobID,State,ExitCode``: each task's last recorded state (``CANCELLED by 0``) and exit
    code; a requeued task's earlier rows come first and are overwritten."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and not parts[0].endswith("]"):  # a pending array's "12_[0-3]" row names no task
            out[parts[0]] = TaskState(parts[1], parts[2], listed=False)
    return out


def task_states(array_id: str, accounting: bool) -> dict[str, TaskState]:
    """Every task of the array that SLURM knows of: live ones from squeue, ended ones from sacct (with
    accounting) or from squeue's memory of recent ends (without: ``MinJobAge``, 300 s by default)."""
    live = squeue_states(command(["squeue", "-h", "-r", "-j", array_id, "-o", "%i|%T|%r"]))
    ended: dict[str, TaskState] = {}
    if accounting:
        try:
            ended = sacct_states(command(["sacct", "-X", "-n", "-P", "-j", array_id, "-o", "JobID,State,ExitCode"]))
        except SlurmError as error:
            log.debug("sacct: %s", error)
    else:
        recent = squeue_states(command(["squeue", "-h", "-r", "--states=all", "-j", array_id, "-o", "%i|%T|%r"]))
        ended = {task: TaskState(s.state, "", listed=False) for task, s in recent.items() if task not in live}
    return {**ended, **live}


def has_accounting() -> bool:
    """Whether ``sacct`` answers (SLURM accounting is configured and reachable)."""
    try:
        command(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"], timeout=10)
    except SlurmError:
        return False
    return True


def cancel(array_id: str) -> None:
    """Cancel every task of the array: pending tasks never start, running ones get SIGTERM (they checkpoint)."""
    try:
        command(["scancel", array_id])
    except SlurmError as error:
        log.warning("could not cancel SLURM job %s: %s", array_id, error)


# --- following a launch's array ---------------------------------------------------------------------------

REASONS = {"PartitionConfig": "the request does not fit the partition's configuration",
           "PartitionTimeLimit": "the time limit exceeds the partition's",
           "BadConstraints": "no node has the requested features",
           "InvalidAccount": "the account is not valid", "InvalidQOS": "the QOS is not valid"}


class SlurmArray:
    """A launch's submitted jobs (an array's tasks, or one job), followed with ``squeue`` (and ``sacct`` where
    accounting is on). A task has ended once squeue no longer lists it at two polls in a row (a requeued task
    is listed throughout: pending again, then running)."""

    def __init__(self, job_ids: Sequence[str], accounting: bool, results: Sequence[Any] = ()):
        self.job_ids = list(job_ids)
        self.array = self.job_ids[0].split("_")[0]
        self.accounting = accounting
        self.results = list(results)  # per task, a callable that reads the job's own result (or None)
        self._unlisted = [0] * len(self.job_ids)
        self._states: dict[str, TaskState] = {}
        self._stuck: dict[str, int] = {}
        self._silent = False  # SLURM did not answer at the last poll (said once)

    def poll(self) -> dict[int, Any]:
        from .cluster import JobEnd

        try:
            self._states = task_states(self.array, self.accounting)
        except SlurmError as error:  # the controller may be restarting: ask again at the next poll
            if not self._silent:
                log.warning("SLURM did not answer (%s); asking again until it does", error)
            self._silent = True
            return {}
        self._silent = False
        ended = {}
        for index, job_id in enumerate(self.job_ids):
            state = self._states.get(job_id)
            if state is not None and state.live:
                self._unlisted[index] = 0
                continue
            self._unlisted[index] += 1
            if self._unlisted[index] >= 2:
                word = state.text() if state is not None else "(no longer known to SLURM)"
                returned, error = self.results[index]() if index < len(self.results) else (None, None)
                ended[index] = JobEnd(word, returned, error)
        return ended

    def waiting(self) -> str:
        live = [s for job_id, s in self._states.items() if job_id in self.job_ids and s.live]
        running = sum(s.state == "RUNNING" for s in live)
        pending: dict[str, int] = {}
        for s in live:
            if s.state != "RUNNING":
                pending[s.reason or s.state] = pending.get(s.reason or s.state, 0) + 1
        parts = [f"{running} running"] if running else []
        if pending:
            parts.append(f"{sum(pending.values())} pending (" +
                         ", ".join(f"{reason}: {n}" if len(pending) > 1 else reason
                                   for reason, n in sorted(pending.items())) + ")")
        return ", ".join(parts) or "none listed"

    def never_starts(self) -> str | None:
        for job_id, state in self._states.items():
            if job_id in self.job_ids and state.state == "PENDING" and state.reason in NEVER_STARTS:
                self._stuck[job_id] = self._stuck.get(job_id, 0) + 1
                if self._stuck[job_id] >= 2:
                    return f"SLURM keeps them pending with reason {state.reason}" + (
                        f" ({REASONS[state.reason]})" if state.reason in REASONS else "")
        return None

    def cancel(self) -> None:
        cancel(self.array)

    def name(self, index: int) -> str:
        return f"SLURM job {self.job_ids[index]}"
