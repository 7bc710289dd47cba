"""``modula-coord-check``: a minutes-long check of whether an architecture and mode will transfer across
width (or depth), and if not, which layer is to blame.

For each mode and scale it trains a fresh network a few steps on one fixed batch and records every
atom's geometry (``geometry.py``) at every step into ``coord.csv``; then the slope of log(value) against
log(scale) at the last step, per layer and quantity, into ``coord_slopes.csv``; a verdict per mode
(width-stable: every layer's ``delta_rms`` and ``own_delta_rms`` slopes within ±tolerance; tentative, with
a warning, when the scales span less than 8× or are fewer than 3); and ``coord.png``, where the layers each
verdict names stand out. Each finished point is saved at once: a stopped check re-run into the same folder
(``hydra.run.dir=…``) redoes only the rest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from ..config import CONFIG_DIR
from ..config.identity import fingerprint
from ..config.resolvers import register_config
from ..config.schema import CoordConfig
from ..config.validate import ConfigError, config_problems, unknown_key_problems
from ..optim.mode_settings import move_old_spellings
from ..data import DataUnavailable, build_dataset
from ..models import ModelError
from ..models.variant import variant_of
from ..nn import Module, layer_names
from ..nn.torch_network import shared_roles
from ..nn.loss import grads_of, losses_and_hits
from ..optim import MODES, OptimConfig, build_network, init_state, optimizer_step, single_lr
from ..optim.mode_settings import DEPTH_RECIPES
from ..plumbing import atomic
from ..plumbing.atomic import remove_if_empty
from ..plumbing.device import resolve_device
from ..plumbing.settings import checked, listed, typed
from ..plumbing.signals import STOP, StopRequested
from ..plumbing.threads import configure_threads
from ..run.geometry import QUANTITIES, captured, layer_geometry
from .plot import plot_coord
from .verdict import judge, slopes, span_warning, verdict_text

log = logging.getLogger(__name__)

register_config()

CSV_FILE, SLOPES_FILE, PLOT_FILE, VERDICT_FILE = "coord.csv", "coord_slopes.csv", "coord.png", "verdict.txt"
POINT_COLUMNS = ("point", "mode", "optimizer", "arch", "width", "depth")


def _int_list_problem(key: str, value: Any) -> str | None:
    items = list(value) if listed(value) else None
    if not items or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in items):
        return f"{key}={value}; must be a list of integers >= 1, e.g. [32,64,128]"
    if len(items) < 2 or len(set(items)) < len(items):
        return f"{key}={value}; needs at least two different values to fit a slope, without repeats"
    return None


def coord_problems(cfg: Any) -> list[str]:
    """Everything wrong with a coordinate check's settings and with each of its points, before any work."""
    problems, values = checked("coord", cfg.coord, CoordConfig)
    coord = typed(CoordConfig, values)  # a mistyped value at its default: named once, by its type
    axis_list = f"coord.{coord.axis}s"
    problem = _int_list_problem(axis_list, list(coord.scales))
    if problem and not any(p.startswith(axis_list) for p in problems):
        problems.append(problem)
    if not coord.modes or any(m not in MODES for m in coord.modes) or len(set(coord.modes)) < len(coord.modes):
        problems.append(f"coord.modes={cfg.coord.modes}; a list of distinct modes from: {', '.join(MODES)}")
    order = [f"coord.{f.name}" for f in dataclasses.fields(CoordConfig)]  # one line per setting, in schema order
    problems.sort(key=lambda p: next((i for i, key in enumerate(order) if p.startswith(key)), len(order)))
    if listed(cfg.train.seed):
        problems.append(f"train.seed={cfg.train.seed}; the coordinate check uses one fixed seed")
    if listed(cfg.optim.lr):
        problems.append(f"optim.lr={cfg.optim.lr}; the coordinate check uses one learning rate (null: each "
                        f"mode's default)")
    if problems:
        return problems
    settings = typed(CoordConfig, cfg.coord)
    if settings.mup_depths is not None:
        if "mup" not in settings.modes:
            return [f"coord.mup_depths={cfg.coord.mup_depths} compares μP's depth recipes, and coord.modes="
                    f"{cfg.coord.modes} has no mup; add it (coord.modes=[mup,unnormed])"]
        if not settings.mup_depths or len(set(settings.mup_depths)) < len(settings.mup_depths) or \
                any(recipe not in DEPTH_RECIPES for recipe in settings.mup_depths):
            return [f"coord.mup_depths={cfg.coord.mup_depths}; a list of distinct recipes from: "
                    f"{', '.join(DEPTH_RECIPES)}"]
    seen: set[str] = set()
    for column in columns(cfg, settings):  # each point's config, as the runner would check it (one line per problem)
        for scale in settings.scales:
            for problem in config_problems(point_config(cfg, settings.axis, scale, column)):
                if problem not in seen:
                    seen.add(problem)
                    problems.append(problem)
    return problems


