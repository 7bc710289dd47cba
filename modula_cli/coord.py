"""``modula-coord-check``: a minutes-long check of whether an architecture and mode will transfer across
width (or depth), and if not, which layer is to blame.

For each mode and scale it trains a fresh network a few steps on one fixed batch and records every
atom's geometry (``geometry.py``) at every step into ``coord.csv``; then the slope of log(value) against
log(scale) at the last step, per layer and quantity, into ``coord_slopes.csv``; a verdict per mode
(width-stable: every layer's ``delta_rms`` and ``own_delta_rms`` slopes within ±tolerance); and
``coord.png``. Each finished point is saved at once: a stopped check re-run into the same folder
(``hydra.run.dir=…``) redoes only the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from . import atomic
from .config import CONFIG_DIR
from .data import build_dataset
from .geometry import QUANTITIES, captured, layer_geometry
from .identity import fingerprint
from .models import ModelError, build_model
from .nn import Module, layer_names, layer_roles
from .optim import MODES, OptimConfig, init_state, optimizer_step
from .plots import plot_coord
from .run import grads_of, losses_and_hits
from .signals import STOP, StopRequested
from .sweep import register_resolvers
from .validate import config_problems, optim_config, resolve_device, unknown_key_problems

log = logging.getLogger(__name__)

register_resolvers()

AXES = ("width", "depth")
CSV_FILE, SLOPES_FILE, PLOT_FILE, VERDICT_FILE = "coord.csv", "coord_slopes.csv", "coord.png", "verdict.txt"
POINT_COLUMNS = ("point", "mode", "optimizer", "arch", "width", "depth")


@dataclass(frozen=True)
class CoordSettings:
    axis: str
    scales: tuple[int, ...]
    modes: tuple[str, ...]
    steps: int
    batch_size: int
    tolerance: float

    @classmethod
    def of(cls, cfg: Any) -> CoordSettings:
        coord = cfg.coord
        return cls(axis=coord.axis, scales=tuple(coord.widths if coord.axis == "width" else coord.depths),
                   modes=tuple(coord.modes), steps=coord.steps, batch_size=coord.batch_size,
                   tolerance=float(coord.tolerance))


def _int_list_problem(key: str, value: Any) -> str | None:
    items = list(value) if isinstance(value, (list, tuple, ListConfig)) else None
    if not items or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in items):
        return f"{key}={value}; must be a list of integers >= 1, e.g. [32,64,128]"
    if len(items) < 2 or len(set(items)) < len(items):
        return f"{key}={value}; needs at least two different values to fit a slope, without repeats"
    return None


def coord_problems(cfg: Any) -> list[str]:
    """Everything wrong with a coordinate check's settings and with each of its points, before any work."""
    coord = cfg.coord
    problems = []
    if coord.axis not in AXES:
        problems.append(f"coord.axis={coord.axis!r}; allowed: {', '.join(AXES)}")
    elif problem := _int_list_problem(f"coord.{coord.axis}s", coord[f"{coord.axis}s"]):
        problems.append(problem)
    modes = list(coord.modes) if isinstance(coord.modes, (list, tuple, ListConfig)) else []
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) < len(modes):
        problems.append(f"coord.modes={coord.modes}; a list of distinct modes from: {', '.join(MODES)}")
    for key in ("steps", "batch_size"):
        value = coord[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"coord.{key}={value}; must be an integer >= 1")
    if not isinstance(coord.tolerance, (int, float)) or isinstance(coord.tolerance, bool) or not coord.tolerance > 0:
        problems.append(f"coord.tolerance={coord.tolerance}; must be a number > 0")
    if isinstance(cfg.train.seed, (list, ListConfig)):
        problems.append(f"train.seed={cfg.train.seed}; the coordinate check uses one fixed seed")
    if isinstance(cfg.optim.lr, (list, ListConfig)):
        problems.append(f"optim.lr={cfg.optim.lr}; the coordinate check uses one learning rate (null: each "
                        f"mode's default)")
    if problems:
        return problems
    settings = CoordSettings.of(cfg)
    seen: set[str] = set()
    for mode in settings.modes:  # each point's config, as the runner would check it (one line per problem)
        for scale in settings.scales:
            for problem in config_problems(point_config(cfg, settings.axis, scale, mode)):
                if problem not in seen:
                    seen.add(problem)
                    problems.append(problem)
    return problems


