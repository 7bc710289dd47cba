"""Stopping on a signal without losing work: SIGTERM, SIGINT (Ctrl-C) and the cluster pre-emption signals
SIGUSR1 / SIGUSR2 set one process-wide flag. The training loop reads it after every step, checkpoints and
raises ``StopRequested``; a sweep then starts no further run, writes its report and exits 128 + signal.
A second Ctrl-C stops at once.

Jobs that run in other processes or on other nodes (local_parallel, SLURM, Ray) also learn of a stop from a
marker file that the launching process writes into the sweep folder (``watch``): the flag then reads as
SIGTERM, as if the launcher's signal had reached the job."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
MARKER_POLL_S = 1.0  # how often a stop marker is looked for (a stat; on a shared file system, not every step)


class StopRequested(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        self.trained = True  # False: stopped before the run's first step (nothing to resume)
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __reduce__(self) -> tuple:  # launchers pickle a job's exception back to the parent
        return (StopRequested, (self.signum,))


class StopSignal:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._depth = 0
        self._listeners: list[Callable[[int], None]] = []  # told once, at the first signal (``telling``)
        self._marker: Path | None = None
        self._marker_seen_at = 0.0
        self.received = False  # a signal reached this process (not only the launch's stop marker)
        self._at_once = 0  # inside ``at_once``: a signal raises StopRequested where the program is

    @property
    def requested(self) -> bool:
        if self.signum is None and self._marker is not None and self._marker_appeared():
            self.signum = signal.SIGTERM  # as if the launcher's SIGTERM had reached this process
            log.warning("the launch was stopped (%s): the current run checkpoints after this step and no further "
                        "run starts", self._marker.name)
        return self.signum is not None

    def watch(self, marker: Path | None) -> None:
        """Also stop when the file ``marker`` appears (None: no marker); looked for at most every
        ``MARKER_POLL_S``."""
        self._marker, self._marker_seen_at = marker, 0.0

    def _marker_appeared(self) -> bool:
        now = time.monotonic()
        if now - self._marker_seen_at < MARKER_POLL_S:
            return False
        self._marker_seen_at = now
        return self._marker is not None and self._marker.exists()

    def reclaim(self) -> None:
        """Take the signals back from a library that replaced our handlers while they were installed (Ray's
        ``ray.init`` sets its own SIGTERM handler, which exits at once)."""
        if self._depth and threading.current_thread() is threading.main_thread():
            for signum in HANDLED:
                signal.signal(signum, self._handle)

    @contextmanager
    def installed(self) -> Iterator[StopSignal]:
        """Handle the signals while inside (nested uses share one installation). Off the main thread
        signals stay with whoever runs this thread (a launcher)."""
        owner = self._depth == 0 and threading.current_thread() is threading.main_thread()
        if owner:
            self.signum, self.received = None, False
            self._previous = {s: signal.signal(s, self._handle) for s in HANDLED}
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if owner:
                for signum, handler in self._previous.items():
                    signal.signal(signum, handler)
                self._previous = {}

    @contextmanager
    def telling(self, listener: Callable[[int], None]) -> Iterator[StopSignal]:
        """While inside, ``listener(signum)`` is told of the first signal (a launch writes its stop marker; a
        follower of cluster jobs wakes up)."""
        self._listeners.append(listener)
        try:
            yield self
        finally:
            self._listeners.remove(listener)

    @contextmanager
    def at_once(self, doing: str) -> Iterator[StopSignal]:
        """Work with no step to stop after (preparing a dataset): a signal stops it where it is, by raising
        ``StopRequested``; long loops inside also call ``stop_here`` in case a library swallowed it."""
        with self.installed():
            self._at_once += 1
            self._doing = doing
            previous_hook = sys.unraisablehook
            # raised inside a finaliser or weakref callback, the stop is only printed ("Exception ignored"):
            # say nothing, the next ``stop_here`` raises it again
            sys.unraisablehook = lambda unraisable: None if isinstance(unraisable.exc_value, StopRequested) \
                else previous_hook(unraisable)
            try:
                self.raise_if_requested()
                yield self
            finally:
                sys.unraisablehook = previous_hook
                self._at_once -= 1

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user wants out now
        first = self.signum is None
        self.signum, self.received = signum, True
        if self._at_once:
            log.warning("received %s while %s: stopping now (nothing half-done is kept)",
                        signal.Signals(signum).name, self._doing)
            raise StopRequested(signum)
        if first:
            log.warning("received %s: the current run checkpoints after this step and no further run starts "
                        "(Ctrl-C again to stop at once)", signal.Signals(signum).name)
            for listener in list(self._listeners):
                listener(signum)

    def stop_here(self) -> None:
        """Inside ``at_once``: raise the stop a library may have caught (outside: nothing, whatever came before)."""
        if self._at_once and self.signum is not None:
            raise StopRequested(self.signum)

    def raise_if_requested(self) -> None:
        if self.signum is not None:
            raise StopRequested(self.signum)

    def chain(self) -> None:
        """After checkpointing, pass the signal to the handler that was there before (e.g. submitit's,
        which requeues the job, or exits); Python's own defaults are left out. A handler that cannot do its
        part (submitit's, when the job has been requeued too often) is said in a warning: the run is
        checkpointed either way. A stop that came as the launch's marker, not a signal, is not passed on."""
        previous = self._previous.get(self.signum) if self.received and self.signum is not None else None
        if callable(previous) and previous is not signal.default_int_handler:
            try:
                previous(self.signum, None)
            except Exception as error:  # noqa: BLE001 - SystemExit (a requeue's exit) passes
                log.warning("after the checkpoint: %s: %s", type(error).__name__, error)


STOP = StopSignal()