@dataclasses.dataclass(frozen=True)
class Column:
    """One compared training: a mode, and for μP its depth recipe; named ``mup+completep`` in the tables."""

    mode: str
    mup_depth: str = "none"

    @property
    def label(self) -> str:
        return self.mode if self.mup_depth == "none" else f"{self.mode}+{self.mup_depth}"


def columns(cfg: Any, settings: CoordConfig) -> list[Column]:
    """``coord.modes``, μP once per recipe of ``coord.mup_depths`` (or with ``optim.mup.depth``'s)."""
    recipes = settings.mup_depths or [OmegaConf.select(cfg, "optim.mup.depth", default="none")]
    return [Column(mode, recipe) for mode in settings.modes for recipe in (recipes if mode == "mup" else ["none"])]


def point_config(cfg: Any, axis: str, scale: int, column: Column) -> DictConfig:
    point = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    point.arch[axis] = scale
    point.optim.mode = column.mode
    point.optim.mup.depth = column.mup_depth  # "none" beside μP: the recipes are μP's alone
    return point


def point_id(point: DictConfig, settings: CoordConfig) -> str:
    """What makes a point's numbers: its run fingerprint, the number of steps and the batch size."""
    key = {"run": fingerprint(point), "steps": settings.steps, "batch_size": settings.batch_size}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def measure(net: Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, opt: OptimConfig,
            steps: int) -> list[dict[str, Any]]:
    """Train ``net`` from ``weights`` for ``steps`` updates on the one batch (x, y); one record per atom and
    step 0…steps (step t: after t updates) with the loss, this step's LR and the geometry."""
    names, roles, shares = layer_names(net), shared_roles(net), net.target_shares()  # along depth: one line a role
    kinds = [type(atom).__name__ for atom in net.atoms()]
    initial_weights = [w.detach().clone() for w in weights]
    weights = [w.detach().clone().requires_grad_() for w in weights]
    state = init_state(weights, opt)
    rows: list[dict[str, Any]] = []
    initial = updates = lr = None
    for t in range(steps + 1):
        with captured(net) as now:
            loss = losses_and_hits(net, weights, x, y)[0]
        initial = initial or now
        for index, record in enumerate(layer_geometry(net, weights, now, initial, initial_weights, updates, lr)):
            rows.append({"layer": names[index], "role": roles[index], "kind": kinds[index], "step": t,
                         "loss": float(loss.detach()), "lr": lr, "share": shares[index], **record})
        if t == steps:
            break
        grads = grads_of(loss, weights)
        before = [w.detach().clone() for w in weights]
        lr = float(optimizer_step(net, weights, grads, state, opt, t, steps))
        updates = [b - w.detach() for b, w in zip(before, weights)]
    return rows


# --- the command ----------------------------------------------------------------------------------------

def _read_previous(path: Path) -> pd.DataFrame:
    """The points a previous check into this folder finished; an unreadable file is recomputed, not trusted."""
    if not path.exists():
        return pd.DataFrame()
    try:
        frame = pd.read_csv(path, dtype={"point": str})  # an id of digits must stay the same string
        if not {"point", "layer", "step", *QUANTITIES} <= set(frame.columns):
            raise ValueError(f"missing columns in {path.name}")
        return frame
    except (ValueError, OSError, pd.errors.ParserError) as error:
        log.warning("%s is unreadable (%s); recomputing every point", path, error)
        return pd.DataFrame()


