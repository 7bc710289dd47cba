"""Claiming a run folder: exactly one trainer per run. A finished run is skipped; one that another process
trains is waited for or returned as busy; under ``torchrun`` the lead process decides for all."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..config.members import Members
from ..plumbing import environment
from ..plumbing.locks import RunLocks
from ..plumbing.signals import STOP
from ..results.status import BUSY
from ..results.summary import Outcome, Summary, is_finished, read_summary

log = logging.getLogger(__name__)


STOPPED_WAITING = "stopped while waiting"


def decided_by_lead(decide: Callable[[], Any], rank: int, world: int) -> Any:
    """Rank 0 decides for every process (none may train, skip or wait alone)."""
    outcome = decide() if rank == 0 else None
    if world > 1:
        shared = [outcome]
        dist.broadcast_object_list(shared, src=0)
        outcome = shared[0]
    return outcome


def already_finished(members: Members, name: str, rerun: bool, knob: str) -> Outcome | None:
    """What ``train`` returns for a run already finished (its data is then not needed), else None."""
    if rerun or not (done := finished_summaries(members)):
        return None
    # a sweep counts its finished runs once, at its start and in its closing line: skipped quietly there
    log.log(logging.DEBUG if knob == "sweep.rerun" else logging.INFO, "%s already finished; skipping (%s=true "
            "retrains)", name, knob)
    return Outcome.of([{**s, "skipped": True} for s in done], members.packed)


def claim(members: Members, locks: RunLocks, name: str, rerun: bool, wait: bool) -> Outcome | str | None:
    """``None`` when this process now holds the run's locks and must train it; else what ``train`` returns
    (skipped, busy) or ``STOPPED_WAITING``."""
    if not locks.try_acquire():
        if not wait:
            return Outcome(BUSY, holder=locks.holder())
        log.info("%s is being trained by %s; waiting for it", name, locks.holder())
        if not locks.wait(give_up=lambda: STOP.requested):
            return STOPPED_WAITING
        rerun = False  # what the other process finished counts, rerun or not
    if not rerun and (done := finished_summaries(members)):  # finished since the first look (_skipped)
        locks.finish()
        log.info("%s was finished by another process; skipping", name)
        return Outcome.of([{**s, "skipped": True} for s in done], members.packed)
    return None


def finished_summaries(members: Members) -> list[Summary] | None:
    summaries = [read_summary(m.run_dir) for m in members]
    return summaries if all(is_finished(s, m.fingerprint) for s, m in zip(summaries, members)) else None


def distributed() -> tuple[int, int]:
    world = int(os.environ.get(environment.WORLD_SIZE, "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)
