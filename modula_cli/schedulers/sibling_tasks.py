"""The SLURM tasks of one job of several runs (``runs_per_task``), as they see each other.

On SLURM's pre-emption or time-limit signal only task 0 requeues the job (submitit's rule: the others checkpoint
and wait to be requeued with it). So task 0 must outlive its siblings: once its own run has ended it stays while
any other task of the job still trains, and a pre-emption then requeues the whole job, each run resuming from its
checkpoint (a finished one is skipped). A task says it lives by touching a file every ``ALIVE_EVERY_S`` and that
it has ended by writing another; one that stops touching (killed with SIGKILL, its node lost) counts as ended
after ``LOST_AFTER_S``, so task 0 never waits for a task that is gone. The files are per incarnation of the job
(``SLURM_RESTART_COUNT``): a requeued job's tasks are not taken for ended by their earlier selves' files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ALIVE_EVERY_S = 10.0
LOST_AFTER_S = 60.0


@dataclass(frozen=True)
class SiblingTasks:
    folder: Path   # the job's submitit folder
    job_id: str    # "12_3": the array task whose tasks these are
    restart: str   # SLURM_RESTART_COUNT: which incarnation of the job
    size: int      # how many of the job's tasks train a run

    @classmethod
    def of_this_job(cls, size: int, restart: str) -> SiblingTasks:
        """The tasks of the job this process is a task of (``restart``: its SLURM_RESTART_COUNT)."""
        import submitit

        env = submitit.JobEnvironment()
        return cls(Path(env.paths.folder), env.job_id, restart, size)

    def _file(self, rank: int, what: str) -> Path:
        return self.folder / f"{self.job_id}.restart{self.restart}.task{rank}.{what}"

    @contextmanager
    def present(self, rank: int) -> Iterator[None]:
        """While the block runs, task ``rank`` says it lives; after it (however it ends), that it has ended."""
        stop = threading.Event()

        def beat() -> None:
            while True:
                try:
                    self._file(rank, "alive").touch()
                except OSError:  # a shared file system's hiccup: the next beat tries again
                    pass
                if stop.wait(ALIVE_EVERY_S):
                    return

        thread = threading.Thread(target=beat, name=f"task-{rank}-alive", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self._file(rank, "ended").touch()

    def training(self, rank: int, since: float) -> bool:
        """Task ``rank`` has not ended and was heard of within ``LOST_AFTER_S`` (one not heard of at all: since
        ``since``, the start of the wait: it may not have started yet)."""
        if self._file(rank, "ended").exists():
            return False
        try:
            heard = self._file(rank, "alive").stat().st_mtime
        except OSError:
            heard = since
        return time.time() - heard < LOST_AFTER_S

    def wait_for_siblings(self, poll_s: float = 2.0) -> None:
        """Task 0, its own run ended: stay while another task of the job trains (a pre-emption meanwhile is
        submitit's to handle here: it requeues the job)."""
        since = time.time()
        while any(self.training(rank, since) for rank in range(1, self.size)):
            time.sleep(poll_s)