def point_config(cfg: Any, axis: str, scale: int, mode: str) -> DictConfig:
    point = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    point.arch[axis] = scale
    point.optim.mode = mode
    return point


def point_id(point: DictConfig, settings: CoordSettings) -> str:
    """What makes a point's numbers: its run fingerprint, the number of steps and the batch size."""
    key = {"run": fingerprint(point), "steps": settings.steps, "batch_size": settings.batch_size}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def measure(net: Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, opt: OptimConfig,
            steps: int) -> list[dict[str, Any]]:
    """Train ``net`` from ``weights`` for ``steps`` updates on the one batch (x, y); one record per atom and
    step 0…steps (step t: after t updates) with the loss, this step's LR and the geometry."""
    names, roles, shares = layer_names(net), layer_roles(net), net.target_shares()
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


# --- slopes and the verdict --------------------------------------------------------------------------------

def fitted_slope(scales: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of log(value) against log(scale); 0 when the value is 0 at every scale (nothing
    changed anywhere), NaN when some values are 0, negative or missing (no power law to fit)."""
    values = np.asarray(values, dtype=float)
    if len(values) >= 2 and np.all(values == 0):
        return 0.0
    if len(values) < 2 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        return math.nan
    return float(np.polyfit(np.log(np.asarray(scales, dtype=float)), np.log(values), 1)[0])


def slopes(frame: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per mode, layer and quantity: the slope at the last step. Along depth, layers differ between
    depths, so a role's layers (every block's ``attn.q``) are averaged first and the role is the layer."""
    last = frame[frame["step"] == frame["step"].max()]
    key = "layer" if axis == "width" else "role"
    order = {name: i for i, name in enumerate(dict.fromkeys(last.sort_values(["point", "index"])[key]))}
    rows = []
    for (mode, layer), group in last.groupby(["mode", key], sort=False):
        by_scale = group.groupby(axis)[list(QUANTITIES)].mean().sort_index()
        for quantity in QUANTITIES:
            values = by_scale[quantity].to_numpy()
            rows.append({"mode": mode, "layer": layer, "quantity": quantity,
                         "slope": fitted_slope(by_scale.index.to_numpy(), values),
                         "smallest": values[0], "largest": values[-1], "points": int(np.isfinite(values).sum()),
                         "_order": order[layer]})
    result = pd.DataFrame(rows)
    if result.empty:
        return result
    modes = {m: i for i, m in enumerate(dict.fromkeys(frame["mode"]))}
    result["_mode"] = result["mode"].map(modes)
    return result.sort_values(["_mode", "_order"], kind="stable").drop(columns=["_mode", "_order"]) \
        .reset_index(drop=True)


VERDICT_QUANTITIES = ("delta_rms", "own_delta_rms")


def verdicts(slope_table: pd.DataFrame, tolerance: float, axis: str = "width", shown: int = 4) -> dict[str, str]:
    """Per mode: stable along the axis when every layer's ``delta_rms`` and ``own_delta_rms`` slopes are
    within ±tolerance (the second catches a layer's own growing update hidden under a large change from
    below); else the worst layers, by |slope|, with the quantity that failed."""
    result = {}
    checked = slope_table[slope_table["quantity"].isin(VERDICT_QUANTITIES)]
    for mode, group in checked.groupby("mode", sort=False):
        layers = group["layer"].nunique()
        measured = group[np.isfinite(group["slope"])]
        unmeasured = sorted(set(group["layer"]) - set(measured["layer"]))
        worst = measured.reindex(measured["slope"].abs().sort_values(ascending=False).index)
        worst = worst.drop_duplicates("layer")  # a layer's worst quantity only
        bad = worst[worst["slope"].abs() > tolerance]
        note = (f"; no slope for {', '.join(unmeasured)} (a zero or non-finite value at some {axis}s: a frozen "
                f"layer or a diverged point)" if unmeasured else "")
        if bad.empty and unmeasured:  # a layer that could not be measured may be the one that fails
            result[mode] = f"no verdict: every measured layer is within ±{tolerance:g}{note}"
        elif bad.empty and not measured.empty:
            top = worst.iloc[0]
            result[mode] = (f"{axis}-stable: every layer's delta_rms and own_delta_rms slopes are within "
                            f"±{tolerance:g} (largest {top['slope']:+.2f}, {top['layer']} {top['quantity']}){note}")
        elif bad.empty:
            result[mode] = f"no verdict: no layer has a delta_rms slope{note}"
        else:
            names = ", ".join(f"{r['layer']} {r['quantity']} {r['slope']:+.2f}" for _, r in bad.head(shown).iterrows())
            more = f", … ({len(bad)} of {layers} layers)" if len(bad) > shown else ""
            result[mode] = f"not {axis}-stable: slope beyond ±{tolerance:g} in {names}{more}{note}"
    return result


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
    settings = CoordSettings.of(cfg)
    plan = [(mode, scale, point_config(cfg, settings.axis, scale, mode))
            for mode in settings.modes for scale in settings.scales]
    ids = {point_id(point, settings) for _, _, point in plan}
    previous = _read_previous(out_dir / CSV_FILE)
    kept = previous[previous["point"].isin(ids)] if not previous.empty else previous
    done = set(kept["point"]) if not kept.empty else set()
    frames = [kept] if not kept.empty else []
    if done:
        log.info("resuming: %d of %d points already measured in %s", len(done), len(plan), out_dir)

    device = resolve_device(cfg.train.device)
    data_options = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items()
                    if k not in ("name", "max_context")}
    data = build_dataset(cfg.data.name, **data_options)
    x, y = data.train_batch(0, settings.batch_size, seed=cfg.train.seed, device=device)
    nets: dict[int, Module] = {}
    for _, scale, point in plan:  # every network built (and a user's checked) before any point is measured
        nets[scale] = nets.get(scale) or build_model(point.arch, data)
    with STOP.installed():
        for mode, scale, point in plan:
            pid = point_id(point, settings)
            if pid in done:
                continue
            tick = time.perf_counter()
            net = nets[scale]
            opt = optim_config(point)
            weights = net.initialize(seed=cfg.train.seed, device=device)
            if opt.mode == "manifold":
                weights = net.onto_manifold(weights)
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
    slope_table = slopes(table, settings.axis)
    verdict = verdicts(slope_table, settings.tolerance, settings.axis)
    _write_frame(out_dir / SLOPES_FILE, slope_table)
    atomic.write_text(out_dir / VERDICT_FILE, "".join(f"{mode}: {text}\n" for mode, text in verdict.items()))
    plot_coord(table, settings.axis, out_dir / PLOT_FILE, title=_title(cfg, settings))
    return table, slope_table, verdict


