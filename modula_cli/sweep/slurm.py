"""What the launching process needs from SLURM: the partition and its nodes (to fit a request before anything
is submitted), the state of a launch's array tasks (to follow them without SLURM accounting, which may be
absent) and cancelling them. Every call is a SLURM command (``scontrol``, ``squeue``, ``sacct``,
``scancel``) with a time limit; the parsers take the commands' text, so they can be checked on any output.

A request is fitted to the partition it goes to: ``auto`` settings follow what its nodes have (a GPU per
task only where the nodes have GPUs; CPUs and memory within one node), and an explicit setting that no node
of the partition can ever satisfy is refused in one line naming the setting and what the cluster has.
"""

from __future__ import annotations

from types import MappingProxyType

import logging
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

AUTO = "auto"
COMMAND_TIMEOUT_S = 30
# what `auto` asks for, at most: a training run's data loader and threads, not a whole node
AUTO_CPUS, AUTO_MEM_GB = 8, 32
# task states in which a task is still the scheduler's (squeue lists them); any other state is an end
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                  "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED"})
# pending reasons that no waiting resolves: the request does not fit the partition's configuration
NEVER_STARTS = frozenset({"PartitionConfig", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS",
                "DependencyNeverSatisfied", "QOSMaxCpuPerNode", "QOSMaxGRESPerNode", "QOSMaxMemoryPerNode",
                "MaxCpuPerAccount", "MaxGRESPerAccount", "MaxMemPerLimit"})
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
        return (f"partition {self.partition}, {self.params.get('cpus_per_task') or 'default'} CPU per task, "
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
    tasks = params["tasks_per_node"]
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
        problems.append(f"{SETTING}.cpus_per_task={cpus}" + (f" × tasks_per_node={tasks}" if tasks > 1 else "") +
                        f" needs {cpus * tasks} CPUs on one node, but the nodes of partition {part.name} have at "
                        f"most {cpu_limit}; set {SETTING}.cpus_per_task={max(1, cpu_limit // tasks)} or less (or auto)")
    nodes = [n for n in nodes if n.cpus >= (cpus or 1) * tasks] or nodes
    mem = None if params.get("mem_gb") == AUTO and _asked_otherwise(params, "mem_per_gpu", "mem_per_cpu", "mem") \
        else params.get("mem_gb")
    mem, problem = _fit_memory(mem, part, nodes, (cpus or 1) * tasks)
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
        if not self.reason or self.reason in ("None", "0:0"):
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


def _squeue(array_id: str, *flags: str) -> dict[str, TaskState]:
    """``squeue`` on the array: nothing once SLURM has forgotten it (``Invalid job id``, after ``MinJobAge``)."""
    try:
        return squeue_states(command(["squeue", "-h", "-r", *flags, "-j", array_id, "-o", "%i|%T|%r"]))
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return {}
        raise


def task_states(array_id: str, accounting: bool, ended_ask: bool = True) -> dict[str, TaskState]:
    """Every task of the array that SLURM knows of: live ones from squeue, ended ones (when ``ended_ask``) from
    sacct (with accounting) or from squeue's memory of recent ends (without: ``MinJobAge``, 300 s by
    default)."""
    live = _squeue(array_id)
    ended: dict[str, TaskState] = {}
    if ended_ask and accounting:
        try:
            ended = sacct_states(command(["sacct", "-X", "-n", "-P", "-j", array_id, "-o", "JobID,State,ExitCode"]))
        except SlurmError as error:
            log.debug("sacct: %s", error)
    elif ended_ask:
        ended = {task: TaskState(s.state, "", listed=False)
                 for task, s in _squeue(array_id, "--states=all").items() if task not in live}
    return {**ended, **live}


def has_accounting() -> bool:
    """Whether ``sacct`` answers (SLURM accounting is configured and reachable)."""
    try:
        command(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"], timeout=10)
    except SlurmError:
        return False
    return True


def _scancel(*args: str) -> None:
    try:
        command(["scancel", *args])
    except SlurmError as error:
        if "Invalid job id" not in str(error):  # else: nothing of it is left to cancel
            log.warning("%s", error)


# --- following a launch's array ---------------------------------------------------------------------------

REASONS = MappingProxyType({"PartitionConfig": "the request does not fit the partition's configuration",
           "PartitionTimeLimit": "the time limit exceeds the partition's",
           "InvalidAccount": "the account is not valid", "InvalidQOS": "the QOS is not valid",
           "DependencyNeverSatisfied": "a dependency can never be satisfied"})
NEVER_STARTS_AFTER_S = 120.0  # a reason of REASONS this long, at every poll, before the jobs are cancelled
# with accounting on, a task neither squeue nor sacct lists yet is waited for this long: a freshly started
# slurmdbd recorded a killed task 2 polls after squeue dropped it
ACCOUNTING_LAG_S = 30.0
HELD = ("JobHeldAdmin", "JobHeldUser")


class SlurmArray:
    """A launch's submitted jobs (an array's tasks, or one job), followed with ``squeue`` (and ``sacct`` where
    accounting is on, for the word on how a task ended). A task has ended once squeue no longer lists it at
    two polls in a row (a requeued task is listed throughout: pending again, then running)."""

    def __init__(self, job_ids: Sequence[str], accounting: bool, results: Sequence[Any] = (),
                 logs: Sequence[str] = ()):
        self.job_ids = list(job_ids)
        self.array = self.job_ids[0].split("_")[0]
        self.accounting = accounting
        self.results = list(results)  # per task, a callable that reads the job's own result: (JobReturn, error)
        self.logs = list(logs)        # per task, its log file
        self._unlisted = [0] * len(self.job_ids)
        self._unknown_since: dict[int, float] = {}  # tasks that neither squeue nor sacct lists, since when
        self._reported: set[int] = set()
        self._states: dict[str, TaskState] = {}
        self._stuck_since: dict[str, float] = {}
        self._silent = False   # SLURM did not answer at the last poll (said once)
        self._signalled = False

    def poll(self) -> dict[int, Any]:
        from .jobs import JobEnd

        try:  # how a task ended is asked only when one has left the queue
            self._states = task_states(self.array, self.accounting,
                                       ended_ask=any(n >= 1 for n in self._unlisted) or not self._states)
        except SlurmError as error:  # the controller may be restarting: ask again at the next poll
            if not self._silent:
                log.warning("SLURM did not answer (%s); asking again until it does", error)
            self._silent = True
            return {}
        self._silent = False
        ended = {}
        for index, job_id in enumerate(self.job_ids):
            state = self._states.get(job_id)
            if index in self._reported:
                continue
            if state is not None and state.live:
                self._unlisted[index] = 0
                continue
            self._unlisted[index] += 1
            if self._unlisted[index] < 2:
                continue
            now = time.monotonic()
            if state is None and self.accounting and now - self._unknown_since.setdefault(index, now) < \
                    ACCOUNTING_LAG_S:
                continue  # accounting has not recorded it yet
            if state is None:
                word = "(no longer known to SLURM)"
            elif state.state.split()[0] in LIVE:  # accounting lags behind the queue
                word = "(SLURM has not recorded how yet)"
            else:
                word = state.text()
            returned, error = self.results[index]() if index < len(self.results) else (None, None)
            ended[index] = JobEnd(word, returned, error, cancelled=word.startswith("CANCELLED"),
                                  log=self.logs[index] if index < len(self.logs) else None)
            self._reported.add(index)
        return ended

    def waiting(self) -> str:
        """``1 running, 2 pending (Resources)``: running first, then each other state (a pending one with its
        reason; a held one with how to release it)."""
        live = [s for job_id, s in self._states.items() if job_id in self.job_ids and s.live]
        by_state: dict[str, int] = {}
        for s in live:
            word = s.state.lower()
            if s.state == "PENDING" and s.reason and s.reason != "None":
                word += f" ({s.reason}" + (f"; release with: scontrol release {self.array}" if s.reason in HELD
                                           else "") + ")"
            by_state[word] = by_state.get(word, 0) + 1
        order = sorted(by_state, key=lambda word: (word != "running", word))
        return ", ".join(f"{by_state[word]} {word}" for word in order) or "none listed"

    def never_starts(self) -> str | None:
        if self._silent:
            return None
        now = time.monotonic()
        stuck = {job_id for job_id, s in self._states.items()
                 if job_id in self.job_ids and s.state == "PENDING" and s.reason in REASONS}
        self._stuck_since = {job_id: self._stuck_since.get(job_id, now) for job_id in stuck}
        for job_id, since in self._stuck_since.items():
            if now - since >= NEVER_STARTS_AFTER_S:
                reason = self._states[job_id].reason
                return f"SLURM has kept them pending with reason {reason} ({REASONS[reason]})"
        return None

    def stop(self, training: set[int]) -> None:
        """Pending tasks are cancelled (at every call: a requeued task is pending again); running ones get
        SIGTERM once, and checkpoint (no SIGKILL follows, unlike a plain scancel after KillWait)."""
        _scancel("--state=PENDING", self.array)
        if not self._signalled:
            _scancel("--signal=TERM", self.array)
            self._signalled = True

    def cancel(self) -> None:
        _scancel(self.array)

    def name(self, index: int) -> str:
        return f"SLURM job {self.job_ids[index]}"

    def owner(self, index: int) -> str:
        return f"slurm:{self.job_ids[index]}"


def job_id_here() -> str | None:
    """This process's SLURM task, as ``SlurmArray.owner`` names it ("slurm:12_3"); None outside SLURM."""
    array, task, job = (os.environ.get(k) for k in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID"))
    if array and task:
        return f"slurm:{array}_{task}"
    return f"slurm:{job}" if job else None
