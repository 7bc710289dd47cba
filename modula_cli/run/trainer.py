"""One training run: the optimisation loop (docs/design.md) over a ``RunState``, with metrics, evaluation,
divergence, checkpoints, resume, and exactly one trainer per run folder.

The loop reads top to bottom like nanoGPT's: batch → loss and gradient → (all-reduce) → update → log /
evaluate / checkpoint. Losses are read from the device only at log steps.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from ..plumbing import environment
from ..config.members import MemberDir, Members, member_overrides
from ..config.schema import TrainConfig
from ..config.validate import checked_optim
from ..data import Dataset, DataUnavailable, build_dataset
from ..models import ModelError, is_import_path
from ..models.config import ArchConfig
from ..models.variant import Variant, explain_scope, variant_of
from ..nn import Module, layer_roles
from ..nn.loss import grads_of, losses_and_hits
from ..optim import MODES, OptimConfig, build_network, init_state, optimizer_step
from ..plumbing import atomic
from ..plumbing.atomic import remove_if_empty
from ..plumbing.device import resolve_device
from ..plumbing.locks import RunLocks
from ..plumbing.settings import typed
from ..plumbing.signals import STOP, StopRequested
from ..results.knobs import knobs_of
from ..results.status import BUSY, COMPLETED, DIVERGED, FAILED, INTERRUPTED, RUNNING
from ..results.summary import Outcome, Summary, is_finished, read_summary, summary_record, write_summary
from . import checkpoint, temperatures
from .layer_stats import LayerStats
from .loggers import RunLoggers, best_text
from .prefetch import Prefetcher
from .state import RunState

log = logging.getLogger(__name__)
# Said in one line, without a traceback (which would bury the cause): data that cannot be had, an architecture
# that cannot be built for the data.
ONE_LINE_ERRORS = (DataUnavailable, ModelError)


def train(cfg: DictConfig, run_dir: Path, *, member_dir: MemberDir | None = None,
          overrides: list[str] | None = None, sweep_dir: Path | None = None, launch: str | None = None,
          wait: bool = True) -> Outcome:
    """Train one configuration into ``run_dir``; returns its ``Outcome``: its summary (also written to
    summary.json), or with ``optim.lr`` and / or ``train.seed`` a list, each member's (one member per (LR,
    seed), trained as a stacked ensemble, each on its own seed's initialisation and batches, exactly as its
    separate run). A run that another process is training is waited for (``wait``) or returned as ``BUSY``;
    a finished run is skipped (its data is not needed). When the data or the network cannot be had
    (``ONE_LINE_ERRORS``) a run of a sweep is recorded as failed, a single run leaves nothing behind.
    """
    opt = checked_optim(cfg)
    members = Members.of(cfg, opt, run_dir, member_dir)
    if opt.lr is None:  # the mode's default for this architecture, as the members took it
        opt = dataclasses.replace(opt, lr=members.items[0].lr)
    rerun = bool(cfg.train.rerun or cfg.sweep.rerun)
    rank, world = _distributed()
    record, locks = _Record(overrides or [], sweep_dir, launch), RunLocks(members.run_dirs)
    knob = "sweep.rerun" if sweep_dir is not None else "train.rerun"
    if (skipped := _decided(lambda: _skipped(members, run_dir.name, rerun, knob), rank, world)) is not None:
        return skipped
    claimed = _decided(lambda: _claim(members, locks, run_dir.name, rerun, wait), rank, world)
    if claimed == _STOPPED:
        raise StopRequested(STOP.signum or signal.SIGTERM)
    if claimed is not None:
        return claimed
    try:  # the data and the network are built under the run's locks: nobody else is training it
        with STOP.at_once("preparing the data"):  # no step to stop after: a signal stops it where it is
            ctx = RunContext.build(cfg, opt, members, rank, world)
        with STOP.installed():
            summaries = _train(ctx, run_dir, rerun, record)
    except StopRequested as stop:
        if "ctx" not in locals():  # stopped before its first step: nothing of this run to keep or resume
            stop.trained = False
            if sweep_dir is None:
                locks.discard()
        raise
    except Exception as error:
        if isinstance(error, ONE_LINE_ERRORS) and sweep_dir is None:  # a single run: nothing written or left
            locks.discard()
        elif rank == 0:
            _write_failed(members, error, record)
        raise
    finally:
        locks.release()
    return Outcome.of(summaries, members.packed)


_STOPPED = "stopped while waiting"


def _decided(decide: Callable[[], Any], rank: int, world: int) -> Any:
    """Rank 0 decides for every process (none may train, skip or wait alone)."""
    outcome = decide() if rank == 0 else None
    if world > 1:
        shared = [outcome]
        dist.broadcast_object_list(shared, src=0)
        outcome = shared[0]
    return outcome


def _skipped(members: Members, name: str, rerun: bool, knob: str) -> Outcome | None:
    """What ``train`` returns for a run already finished (its data is then not needed), else None."""
    if rerun or not (done := _finished(members)):
        return None
    # a sweep counts its finished runs once, at its start and in its closing line: skipped quietly there
    log.log(logging.DEBUG if knob == "sweep.rerun" else logging.INFO, "%s already finished; skipping (%s=true "
            "retrains)", name, knob)
    return Outcome.of([{**s, "skipped": True} for s in done], members.packed)


def _claim(members: Members, locks: RunLocks, name: str, rerun: bool, wait: bool) -> Outcome | str | None:
    """``None`` when this process now holds the run's locks and must train it; else what ``train`` returns
    (skipped, busy) or ``_STOPPED``."""
    if not locks.try_acquire():
        if not wait:
            return Outcome(BUSY, holder=locks.holder())
        log.info("%s is being trained by %s; waiting for it", name, locks.holder())
        if not locks.wait(give_up=lambda: STOP.requested):
            return _STOPPED
        rerun = False  # what the other process finished counts, rerun or not
    if not rerun and (done := _finished(members)):  # finished since the first look (_skipped)
        locks.release()
        log.info("%s was finished by another process; skipping", name)
        return Outcome.of([{**s, "skipped": True} for s in done], members.packed)
    return None


def _finished(members: Members) -> list[Summary] | None:
    summaries = [read_summary(m.run_dir) for m in members]
    return summaries if all(is_finished(s, m.fingerprint) for s, m in zip(summaries, members)) else None


@dataclass(frozen=True)
class _Record:
    """Where a run's summaries come from: its overrides, its sweep and the launch that trained it."""

    overrides: list[str]
    sweep_dir: Path | None
    launch: str | None
    resumed_from: int = 0  # the checkpoint's step this process started from (0: from the start)

    def fields(self, members: Members, k: int) -> dict[str, Any]:
        member = members.items[k]
        overrides = member_overrides(self.overrides, member.packed) if members.packed else self.overrides
        return {"overrides": overrides, "launch": self.launch,
                **({"resumed_from": self.resumed_from} if self.resumed_from else {})}


