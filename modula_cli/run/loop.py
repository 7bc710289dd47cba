"""The optimisation loop, read top to bottom like nanoGPT's: batch → loss and gradient → (all-reduce) →
update → log / evaluate / checkpoint. Losses are read from the device only at log steps; every step's are
checked for divergence one step late, so the host never waits for the device."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..optim import MODES, optimizer_step
from ..plumbing.signals import STOP, StopRequested
from ..results.status import DIVERGED, RUNNING
from . import temperatures
from .context import RunContext
from .layer_stats import LayerStats
from .loggers import RunLoggers, best_text
from .prefetch import Prefetcher
from .state import RunState


def run_loop(ctx: RunContext, state: RunState, out: RunLoggers, batches: Prefetcher,
             save: Callable[[RunLoggers], None],
             branch: tuple[int, Callable[[RunLoggers], None]] | None = None) -> None:
    """Steps ``state.step`` … the end; ``save`` checkpoints; ``branch``: (the step at which the cool-down starts,
    what saves the stable phase there for other horizons: ``branches.py``)."""
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
        loss, grads = ctx.step_gradients(state.weights, *batches.get(t))
        loss, grads, stop = _all_reduce(ctx, loss, grads)
        before = [w.detach().clone() for w in state.weights] if layers and layers.due(t) else None
        lr = optimizer_step(ctx.net, state.weights, grads, state.optim, ctx.opt, t, steps, base_lr=lrs,
                            active=active, update=ctx.update)
        state.record_loss(t, loss)
        state.step, state.elapsed = t + 1, state.elapsed + time.perf_counter() - tick
        last = t == ctx.iterations - 1
        # Every step's losses are checked for divergence, read one step late (the device is busy with this
        # step meanwhile, so the host never waits for it); a logged step is read at once.
        diverged = _check_divergence(ctx, state, out, *unread) if unread else False
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
                _check_divergence(ctx, state, out, *unread)
            raise StopRequested(STOP.signum or signal.SIGTERM)
        if branch is not None and t + 1 == branch[0] and not last:  # the stable phase ends: other horizons start here
            if unread:
                _check_divergence(ctx, state, out, *unread)
                unread = None
                active = state.active() if ctx.members.packed else None
            branch[1](out)
        if train.checkpoint_every and (t + 1) % train.checkpoint_every == 0 and not last:
            if unread:  # the saved state has read every step it holds
                _check_divergence(ctx, state, out, *unread)
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


def _step_metrics(ctx: RunContext, state: RunState, t: int, loss: float, lr: float) -> dict[str, Any]:
    return {"step": t, "train_loss": loss, "lr": lr, "elapsed": round(state.elapsed, 4),
            ctx.units: (t + 1) * ctx.units_per_step}


def _diverges(ctx: RunContext, state: RunState, member: int, loss: float) -> bool:
    """Not finite, or above ``train.diverge_factor`` × the member's first loss (which this call records)."""
    initial = state.initial_loss[member]
    if initial is None:
        initial = state.initial_loss[member] = loss
    return not math.isfinite(loss) or loss > ctx.train.diverge_factor * initial


def _check_divergence(ctx: RunContext, state: RunState, out: RunLoggers, t: int, loss: torch.Tensor, lr: torch.Tensor
           ) -> bool:
    """Step t's divergence check between logs: a member that diverged is frozen (packed) or stopped, and its
    last loss goes to the log. Whether any member diverged."""
    losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
    diverged = False
    for k, status in enumerate(state.statuses):
        if status == RUNNING and _diverges(ctx, state, k, losses[k]):
            state.last_loss[k] = losses[k]
            out.emit(k, _step_metrics(ctx, state, t, losses[k], lrs[k % len(lrs)]))
            state.diverge(k, t + 1)
            diverged = True
    return diverged


def _log_train(ctx: RunContext, state: RunState, out: RunLoggers, t: int, loss: torch.Tensor,
               lr: torch.Tensor) -> None:
    losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
    learned = {**_learned_scales(ctx, state), **_clipping(state, t)}
    for k, status in enumerate(state.statuses):
        if status != RUNNING:
            continue
        state.last_loss[k] = losses[k]
        record = _step_metrics(ctx, state, t, losses[k], lrs[k % len(lrs)])
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


def _clipping(state: RunState, t: int) -> dict[str, list[float]]:
    """With optim.grad_clip, per member: step t's gradient norm before clipping and the fraction of steps so far
    that were clipped."""
    record = state.optim.clip
    if record is None:
        return {}
    return {"grad_norm": record.norm.tolist(), "clip_rate": (record.clipped / (t + 1)).tolist()}


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