def _write_frame(path: Path, frame: pd.DataFrame) -> None:
    atomic.write_with(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.7g"))


def run_coord_check(cfg: DictConfig, out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """The whole check into ``out_dir``; returns (coord table, slopes, verdict per mode). Raises
    ``StopRequested`` on a signal, after saving every finished point."""
    settings = typed(CoordConfig, cfg.coord)
    if warning := span_warning(settings.axis, settings.scales):  # said now too: a long check can be widened
        log.warning("%s", warning)
    plan = [(column.label, scale, point_config(cfg, settings.axis, scale, column))
            for column in columns(cfg, settings) for scale in settings.scales]
    ids = {point_id(point, settings) for _, _, point in plan}
    previous = _read_previous(out_dir / CSV_FILE)
    kept = previous[previous["point"].isin(ids)] if not previous.empty else previous
    done = set(kept["point"]) if not kept.empty else set()
    frames = [kept] if not kept.empty else []
    if done:
        log.info("resuming: %d of %d points already measured in %s", len(done), len(plan), out_dir)

    device = resolve_device(cfg.train.device)
    x, y, nets = _batch_and_networks(cfg, settings, plan, device)
    with STOP.installed():
        for mode, scale, point in plan:
            pid = point_id(point, settings)
            if pid in done:
                continue
            tick = time.perf_counter()
            net = nets[mode, scale]
            opt = OptimConfig.of(point.optim)
            if opt.lr is None:  # each mode's default, as a run of this architecture would take it
                opt = dataclasses.replace(opt, lr=single_lr(opt, point.arch.name,
                                                            OmegaConf.select(point, "variant.scales")))
            weights = net.initialize(seed=cfg.train.seed, device=device)
            weights = MODES[opt.mode].initial_weights(net, weights)
            rows = measure(net, weights, x, y, opt, settings.steps)
            frame = pd.DataFrame(rows)
            frame.insert(0, "index", frame.groupby("step").cumcount())
            for column, value in reversed(list(zip(POINT_COLUMNS, (pid, mode, opt.name, point.arch.name,
                                                                    point.arch.width, point.arch.depth)))):
                frame.insert(0, column, value)
            frames.append(frame)
            _write_frame(out_dir / CSV_FILE, pd.concat(frames, ignore_index=True))
            losses = frame.groupby("step")["loss"].first()
            if not np.isfinite(losses.iloc[-1]):
                log.warning("%s %s %d: the loss is not finite after %d steps (diverged): its layers get no slope "
                            "and the mode no verdict; try a smaller optim.lr", mode, settings.axis, scale,
                            settings.steps)
            log.info("%-9s %s %-5d loss %.4f → %.4f  (%d layers, %.1f s)", mode, settings.axis, scale, losses.iloc[0],
                     losses.iloc[-1], frame["layer"].nunique(), time.perf_counter() - tick)
            STOP.raise_if_requested()
    table = pd.concat(frames, ignore_index=True)
    slope_table, verdict = _conclude(cfg, settings, table, out_dir)
    return table, slope_table, verdict


def _batch_and_networks(cfg: DictConfig, settings: CoordConfig, plan: list, device: torch.device) \
        -> tuple[torch.Tensor, torch.Tensor, dict[tuple[str, int], Module]]:
    """The fixed batch and one network per scale. Raises DataUnavailable or ModelError before any file
    is written: every network is built (and a user's checked) before any point is measured."""
    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    x, y = data.train_batch(0, settings.batch_size, seed=cfg.train.seed, device=device)
    nets: dict[tuple[str, int], Module] = {}  # per mode too: μP sets its own multipliers on its network
    for mode, scale, point in plan:
        nets[mode, scale] = build_network(point.arch, data, variant_of(point), OptimConfig.of(point.optim))
    return x, y, nets


def _conclude(cfg: DictConfig, settings: CoordConfig, table: pd.DataFrame, out_dir: Path) \
        -> tuple[pd.DataFrame, dict[str, str]]:
    """Slopes, verdicts (with the span warning) and the plot, written into ``out_dir``."""
    slope_table = slopes(table, settings.axis)
    judged = judge(slope_table, settings.tolerance, settings.axis, scales=settings.scales)
    verdict = {mode: str(v) for mode, v in judged.items()}
    warning = span_warning(settings.axis, settings.scales)
    _write_frame(out_dir / SLOPES_FILE, slope_table)
    lines = [f"{mode}: {text}" for mode, text in verdict.items()] + ([f"warning: {warning}"] if warning else [])
    atomic.write_text(out_dir / VERDICT_FILE, "".join(line + "\n" for line in lines))
    plot_coord(table, settings.axis, out_dir / PLOT_FILE, title=_title(cfg, settings),
               named={mode: v.layers for mode, v in judged.items()},
               subtitles={mode: v.head for mode, v in judged.items()})
    return slope_table, verdict


def _title(cfg: Any, settings: CoordConfig) -> str:
    fixed = f"depth {cfg.arch.depth}" if settings.axis == "width" else f"width {cfg.arch.width}"
    lr = "each mode's default LR" if cfg.optim.lr is None else f"LR {cfg.optim.lr:g}"
    steps = f"{settings.steps} step{'s' if settings.steps > 1 else ''}"
    return (f"{cfg.arch.name} on {cfg.data.name}, {cfg.optim.name}, {fixed}, {lr}, {steps} on one batch of "
            f"{settings.batch_size}, seed {cfg.train.seed}")


def check(cfg: DictConfig, overrides: list[str]) -> None:
    problems = unknown_key_problems(overrides, cfg) + coord_problems(cfg)
    if problems:
        raise ConfigError(problems)


def modes_from_command_line(cfg: DictConfig, overrides: list[str]) -> None:
    """``optim.mode=X`` without ``coord.modes=…`` (e.g. ``optim.mode=mup``): check X beside unnormed (the
    standard parametrisation it is measured against) instead of the default three."""
    keys = {override.lstrip("+~").partition("=")[0]: override.partition("=")[2] for override in overrides}
    if "optim.mode" in keys and "coord.modes" not in keys:
        mode = keys["optim.mode"]
        if mode not in MODES:
            raise ConfigError([f"optim.mode={mode!r}; allowed: {', '.join(MODES)}"])
        cfg.coord.modes = [mode] if mode == "unnormed" else [mode, "unnormed"]
        log.info("coord.modes=%s (from optim.mode=%s)", list(cfg.coord.modes), mode)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="coord_check")
def main(cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        overrides = list(HydraConfig.get().overrides.task)
        move_old_spellings(cfg.optim)  # a config file's old spellings, before the columns and points read them
        modes_from_command_line(cfg, overrides)
        check(cfg, overrides)
        configure_threads(cfg.train.threads)
        _, _, verdict = run_coord_check(cfg, out_dir)
    except (ConfigError, DataUnavailable, ModelError) as error:  # the user's to fix: the message, no traceback
        remove_if_empty(out_dir, up_to=Path.cwd())  # Hydra made the folder (and its parents) before the check
        raise SystemExit(f"modula-coord-check: {error}") from None
    except StopRequested as stop:
        saved = _read_previous(out_dir / CSV_FILE)
        count = saved["point"].nunique() if not saved.empty else 0
        log.warning("stopped (%s) with %d point(s) measured in %s; re-run the same command with "
                    "hydra.run.dir=%s to finish", stop, count, out_dir / CSV_FILE, out_dir)
        raise SystemExit(stop.exit_code) from None
    settings = typed(CoordConfig, cfg.coord)
    print(f"\nCoordinate check ({_title(cfg, settings)}):\n"
          f"{verdict_text(verdict, span_warning(settings.axis, settings.scales))}\n"
          f"Tables and plot: {out_dir / CSV_FILE}, {out_dir / SLOPES_FILE}, {out_dir / PLOT_FILE}")


if __name__ == "__main__":  # python -m modula_cli.coord.check: the same front door as modula-coord-check
    from ..cli import run

    run("modula-coord-check", main, config_name="coord_check")
