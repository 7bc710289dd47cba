"""One training run: the loop of SPEC §7 with metrics, evaluation, divergence, checkpoints and resume.

Reads top to bottom like nanoGPT's loop: batch → loss and gradient → (all-reduce) → update → log /
evaluate / checkpoint. Losses are read from the device only at log steps.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import re
import signal
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf, open_dict
from tqdm import tqdm

from .data import build_dataset
from .loggers import JsonlLogger, WandbLogger
from .models import build_model
from .nn import Module
from .optim import init_state, optimizer_step
from .validate import check_config, optim_config, resolve_device

log = logging.getLogger(__name__)

FINISHED = ("completed", "diverged")
SCALE_KNOBS = ("width", "depth", "block_depth", "blocks_mass", "heads")


def read_summary(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)


def training_fingerprint(cfg: DictConfig) -> str:
    """Hash of everything that changes the numbers (not logging, progress or rerun flags)."""
    relevant = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("arch", "data", "optim")}
    relevant["train"] = {k: v for k, v in OmegaConf.to_container(cfg.train, resolve=True).items()
                         if k not in ("progress", "rerun", "checkpoint_every", "log_every", "keep_checkpoint")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def scale_record(cfg: DictConfig) -> dict[str, Any]:
    record = {k: cfg.arch.get(k) for k in SCALE_KNOBS if cfg.arch.get(k) is not None}
    if cfg.data.get("context") is not None:
        record["context"] = cfg.data.context
    record.update(arch=cfg.arch.name, data=cfg.data.name, optimizer=cfg.optim.name, mode=cfg.optim.mode,
                  lr=optim_config(cfg).base_lr, seed=cfg.train.seed)
    return record


class Preempted(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"received signal {signal.Signals(signum).name}")


class _SignalFlag:
    """Turns SIGTERM / SIGUSR1 / SIGUSR2 (SLURM pre-emption, submitit's timeout signal) into a flag the
    loop checks at the next step, so it checkpoints before exiting."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalFlag:
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave signals to the launcher
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum

    def chain(self) -> None:
        """After checkpointing, hand the signal to whoever handled it before us (a cluster launcher)."""
        previous = self.previous.get(self.signum)
        if callable(previous):
            previous(self.signum, None)

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return (dist.get_rank(), world) if world > 1 else (0, 1)


@dataclass
class Member:
    """One configuration of a (possibly packed) run: its LR, its own config and its own run folder."""

    lr: float
    cfg: DictConfig
    run_dir: Path
    fingerprint: str


def members_of(cfg: DictConfig, run_dir: Path) -> list[Member]:
    """A single run is one member; ``optim.lr=[…]`` packs one member per LR. Packed members get the
    folders that separate runs would get (``…optim.lr=0.25…`` beside the pack's folder inside a sweep,
    ``<run_dir>/optim.lr=0.25`` for a single run)."""
    opt = optim_config(cfg)
    if not opt.packed:
        return [Member(opt.base_lr, cfg, run_dir, training_fingerprint(cfg))]
    members = []
    for lr in opt.lrs:
        member_cfg = copy.deepcopy(cfg)
        with open_dict(member_cfg):
            member_cfg.optim.lr = lr
        name, count = PACKED_LR.subn(f"optim.lr={lr!r}", run_dir.name)
        member_dir = run_dir.parent / name if count else run_dir / f"optim.lr={lr!r}"
        members.append(Member(lr, member_cfg, member_dir, training_fingerprint(member_cfg)))
    return members


PACKED_LR = re.compile(r"optim\.lr=\[[^\]]*\]")


def train(cfg: DictConfig, run_dir: Path) -> dict:
    """Train one configuration into ``run_dir``; returns its summary (also written to summary.json).

    With ``optim.lr`` a list, trains one member per LR as a stacked ensemble on identical batches and
    returns ``{"status": "packed", "members": [summary, …]}``.
    """
    check_config(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    members = members_of(cfg, run_dir)
    rerun = bool(cfg.train.rerun or cfg.get("sweep", {}).get("rerun", False))
    previous = [read_summary(m.run_dir) for m in members]
    if not rerun and all(p and p.get("status") in FINISHED and p.get("fingerprint") == m.fingerprint
                         for p, m in zip(previous, members)):
        log.info("%s already finished; skipping (train.rerun=true retrains)", run_dir)
        done = [{**p, "skipped": True} for p in previous]
        return done[0] if len(done) == 1 and not optim_config(cfg).packed else _pack_result(done)
    rank, world = _distributed()
    try:
        summaries = _train(cfg, run_dir, members, rank, world, rerun)
    except Preempted:
        raise
    except Exception as error:
        for member in members:
            summary = {"status": "failed", "error": f"{type(error).__name__}: {error}",
                       "traceback": traceback.format_exc(), **scale_record(member.cfg),
                       "fingerprint": member.fingerprint}
            if rank == 0:
                member.run_dir.mkdir(parents=True, exist_ok=True)
                write_json(member.run_dir / "summary.json", summary)
        raise
    return summaries[0] if not optim_config(cfg).packed else _pack_result(summaries)


def losses_and_hits(net: Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    members: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy and correct-prediction count of each network on one batch, shape (K,) each.

    ``members=K``: the weights carry a leading member axis (a packed sweep); the shared batch gets one
    too (a view, no copy) and every atom applies its K weights in one batched call."""
    count = members or 1
    logits = net(x.expand(count, *x.shape) if members else x, weights).float()
    logits = logits.reshape(-1, logits.shape[-1])
    targets = y.reshape(1, -1).expand(count, -1).reshape(-1)
    loss = F.cross_entropy(logits, targets, reduction="none").view(count, -1).mean(dim=1)
    return loss, (logits.argmax(-1) == targets).view(count, -1).sum(dim=1)


def grads_of(losses: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    # Members share no weight, so the gradient of the summed loss is each member's own gradient.
    return list(torch.autograd.grad(losses.sum(), weights))


def _pack_result(summaries: list[dict]) -> dict:
    return {"status": "packed", "members": summaries, "train_loss": None, "test_loss": None,
            "steps_done": max(s.get("steps_done", 0) for s in summaries)}


def _train(cfg: DictConfig, run_dir: Path, members: list[Member], rank: int, world: int,
           rerun: bool) -> list[dict]:
    train_cfg, opt = cfg.train, optim_config(cfg)
    packed, K = opt.packed, len(members)
    device = resolve_device(train_cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if train_cfg.batch_size % world:
        raise ValueError(f"train.batch_size={train_cfg.batch_size} must divide evenly over {world} processes")

    data_options = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "name"}
    data = build_dataset(cfg.data.name, **data_options)
    net = build_model(cfg.arch, data)
    weights = net.initialize(seed=train_cfg.seed, device=device)
    if packed:  # K identical copies on a leading member axis
        weights = [w.unsqueeze(0).repeat(K, *([1] * w.ndim)) for w in weights]
    weights = [w.requires_grad_() for w in weights]
    state = init_state(weights, opt)
    member_lrs = torch.tensor([m.lr for m in members], device=device) if packed else None
    active = torch.ones(K, dtype=torch.bool, device=device) if packed else None
    eval_batches = data.eval_batches(train_cfg.eval_batches, train_cfg.batch_size, device)
    per_rank = train_cfg.batch_size // world
    units = "tokens" if data.kind == "language" else "samples"
    units_per_step = train_cfg.batch_size * (data.context if data.kind == "language" else 1)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if train_cfg.dtype == "bfloat16"
                else nullcontext())

    def member_losses(w: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast:
            return losses_and_hits(net, w, x, y, K if packed else None)

    def loss_and_grads(w: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        loss = member_losses(w, x, y)[0]
        return loss.detach(), grads_of(loss, w)

    if train_cfg.compile:
        # A sweep runs many configurations in one process; Dynamo's per-function recompile limit would
        # otherwise send the later runs back to eager.
        torch._dynamo.reset()
    compute = torch.compile(loss_and_grads) if train_cfg.compile else loss_and_grads

    # --- resume -----------------------------------------------------------------------------------------
    start, elapsed, wandb_ids = 0, 0.0, [None] * K
    initial: list[float | None] = [None] * K
    metrics_offsets: list[int | None] = [None] * K
    statuses, stopped_at = ["completed"] * K, [None] * K
    window = max(1, int(cfg.arch.get("loss_window", 1)))
    recent = torch.zeros(window, K, device=device)
    checkpoint_path = run_dir / "checkpoint.pt"
    fingerprint = "|".join(m.fingerprint for m in members)
    if checkpoint_path.exists() and not rerun:
        ckpt = torch.load(checkpoint_path, map_location=device, weights_only=False)
        if ckpt["fingerprint"] == fingerprint:
            with torch.no_grad():
                for w, saved in zip(weights, ckpt["weights"]):
                    w.copy_(saved)
            state.load_state_dict(ckpt["optim"], device)
            recent.copy_(ckpt["recent"])
            start, elapsed, initial = ckpt["step"], ckpt["elapsed"], ckpt["initial_loss"]
            metrics_offsets, wandb_ids = ckpt["metrics_offset"], ckpt.get("wandb_id") or [None] * K
            statuses, stopped_at = ckpt["statuses"], ckpt["stopped_at"]
            if packed:
                active.copy_(torch.tensor([s == "completed" for s in statuses], device=device))
            log.info("resuming %s from step %d", run_dir, start)
        else:
            log.warning("%s holds a checkpoint of another configuration; starting afresh", run_dir)

    metrics, wandbs = [None] * K, [None] * K
    if rank == 0:
        for k, member in enumerate(members):
            member.run_dir.mkdir(parents=True, exist_ok=True)
            if packed:  # the member's own config, where the report reads its knobs
                (member.run_dir / ".hydra").mkdir(exist_ok=True)
                OmegaConf.save(member.cfg, member.run_dir / ".hydra" / "config.yaml")
            metrics[k] = JsonlLogger(member.run_dir / "metrics.jsonl", truncate_at=metrics_offsets[k])
            if cfg.logger.name == "wandb":
                wandbs[k] = WandbLogger(
                    project=cfg.logger.project, entity=cfg.logger.entity,
                    group=cfg.logger.group or os.environ.get("MODULA_SWEEP_GROUP"), name=member.run_dir.name,
                    config=OmegaConf.to_container(member.cfg, resolve=True), run_dir=member.run_dir,
                    mode=cfg.logger.mode, tags=list(cfg.logger.tags), resume_id=wandb_ids[k])

    def emit(k: int, record: dict) -> None:
        if metrics[k]:
            metrics[k].log(record)
        if wandbs[k]:
            wandbs[k].log(record)

    def evaluate() -> list[dict]:
        losses = torch.zeros(K, device=device)
        correct = torch.zeros(K, device=device)
        count = 0
        with torch.no_grad():
            for x, y in eval_batches:
                loss, hits = member_losses(weights, x, y)
                losses += loss
                correct += hits
                count += y.numel()
        results = [{"test_loss": float(v) / max(1, len(eval_batches))} for v in losses]
        if data.kind == "image":
            for result, hits in zip(results, correct.tolist()):
                result["test_acc"] = hits / max(1, count)
        return results

    def save_checkpoint(next_step: int) -> None:
        if rank != 0:
            return
        payload = {"step": next_step, "weights": [w.detach() for w in weights], "optim": state.state_dict(),
                   "recent": recent, "elapsed": elapsed, "initial_loss": initial, "statuses": statuses,
                   "stopped_at": stopped_at, "metrics_offset": [m.offset() for m in metrics],
                   "fingerprint": fingerprint, "wandb_id": [w.run_id if w else None for w in wandbs]}
        tmp = checkpoint_path.with_name("checkpoint.pt.tmp")
        torch.save(payload, tmp)
        tmp.replace(checkpoint_path)

    def batch_for(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = data.train_batch(step, train_cfg.batch_size, seed=train_cfg.seed, device=device)
        if world > 1:  # every rank draws the same global batch and keeps its slice
            x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        return x, y

    # --- the loop ------------------------------------------------------------------------------------------
    steps = train_cfg.steps
    # Batches depend only on (seed, step), so the next one is prepared in the background (augmentation,
    # host-to-device copy) while this step computes, without changing any number.
    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
    upcoming = prefetch.submit(batch_for, start) if start < steps else None
    last_eval: list[dict] = [{} for _ in range(K)]
    show_bar = train_cfg.progress and rank == 0
    bar = tqdm(total=steps, initial=start, desc=run_dir.name, disable=None if show_bar else True,
               dynamic_ncols=True, leave=True, mininterval=1.0)  # None: only on a terminal
    t, elapsed_at_start, last_loss = start, elapsed, [None] * K
    with _SignalFlag() as flag:
        for t in range(start, steps):
            if flag.signum is not None:
                save_checkpoint(t)
                prefetch.shutdown(cancel_futures=True)
                flag.chain()  # e.g. submitit's handler, which requeues the job
                raise Preempted(flag.signum)
            tick = time.perf_counter()
            x, y = upcoming.result()
            if t + 1 < steps:
                upcoming = prefetch.submit(batch_for, t + 1)
            loss, grads = compute(weights, x, y)
            if world > 1:
                flat = torch.cat([g.reshape(-1) for g in grads] + [loss])
                dist.all_reduce(flat)
                flat /= world
                pieces = flat[:-K].split([g.numel() for g in grads])
                grads = [piece.view_as(g) for piece, g in zip(pieces, grads)]
                loss = flat[-K:]
            lr = optimizer_step(net, weights, grads, state, opt, t, steps, base_lr=member_lrs, active=active,
                                compile=train_cfg.compile)
            recent[t % window] = loss
            elapsed += time.perf_counter() - tick

            last = t == steps - 1
            if t % train_cfg.log_every == 0 or last:
                losses, lrs = loss.tolist(), lr.reshape(-1).tolist()
                throughput = (t + 1 - start) * units_per_step * K / max(elapsed - elapsed_at_start, 1e-9)
                for k in range(K):
                    if statuses[k] != "completed":
                        continue
                    last_loss[k] = losses[k]
                    initial[k] = losses[k] if initial[k] is None else initial[k]
                    emit(k, {"step": t, "train_loss": losses[k], "lr": lrs[k], "elapsed": round(elapsed, 4),
                             units: (t + 1) * units_per_step})
                    if not math.isfinite(losses[k]) or losses[k] > train_cfg.diverge_factor * initial[k]:
                        statuses[k], stopped_at[k] = "diverged", t + 1
                        if packed:  # frozen: the other members go on
                            active[k] = False
                best = min((v for v, s in zip(losses, statuses) if s == "completed"), default=losses[0])
                bar.set_postfix(loss=f"{best:.4f}", lr=f"{max(lrs):.3g}",
                                **{f"{units}/s": f"{throughput:,.0f}"})
                if all(s == "diverged" for s in statuses):
                    bar.update(1)
                    break
            if (train_cfg.eval_every and (t + 1) % train_cfg.eval_every == 0) or last:
                for k, result in enumerate(evaluate()):
                    if statuses[k] == "completed":
                        last_eval[k] = result
                        emit(k, {"step": t + 1, **result})
            if train_cfg.checkpoint_every and (t + 1) % train_cfg.checkpoint_every == 0 and not last:
                save_checkpoint(t + 1)
            bar.update(1)
    bar.close()
    prefetch.shutdown(cancel_futures=True)

    summaries = []
    for k, member in enumerate(members):
        done = statuses[k] == "completed"
        steps_done = (t + 1) if done else stopped_at[k]
        summary = {"status": statuses[k],
                   # mean of the last `loss_window` step losses (all of them if fewer)
                   "train_loss": float(recent[:min(window, steps_done), k].mean()) if done else None,
                   "test_loss": last_eval[k].get("test_loss") if done else None,
                   "last_logged_train_loss": last_loss[k], "steps_done": steps_done,
                   "wall_time_s": round(elapsed, 3),
                   "throughput": round(steps_done * units_per_step / max(elapsed, 1e-9), 1),
                   "throughput_unit": f"{units}/s", "device": str(device), "world_size": world,
                   "packed_with": K if packed else 1, **scale_record(member.cfg),
                   "fingerprint": member.fingerprint}
        if data.kind == "image":
            summary["test_acc"] = last_eval[k].get("test_acc") if done else None
        summaries.append(summary)
    if rank == 0:
        for k, member in enumerate(members):
            metrics[k].close()
            write_json(member.run_dir / "summary.json", summaries[k])
            if wandbs[k]:
                wandbs[k].summary(summaries[k])
                wandbs[k].close()
        if not train_cfg.keep_checkpoint:  # a finished run needs no resume point; sweeps hold many runs
            checkpoint_path.unlink(missing_ok=True)
        else:
            save_checkpoint(t + 1)
    return summaries


def exit_code_for(error: BaseException) -> int:
    return 128 + error.signum if isinstance(error, Preempted) else 1


def run_or_exit(cfg: DictConfig, run_dir: Path) -> dict:
    """For the command line: a pre-empted run exits with 128 + signal after checkpointing."""
    try:
        return train(cfg, run_dir)
    except Preempted as error:
        log.warning("%s: checkpointed at pre-emption (%s); re-run the same command to resume", run_dir, error)
        sys.exit(exit_code_for(error))
