"""The measured effect of each difference between variant=modular and variant=paper (docs/variants.md).

Two parts, printed as markdown:

1. One step, no training: how much each difference changes the function or the update of the same network
   (character GPT width 64 on Shakespeare; ResNet width 16 on random images for the convolution).
2. Training: the modular variant with one difference switched to the paper's, three seeds, the small
   experiment's settings at width 64 (200 steps, batch 16, context 64), final train loss at two LRs:
   normed Adam at 2^-2 and 2^-1 (the two variants' optima), unnormed Adam at 2^-6 and 2^-5.

    python docs/results/variants/variant_effects.py [--skip-training]     # about 8 minutes on a 2-core CPU
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path.insert(0, str(ROOT))

from modula_cli.data import build_dataset  # noqa: E402
from modula_cli.models import build_model  # noqa: E402
from modula_cli.nn import Conv2D, PowerIterationState, ResNet  # noqa: E402
from modula_cli.optim import OptimConfig, init_state, optimizer_step  # noqa: E402
from modula_cli.results.table import collect  # noqa: E402
from modula_cli.models.variant import VARIANTS, Variant  # noqa: E402

SMALL = ["experiment=small/gpt_width", "arch.width=64", "sweep.pack=true",
         "train.seed=0,1,2"]
# (label, overrides): the modular variant, one difference at a time, and the paper variant
TOGGLES = [
    ("modular", ["variant=modular"]),
    ("attention 1/3 on q, k, v", ["variant=modular", "variant.attention_third=qkv"]),
    ("embedding rows reset every step", ["variant=modular", "variant.embed_rows=unit"]),
    ("1 power-iteration step", ["variant=modular", "optim.normed.power_iterations=1"]),
    ("steps + 1 iterations", ["variant=modular", "variant.extra_step=true"]),
    ("constant factors in forward", ["variant=modular", "variant.scales=forward"]),
    ("paper (all of them)", ["variant=paper"]),
]
MODES = {"normed": "0.25,0.5", "unnormed": "0.015625,0.03125"}


def gpt_batch(width: int = 64):
    data = build_dataset("shakespeare", root=str(ROOT / "data"), context=64)
    arch = OmegaConf.create({"name": "gpt", "width": width, "depth": 3, "heads": 4, "blocks_mass": 5.0})
    x, y = data.train_batch(0, 16, seed=0)
    return arch, data, x, y


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def one_step_effects() -> list[tuple[str, str]]:
    torch.manual_seed(0)
    arch, data, x, y = gpt_batch()
    modular = build_model(arch, data, VARIANTS["modular"])
    qkv = build_model(arch, data, Variant(attention_third="qkv"))
    w = modular.initialize(seed=0)
    with torch.no_grad():
        gap = relative(qkv(x, w), modular(x, w))
    rows = [("attention 1/3 on q, k, v", f"logits of the same initial GPT differ by {100 * gap:.1f} % "
             f"(attention logits × 1/9, its output × 1/3 as before)")]

    scales = build_model(arch, data, VARIANTS["paper"])
    named = {a.role: a.forward_scale for a in scales.atoms()}
    rows.append(("constant factors in forward", "a plain (unnormed) step moves each layer by lr × its factor: "
                 + ", ".join(f"{role} {named[role]:.3g}" for role in ("embed.token", "attn.q", "mlp.in", "mlp.out",
                                                                     "output"))
                 + " at width 64 (all 1 in modular; normed and dualized steps are the same)"))

    rms = embedding_rms_after_training(arch, data)
    rows.append(("embedding rows reset every step", f"modular, normed Adam at LR 2^-1, 200 steps: token-embedding "
                 f"rows end at RMS {rms[0]:.2f} (median; max {rms[1]:.2f}); paper keeps them at 1"))

    err1, err2 = power_iteration_error(arch, data)
    rows.append(("1 power-iteration step", f"σ estimate of the Adam update over 50 normed steps: mean relative "
                 f"error {100 * err1:.2f} % with 1 warm-started step, {100 * err2:.3f} % with 2"))

    rows.append(("Conv2D normalised per slice", conv_effect()))
    return rows


def embedding_rms_after_training(arch, data, steps: int = 200) -> tuple[float, float]:
    net = build_model(arch, data, VARIANTS["modular"])
    weights = [w.requires_grad_() for w in net.initialize(seed=0)]
    cfg = OptimConfig(name="adam", mode="normed", lr=0.5)
    state = init_state(weights, cfg)
    for t in range(steps):
        xb, yb = data.train_batch(t, 16, seed=0)
        out = net(xb, weights)
        grads = torch.autograd.grad(F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1)), weights)
        optimizer_step(net, weights, list(grads), state, cfg, t, steps)
    row_rms = weights[0].detach().pow(2).mean(dim=-1).sqrt()
    return float(row_rms.median()), float(row_rms.max())


def power_iteration_error(arch, data, steps: int = 50) -> tuple[float, float]:
    """Relative error of the warm-started σ estimate (one step vs two) along a real normed-Adam run."""
    net = build_model(arch, data, VARIANTS["modular"])
    weights = [w.requires_grad_() for w in net.initialize(seed=0)]
    cfg = OptimConfig(name="adam", mode="normed", lr=0.25)
    state = init_state(weights, cfg)
    estimators = {1: PowerIterationState(1), 2: PowerIterationState(2)}
    errors: dict[int, list[float]] = {1: [], 2: []}
    for t in range(steps):
        xb, yb = data.train_batch(t, 16, seed=0)
        out = net(xb, weights)
        grads = list(torch.autograd.grad(F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1)), weights))
        optimizer_step(net, weights, grads, state, cfg, t, steps)
        # this step's Adam direction, as the optimiser normalised it
        u = [(m / v.sqrt()).nan_to_num(0.0, 0.0, 0.0) for m, v in zip(state.momentum, state.second_moment)]
        matrices = {i: a.matrices(p) for i, (a, p) in enumerate(zip(net.atoms(), u)) if a.matrices(p) is not None}
        exact = {i: torch.linalg.matrix_norm(m, ord=2) for i, m in matrices.items()}
        for k, estimator in estimators.items():
            estimate = estimator.spectral_norms(matrices)
            errors[k] += [float(((exact[i] - estimate[i]) / exact[i]).abs().mean()) for i in matrices]
    return sum(errors[1]) / len(errors[1]), sum(errors[2]) / len(errors[2])


def conv_effect() -> str:
    torch.manual_seed(0)
    net = ResNet(16, 2, 1, 3, 10)
    weights = [w.requires_grad_() for w in net.initialize(seed=0)]
    x, y = torch.randn(32, 3, 16, 16), torch.randint(0, 10, (32,))
    grads = torch.autograd.grad(F.cross_entropy(net(x, weights), y), weights)
    hidden = next(i for i, a in enumerate(net.atoms()) if isinstance(a, Conv2D) and a.d_in == 16)
    atom, g = list(net.atoms())[hidden], grads[hidden]
    kernel = atom.normalize_piece(g, 1.0)
    atom.normalize_slices = True
    per_slice = atom.normalize_piece(g, 1.0)
    return (f"one normed update of a hidden 16-channel kernel (ResNet, random images) differs by "
            f"{100 * relative(per_slice, kernel):.0f} %: every slice grows to the largest one's size")


def training_effects(out_dir: Path) -> list[str]:
    """One sweep folder per toggle (rerunning skips what is finished); mean ± sd over the three seeds."""
    lines = ["| difference switched on (from modular) | normed Adam 2^-2 | normed Adam 2^-1 | unnormed Adam 2^-6 | "
             "unnormed Adam 2^-5 |", "|---|---|---|---|---|"]
    for index, (label, overrides) in enumerate(TOGGLES):
        folder = out_dir / f"toggle{index}"
        for mode, lrs in MODES.items():
            command = [sys.executable, "-m", "modula_cli.train", "-m", *SMALL, f"optim.mode={mode}",
                       f"optim.lr={lrs}", *overrides, f"hydra.sweep.dir={folder}"]
            subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
        frame = collect(folder)
        cells = []
        for mode, lrs in MODES.items():
            for lr in map(float, lrs.split(",")):
                losses = frame[(frame["mode"] == mode) & (frame["lr"] == lr)]["train_loss"].dropna()
                cells.append(f"{losses.mean():.3f} ± {losses.std():.3f}" if len(losses) else "diverged")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "sweeps" / "variant_effects")
    args = parser.parse_args()
    print("| difference | one-step effect |\n|---|---|")
    for name, effect in one_step_effects():
        print(f"| {name} | {effect} |")
    if not args.skip_training:
        print()
        print("\n".join(training_effects(args.out)))


if __name__ == "__main__":
    main()
