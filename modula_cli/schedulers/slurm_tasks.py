"""A launch's SLURM tasks after submission: their states from ``squeue`` (and ``sacct`` where accounting is on,
for the word on how a task ended), cancelling them, and ``SlurmArray``, which follows one launch's array to the
end of every task. The parsers take the commands' text, so they can be checked on any output."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .jobs import JobWord
from .slurm import SlurmError, command, records

log = logging.getLogger(__name__)

# task states in which a task is still the scheduler's (squeue lists them); any other state is an end
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                  "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "PREEMPTED"})

# --- a launch's tasks ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskState:
    state: str            # SLURM's state word (PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, ...), or ENDED
    reason: str = ""      # a pending task's reason; an ended task's exit code
    listed: bool = True   # squeue still lists the task (it is the scheduler's)
    node: str = ""        # the node a running task runs on

    @property
    def live(self) -> bool:
        return self.listed and self.state.split()[0] in LIVE

    def text(self) -> str:
        """``PENDING (Resources)``; an ended task ``FAILED, exit code 9:0``."""
        if not self.reason or self.reason in ("None", "0:0"):
            return self.state
        return f"{self.state}, exit code {self.reason}" if ":" in self.reason else f"{self.state} ({self.reason})"


def squeue_states(text: str) -> dict[str, TaskState]:
    """``squeue -h -r -o '%i|%T|%r|%N'``: each listed task's state, pending reason and node."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3:
            out[parts[0]] = TaskState(parts[1], parts[2], node=parts[3] if len(parts) > 3 else "")
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
        return squeue_states(command(["squeue", "-h", "-r", *flags, "-j", array_id, "-o", "%i|%T|%r|%N"]))
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


def node_trouble(node: str) -> str | None:
    """``DOWN+NOT_RESPONDING, Not responding`` when ``node`` is down or failing (SLURM's state and reason); None
    when it is well (draining is not lost), or SLURM does not say."""
    try:
        found = records(command(["scontrol", "-o", "show", "node", node]))
    except SlurmError:
        return None
    state = found[0].get("State", "") if found else ""
    if not re.search(r"DOWN|FAIL|NOT_RESPONDING", state):
        return None
    reason = found[0].get("Reason", "")
    return state + (f", {reason.split(' [')[0]}" if reason and reason != "(null)" else "")


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

    scheduler = "slurm"

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
        self._ran_on: dict[int, str] = {}  # each task's node while it ran
        self._lost: set[str] = set()       # nodes said lost

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
        self._watch_nodes()
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

    def _watch_nodes(self) -> None:
        """Say once when a node that ran a task of this launch is lost (down, failing) and SLURM has put the
        task back in the queue; where each task goes next is the follower's word (its run's host)."""
        requeued: dict[str, list[str]] = {}
        for index, job_id in enumerate(self.job_ids):
            state = self._states.get(job_id)
            if state is None or not state.live:
                continue
            if state.state == "RUNNING" and state.node:
                self._ran_on[index] = state.node
            elif state.state.startswith(("PENDING", "REQUEUE")) and index in self._ran_on:  # back in the queue
                ids = requeued.setdefault(self._ran_on.pop(index), [])
                if job_id not in ids:  # a job of several runs (runs_per_task) is named once
                    ids.append(job_id)
        for node, job_ids in requeued.items():
            if node in self._lost or (trouble := node_trouble(node)) is None:
                continue
            self._lost.add(node)
            log.warning("node %s is lost (SLURM: %s): SLURM requeued %s, which ran there; %s resume%s from the "
                        "last checkpoint on another node", node, trouble, ", ".join(f"job {j}" for j in job_ids),
                        "it" if len(job_ids) == 1 else "they", "s" if len(job_ids) == 1 else "")

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
        return f"{self.scheduler}:{self.job_ids[index]}"

    def scheduler_ids(self) -> list[str] | None:
        return list(self.job_ids)

    job_noun = "SLURM job"

    @staticmethod
    def ask(job_ids: list[str]) -> dict[str, JobWord]:
        return slurm_words(job_ids)


def slurm_words(job_ids: list[str]) -> dict[str, JobWord]:
    """Each job's state from ``squeue`` / ``sacct``, and its requeue count from ``scontrol show job``; a job
    SLURM no longer knows of (ended long ago) is not live. When SLURM does not answer, its jobs count as live:
    nothing is settled or reported on a silence."""
    words: dict[str, JobWord] = dict.fromkeys(job_ids, JobWord(False, "no longer known to SLURM"))
    accounting = has_accounting()
    for array in sorted({job_id.split("_")[0] for job_id in job_ids}):
        try:
            states = task_states(array, accounting)
            shown = _shown_jobs(array) if any(state.live for state in states.values()) else []
        except SlurmError as error:
            silent = JobWord(True, f"SLURM did not answer ({error})")
            words.update({job_id: silent for job_id in job_ids if job_id.split("_")[0] == array})
            continue
        restarts = {f"{r.get('ArrayJobId')}_{r.get('ArrayTaskId')}" if r.get("ArrayTaskId") else r.get("JobId", ""):
                    int(r.get("Restarts", "0") or 0) for r in shown if (r.get("Restarts") or "0").isdigit()}
        for job_id, state in states.items():
            text = state.text() + (f" on {state.node}" if state.node and state.live else "")
            if restarts.get(job_id):
                text += f", requeued {restarts[job_id]}×"
            words[job_id] = JobWord(state.live, text)
    return words


def _shown_jobs(array: str) -> list[dict[str, str]]:
    """``scontrol show job`` of the array's tasks (their requeue counts); none once SLURM has forgotten them."""
    try:
        return records(command(["scontrol", "-o", "show", "job", array]))
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return []
        raise


def adopt(job_ids: Sequence[str]) -> list[tuple[list[int], SlurmArray]]:
    """The jobs of ``job_ids`` that SLURM still lists (queued, running, requeued), as one ``SlurmArray`` per
    array with their positions in ``job_ids``: an earlier launch's jobs, for a relaunch to follow instead of
    submitting their runs again. Nothing when SLURM does not answer (the relaunch then submits; a run is
    never trained twice, its lock sees to that)."""
    by_array: dict[str, list[int]] = {}
    for position, job_id in enumerate(job_ids):
        by_array.setdefault(job_id.split("_")[0], []).append(position)
    adopted = []
    accounting = None
    for array, positions in by_array.items():
        try:
            live = {task for task, state in task_states(array, False, ended_ask=False).items() if state.live}
        except SlurmError as error:
            log.warning("could not ask SLURM about the earlier launch's job %s (%s)", array, error)
            continue
        kept = [p for p in positions if job_ids[p] in live]
        if kept:
            accounting = has_accounting() if accounting is None else accounting
            adopted.append((kept, SlurmArray([job_ids[p] for p in kept], accounting)))
    return adopted
