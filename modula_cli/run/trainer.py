"""One training run: the loop of SPEC §7 over a ``RunState``, with metrics, evaluation, divergence,
checkpoints, resume, and exactly one trainer per run folder.

The loop reads top to bottom like nanoGPT's: batch → loss and gradient → (all-reduce) → update → log /
evaluate / checkpoint. Losses are read from the device only at log steps.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from ..analysis import temperatures
from ..analysis.results import (COMPLETED, DIVERGED, FAILED, INTERRUPTED, RUNNING, is_finished, read_summary,
                                summary_record, write_summary)
from ..config.identity import member_overrides
from ..config.members import Members
from ..config.validate import checked_optim, resolve_device
from ..data import Dataset, DataUnavailable, build_dataset
from ..models import ModelError, build_model, is_import_path, role_problems
from ..models.variant import Variant, explain_scope, variant_of
from ..nn import Module, layer_roles
from ..nn.orthogonalize import iteration_dtype
from ..optim import OptimConfig, init_state, optimizer_step
from ..plumbing import atomic
from ..plumbing.locks import RunLocks
from ..plumbing.signals import STOP, StopRequested
from . import checkpoint
from .layer_stats import LayerStats
from .loggers import RunLoggers
from .prefetch import Prefetcher
from .state import RunState

log = logging.getLogger(__name__)
BUSY = "busy"  # train(wait=False) found another process training this run
# Said in one line, without a traceback (which would bury the cause): data that cannot be had, an architecture
# that cannot be built for the data.
ONE_LINE_ERRORS = (DataUnavailable, ModelError)


def train(cfg: DictConfig, run_dir: Path, *, member_dir: Callable[[dict[str, Any]], Path] | None = None,
          overrides: list[str] | None = None, sweep_dir: Path | None = None, launch: str | None = None,
          wait: bool = True) -> dict:
    """Train one configuration into ``run_dir``; returns its summary (also written to summary.json).

    With ``optim.lr`` and / or ``train.seed`` a list, trains one member per (LR, seed) as a stacked ensemble
    (each member on its own seed's initialisation and batches, exactly as its separate run) and returns
    ``{"status": "packed", "members": [summary, …]}``. A run that another process is training is
    waited for (``wait``) or returned as ``{"status": "busy"}``; a finished run is skipped (its data is not
    needed). When the data or the network cannot be had (``ONE_LINE_ERRORS``) a run of a sweep is recorded as
    failed, a single run leaves nothing behind.
    """
    opt = checked_optim(cfg)
    members = Members.of(cfg, opt, run_dir, member_dir)
    rerun = bool(cfg.train.rerun or cfg.get("sweep", {}).get("rerun", False))
    rank, world = _distributed()
    record, locks = _Record(overrides or [], sweep_dir, launch), RunLocks(members.run_dirs)
    knob = "sweep.rerun" if sweep_dir is not None else "train.rerun"
    if (skipped := _decided(lambda: _skipped(members, run_dir.name, rerun, knob), rank, world)) is not None:
        return skipped
    outcome = _decided(lambda: _claim(members, locks, run_dir.name, rerun, wait), rank, world)
    if outcome == _STOPPED:
        raise StopRequested(STOP.signum or signal.SIGTERM)
    if outcome is not None:
        return outcome
    try:  # the data and the network are built under the run's locks: nobody else is training it
        ctx = RunContext.build(cfg, opt, members, rank, world)
        with STOP.installed():
            summaries = _train(ctx, run_dir, rerun, record)
    except StopRequested:
        raise
    except Exception as error:
        if isinstance(error, ONE_LINE_ERRORS) and sweep_dir is None:  # a single run: nothing written or left
            locks.discard()
        elif rank == 0:
            _write_failed(members, error, record)
        raise
    finally:
        locks.release()
    return _result(members, summaries)


_STOPPED = "stopped while waiting"


def _decided(decide: Callable[[], Any], rank: int, world: int) -> Any:
    """Rank 0 decides for every process (none may train, skip or wait alone)."""
    outcome = decide() if rank == 0 else None
    if world > 1:
        shared = [outcome]
        dist.broadcast_object_list(shared, src=0)
        outcome = shared[0]
    return outcome


def _skipped(members: Members, name: str, rerun: bool, knob: str) -> dict | None:
    """What ``train`` returns for a run already finished (its data is then not needed), else None."""
    if rerun or not (done := _finished(members)):
        return None
    log.info("%s already finished; skipping (%s=true retrains)", name, knob)
    return _result(members, [{**s, "skipped": True} for s in done])


def _claim(members: Members, locks: RunLocks, name: str, rerun: bool, wait: bool) -> dict | str | None:
    """``None`` when this process now holds the run's locks and must train it; else what ``train`` returns
    (skipped, busy) or ``_STOPPED``."""
    if not locks.try_acquire():
        if not wait:
            return {"status": BUSY, "holder": locks.holder(), "members": []}
        log.info("%s is being trained by %s; waiting for it", name, locks.holder())
        if not locks.wait(give_up=lambda: STOP.requested):
            return _STOPPED
        rerun = False  # what the other process finished counts, rerun or not
    if not rerun and (done := _finished(members)):  # finished since the first look (_skipped)
        locks.release()
        log.info("%s was finished by another process; skipping", name)
        return _result(members, [{**s, "skipped": True} for s in done])
    return None


def _finished(members: Members) -> list[dict] | None:
    summaries = [read_summary(m.run_dir) for m in members]
    return summaries if all(is_finished(s, m.fingerprint) for s, m in zip(summaries, members)) else None


def _result(members: Members, summaries: list[dict]) -> dict:
    if not members.packed:
        return summaries[0]
    return {"status": "packed", "members": summaries, "train_loss": None, "test_loss": None,
            "steps_done": max(s.get("steps_done") or 0 for s in summaries)}


@dataclass(frozen=True)
class _Record:
    """Where a run's summaries come from: its overrides, its sweep and the launch that trained it."""

    overrides: list[str]
    sweep_dir: Path | None
    launch: str | None

    def fields(self, members: Members, k: int) -> dict[str, Any]:
        member = members.items[k]
        overrides = member_overrides(self.overrides, member.packed) if members.packed else self.overrides
        return {"overrides": overrides, "launch": self.launch}


def _write_failed(members: Members, error: Exception, record: _Record) -> None:
    import traceback

    for k, member in enumerate(members):
        write_summary(member.run_dir, summary_record(
            FAILED, member.run_dir, member.knobs, member.fingerprint, error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(), **record.fields(members, k)))


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def losses_and_hits(net: Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    members: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy and correct-prediction count of each network on one batch, shape (K,) each.

    ``members=K``: the weights and the batch carry a leading member axis (a packed run; a batch the
    members share is an ``expand`` view, no copy), and every atom applies its K weights in one batched
    call."""
    count = members or 1
    logits = net(x, weights).float()
    logits = logits.reshape(-1, logits.shape[-1])
    targets = y.reshape(-1)
    loss = F.cross_entropy(logits, targets, reduction="none").view(count, -1).mean(dim=1)
    return loss, (logits.argmax(-1) == targets).view(count, -1).sum(dim=1)


def grads_of(losses: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    # Members share no weight, so the gradient of the summed loss is each member's own gradient.
    return list(torch.autograd.grad(losses.sum(), weights))


@dataclass
class RunContext:
    """What stays fixed while a run trains: config, device, data, network and the compiled step."""

    cfg: DictConfig
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
        device = resolve_device(cfg.train.device)
        if device.type == "cuda" and world > 1:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        elif device.type == "cuda":  # an explicit index: the prefetch thread has its own current device
            device = torch.device("cuda", torch.cuda.current_device())
        if cfg.train.batch_size % world:
            raise ValueError(f"train.batch_size={cfg.train.batch_size} must divide evenly over {world} processes")
        data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
        variant = variant_of(cfg)
        if rank == 0 and (scope := explain_scope(cfg.arch.name, variant)):
            log.info(scope)
        ctx = cls(cfg, opt, members, rank, world, device, data, build_model(cfg.arch, data, variant), compute=None,
                  eval_batches=data.eval_batches(cfg.train.eval_batches, cfg.train.batch_size, device),
                  variant=variant, seed_index=members.seed_index(device) if members.packed else None)
        if members.packed:
            ctx.eval_batches = [ctx.stacked(x, y) for x, y in ctx.eval_batches]
        if opt.mode == "manifold" and is_import_path(cfg.arch.name):  # a user's roles are known once it is built
            roles = tuple(layer_roles(ctx.net))
            if problems := [*role_problems("optim.manifold_scaled", opt.manifold_scaled, roles),
                            *role_problems("optim.manifold_free", opt.manifold_free, roles)]:
                raise ValueError("; ".join(problems))
        if cfg.train.compile:  # a sweep compiles many configurations in one process: start each afresh
            torch._dynamo.reset()
        ctx.compute = torch.compile(ctx.loss_and_grads) if cfg.train.compile else ctx.loss_and_grads
        return ctx

    @property
    def iterations(self) -> int:
        """Training iterations: train.steps, and in the paper variant one more at LR 0, as its reference loop
        runs steps + 1 (``schedule_factor`` is 0 past the end)."""
        return self.cfg.train.steps + int(self.variant.extra_step)

    @property
    def units(self) -> str:
        return "tokens" if self.data.kind == "language" else "samples"

    @property
    def units_per_step(self) -> int:
        return self.cfg.train.batch_size * (self.data.context if self.data.kind == "language" else 1)

    def losses(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        """Per-member losses and hits; ``x, y`` carry the member axis when packed (see ``batch_for``)."""
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.cfg.train.dtype == "bfloat16"
                    else nullcontext())
        with autocast:
            return losses_and_hits(self.net, weights, x, y, len(self.members) if self.members.packed else None)

    def loss_and_grads(self, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        loss = self.losses(weights, x, y)[0]
        return loss.detach(), grads_of(loss, weights)

    def batch_for(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s batch of each seed; packed, with a leading member axis (each member gets its
        own seed's batch: a view when they share one seed, a gather of the few seeds' batches otherwise)."""
        size, share = self.cfg.train.batch_size, self.cfg.train.batch_size // self.world
        batches = []
        for seed in self.members.seeds:
            x, y = self.data.train_batch(step, size, seed=seed, device=self.device)
            if self.world > 1:  # every rank draws the same global batch and keeps its slice
                x, y = x[self.rank * share:(self.rank + 1) * share], y[self.rank * share:(self.rank + 1) * share]
            batches.append((x, y))
        if not self.members.packed:
            return batches[0]
        return self.stacked(*batches[0]) if len(batches) == 1 else tuple(
            torch.stack(parts)[self.seed_index] for parts in zip(*batches))

    def stacked(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch for every member of a packed run (a view, no copy)."""
        k = len(self.members)
        return x.expand(k, *x.shape), y.expand(k, *y.shape)

    def initial_weights(self) -> list[torch.Tensor]:
        """Each member's initial weights from its own seed, stacked on the member axis when packed."""
        by_seed = {seed: self.net.initialize(seed=seed, device=self.device) for seed in self.members.seeds}
        if self.opt.mode == "manifold":  # start on the manifold (a Gaussian initialisation is not)
            by_seed = {seed: self.net.onto_manifold(weights) for seed, weights in by_seed.items()}
        if self.members.packed:
            return [torch.stack(per_member) for per_member in zip(*(by_seed[m.seed] for m in self.members))]
        return by_seed[self.members.items[0].seed]

    def fresh_state(self) -> RunState:
        k = len(self.members)
        weights = [w.requires_grad_() for w in self.initial_weights()]
        window = max(1, int(self.cfg.arch.get("loss_window", 1)))
        return RunState(weights, init_state(weights, self.opt), torch.zeros(window, k, device=self.device), k)


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


def _train(ctx: RunContext, run_dir: Path, rerun: bool, record: _Record) -> list[dict]:
    cfg, members = ctx.cfg, ctx.members
    path = run_dir / checkpoint.CHECKPOINT_FILE
    state = _start_state(ctx, path, rerun)
    lead = ctx.rank == 0
    if lead:
        for member in members:
            atomic.write_text(member.run_dir / "config.yaml", OmegaConf.to_yaml(member.cfg, resolve=True))
        _write_summaries(ctx, state, record, final=None)

    def save(out: RunLoggers) -> None:
        if lead:
            state.metrics_offsets, state.wandb_ids = out.offsets(), out.wandb_ids()
            checkpoint.save(path, state.state_dict(), members.fingerprint)

    loggers = RunLoggers(cfg, members, state, lead=lead, show_bar=lead and cfg.train.progress,
                         sweep_dir=record.sweep_dir, total=ctx.iterations)
    with loggers as out, Prefetcher(ctx.batch_for, state.step, ctx.iterations) as batches:
        try:
            _loop(ctx, state, out, batches, save)
        except StopRequested:
            save(out)
            if lead:
                _write_summaries(ctx, state, record, final=INTERRUPTED)
            STOP.chain()  # e.g. submitit's handler, which requeues the job
            raise
        summaries = _write_summaries(ctx, state, record, final=COMPLETED, write=False)
        out.finish(summaries)
    if lead:
        for member, summary in zip(members, summaries):
            write_summary(member.run_dir, summary)
        if cfg.train.keep_checkpoint:
            save(out)
        else:  # a finished run needs no resume point; sweeps hold many runs
            path.unlink(missing_ok=True)
    return summaries


def _loop(ctx: RunContext, state: RunState, out: RunLoggers, batches: Prefetcher,
          save: Callable[[RunLoggers], None]) -> None:
    train, steps = ctx.cfg.train, ctx.cfg.train.steps  # the schedule runs over train.steps
    lrs = ctx.members.lrs(ctx.device)
    active = state.active() if ctx.members.packed else None
    every = train.get("layer_stats_every", 0)
    layers = LayerStats(ctx, every) if every and ctx.rank == 0 else None
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
        if t % train.log_every == 0 or last:
            _log_train(ctx, state, out, t, loss, lr)
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
            raise StopRequested(STOP.signum or signal.SIGTERM)
        if train.checkpoint_every and (t + 1) % train.checkpoint_every == 0 and not last:
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


def _log_train(ctx: RunContext, state: RunState, out: RunLoggers, t: int, loss: torch.Tensor,
               lr: torch.Tensor) -> None:
    losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
    manifold = state.optim.manifold.means() if state.optim.manifold is not None else None
    learned = _temperatures(ctx, state)
    for k, status in enumerate(state.statuses):
        if status != RUNNING:
            continue
        state.last_loss[k] = losses[k]
        initial = state.initial_loss[k] = losses[k] if state.initial_loss[k] is None else state.initial_loss[k]
        record = {"step": t, "train_loss": losses[k], "lr": lrs[k % len(lrs)], "elapsed": round(state.elapsed, 4),
                  ctx.units: (t + 1) * ctx.units_per_step}
        if manifold is not None:  # the dual ascent, averaged over the steps since the last log
            record["tangency"], record["dual_iterations"] = manifold[0][k], manifold[1][k]
        record.update({name: values[k] for name, values in learned.items()})
        out.emit(k, record)
        if not math.isfinite(losses[k]) or losses[k] > ctx.cfg.train.diverge_factor * initial:
            state.diverge(k, t + 1)  # packed: frozen, the other members go on
    running = [v for v, s in zip(losses, state.statuses) if s == RUNNING]
    rate = state.step * ctx.units_per_step * len(losses) / max(state.elapsed, 1e-9)
    out.bar.set_postfix(loss=f"{min(running, default=losses[0]):.4f}", lr=f"{max(lrs):.3g}",
                        **{f"{ctx.units}/s": f"{rate:,.0f}"})


def _temperatures(ctx: RunContext, state: RunState) -> dict[str, list[float]]:
    """Per member: the logits' RMS on the probe, and manifold mode's learned-radius and free layers' scales."""
    packed = ctx.members.packed
    x = temperatures.probe(ctx.eval_batches[0], packed)
    values = {"logit_rms": temperatures.logit_rms(ctx.net, state.weights, x, packed)}
    if state.optim.manifold is not None and state.optim.manifold.kinds is not None:
        values.update(temperatures.role_scales(ctx.net, state.weights, state.optim.manifold.kinds, packed))
    return {name: value.reshape(-1).tolist() for name, value in values.items()}


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
                     write: bool = True) -> list[dict]:
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
                  "packed_with": len(ctx.members) if ctx.members.packed else 1, **record.fields(ctx.members, k)}
        if ctx.data.kind == "image":
            fields["test_acc"] = state.last_eval[k].get("test_acc") if done else None
        if ctx.opt.mode == "dualized":  # optim.ortho_dtype=auto depends on the device, like its kernels
            dtype = iteration_dtype(ctx.opt.ortho_dtype, ctx.device) or torch.float32
            fields["ortho_dtype"] = str(dtype).removeprefix("torch.")
        summaries.append(summary_record(status, member.run_dir, member.knobs, member.fingerprint, **fields))
        if write:
            write_summary(member.run_dir, summaries[-1])
    return summaries


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` when nothing is in it (a folder made for a command that wrote nothing); a folder
    holding anything, an earlier run's files included, stays."""
    with suppress(OSError):
        folder.rmdir()


@contextmanager
def one_line_errors(program: str, run_dir: Path) -> Iterator[None]:
    """For the command line: ``ONE_LINE_ERRORS`` exit with ``<program>: <message>`` (exit code 1) and the run
    folder made for this command is removed when the command left it empty."""
    try:
        yield
    except ONE_LINE_ERRORS as error:
        remove_if_empty(run_dir)
        raise SystemExit(f"{program}: {error}") from None


def run_or_exit(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> dict:
    """For the command line: a run stopped by a signal exits with 128 + signal after checkpointing; data that
    cannot be had or an architecture that does not fit the data exits with one line."""
    with one_line_errors("modula-sweep", run_dir):
        try:
            return train(cfg, run_dir, overrides=overrides)
        except StopRequested as stop:
            log.warning("%s: checkpointed (%s); re-run the same command with hydra.run.dir=%s to resume", run_dir,
                        stop, run_dir)
            raise SystemExit(stop.exit_code) from None