def _title(cfg: Any, settings: CoordSettings) -> str:
    fixed = f"depth {cfg.arch.depth}" if settings.axis == "width" else f"width {cfg.arch.width}"
    lr = "each mode's default LR" if cfg.optim.lr is None else f"LR {cfg.optim.lr:g}"
    steps = f"{settings.steps} step{'s' if settings.steps > 1 else ''}"
    return (f"{cfg.arch.name} on {cfg.data.name}, {cfg.optim.name}, {fixed}, {lr}, {steps} on one batch of "
            f"{settings.batch_size}, seed {cfg.train.seed}")


def verdict_text(verdict: dict[str, str]) -> str:
    width = max(map(len, verdict), default=0)
    return "\n".join(f"  {mode:<{width}}  {text}" for mode, text in verdict.items())


def check(cfg: DictConfig, overrides: list[str]) -> None:
    problems = unknown_key_problems(overrides, cfg) + coord_problems(cfg)
    if problems:
        raise SystemExit("modula-coord-check: invalid configuration:\n  - " + "\n  - ".join(problems))


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="coord_check")
def main(cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    check(cfg, list(HydraConfig.get().overrides.task))
    try:
        _, _, verdict = run_coord_check(cfg, out_dir)
    except ModelError as error:
        raise SystemExit(f"modula-coord-check: {error}") from None
    except StopRequested as stop:
        saved = _read_previous(out_dir / CSV_FILE)
        count = saved["point"].nunique() if not saved.empty else 0
        log.warning("stopped (%s) with %d point(s) measured in %s; re-run the same command with "
                    "hydra.run.dir=%s to finish", stop, count, out_dir / CSV_FILE, out_dir)
        raise SystemExit(stop.exit_code) from None
    print(f"\nCoordinate check ({_title(cfg, CoordSettings.of(cfg))}):\n{verdict_text(verdict)}\n"
          f"Tables and plot: {out_dir / CSV_FILE}, {out_dir / SLOPES_FILE}, {out_dir / PLOT_FILE}")


if __name__ == "__main__":
    main()
