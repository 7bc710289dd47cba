"""One training run: claim its folder (``claim.py``), build what stays fixed (``context.py``), start from the
checkpoint or afresh, run the loop (``loop.py``), and write the summaries (``summaries.py``): divergence,
checkpoints, resume, and exactly one trainer per run folder."""

from __future__ import annotations

import dataclasses
import logging
import signal
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..config.members import MemberDir, Members
from ..config.run_config import RunConfig
from ..config.validate import checked_optim
from ..data import DataUnavailable
from ..models import ModelError
from ..plumbing import atomic
from ..plumbing.locks import RunLocks
from ..plumbing.signals import STOP, StopRequested
from ..results.files import CONFIG_FILE, METRICS_FILE
from ..results.status import COMPLETED, INTERRUPTED
from ..results.summary import Outcome, Summary, is_finished, write_summary
from . import checkpoint
from .branches import Trunks, cooldown_start
from .claim import STOPPED_WAITING, already_finished, claim, decided_by_lead, distributed
from .context import RunContext
from .loggers import RunLoggers
from .loop import run_loop
from .prefetch import Prefetcher
from .state import RunState
from .summaries import Provenance, write_failed, write_summaries

log = logging.getLogger(__name__)
# Said in one line, without a traceback (which would bury the cause): data that cannot be had, an architecture
# that cannot be built for the data.
ONE_LINE_ERRORS = (DataUnavailable, ModelError)


def train(cfg: DictConfig, run_dir: Path, *, member_dir: MemberDir | None = None,
          overrides: list[str] | None = None, sweep_dir: Path | None = None, launch: str | None = None,
          wait: bool = True, job: str | None = None) -> Outcome:
    """Train one configuration into ``run_dir``; returns its ``Outcome``: its summary (also written to
    summary.json), or with ``optim.lr`` and / or ``train.seed`` a list, each member's (one member per (LR,
    seed), trained as a stacked ensemble, each on its own seed's initialisation and batches, exactly as its
    separate run). A run that another process is training is waited for (``wait``) or returned as ``BUSY``;
    a finished run is skipped (its data is not needed). When the data or the network cannot be had
    (``ONE_LINE_ERRORS``) a run of a sweep is recorded as failed, a single run leaves nothing behind. ``job``: the
    scheduler's job it trains in ("slurm:12_3"), as its launcher named it, recorded with its lock and summaries.
    """
    opt = checked_optim(cfg)
    members = Members.of(cfg, opt, run_dir, member_dir)
    if opt.lr is None:  # the mode's default for this architecture, as the members took it
        opt = dataclasses.replace(opt, lr=members.items[0].lr)
    config = RunConfig.of(cfg, opt)
    rerun = config.rerun
    rank, world = distributed()
    provenance, locks = Provenance(overrides or [], sweep_dir, launch, job), RunLocks(members.run_dirs, job)
    knob = "sweep.rerun" if sweep_dir is not None else "train.rerun"
    skipped = decided_by_lead(lambda: already_finished(members, run_dir.name, rerun, knob), rank, world)
    if skipped is not None:
        return skipped
    claimed = decided_by_lead(lambda: claim(members, locks, run_dir.name, rerun, wait), rank, world)
    if claimed == STOPPED_WAITING:
        raise StopRequested(STOP.signum or signal.SIGTERM)
    if claimed is not None:
        return claimed
    ctx: RunContext | None = None
    try:  # the data and the network are built under the run's locks: nobody else is training it
        with STOP.at_once("preparing the data"):  # no step to stop after: a signal stops it where it is
            ctx = RunContext.build(config, members, rank, world)
        with STOP.installed():
            summaries = train_from_checkpoint(ctx, run_dir, provenance)
        if all(is_finished(s, m.fingerprint) for s, m in zip(summaries, members)):
            locks.finish()  # a finished run folder holds its results alone
    except StopRequested as stop:
        if ctx is None:  # stopped before its first step: nothing of this run to keep or resume
            stop.trained = False
            if sweep_dir is None:
                locks.discard()
        raise
    except Exception as error:
        if (cause := atomic.full_disk_cause(error)) is not None and not isinstance(error, atomic.DiskFull):
            # a log appended to a full disk: said as a checkpoint's full disk is, in one line
            written = Path(cause.filename) if cause.filename else run_dir
            kept = "the last checkpoint is kept as it was" if (run_dir / checkpoint.CHECKPOINT_FILE).exists() else \
                "no checkpoint was written yet"
            full = atomic.disk_full(cause, written, kept)
            if rank == 0:
                write_failed(members, full, provenance)
            raise full from error
        if isinstance(error, ONE_LINE_ERRORS) and sweep_dir is None:  # a single run: nothing written or left
            locks.discard()
        elif rank == 0:
            write_failed(members, error, provenance)
        raise
    finally:
        locks.release()
    return Outcome.of(summaries, members.packed)


