"""Is the modular norm's depth rule CompleteP's in another form? Per depth, the modular GPT's residual weights
and the size of one update of each block layer, beside the standard GPT under μP + CompleteP (and + Depth-μP).

Both networks are built as a run builds them (width 64, character vocabulary, context 64), at depths 2, 4, 8, 16.
For each: the branch multiplier b (the factor on a block's residue) and the skip weight a (on its identity) of
x ← a·x + b·f(x); then one step at LR 1 from gradients drawn N(0, 1) (three seeds), and for each block layer the
change of its effective weight: its spectral norm ‖ΔW‖ and b·‖ΔW‖, what the change can add to the residual stream
per unit input (the branch's factor times the layer's). The modular GPT steps dualized (its update in the modular
norm is exactly its share of the LR, whatever the gradient), the standard GPT steps Adam (its first step is
±LR·(the layer's LR factor) in every entry). The slopes are log2 change per doubling of depth.

    python scripts/depth_study.py --out docs/results/depth_recipes/study
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf

from modula_cli.models.variant import Variant
from modula_cli.nn import Mul, layer_roles
from modula_cli.optim import OptimConfig, build_network, init_state, optimizer_step
from modula_cli.plumbing import atomic

DEPTHS = (2, 4, 8, 16)
WIDTH, CONTEXT, VOCAB = 64, 64, 65
BLOCK_ROLES = ("attn.q", "attn.k", "attn.v", "attn.out", "mlp.in", "mlp.out")
DATA = OmegaConf.create({"name": "shakespeare", "kind": "language", "vocab_size": VOCAB, "context": CONTEXT})
SERIES = {  # name → (arch overrides, optim settings, skip and branch weight of a block at depth L)
    "modular GPT, dualized": ({"name": "gpt", "blocks_mass": 5.0}, {"mode": "dualized"},
                              lambda depth: (1 - 1 / (2 * depth), 1 / (2 * depth))),
    "standard GPT, μP + CompleteP": ({"name": "standard_gpt", "residual_scale": 1.0},
                                     {"mode": "mup", "mup": {"depth": "completep", "base_depth": 2}},
                                     lambda depth: (1.0, 2 / depth)),
    "standard GPT, μP + Depth-μP": ({"name": "standard_gpt", "residual_scale": 1.0},
                                    {"mode": "mup", "mup": {"depth": "depth_mup", "base_depth": 2}},
                                    lambda depth: (1.0, (2 / depth) ** 0.5)),
}


def block_update_sizes(series: str, depth: int, seed: int, width: int = WIDTH) -> list[dict]:
    arch_extra, optim, weights_of = SERIES[series]
    arch = OmegaConf.create({"width": width, "depth": depth, "heads": 4, **arch_extra})
    mup = {"base_width": width, **optim.get("mup", {})}
    cfg = OptimConfig.of({"lr": 1.0, "schedule": "constant", **optim, "mup": mup})
    net = build_network(arch, DATA, Variant(), cfg)
    skip, branch = weights_of(depth)
    scalars = {round(m.scalar, 12) for m in net.walk() if isinstance(m, Mul)}
    if not math.isclose(branch, 1.0) and round(branch, 12) not in scalars:  # the formula is the network's own
        raise AssertionError(f"{series} at depth {depth}: no residual multiplier {branch} in {sorted(scalars)}")
    weights = net.initialize(seed=seed)
    generator = torch.Generator().manual_seed(100 + seed)
    grads = [torch.randn(w.shape, generator=generator) for w in weights]
    before = [atom.effective(w).clone() for atom, w in zip(net.atom_list(), weights)]
    optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, t=0, total_steps=1)
    rows = []
    for atom, role, w0, w in zip(net.atom_list(), layer_roles(net), before, weights):
        if role not in BLOCK_ROLES:
            continue
        spectral = float(torch.linalg.matrix_norm(w0 - atom.effective(w), ord=2))
        rows.append({"series": series, "depth": depth, "seed": seed, "role": role, "skip": skip, "branch": branch,
                     "update_spectral": spectral, "branch_update": branch * spectral})
    return rows


def slope(frame: pd.DataFrame, column: str) -> float:
    means = frame.groupby("depth")[column].mean()
    return float(np.polyfit(np.log2(means.index.to_numpy(float)), np.log2(means.to_numpy()), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS), help="at least two, from 2 (the base)")
    parser.add_argument("--width", type=int, default=WIDTH, help="a multiple of 4 (4 heads)")
    args = parser.parse_args()
    if len(set(args.depths)) < 2 or min(args.depths) < 2:
        parser.error(f"--depths {' '.join(map(str, args.depths))}: at least two different depths, each 2 or more")
    rows = [row for series in SERIES for depth in args.depths for seed in range(3)
            for row in block_update_sizes(series, depth, seed, args.width)]
    frame = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_with(args.out / "study.csv", lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))
    lines = ["| series | depth | skip a | branch b | ‖ΔW‖ per block layer (mean) | b·‖ΔW‖ | L·b·‖ΔW‖ |",
             "|---|---|---|---|---|---|---|"]
    for (series, depth), group in frame.groupby(["series", "depth"], sort=False):
        spectral, weighted = group["update_spectral"].mean(), group["branch_update"].mean()
        lines.append(f"| {series} | {depth} | {group['skip'].iloc[0]:.4g} | {group['branch'].iloc[0]:.4g} | "
                     f"{spectral:.4g} | {weighted:.4g} | {depth * weighted:.4g} |")
    lines += ["", "| series | slope of b | slope of ‖ΔW‖ | slope of b·‖ΔW‖ (per doubling of depth) |",
              "|---|---|---|---|"]
    for series, group in frame.groupby("series", sort=False):
        lines.append(f"| {series} | {slope(group, 'branch'):+.3f} | {slope(group, 'update_spectral'):+.3f} | "
                     f"{slope(group, 'branch_update'):+.3f} |")
    text = "\n".join(lines) + "\n"
    atomic.write_text(args.out / "study.md", text)
    print(text)


if __name__ == "__main__":
    main()
