"""A run's summaries: each member's ``summary.json`` at the start, at every checkpoint, on a stop, at the end,
and when the run fails, with where it came from (its overrides, its sweep, its launch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..config.members import Members, member_overrides
from ..optim import MODES
from ..plumbing import atomic
from ..plumbing.locks import HOST
from ..results.status import COMPLETED, DIVERGED, FAILED, RUNNING
from ..results.summary import Summary, summary_record, write_summary
from .state import RunState

if TYPE_CHECKING:
    from .context import RunContext


@dataclass(frozen=True)
class Provenance:
    """Where a run's summaries come from: its overrides, its sweep and the launch that trained it."""

    overrides: list[str]
    sweep_dir: Path | None
    launch: str | None
    job: str | None = None  # the scheduler's job it trains in ("slurm:12_3"), as its launcher named it
    resumed_from: int = 0  # the checkpoint's step this process started from (0: from the start)
    branched_from: int = 0  # the step of the WSD stable phase it started from (another run's: ``branches.py``)

    def fields(self, members: Members, k: int) -> dict[str, Any]:
        member = members.items[k]
        overrides = member_overrides(self.overrides, member.packed) if members.packed else self.overrides
        return {"overrides": overrides, "launch": self.launch, "host": HOST, "job": self.job,
                **({"resumed_from": self.resumed_from} if self.resumed_from else {}),
                **({"branched_from": self.branched_from} if self.branched_from else {})}


def write_failed(members: Members, error: Exception, provenance: Provenance) -> None:
    import traceback

    for k, member in enumerate(members):
        # a full disk is said in its one line: a traceback would only make the summary less likely to fit
        trace = {} if isinstance(error, atomic.DiskFull) else {"traceback": traceback.format_exc()}
        write_summary(member.run_dir, summary_record(
            FAILED, member.run_dir, member.identity.knobs, member.fingerprint,
            error=f"{type(error).__name__}: {error}", **trace, **provenance.fields(members, k)))


def write_summaries(ctx: RunContext, state: RunState, provenance: Provenance, final: str | None,
                     write: bool = True) -> list[Summary]:
    """Each member's summary: still-running members get ``final`` (or ``running`` when None); diverged
    members stay diverged."""
    summaries = []
    for k, member in enumerate(ctx.members):
        status = state.statuses[k] if state.statuses[k] != RUNNING else (final or RUNNING)
        done = status == COMPLETED
        steps_done = state.stopped_at[k] if status == DIVERGED else state.step
        fields = {"train_loss": state.final_loss(k) if done else None,
                  "test_loss": state.last_eval[k].get("test_loss") if done else None,
                  "last_logged_train_loss": state.last_loss[k], "steps_done": steps_done,
                  "wall_time_s": round(state.elapsed, 3),
                  "throughput": round(steps_done * ctx.units_per_step / max(state.elapsed, 1e-9), 1),
                  "throughput_unit": f"{ctx.units}/s", "device": str(ctx.device), "world_size": ctx.world,
                  "threads": torch.get_num_threads(),
                  "packed_with": len(ctx.members) if ctx.members.packed else 1, **provenance.fields(ctx.members, k)}
        if ctx.data.kind == "image":
            fields["test_acc"] = state.last_eval[k].get("test_acc") if done else None
        fields.update(MODES[ctx.opt.mode].summary_fields(ctx.opt, ctx.device))
        summaries.append(summary_record(status, member.run_dir, member.identity.knobs, member.fingerprint, **fields))
        if write:
            write_summary(member.run_dir, summaries[-1])
    return summaries
