"""The modular-duality paper's claim about μP, measured: μP's per-layer update sizes against the dualized
update's, at each width, each mode at its own tuned LR.

The paper says μP approximates the duality map: the Linear atom's dual map has the factor √(d_out/d_in), which
μP's per-layer LRs recover. Here each layer's update is measured in the layer's own modular norm (the
RMS→RMS operator norm, ``atom.atom_norm``: σ_max / √(d_out/d_in) for a matrix, the largest row RMS for an
embedding), divided by the step's schedule factor, and averaged over the run's measured steps. A dualized
step has exactly LR × the layer's share of the modular norm; a μP step has whatever its per-layer Adam LR
gives. The ratio μP / dualized per layer and width says how far apart they are; its slope along log2(width)
says whether μP's update scales with width as the duality map's does (0: it does).

Trains one network per (mode, width, seed) through the library's own step (``build_network``,
``optimizer_step``) on the sweep's settings (``experiment=small/gpt_width``: 200 steps, batch 16, context
64), the configs composed as the sweep composes them. About 10 minutes on a 2-core CPU.

    python scripts/mup_geometry.py --mup-lrs 32=0.03125,64=0.0625,128=0.0625,256=0.0625 \\
        --dualized-lr 0.5 --out docs/results/mup_geometry
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf

from modula_cli.analysis.stats import T_975
from modula_cli.config import CONFIG_DIR
from modula_cli.config.resolvers import register_config
from modula_cli.data import build_dataset
from modula_cli.models.variant import variant_of
from modula_cli.nn import layer_roles
from modula_cli.nn.loss import grads_of, losses_and_hits
from modula_cli.optim import MODES, OptimConfig, build_network, init_state, optimizer_step
from modula_cli.optim.schedule import schedule_factor


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


@torch.no_grad()
def update_norms(net, before: list[torch.Tensor], after: list[torch.Tensor]) -> list[float]:
    """Each atom's change of its effective weight in the atom's own norm."""
    return [atom.atom_norm(atom.effective(b - a).float()) for atom, b, a in zip(net.atom_list(), before, after)]


def measure(mode: str, width: int, lr: float, seed: int, every: int, extra: list[str]) -> pd.DataFrame:
    """One run of ``mode`` at ``width``: per role, the mean over measured steps of its update norm / schedule."""
    cfg = compose("experiment=small/gpt_width", f"optim.mode={mode}", f"arch.width={width}", f"optim.lr={lr}",
                  f"train.seed={seed}", "train.device=cpu", *extra)
    torch.manual_seed(seed)
    opt = OptimConfig.of(cfg.optim)
    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    net = build_network(cfg.arch, data, variant_of(cfg), opt)
    weights = [w.requires_grad_() for w in MODES[mode].initial_weights(net, net.initialize(seed=seed))]
    state = init_state(weights, opt)
    steps = cfg.train.steps
    rows = []
    for t in range(steps):
        x, y = data.train_batch(t, cfg.train.batch_size, seed=seed)
        loss = losses_and_hits(net, weights, x, y)[0]
        grads = grads_of(loss, weights)
        before = [w.detach().clone() for w in weights] if t % every == 0 else None
        optimizer_step(net, weights, grads, state, opt, t, steps)
        if before is not None:
            factor = schedule_factor(opt.schedule, t, steps)
            for role, norm in zip(layer_roles(net), update_norms(net, before, [w.detach() for w in weights])):
                rows.append({"mode": mode, "width": width, "seed": seed, "step": t, "role": role,
                             "update": norm / factor})
    frame = pd.DataFrame(rows)
    frame["loss"] = float(loss.detach().mean())
    return frame


def slope(widths: np.ndarray, values: np.ndarray) -> float:
    return float(np.polyfit(np.log2(widths), np.log2(values), 1)[0])


def _slope_cells(ratios: pd.Series) -> tuple[float, float, str]:
    """The slope of log2(ratio) on log2(width) per seed, then its mean with a 95 % t-interval over seeds."""
    by_seed = ratios.unstack("seed")
    per = np.array([slope(by_seed.index.to_numpy(float), by_seed[s].to_numpy(float)) for s in by_seed])
    half = T_975[len(per) - 2] * per.std(ddof=1) / math.sqrt(len(per)) if len(per) > 1 else math.nan
    return per.mean(), half, f"{per.mean():+.2f} [{per.mean() - half:+.2f}, {per.mean() + half:+.2f}]"


def summarise(frame: pd.DataFrame, lrs: dict[str, dict[int, float]]) -> tuple[pd.DataFrame, list[str]]:
    """Per role and width: the mean update of each mode (over steps and blocks, then seeds) and the ratio
    μP / dualized at each mode's tuned LR, with its spread over seeds; then the same ratio per unit LR (each
    update divided by its run's LR), whose slope along log2(width) says whether μP's update grows with width
    as the duality map's does (a 95 % interval over seeds: t on n−1 degrees of freedom of the per-seed slopes)."""
    frame = frame.assign(lr=[lrs[m][w] for m, w in zip(frame["mode"], frame["width"])])
    frame = frame.assign(per_lr=frame["update"] / frame["lr"])
    per_seed = frame.groupby(["mode", "role", "width", "seed"])[["update", "per_lr"]].mean().unstack("mode")
    ratio = per_seed["update"]["mup"] / per_seed["update"]["dualized"]
    ratio_per_lr = per_seed["per_lr"]["mup"] / per_seed["per_lr"]["dualized"]
    widths = sorted(frame["width"].unique())
    lines = ["| role | " + " | ".join(f"μP / dualized at {w}" for w in widths) + " | per unit LR: "
             + " | ".join(f"at {w}" for w in widths) + " | its slope per doubling [95 %] |",
             "|---" * (2 * len(widths) + 2) + "|"]
    rows = []
    for role in ratio.index.get_level_values("role").unique():
        tuned, unit = ratio.loc[role], ratio_per_lr.loc[role]
        mean, half, text = _slope_cells(unit)
        by_width = tuned.groupby("width").agg(["mean", "std"])
        unit_mean = unit.groupby("width").mean()
        rows += [{"role": role, "width": w, "ratio": by_width.loc[w, "mean"], "ratio_sd": by_width.loc[w, "std"],
                  "ratio_per_lr": unit_mean.loc[w], "slope_per_lr": mean, "slope_half_width": half} for w in widths]
        lines.append(f"| {role} | " + " | ".join(f"{by_width.loc[w, 'mean']:.2f} ± {by_width.loc[w, 'std']:.2f}"
                                               for w in widths)
                     + " | " + " | ".join(f"{unit_mean.loc[w]:.3g}" for w in widths) + f" | {text} |")
    return pd.DataFrame(rows), lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mup-lrs", required=True, help="width=LR,… : μP's tuned LR at each width")
    parser.add_argument("--dualized-lr", type=float, required=True, help="dualized Adam's tuned LR (every width)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--every", type=int, default=20, help="measure every N-th step")
    parser.add_argument("--out", type=Path, help="write updates.csv and geometry.csv and geometry.md here")
    parser.add_argument("--summarise", type=Path,
                        help="summarise this updates.csv (of the same LRs) instead of training")
    parser.add_argument("overrides", nargs="*", help="further config overrides for every run")
    args = parser.parse_args(argv)
    lrs = {int(w): float(lr) for w, lr in (item.split("=") for item in args.mup_lrs.split(","))}
    modes_lrs = {"mup": lrs, "dualized": {width: args.dualized_lr for width in lrs}}
    updates = pd.read_csv(args.summarise) if args.summarise else train_all(lrs, args)
    table, lines = summarise(updates, modes_lrs)
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.summarise:
            updates.to_csv(args.out / "updates.csv", index=False, float_format="%.6g")
        table.to_csv(args.out / "geometry.csv", index=False, float_format="%.6g")
        (args.out / "geometry.md").write_text("\n".join(lines) + "\n")


def train_all(lrs: dict[int, float], args: argparse.Namespace) -> pd.DataFrame:
    frames = []
    for width, mup_lr in lrs.items():
        for seed in range(args.seeds):
            for mode, lr in (("mup", mup_lr), ("dualized", args.dualized_lr)):
                tick = time.perf_counter()
                frames.append(measure(mode, width, lr, seed, args.every, args.overrides))
                print(f"{mode:8s} width {width:4d} seed {seed} lr {lr:g}: final loss {frames[-1]['loss'].iloc[0]:.3f}"
                      f" ({time.perf_counter() - tick:.0f} s)", file=sys.stderr)
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":
    main()