def start_state(ctx: RunContext, path: Path, rerun: bool) -> RunState:
    """A fresh state, or the checkpointed one when it is valid for this very configuration."""
    state = ctx.fresh_state()
    saved = None if rerun else checkpoint.load(path, ctx.members.fingerprint, ctx.device)
    if saved is None:
        return state
    try:
        state.load_state_dict(saved)
    except (KeyError, ValueError, TypeError, RuntimeError) as error:
        checkpoint.discard(path, f"unusable ({type(error).__name__}: {error})")
        return ctx.fresh_state()
    log.info("resuming %s from step %d", path.parent.name, state.step)
    return state


def branched_state(ctx: RunContext, state: RunState, trunks: Trunks | None, cooldown: int | None) -> RunState:
    """A fresh state replaced by the latest trunk of this stable phase at or before this run's cool-down, if any."""
    if trunks is None or state.step or (folder := trunks.latest(cooldown)) is None:
        return state
    saved = trunks.load(folder, [m.run_dir / METRICS_FILE for m in ctx.members], ctx.device)
    if saved is None:
        return state
    try:
        state.load_state_dict(saved)
    except (KeyError, ValueError, TypeError, RuntimeError) as error:
        log.warning("the trunk %s does not fit this run (%s); training from the start", folder, error)
        return ctx.fresh_state()
    log.info("branching %s from the stable phase at step %d (%s)", ctx.members.items[0].run_dir.name, state.step,
             folder)
    return state


def train_from_checkpoint(ctx: RunContext, run_dir: Path, provenance: Provenance) -> list[Summary]:
    members = ctx.members
    path = run_dir / checkpoint.CHECKPOINT_FILE
    state = start_state(ctx, path, ctx.config.rerun)
    cooldown = cooldown_start(ctx) if provenance.sweep_dir is not None else None
    trunks = Trunks.of(ctx, provenance.sweep_dir) if cooldown is not None else None
    resumed = state.step
    state = branched_state(ctx, state, trunks, cooldown)
    provenance = dataclasses.replace(provenance, resumed_from=resumed,
                                     branched_from=state.step if state.step and not resumed else 0)
    lead = ctx.rank == 0
    if lead:
        for member in members:
            atomic.write_text(member.run_dir / CONFIG_FILE, OmegaConf.to_yaml(member.cfg, resolve=True))
        write_summaries(ctx, state, provenance, final=None)

    def save(out: RunLoggers, running: bool = True) -> None:
        if lead:
            state.metrics_offsets, state.wandb_ids = out.offsets(), out.wandb_ids()
            checkpoint.save(path, state.state_dict(), members.fingerprint)
            if running:  # the step a relaunch would resume from, should this process be killed
                write_summaries(ctx, state, provenance, final=None)

    def save_trunk(out: RunLoggers) -> None:
        if lead and trunks is not None:
            trunks.save(state.state_dict(), state.step, [m.run_dir / METRICS_FILE for m in members], out.offsets())

    loggers = RunLoggers(ctx.config.logger, ctx.train, members, state, lead=lead,
                         show_bar=lead and ctx.train.progress, sweep_dir=provenance.sweep_dir, total=ctx.iterations)
    with loggers as out, Prefetcher(ctx.batch_for, state.step, ctx.iterations) as batches:
        try:
            run_loop(ctx, state, out, batches, save, (cooldown, save_trunk) if trunks is not None else None)
        except StopRequested:
            save(out, running=False)
            if lead:
                write_summaries(ctx, state, provenance, final=INTERRUPTED)
            STOP.chain()  # e.g. submitit's handler, which requeues the job
            raise
        summaries = write_summaries(ctx, state, provenance, final=COMPLETED, write=False)
        out.finish(summaries)
    if lead:
        for member, summary in zip(members, summaries):
            write_summary(member.run_dir, summary)
        if ctx.train.keep_checkpoint:
            save(out, running=False)
        else:  # a finished run needs no resume point; sweeps hold many runs
            path.unlink(missing_ok=True)
    return summaries