def _write_failed(members: Members, error: Exception, record: _Record) -> None:
    import traceback

    for k, member in enumerate(members):
        write_summary(member.run_dir, summary_record(
            FAILED, member.run_dir, knobs_of(member.cfg, member.lr, member.seed), member.fingerprint,
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(), **record.fields(members, k)))


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get(environment.WORLD_SIZE, "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


@dataclass
class RunContext:
    """What stays fixed while a run trains: config, device, data, network and the compiled step."""

    cfg: DictConfig
    train: TrainConfig
    arch: ArchConfig
    opt: OptimConfig
    members: Members
    rank: int
    world: int
    device: torch.device
    data: Dataset
    net: Module
    compute: Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]
    eval_batches: list[tuple[torch.Tensor, torch.Tensor]]  # shared by every member (and seed)
    variant: Variant = field(default_factory=Variant)
    seed_index: torch.Tensor | None = None  # packed: each member's position among the run's seeds

    @classmethod
    def build(cls, cfg: DictConfig, opt: OptimConfig, members: Members, rank: int, world: int) -> RunContext:
        train = typed(TrainConfig, cfg.train)
        device = _run_device(train.device, world)
        if train.batch_size % world:
            raise ValueError(f"train.batch_size={train.batch_size} must divide evenly over {world} processes")
        data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
        variant = variant_of(cfg)
        ctx = cls(cfg, train, typed(ArchConfig, cfg.arch), opt, members, rank, world, device, data,
                  build_network(cfg.arch, data, variant, opt), compute=None,
                  eval_batches=data.eval_batches(train.eval_batches, train.batch_size, device),
                  variant=variant, seed_index=members.seed_index(device) if members.packed else None)
        if rank == 0 and (scope := explain_scope(cfg.arch.name, variant, ctx.net)):
            _say_once(scope)
        if members.packed:
            ctx.eval_batches = [members.shared(x, y) for x, y in ctx.eval_batches]
        if is_import_path(cfg.arch.name):  # a user's layer roles are known once it is built
            if problems := MODES[opt.mode].problems(opt, tuple(layer_roles(ctx.net))):
                raise ValueError("; ".join(problems))
        if train.compile:  # a sweep compiles many configurations in one process: start each afresh
            torch._dynamo.reset()
        ctx.compute = torch.compile(ctx.loss_and_grads) if train.compile else ctx.loss_and_grads
        return ctx

    @property
    def iterations(self) -> int:
        """Training iterations: train.steps, and in the paper variant one more at LR 0, as its reference loop
        runs steps + 1 (``schedule_factor`` is 0 past the end)."""
        return self.train.steps + int(self.variant.extra_step)

    @property
    def units(self) -> str:
        return "tokens" if self.data.kind == "language" else "samples"

    @property
    def units_per_step(self) -> int:
        return self.train.batch_size * (self.data.context if self.data.kind == "language" else 1)

    def losses(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        """Per-member losses and hits; ``x, y`` carry the member axis when packed (see ``batch_for``)."""
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.train.dtype == "bfloat16"
                    else nullcontext())
        with autocast:
            return losses_and_hits(self.net, weights, x, y, len(self.members) if self.members.packed else None)

    def loss_and_grads(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        loss = self.losses(weights, x, y)[0]
        return loss.detach(), grads_of(loss, weights)

    def batch_for(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s batch of each seed; packed, with a leading member axis (each member gets its
        own seed's batch: a view when they share one seed, a gather of the few seeds' batches otherwise)."""
        size, share = self.train.batch_size, self.train.batch_size // self.world
        batches = []
        for seed in self.members.seeds:
            x, y = self.data.train_batch(step, size, seed=seed, device=self.device)
            if self.world > 1:  # every rank draws the same global batch and keeps its slice
                x, y = x[self.rank * share:(self.rank + 1) * share], y[self.rank * share:(self.rank + 1) * share]
            batches.append((x, y))
        return self.members.batch(batches, self.seed_index)

    def initial_weights(self) -> list[torch.Tensor]:
        """Each member's initial weights from its own seed (on the mode's constraint set), stacked on the member
        axis when packed."""
        mode = MODES[self.opt.mode]
        by_seed = {seed: mode.initial_weights(self.net, self.net.initialize(seed=seed, device=self.device))
                   for seed in self.members.seeds}
        return self.members.weights(by_seed)

    def fresh_state(self) -> RunState:
        k = len(self.members)
        weights = [w.requires_grad_() for w in self.initial_weights()]
        window = self.arch.loss_window
        return RunState(weights, init_state(weights, self.opt), torch.zeros(window, k, device=self.device), k)


def _run_device(name: str, world: int) -> torch.device:
    device = resolve_device(name)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get(environment.LOCAL_RANK, "0")))
        torch.cuda.set_device(device)
    elif device.type == "cuda":  # an explicit index: the prefetch thread has its own current device
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _start_state(ctx: RunContext, path: Path, rerun: bool) -> RunState:
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


def _train(ctx: RunContext, run_dir: Path, rerun: bool, record: _Record) -> list[Summary]:
    cfg, members = ctx.cfg, ctx.members
    path = run_dir / checkpoint.CHECKPOINT_FILE
    state = _start_state(ctx, path, rerun)
    record = dataclasses.replace(record, resumed_from=state.step)
    lead = ctx.rank == 0
    if lead:
        for member in members:
            atomic.write_text(member.run_dir / "config.yaml", OmegaConf.to_yaml(member.cfg, resolve=True))
        _write_summaries(ctx, state, record, final=None)

    def save(out: RunLoggers, running: bool = True) -> None:
        if lead:
            state.metrics_offsets, state.wandb_ids = out.offsets(), out.wandb_ids()
            checkpoint.save(path, state.state_dict(), members.fingerprint)
            if running:  # the step a relaunch would resume from, should this process be killed
                _write_summaries(ctx, state, record, final=None)

    loggers = RunLoggers(cfg, members, state, lead=lead, show_bar=lead and ctx.train.progress,
                         sweep_dir=record.sweep_dir, total=ctx.iterations)
    with loggers as out, Prefetcher(ctx.batch_for, state.step, ctx.iterations) as batches:
        try:
            _loop(ctx, state, out, batches, save)
        except StopRequested:
            save(out, running=False)
            if lead:
                _write_summaries(ctx, state, record, final=INTERRUPTED)
            STOP.chain()  # e.g. submitit's handler, which requeues the job
            raise
        summaries = _write_summaries(ctx, state, record, final=COMPLETED, write=False)
        out.finish(summaries)
    if lead:
        for member, summary in zip(members, summaries):
            write_summary(member.run_dir, summary)
        if ctx.train.keep_checkpoint:
            save(out, running=False)
        else:  # a finished run needs no resume point; sweeps hold many runs
            path.unlink(missing_ok=True)
    return summaries


@functools.cache
def _say_once(note: str) -> None:
    """A note that holds for every run of a sweep, logged by its first run in each process only."""
    log.info(note)


def _loop(ctx: RunContext, state: RunState, out: RunLoggers, batches: Prefetcher,
          save: Callable[[RunLoggers], None]) -> None:
    train, steps = ctx.train, ctx.train.steps  # the schedule runs over train.steps
    lrs = ctx.members.lrs(ctx.device)
    active = state.active() if ctx.members.packed else None
    every = train.layer_stats_every
    layers = LayerStats(ctx.net, ctx.losses, ctx.eval_batches[0], ctx.initial_weights(), ctx.members.packed,
                        every) if every and ctx.rank == 0 else None
    if all(s == DIVERGED for s in state.statuses):  # stopped right after the last member diverged
        return
    unread: tuple[int, torch.Tensor, torch.Tensor] | None = None  # a step whose losses the host has not read
    for t in range(state.step, ctx.iterations):
        tick = time.perf_counter()
        loss, grads = ctx.compute(state.weights, *batches.get(t))
        loss, grads, stop = _all_reduce(ctx, loss, grads)
        before = [w.detach().clone() for w in state.weights] if layers and layers.due(t) else None
        lr = optimizer_step(ctx.net, state.weights, grads, state.optim, ctx.opt, t, steps, base_lr=lrs,
                            active=active, compile=train.compile)
        state.record_loss(t, loss)
        state.step, state.elapsed = t + 1, state.elapsed + time.perf_counter() - tick
        last = t == ctx.iterations - 1
        # Every step's losses are checked for divergence, read one step late (the device is busy with this
        # step meanwhile, so the host never waits for it); a logged step is read at once.
        diverged = _watch(ctx, state, out, *unread) if unread else False
        unread = (t, loss, lr)
        if t % train.log_every == 0 or last:
            _log_train(ctx, state, out, t, loss, lr)
            unread, diverged = None, True
        if diverged:
            active = state.active() if ctx.members.packed else None
            if all(s == DIVERGED for s in state.statuses):
                break
        # (not at train.steps when the paper variant's extra iteration follows: the same weights, evaluated last)
        if (train.eval_every and (t + 1) % train.eval_every == 0 and t + 1 < steps) or last:
            _log_eval(ctx, state, out, t + 1)
        if before is not None:  # after this step's logs: W&B drops a step lower than one it has seen
            running = [s == RUNNING for s in state.statuses]
            for k, records in enumerate(layers.measure(state.weights, before, lr, running)):
                if records is not None:
                    out.emit_layers(k, t + 1, records)
        if stop if ctx.world > 1 else STOP.requested:  # after every step: a signal costs at most one step
            if unread:
                _watch(ctx, state, out, *unread)
            raise StopRequested(STOP.signum or signal.SIGTERM)
        if train.checkpoint_every and (t + 1) % train.checkpoint_every == 0 and not last:
            if unread:  # the saved state has read every step it holds
                _watch(ctx, state, out, *unread)
                unread = None
                active = state.active() if ctx.members.packed else None
            save(out)
        out.bar.update(1)


def _all_reduce(ctx: RunContext, loss: torch.Tensor, grads: list[torch.Tensor]):
    """Average gradients and losses over processes; a stop request anywhere stops every process."""
    if ctx.world == 1:
        return loss, grads, STOP.requested
    k = loss.numel()
    flag = torch.tensor([1.0 if STOP.requested else 0.0], device=loss.device)
    flat = torch.cat([g.reshape(-1) for g in grads] + [loss, flag])
    dist.all_reduce(flat)
    stop = bool(flat[-1] > 0)
    flat = flat[:-1] / ctx.world
    pieces = flat[:-k].split([g.numel() for g in grads])
    return flat[-k:], [piece.view_as(g) for piece, g in zip(pieces, grads)], stop


def _record(ctx: RunContext, state: RunState, t: int, loss: float, lr: float) -> dict[str, Any]:
    return {"step": t, "train_loss": loss, "lr": lr, "elapsed": round(state.elapsed, 4),
            ctx.units: (t + 1) * ctx.units_per_step}


def _diverges(ctx: RunContext, state: RunState, member: int, loss: float) -> bool:
    """Not finite, or above ``train.diverge_factor`` × the member's first loss (which this call records)."""
    initial = state.initial_loss[member]
    if initial is None:
        initial = state.initial_loss[member] = loss
    return not math.isfinite(loss) or loss > ctx.train.diverge_factor * initial


def _watch(ctx: RunContext, state: RunState, out: RunLoggers, t: int, loss: torch.Tensor, lr: torch.Tensor
           ) -> bool:
    """Step t's divergence check between logs: a member that diverged is frozen (packed) or stopped, and its
    last loss goes to the log. Whether any member diverged."""
    losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
    diverged = False
    for k, status in enumerate(state.statuses):
        if status == RUNNING and _diverges(ctx, state, k, losses[k]):
            state.last_loss[k] = losses[k]
            out.emit(k, _record(ctx, state, t, losses[k], lrs[k % len(lrs)]))
            state.diverge(k, t + 1)
            diverged = True
    return diverged


def _log_train(ctx: RunContext, state: RunState, out: RunLoggers, t: int, loss: torch.Tensor,
               lr: torch.Tensor) -> None:
    losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
    learned = _learned_scales(ctx, state)
    for k, status in enumerate(state.statuses):
        if status != RUNNING:
            continue
        state.last_loss[k] = losses[k]
        record = _record(ctx, state, t, losses[k], lrs[k % len(lrs)])
        record.update({name: values[k] for name, values in learned.items()})
        out.emit(k, record)
        if _diverges(ctx, state, k, losses[k]):
            state.diverge(k, t + 1)  # packed: frozen, the other members go on
    # a packed run shows its best LR's loss (its mean over the seeds), as the report picks a best LR
    running = [(ctx.members.items[k].lr, losses[k]) for k, s in enumerate(state.statuses) if s == RUNNING]
    rate = state.step * ctx.units_per_step * len(losses) / max(state.elapsed, 1e-9)
    shown = {"loss": f"{losses[0]:.4f}", "lr": f"{lrs[0]:.3g}"} if len(losses) == 1 else \
        {"best lr": best_text(running, short=True)}
    out.bar.set_postfix(**shown, **{f"{ctx.units}/s": f"{rate:,.0f}"})
    out.heartbeat(t + 1, losses[0] if len(losses) == 1 else running, f"{rate:,.0f} {ctx.units}/s",
                  state.elapsed / max(state.step, 1))


def _learned_scales(ctx: RunContext, state: RunState) -> dict[str, list[float]]:
    """Per member: the logits' RMS on the probe, and what the mode logs (manifold: the dual ascent, the
    learned layer scales)."""
    packed = ctx.members.packed
    x = temperatures.probe(ctx.eval_batches[0], packed)
    rms = temperatures.logit_rms(ctx.net, state.weights, x, packed)
    logged = MODES[ctx.opt.mode].logged(ctx.net, state.weights, state.optim.mode_state, packed)
    return {"logit_rms": rms.reshape(-1).tolist(), **logged}


def _log_eval(ctx: RunContext, state: RunState, out: RunLoggers, step: int) -> None:
    k = len(ctx.members)
    losses, correct, count = torch.zeros(k, device=ctx.device), torch.zeros(k, device=ctx.device), 0
    with torch.no_grad():
        for x, y in ctx.eval_batches:
            loss, hits = ctx.losses(state.weights, x, y)
            losses += loss
            correct += hits
            count += y[0].numel() if ctx.members.packed else y.numel()  # packed: y repeats per member
    for member, (total, hits) in enumerate(zip(losses.tolist(), correct.tolist())):
        if state.statuses[member] != RUNNING:
            continue
        result = {"test_loss": total / max(1, len(ctx.eval_batches))}
        if ctx.data.kind == "image":
            result["test_acc"] = hits / max(1, count)
        state.last_eval[member] = result
        out.emit(member, {"step": step, **result})


def _write_summaries(ctx: RunContext, state: RunState, record: _Record, final: str | None,
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
                  "packed_with": len(ctx.members) if ctx.members.packed else 1, **record.fields(ctx.members, k)}
        if ctx.data.kind == "image":
            fields["test_acc"] = state.last_eval[k].get("test_acc") if done else None
        fields.update(MODES[ctx.opt.mode].summary_fields(ctx.opt, ctx.device))
        knobs = knobs_of(member.cfg, member.lr, member.seed)
        summaries.append(summary_record(status, member.run_dir, knobs, member.fingerprint, **fields))
        if write:
            write_summary(member.run_dir, summaries[-1])
    return summaries


@contextmanager
def one_line_errors(program: str, run_dir: Path) -> Iterator[None]:
    """For the command line: ``ONE_LINE_ERRORS`` exit with ``<program>: <message>`` (exit code 1) and the run
    folder made for this command is removed when the command left it empty."""
    try:
        yield
    except ONE_LINE_ERRORS as error:
        remove_if_empty(run_dir, up_to=Path.cwd())  # and outputs/runs/ when this run made it
        raise SystemExit(f"{program}: {error}") from None


def out_of_memory(error: BaseException) -> bool:
    """The device or the host could not allocate a tensor (CUDA's error, or the CPU allocator's RuntimeError)."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and re.search(r"can't allocate memory|out of memory", str(error)) is not None)


def run_or_exit(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> Outcome:
    """For the command line: a run stopped by a signal exits with 128 + signal after checkpointing; data that
    cannot be had, an architecture that does not fit the data, or a run that runs out of memory exits with one
    line."""
    with one_line_errors("modula-sweep", run_dir):
        try:
            return train(cfg, run_dir, overrides=overrides)
        except (MemoryError, RuntimeError) as error:
            if not out_of_memory(error):
                raise
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise SystemExit(
                f"modula-sweep: out of memory ({reason[:160]}); arch.width={cfg.arch.get('width')}, "
                f"train.batch_size={cfg.train.batch_size}, data.context={cfg.data.get('context')}: smaller ones need "
                f"less (recorded as failed in {run_dir / 'summary.json'})") from None
        except StopRequested as stop:
            if stop.trained:
                log.warning("%s: checkpointed (%s); re-run the same command with hydra.run.dir=%s to resume",
                            run_dir, stop, run_dir)
            else:
                log.warning("%s before the first step: nothing was trained", stop)
                remove_if_empty(run_dir, up_to=Path.cwd())
            raise SystemExit(stop.exit_code) from None
