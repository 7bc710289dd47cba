"""Jobs that run on other machines, as their scheduler reports them: the words that the follower
(``cluster.py``) and the schedulers (``slurm.py`` for SLURM's array tasks, ``ray_cluster.py`` for Ray's tasks)
share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class JobEnd:
    """How a job ended, as its scheduler tells it."""
    state: str                # "COMPLETED", "CANCELLED by 0", "FAILED, exit code 9:0", "finished", "cancelled"
    returned: Any = None      # the job's own JobReturn, when it delivered one
    error: str | None = None  # an error the job raised outside its runs
    cancelled: bool = False   # ended by a cancel (a stop, an administrator), not by anything of its own
    log: str | None = None    # where the job's output is


@dataclass(frozen=True)
class JobWord:
    """What a scheduler says of one job now, asked after its launch has gone (``modula-sweep-status``)."""
    live: bool            # queued, running or requeued (or unknown: the scheduler did not answer): it may still train
    text: str             # "RUNNING on node2, requeued 1×", "PENDING (Resources)", "COMPLETED"


class Jobs(Protocol):
    """A launch's jobs on one scheduler, by position in the launch.

    A scheduler whose jobs outlive the launching process (``scheduler_ids`` gives their ids) can also be asked about
    them later, without a launch: its class then says what it calls a job (``job_noun``: "SLURM job") and answers
    ``ask(job_ids)`` (a static method: each id's ``JobWord``; one it no longer lists has ended). ``sweep.json``
    records the class, and ``modula-sweep-status`` asks it."""

    scheduler: str  # the scheduler's name, as sweep.json records it beside the jobs' ids ("slurm", "ray")

    def poll(self) -> dict[int, JobEnd]:
        """The jobs that have ended since the last poll (each reported once)."""

    def waiting(self) -> str:
        """How the others wait now: "2 running, 25 pending (Priority)"."""

    def never_starts(self) -> str | None:
        """Why the waiting jobs can never start, when no waiting helps."""

    def stop(self, training: set[int]) -> None:
        """Stop every job: pending ones never start; ``training`` (positions whose runs train now) checkpoint
        and end. Called again at every poll while the launch stops (a requeued job is pending again)."""

    def cancel(self) -> None:
        """End whatever is left of the launch, at once (the stop's grace is over)."""

    def name(self, index: int) -> str:
        """"SLURM job 12_3", "Ray task 3"."""

    def owner(self, index: int) -> str:
        """The job as its trainer records itself in ``run.owner`` (``host.job_of``): "slurm:12_3"."""

    def scheduler_ids(self) -> list[str] | None:
        """Each job's id on a scheduler that outlives the launching process ("12_3"), by position; None where
        the jobs end with it (Ray's tasks are their driver's)."""
