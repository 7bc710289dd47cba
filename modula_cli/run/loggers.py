"""Run loggers. ``metrics.jsonl`` is always written; wandb is optional and can never stop training, nor
stall it: an unreachable W&B server is detected once (a few seconds), said once per sweep, and the runs
log offline (``wandb sync`` uploads them later)."""

from __future__ import annotations

import json
import logging
import netrc
import os
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import OmegaConf
from tqdm import tqdm

from ..config.members import Members
from ..config.schema import LoggerConfig, TrainConfig
from ..plumbing import atomic, environment
from ..plumbing.wording import duration_text
from ..results.files import METRICS_FILE
from ..results.summary import best_lr
from .state import RunState

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
INIT_TIMEOUT_S = 15
LAYER_STATS_FILE = "layer_stats.jsonl"  # train.layer_stats_every: one line per layer and measured step
HEARTBEAT_S = 60.0  # without a progress bar, how often a training run says where it stands
UNREACHABLE_MARKER = ".wandb_unreachable"  # in the sweep folder: later runs (any process) go offline quietly


class JsonlLogger:
    """Appends one JSON object per line; ``offset()`` is the resume point stored in checkpoints."""

    def __init__(self, path: Path, truncate_at: int | None = None):
        self.path = path
        if truncate_at is not None and path.exists():
            with open(path, "r+b") as handle:
                handle.truncate(truncate_at)
        elif truncate_at is None and path.exists():
            path.unlink()
        self.handle = open(path, "a")

    def log(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()  # on disk at every logged step: a run is watched (tail -f, a dashboard) while it trains

    def offset(self) -> int:
        if self.handle.closed:  # after the run (train.keep_checkpoint saves once more): the whole file
            return self.path.stat().st_size
        self.handle.flush()
        return self.handle.tell()

    def close(self) -> None:
        if not self.handle.closed:
            self.handle.close()


def keep_until(path: Path, step: int) -> None:
    """Drop a file's records past ``step`` (a resumed run logs them again) and any line cut by a crash."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line + "\n")
    atomic.write_text(path, "".join(kept))


def sweep_group(sweep_dir: str | Path) -> str:
    """The wandb group of a sweep's runs and report: its last two folders, e.g. ``quick-gpt_shakespeare``."""
    return "-".join(Path(sweep_dir).parts[-2:])


def _has_wandb_credentials() -> bool:
    if os.environ.get(environment.WANDB_KEY):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def _probe(url: str, timeout_s: float) -> str | None:
    """``None`` when a TCP connection to the W&B server opens in time, else why not. Name lookup has no
    timeout of its own, so the probe runs in a thread that is abandoned after ``timeout_s``."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "api.wandb.ai", parsed.port or (80 if parsed.scheme == "http" else 443)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(f"{host}:{port}: {error}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {timeout_s:.0f} s"


def wandb_mode(requested: str | None, sweep_dir: Path | None) -> str:
    """The mode to run wandb in: the requested one, but offline when the server cannot be reached. A sweep's later
    runs, in this process or any other, read the first one's finding from the marker in its folder (a run
    outside a sweep asks once: it is its process's only run)."""
    mode = requested or ("online" if _has_wandb_credentials() else "offline")
    if mode != "online":
        return mode
    marker = sweep_dir / UNREACHABLE_MARKER if sweep_dir else None
    if marker and marker.exists():
        return "offline"
    reason = _probe(os.environ.get(environment.WANDB_URL, "https://api.wandb.ai"), PROBE_TIMEOUT_S)
    if reason is None:
        return mode
    log.warning("W&B is unreachable (%s): logging offline into each run's wandb/ folder; upload later with "
                "`wandb sync`. Said once per sweep.", reason)
    if marker:
        try:
            marker.write_text(reason)
        except OSError:
            pass
    return "offline"


def wandb_settings(wandb: Any) -> Any:
    """wandb's settings for our runs: silent (its banner, its 3-line offline notice and its ~25-line history
    and summary at every run's end would bury a sweep's output; ``wandb_location`` says in one line where a
    run goes instead), and a bounded wait for the server. Silent also hides wandb's own warnings; its failures
    reach us as exceptions, each logged as one warning (a wandb error never stops training)."""
    return wandb.Settings(init_timeout=INIT_TIMEOUT_S, silent=True)


def wandb_location(run: Any) -> str | None:
    """Where a wandb run's data goes, for one log line: its URL online, its folder offline (``wandb sync``
    uploads it later), None when disabled. (Reading ``run.url`` offline makes wandb warn, so it is not.)"""
    if getattr(run, "disabled", False):
        return None
    if run.offline:
        return f"offline; upload later with: wandb sync {run.settings.sync_dir}"
    return run.url or str(run.settings.sync_dir)


class WandbLogger:
    """Mirrors metrics to Weights & Biases; any wandb error turns it off with a warning."""

    def __init__(self, project: str, entity: str | None, group: str | None, name: str, config: dict,
                 run_dir: Path, mode: str | None = None, tags: list[str] | None = None, resume_id: str | None = None):
        self.run = None
        try:
            import wandb

            self.run = wandb.init(project=project, entity=entity, group=group, name=name, config=config,
                                  dir=str(run_dir), mode=mode, tags=tags or None, id=resume_id, resume="allow",
                                  reinit="finish_previous", settings=wandb_settings(wandb))
            if where := wandb_location(self.run):
                log.info("W&B: %s %s", name, where)
        except Exception as error:  # noqa: BLE001 - a logging backend must never stop training
            log.warning("wandb disabled: %s", error)

    @property
    def run_id(self) -> str | None:
        return getattr(self.run, "id", None)

    def log(self, record: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in record.items() if k != "step"}, step=record.get("step"))
        except Exception as error:  # noqa: BLE001
            log.warning("wandb disabled after a logging error: %s", error)
            self.run = None

    def summary(self, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.summary.update(summary)
        except Exception as error:  # noqa: BLE001
            log.warning("wandb summary not written: %s", error)

    def close(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish()
            except Exception as error:  # noqa: BLE001
                log.warning("wandb finish failed: %s", error)


def best_text(running: list[tuple[float, float]], short: bool = False) -> str:
    """A packed run's best LR at this step from its running members' (LR, loss): the lowest mean over seeds, as
    the report picks its best grid LR."""
    best = best_lr(running)
    if best is None:
        return "none running"
    lr, loss, seeds = best
    if short:
        return f"{lr:.3g} ({loss:.4f})"
    return f"best lr {lr:.4g}: train loss {loss:.4f}" + (f" (mean of {seeds} seeds)" if seeds > 1 else "")


def pack_label(members: Members) -> str:
    """What a run's progress names: its folder; for a packed run, what its members share and the LRs and seeds
    they span (``width=64: 11 packed runs, lr 0.000122…0.125``)."""
    first = members.items[0].run_dir.name
    if len(members) == 1:
        return first
    shared = ",".join(part for part in first.split(",") if part.partition("=")[0] not in ("lr", "seed"))
    lrs = sorted({member.lr for member in members})
    seeds = sorted({member.seed for member in members})
    spans = [f"lr {lrs[0]:.3g}…{lrs[-1]:.3g}" if len(lrs) > 1 else f"lr {lrs[0]:.3g}"]
    if len(seeds) > 1:
        spans.append(f"seeds {seeds[0]}…{seeds[-1]}")
    return f"{shared + ': ' if shared else ''}{len(members)} packed runs, {', '.join(spans)}"


class RunLoggers:
    """A run's outputs while it trains: one metrics.jsonl (and wandb run) per member, and the progress bar.
    A context manager: everything is closed on every way out, errors and signals included."""

    def __init__(self, logger: LoggerConfig, train: TrainConfig, members: Members, state: RunState, lead: bool,
                 show_bar: bool, sweep_dir: Path | None, total: int | None = None):
        self._stack = ExitStack()
        self.metrics: list[JsonlLogger | None] = [None] * len(members)
        self.wandbs: list[WandbLogger | None] = [None] * len(members)
        self.layers: list[JsonlLogger | None] = [None] * len(members)  # layer_stats.jsonl, when measured
        self.name = pack_label(members)
        self.total = total or train.steps
        self._last_beat = time.monotonic()
        self.bar = self._stack.enter_context(
            tqdm(total=self.total, initial=state.step, desc=self.name,
                 dynamic_ncols=True, disable=None if show_bar else True, mininterval=1.0,  # None: only on a terminal
                 leave=sweep_dir is None))  # in a sweep the job's progress line stays instead
        if not lead:  # ranks > 0 of a distributed run write nothing
            return
        mode = wandb_mode(logger.mode, sweep_dir) if logger.name == "wandb" else None
        for k, member in enumerate(members):
            self.metrics[k] = JsonlLogger(member.run_dir / METRICS_FILE, truncate_at=state.metrics_offsets[k])
            self._stack.callback(self.metrics[k].close)
            if train.layer_stats_every:
                path = member.run_dir / LAYER_STATS_FILE
                keep_until(path, state.step)  # a resumed run logs its later records again
                resumed = state.step and path.exists()  # (the setting may be new to a resumed run)
                self.layers[k] = JsonlLogger(path, truncate_at=path.stat().st_size if resumed else None)
                self._stack.callback(self.layers[k].close)
            if mode is not None:
                self.wandbs[k] = WandbLogger(
                    project=logger.project, entity=logger.entity,
                    group=logger.group or (sweep_group(sweep_dir) if sweep_dir else None),
                    name=member.run_dir.name, config=OmegaConf.to_container(member.cfg, resolve=True),
                    run_dir=member.run_dir, mode=mode, tags=list(logger.tags), resume_id=state.wandb_ids[k])
                self._stack.callback(self.wandbs[k].close)

    def __enter__(self) -> RunLoggers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def emit(self, member: int, record: dict[str, Any]) -> None:
        for sink in (self.metrics[member], self.wandbs[member]):
            if sink is not None:
                sink.log(record)

    def heartbeat(self, step: int, loss: float | list[tuple[float, float]], rate: str,
                  seconds_per_step: float) -> None:
        """Without a progress bar (not a terminal, or train.progress=false), a line at most every ``HEARTBEAT_S``
        seconds says the run is alive, where it stands and how long its remaining steps take at its pace.
        ``loss``: this step's, or a packed run's running members' (LR, loss)."""
        if not self.bar.disable or time.monotonic() - self._last_beat < HEARTBEAT_S:
            return
        self._last_beat = time.monotonic()
        left = duration_text(seconds_per_step * max(0, self.total - step))
        said = f"train loss {loss:.4f}" if isinstance(loss, float) else best_text(loss)
        log.info("%s: step %d of %d, %s, %s, about %s left in this run", self.name, step, self.total, said, rate,
                 left)

    def emit_layers(self, member: int, step: int, records: list[dict[str, Any]]) -> None:
        """One line per layer into layer_stats.jsonl; W&B gets ``layers/<layer>/<quantity>`` columns."""
        if self.layers[member] is not None:
            for record in records:
                self.layers[member].log({"step": step, **record})
        if self.wandbs[member] is not None:
            flat = {f"layers/{r['layer']}/{key}": value for r in records for key, value in r.items()
                    if key not in ("layer", "role")}
            self.wandbs[member].log({"step": step, **flat})

    def offsets(self) -> list[int | None]:
        """Where metrics.jsonl stands (the resume point saved with a checkpoint); flushes layer_stats.jsonl
        too, so that what a checkpoint covers is on disk if the process is killed after it."""
        for layers in self.layers:
            if layers is not None:
                layers.offset()
        return [m.offset() if m else None for m in self.metrics]

    def wandb_ids(self) -> list[str | None]:
        return [w.run_id if w else None for w in self.wandbs]

    def finish(self, summaries: list[dict[str, Any]]) -> None:
        for wandb_run, summary in zip(self.wandbs, summaries):
            if wandb_run is not None:
                wandb_run.summary(summary)
