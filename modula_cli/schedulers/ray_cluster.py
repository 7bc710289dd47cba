"""What the launching process needs from a Ray cluster: its nodes' resources (to fit a task's request before
anything is submitted) and following a launch's tasks (``follow`` in ``cluster.py``).

A request is fitted to the nodes that are alive: ``auto`` GPUs are one per task where a node has GPUs, ``auto``
CPUs are 4 at most what one node has; an explicit request that no node can ever satisfy is refused in one
line naming the setting and what the cluster has (Ray itself would keep such a task pending forever).
"""

from __future__ import annotations

from types import MappingProxyType

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .jobs import JobEnd

log = logging.getLogger(__name__)

AUTO = "auto"
AUTO_CPUS = 4
SETTING = "hydra.launcher.ray.remote"
# a task's request: its option name and Ray's resource name
RESOURCES = (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory"))
ARTICLE = MappingProxyType({"CPU": "a CPU", "GPU": "a GPU"})


@dataclass
class Fit:
    """The remote options with ``auto`` resolved (each run's, and the task's: ``runs`` runs' worth), or the
    problems that stop the launch."""
    options: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    runs: int = 1

    @property
    def task_options(self) -> dict[str, Any]:
        """What one Ray task asks for: its runs' CPUs, GPUs and memory together."""
        return {**self.options, **{name: self.options[name] * self.runs for name, _ in RESOURCES
                                   if isinstance(self.options.get(name), (int, float)) and self.options[name]}}

    def describe(self) -> str:
        gpus = self.options.get("num_gpus") or 0
        per = "run" if self.runs > 1 else "task"
        return (f"{self.runs} runs per task, " if self.runs > 1 else "") + \
            f"{self.options.get('num_cpus')} CPU per {per}, " + (f"{gpus:g} GPU" if gpus else "no GPU")


def _amount(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def fit(options: Mapping[str, Any], nodes: Sequence[Mapping[str, float]], runs_per_task: Any = 1) -> Fit:
    """Resolve ``auto`` against the alive nodes' resources (``ray.nodes()[i]["Resources"]``) and check that one
    node can hold a task of ``runs_per_task`` runs (``auto``: one per GPU of the biggest GPU node)."""
    options = dict(options)
    if not nodes:
        return Fit(options, ["the Ray cluster has no alive node"])
    most_gpus = int(max(node.get("GPU", 0) for node in nodes))
    asked = options.get("num_gpus")
    each = asked if _amount(asked) and asked >= 1 else 1  # auto, none or a fraction: one GPU's worth of runs
    runs = max(1, int(most_gpus // each)) if runs_per_task == AUTO else runs_per_task
    if not (isinstance(runs, int) and not isinstance(runs, bool) and runs >= 1):
        return Fit(options, [f"hydra.launcher.runs_per_task={runs_per_task!r}; allowed: auto, or an integer >= 1"])
    per_run = _fit_run(options, nodes, runs)
    if per_run.problems or runs == 1:
        return per_run
    task = Fit(per_run.options, [], runs)
    holding = fit(task.task_options, nodes)
    if holding.problems:  # said for the runs per task, the setting that asked for so much
        gpus, cpus = task.options.get("num_gpus") or 0, task.options.get("num_cpus") or 0
        resource, each = ("GPU", gpus) if gpus and runs * gpus > most_gpus else ("CPU", cpus)
        most = int(max(node.get(resource, 0) for node in nodes))
        fewer = int(most // each) if each else 0
        return Fit(task.options, [f"hydra.launcher.runs_per_task={runs} × {each:g} {resource}, but the nodes of this "
                                  f"Ray cluster have at most {most} {resource}; set hydra.launcher.runs_per_task="
                                  f"{max(1, fewer)} or less" + (" (or auto)" if resource == "GPU" else "")])
    return task


def _fit_run(options: dict[str, Any], nodes: Sequence[Mapping[str, float]], runs: int) -> Fit:
    """One run's options: ``auto`` resolved for a node that holds ``runs`` of them."""
    problems = [f"{SETTING}.{name}={options[name]!r}; allowed: auto, or a number >= 0"
                for name in ("num_cpus", "num_gpus") if name in options and options[name] != AUTO
                and not _amount(options[name])]
    if problems:
        return Fit(options, problems)
    if options.get("num_gpus") == AUTO:
        options["num_gpus"] = 1 if any(node.get("GPU", 0) >= 1 for node in nodes) else 0
    if options.get("num_cpus") == AUTO:
        holding = [node for node in nodes if node.get("GPU", 0) >= (options.get("num_gpus") or 0)] or nodes
        options["num_cpus"] = max(1, min(AUTO_CPUS, int(max(node.get("CPU", 0) for node in holding)) // runs))
    wanted = {resource: float(options.get(name) or 0) for name, resource in RESOURCES}
    wanted.update({name: float(amount) for name, amount in (options.get("resources") or {}).items()})
    if not any(all(node.get(resource, 0) >= amount for resource, amount in wanted.items() if amount)
               for node in nodes):
        for name, resource in [*RESOURCES, *((n, n) for n in (options.get("resources") or {}))]:
            amount = wanted.get(resource, 0)
            most = max(node.get(resource, 0) for node in nodes)
            if amount > most:
                standard = name in {r[0] for r in RESOURCES}
                key, asked = ((name, options.get(name)) if standard else
                              (f"resources.{name}", options["resources"][name]))
                have = (f"the nodes of this Ray cluster have at most {most:g} {resource}" if most else
                        f"no node of this Ray cluster has {ARTICLE.get(resource, resource)}")
                problems.append(f"{SETTING}.{key}={asked!r}, but {have}; set "
                                f"{SETTING}.{key}={most:g}" + (" or less" if most else "")
                                + (" (or auto)" if name in ("num_cpus", "num_gpus") else ""))
        if not problems:
            asked = ", ".join(f"{amount:g} {resource}" for resource, amount in wanted.items() if amount)
            problems.append(f"no single node of this Ray cluster has {asked} at once; ask for less of one "
                            f"(hydra.launcher.ray.remote)")
    return Fit(options, problems)


def _member_end(end: JobEnd, k: int) -> JobEnd:
    """The end of a task's k-th run: its own result (a JobReturn, or the error that ended its process)."""
    if not isinstance(end.returned, list):
        return end
    returned = end.returned[k] if k < len(end.returned) else None
    if isinstance(returned, str):  # its process died: the task's other runs went on
        return JobEnd(end.state, error=returned)
    return JobEnd(end.state, returned)


def alive_nodes() -> list[dict[str, float]]:
    import ray

    return [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]


class RayTasks:
    """A launch's Ray tasks, by position: ended once ``ray.wait`` says so; what each raised is said in words.
    A cluster that stops answering for ``GONE_AFTER_S`` ends every task still out. With ``members`` (a task of
    several runs, ``runs_per_task``), position i is member ``members[i] = (task, k)``: the k-th of that task's
    results."""

    scheduler = "ray"
    GONE_AFTER_S = 300.0
    NODES_EVERY_S = 2.0  # how often the cluster's nodes are looked at, for one that died (a cheap GCS call)

    def __init__(self, refs: Sequence[Any], members: Sequence[tuple[int, int]] | None = None):
        self.refs = list(refs)
        self.members = list(members) if members is not None else [(i, -1) for i in range(len(self.refs))]
        self._done: set[int] = set()  # tasks (indices of refs) that have ended
        self._silent_since: float | None = None
        self._alive: dict[str, str] | None = None  # alive node id -> "raynode2 (10.78.2.2)"
        self._nodes_at = -math.inf

    def poll(self) -> dict[int, JobEnd]:
        import ray

        waiting = [ref for i, ref in enumerate(self.refs) if i not in self._done]
        if not waiting:
            return {}
        try:
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
        except (ray.exceptions.RayError, ConnectionError, OSError) as error:
            return self._silent(error)
        self._silent_since = None
        self._watch_nodes()
        ended = {}
        for ref in ready:
            task = self.refs.index(ref)
            self._done.add(task)
            end = self._end(ref)
            for position, (of, k) in enumerate(self.members):
                if of == task:
                    ended[position] = end if k < 0 else _member_end(end, k)
        return ended

    def _watch_nodes(self) -> None:
        """Say once when a node of the cluster dies; which runs moved where is the follower's word."""
        import ray

        now = time.monotonic()
        if now - self._nodes_at < self.NODES_EVERY_S:
            return
        self._nodes_at = now
        try:
            nodes = ray.nodes()
        except (ray.exceptions.RayError, ConnectionError, OSError) as error:
            log.debug("ray.nodes: %s", error)
            return
        alive = {node["NodeID"]: f"{node.get('NodeManagerHostname')} ({node.get('NodeManagerAddress')})"
                 for node in nodes if node.get("Alive")}
        for node_id, name in (self._alive or {}).items():
            if node_id not in alive:
                log.warning("Ray node %s is lost: Ray runs the tasks it held, if any, again on another node (up "
                            "to %s.max_retries times), each resuming from its last checkpoint", name, SETTING)
        self._alive = alive

    def _silent(self, error: Exception) -> dict[int, JobEnd]:
        """The cluster did not answer: said once; after GONE_AFTER_S, every task still out has ended."""
        now = time.monotonic()
        if self._silent_since is None:
            log.warning("the Ray cluster did not answer (%s: %s); asking again", type(error).__name__, error)
            self._silent_since = now
        if now - self._silent_since < self.GONE_AFTER_S:
            return {}
        gone = {i: JobEnd(f"the Ray cluster stopped answering ({type(error).__name__})")
                for i, (task, _) in enumerate(self.members) if task not in self._done}
        self._done.update(range(len(self.refs)))
        return gone

    @staticmethod
    def _end(ref: Any) -> JobEnd:
        import ray
        import ray.exceptions as errors

        try:
            return JobEnd("finished", ray.get(ref))
        except errors.TaskCancelledError:
            return JobEnd("cancelled", cancelled=True)
        except errors.WorkerCrashedError:
            return JobEnd("its worker process died (retries exhausted)")
        except errors.NodeDiedError:
            return JobEnd("its node died")
        except errors.OutOfMemoryError:
            return JobEnd("killed by Ray's memory monitor")
        except errors.RayTaskError as error:
            cause = error.cause if getattr(error, "cause", None) is not None else error
            first = str(cause).strip().splitlines()
            return JobEnd("raised", error=f"{type(cause).__name__}: {first[0] if first else ''}")
        except errors.RayError as error:
            return JobEnd(type(error).__name__, error=str(error).strip().splitlines()[0])

    def waiting(self) -> str:
        return f"{len(self.refs) - len(self._done)} tasks not finished"

    def _tasks(self, positions: set[int]) -> set[int]:
        return {self.members[i][0] for i in positions}

    def never_starts(self) -> str | None:
        return None  # fitted before submission; a node that leaves later shows as a task that waits

    def stop(self, training: set[int]) -> None:
        """Tasks not training yet are cancelled (a waiting one never starts); training ones have the stop
        marker, and checkpoint at their next step."""
        busy = self._tasks(training)  # a task with one run training checkpoints through the marker, whole
        self._cancel([i for i in range(len(self.refs)) if i not in self._done and i not in busy], force=False)

    def cancel(self) -> None:
        self._cancel([i for i in range(len(self.refs)) if i not in self._done], force=True)

    def _cancel(self, indices: list[int], force: bool) -> None:
        import ray

        for i in indices:
            try:
                ray.cancel(self.refs[i], force=force)
            except (ray.exceptions.RayError, ConnectionError, OSError, ValueError) as error:
                log.debug("ray.cancel: %s", error)

    def name(self, index: int) -> str:
        task, k = self.members[index]
        return f"Ray task {task}" + (f" (run {k + 1})" if k >= 0 else "")

    def owner(self, index: int) -> str:
        return f"{self.scheduler}:{self.refs[self.members[index][0]].task_id().hex()}"

    def scheduler_ids(self) -> list[str] | None:
        return None
