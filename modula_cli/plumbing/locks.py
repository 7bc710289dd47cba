"""One trainer per run: a run folder's ``run.lock`` (an OS file lock, released when its process dies,
even by SIGKILL) is held while the run trains; ``run.owner`` says by whom: process, host and, in a cluster
job, the job (as the launcher that started it names it: ``RunLocks(job=)``), so that a launcher that saw the job end
can tell its run was abandoned even where file locks do not reach across nodes. The holder renews ``run.owner``
(its time) every ``RENEW_S`` while it trains: one silent far longer (``silent_for``) is gone, wherever it ran."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from . import atomic

log = logging.getLogger(__name__)
LOCK_FILE, OWNER_FILE = "run.lock", "run.owner"
HOST = socket.gethostname()
RENEW_S = 10.0  # how often a trainer says it still holds its run


def owner_of(folder: Path) -> dict | None:
    """Who holds, or last held, the run: ``{"pid", "host", "since", "job"}``; None when unknown."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


@contextmanager
def holding(folder: Path) -> Iterator[bool]:
    """Hold ``folder``'s run lock for the block if nobody else does: yields whether it is held (a folder
    without a lock file is left alone: no run started there)."""
    path = folder / LOCK_FILE
    lock = FileLock(str(path))
    try:
        taken = path.exists() and lock.acquire(timeout=0) is not None
    except (Timeout, OSError):
        taken = False
    try:
        yield taken
    finally:
        if taken:
            lock.release()


def is_held(folder: Path) -> bool:
    """Whether a live process holds ``folder``'s run lock (trains it now). The kernel releases the lock when
    its holder dies, even by SIGKILL, so a ``running`` summary in a folder nobody holds was left by a process
    that is gone. Probing takes the lock for an instant; a trainer starting in that instant finds the run
    busy and comes back to it. An unreadable lock counts as held (nothing is declared dead on a doubt).
    Only a holder on this host is seen for sure: file locks do not reach across nodes on every file system."""
    with holding(folder) as taken:
        return (folder / LOCK_FILE).exists() and not taken


def silent_for(folder: Path) -> float | None:
    """Seconds since the run's holder last renewed ``run.owner`` (None without one): a trainer renews it every
    ``RENEW_S``, so a holder silent for minutes is gone (its node lost, its process killed)."""
    try:
        return max(0.0, time.time() - (folder / OWNER_FILE).stat().st_mtime)
    except OSError:
        return None


def held_here(folder: Path) -> bool:
    """Whether the run's last holder ran on this host (or nothing says where): its lock probe is then sure."""
    owner = owner_of(folder)
    return owner is None or owner.get("host") in (None, HOST)


def _take_over_from_lost_node(folder: Path, lock: FileLock, job: str | None) -> bool:
    """The lock is held by an earlier run of this very cluster job on another host: the scheduler runs one
    instance of a job at a time, so having started it again here it has given up that host (a node that
    stopped answering keeps its processes, and their locks, where a shared file system still honours them).
    Its word settles the lock: a fresh lock file, which the lost holder never had, is taken. Whether taken."""
    owner = owner_of(folder)
    if not job or owner is None or owner.get("job") != job or owner.get("host") in (None, HOST):
        return False
    (folder / LOCK_FILE).unlink(missing_ok=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:  # another process took the fresh file first
        return False
    log.warning("%s was held by pid %s on %s, an earlier run of this job (%s) that the scheduler has started "
                "again here: %s is lost, and this run takes over from its last checkpoint", folder / LOCK_FILE,
                owner.get("pid"), owner.get("host"), job, owner.get("host"))
    return True


class RunLocks:
    """All-or-nothing exclusive hold of several run folders (a packed run's members), taken in sorted
    order so that two processes can never each hold half."""

    def __init__(self, run_dirs: list[Path], job: str | None = None):
        self.run_dirs, self.job = sorted(set(run_dirs)), job  # job: the scheduler's job it trains in
        self._locks = [FileLock(str(d / LOCK_FILE)) for d in self.run_dirs]
        self.held = False
        self._renewing: threading.Event | None = None

    def try_acquire(self) -> bool:
        taken = []
        for folder, lock in zip(self.run_dirs, self._locks):
            folder.mkdir(parents=True, exist_ok=True)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                if not _take_over_from_lost_node(folder, lock, self.job):
                    for other in taken:
                        other.release()
                    return False
            taken.append(lock)
        self.held = True
        owner = json.dumps({"pid": os.getpid(), "host": HOST, "since": time.time(),
                            "job": self.job})
        for folder in self.run_dirs:
            atomic.write_text(folder / OWNER_FILE, owner)
        self._renewing = threading.Event()
        threading.Thread(target=self._renew, args=(self._renewing,), name="run-lock-renewal", daemon=True).start()
        return True

    def _renew(self, stop: threading.Event) -> None:
        """Say every ``RENEW_S`` that the runs are still held (``silent_for`` reads it), until released."""
        while not stop.wait(RENEW_S):
            for folder in self.run_dirs:
                with suppress(OSError):  # removed by finish() meanwhile, or a file system's hiccup
                    os.utime(folder / OWNER_FILE)

    def wait(self, give_up: Callable[[], bool], poll_s: float = 0.5) -> bool:
        """Block until held (True), or until ``give_up()`` says so (False)."""
        while not self.try_acquire():
            if give_up():
                return False
            time.sleep(poll_s)
        return True

    def holder(self) -> str:
        """Who holds the first busy folder, as far as its owner file says."""
        for folder in self.run_dirs:
            owner = owner_of(folder) or {}
            if "pid" in owner and "host" in owner:
                return f"pid {owner['pid']} on {owner['host']}" + (f" ({owner['job']})" if owner.get("job") else "")
        return "another process"

    def release(self) -> None:
        if self._renewing is not None:
            self._renewing.set()
            self._renewing = None
        if self.held:
            for lock in reversed(self._locks):
                lock.release()
            self.held = False

    def finish(self) -> None:
        """For a run that has finished: remove the lock and owner files while still holding the locks, then release
        them, so a finished run folder holds its results alone. Whoever comes next makes a fresh lock file, takes
        it and finds the run finished: no process can hold a removed file's lock beside another's fresh one."""
        if not self.held:
            return
        for folder in self.run_dirs:
            for name in (OWNER_FILE, LOCK_FILE):
                (folder / name).unlink(missing_ok=True)
        self.release()

    def discard(self) -> None:
        """Release, and remove what holding left behind (a run that wrote nothing leaves no files)."""
        if not self.held:
            return
        self.release()
        for folder in self.run_dirs:
            for name in (OWNER_FILE, LOCK_FILE):
                (folder / name).unlink(missing_ok=True)
            with suppress(OSError):
                folder.rmdir()  # only when empty
