"""One training run: the loop of SPEC §7 with metrics, evaluation, divergence, checkpoints and resume.

Reads top to bottom like nanoGPT's loop: batch → loss and gradient → (all-reduce) → update → log /
evaluate / checkpoint. Losses are read from the device only at log steps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from .data import build_dataset
from .loggers import JsonlLogger, WandbLogger
from .models import build_model
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


def train(cfg: DictConfig, run_dir: Path) -> dict:
    """Train one configuration into ``run_dir``; returns its summary (also written to summary.json)."""
    check_config(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = read_summary(run_dir)
    fingerprint = training_fingerprint(cfg)
    rerun = bool(cfg.train.rerun or cfg.get("sweep", {}).get("rerun", False))
    if previous and previous.get("status") in FINISHED and not rerun:
        if previous.get("fingerprint") == fingerprint:
            log.info("%s already %s; skipping (train.rerun=true retrains)", run_dir, previous["status"])
            return {**previous, "skipped": True}
    rank, world = _distributed()
    try:
        return _train(cfg, run_dir, fingerprint, rank, world, rerun)
    except Preempted:
        raise
    except Exception as error:
        summary = {"status": "failed", "error": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc(), **scale_record(cfg), "fingerprint": fingerprint}
        if rank == 0:
            write_json(run_dir / "summary.json", summary)
        raise


def _train(cfg: DictConfig, run_dir: Path, fingerprint: str, rank: int, world: int, rerun: bool) -> dict:
    train_cfg, opt = cfg.train, optim_config(cfg)
    device = resolve_device(train_cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if train_cfg.batch_size % world:
        raise ValueError(f"train.batch_size={train_cfg.batch_size} must divide evenly over {world} processes")

    data_options = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "name"}
    data = build_dataset(cfg.data.name, **data_options)
    net = build_model(cfg.arch, data)
    weights = [w.requires_grad_() for w in net.initialize(seed=train_cfg.seed, device=device)]
    state = init_state(weights, opt)
    eval_batches = data.eval_batches(train_cfg.eval_batches, train_cfg.batch_size, device)
    per_rank = train_cfg.batch_size // world
    units = "tokens" if data.kind == "language" else "samples"
    units_per_step = train_cfg.batch_size * (data.context if data.kind == "language" else 1)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if train_cfg.dtype == "bfloat16"
                else nullcontext())

    def loss_fn(w: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with autocast:
            logits = net(x, w)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    compute_loss = torch.compile(loss_fn) if train_cfg.compile else loss_fn

    # --- resume -----------------------------------------------------------------------------------------
    start, elapsed, initial_loss, metrics_offset, wandb_id = 0, 0.0, None, None, None
    window = max(1, int(cfg.arch.get("loss_window", 1)))
    recent = torch.zeros(window, device=device)
    checkpoint_path = run_dir / "checkpoint.pt"
    if checkpoint_path.exists() and not rerun:
        ckpt = torch.load(checkpoint_path, map_location=device, weights_only=False)
        if ckpt["fingerprint"] == fingerprint:
            with torch.no_grad():
                for w, saved in zip(weights, ckpt["weights"]):
                    w.copy_(saved)
            state.load_state_dict(ckpt["optim"], device)
            recent.copy_(ckpt["recent"])
            start, elapsed, initial_loss = ckpt["step"], ckpt["elapsed"], ckpt["initial_loss"]
            metrics_offset, wandb_id = ckpt["metrics_offset"], ckpt.get("wandb_id")
            log.info("resuming %s from step %d", run_dir, start)
        else:
            log.warning("%s holds a checkpoint of another configuration; starting afresh", run_dir)

    metrics = JsonlLogger(run_dir / "metrics.jsonl", truncate_at=metrics_offset) if rank == 0 else None
    wandb = None
    if rank == 0 and cfg.logger.name == "wandb":
        wandb = WandbLogger(project=cfg.logger.project, entity=cfg.logger.entity,
                            group=cfg.logger.group or os.environ.get("MODULA_SWEEP_GROUP"), name=run_dir.name,
                            config=OmegaConf.to_container(cfg, resolve=True), run_dir=run_dir,
                            mode=cfg.logger.mode, tags=list(cfg.logger.tags), resume_id=wandb_id)

    def emit(record: dict) -> None:
        if metrics:
            metrics.log(record)
        if wandb:
            wandb.log(record)

    def evaluate() -> dict:
        total_loss, correct, count = 0.0, 0, 0
        with torch.no_grad():
            for x, y in eval_batches:
                with autocast:
                    logits = net(x, weights)
                logits = logits.float()
                total_loss += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
                if data.kind == "image":
                    correct += int((logits.argmax(-1) == y).sum())
                    count += y.numel()
        result = {"test_loss": total_loss / max(1, len(eval_batches))}
        if data.kind == "image":
            result["test_acc"] = correct / max(1, count)
        return result

    def save_checkpoint(next_step: int) -> None:
        if rank != 0:
            return
        payload = {"step": next_step, "weights": [w.detach() for w in weights], "optim": state.state_dict(),
                   "recent": recent, "elapsed": elapsed, "initial_loss": initial_loss,
                   "metrics_offset": metrics.offset(), "fingerprint": fingerprint,
                   "wandb_id": wandb.run_id if wandb else None}
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
    status, last_eval, train_loss_value = "completed", {}, None
    show_bar = train_cfg.progress and rank == 0
    bar = tqdm(total=steps, initial=start, desc=run_dir.name, disable=None if show_bar else True,
               dynamic_ncols=True, leave=True, mininterval=1.0)  # None: only on a terminal
    t, elapsed_at_start, last_loss = start, elapsed, None
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
            loss = compute_loss(weights, x, y)
            grads = list(torch.autograd.grad(loss, weights))
            loss = loss.detach()
            if world > 1:
                flat = torch.cat([g.reshape(-1) for g in grads] + [loss.reshape(1)])
                dist.all_reduce(flat)
                flat /= world
                grads = [piece.view_as(g) for piece, g in zip(flat[:-1].split([g.numel() for g in grads]), grads)]
                loss = flat[-1]
            lr = optimizer_step(net, weights, grads, state, opt, t, steps)
            recent[t % window] = loss
            elapsed += time.perf_counter() - tick

            last = t == steps - 1
            if t % train_cfg.log_every == 0 or last:
                loss_value = last_loss = float(loss)
                initial_loss = loss_value if initial_loss is None else initial_loss
                throughput = (t + 1 - start) * units_per_step / max(elapsed - elapsed_at_start, 1e-9)
                emit({"step": t, "train_loss": loss_value, "lr": lr, "elapsed": round(elapsed, 4),
                      units: (t + 1) * units_per_step})
                bar.set_postfix(loss=f"{loss_value:.4f}", lr=f"{lr:.3g}", **{f"{units}/s": f"{throughput:,.0f}"})
                if not math.isfinite(loss_value) or loss_value > train_cfg.diverge_factor * initial_loss:
                    status = "diverged"
                    bar.update(1)
                    break
            if (train_cfg.eval_every and (t + 1) % train_cfg.eval_every == 0) or last:
                last_eval = evaluate()
                emit({"step": t + 1, **last_eval})
            if train_cfg.checkpoint_every and (t + 1) % train_cfg.checkpoint_every == 0 and not last:
                save_checkpoint(t + 1)
            bar.update(1)
    bar.close()
    prefetch.shutdown(cancel_futures=True)

    steps_done = t + 1
    if status == "completed":  # mean of the last `loss_window` step losses (all of them if fewer)
        train_loss_value = float(recent[:min(window, steps_done)].mean())
    summary = {"status": status, "train_loss": train_loss_value if status == "completed" else None,
               "test_loss": last_eval.get("test_loss") if status == "completed" else None,
               "last_logged_train_loss": last_loss, "steps_done": steps_done, "wall_time_s": round(elapsed, 3),
               "throughput": round(steps_done * units_per_step / max(elapsed, 1e-9), 1), "throughput_unit":
               f"{units}/s", "device": str(device), "world_size": world, **scale_record(cfg),
               "fingerprint": fingerprint}
    if data.kind == "image":
        summary["test_acc"] = last_eval.get("test_acc") if status == "completed" else None
    if rank == 0:
        metrics.close()
        if not train_cfg.keep_checkpoint:  # a finished run needs no resume point; sweeps hold many runs
            checkpoint_path.unlink(missing_ok=True)
        else:
            save_checkpoint(steps_done)
        write_json(run_dir / "summary.json", summary)
        if wandb:
            wandb.summary(summary)
            wandb.close()
    return summary


def exit_code_for(error: BaseException) -> int:
    return 128 + error.signum if isinstance(error, Preempted) else 1


def run_or_exit(cfg: DictConfig, run_dir: Path) -> dict:
    """For the command line: a pre-empted run exits with 128 + signal after checkpointing."""
    try:
        return train(cfg, run_dir)
    except Preempted as error:
        log.warning("%s: checkpointed at pre-emption (%s); re-run the same command to resume", run_dir, error)
        sys.exit(exit_code_for(error))
