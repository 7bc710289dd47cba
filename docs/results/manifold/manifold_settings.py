"""How the manifold mode's dual-ascent settings trade cost against tangency and loss (docs/design.md, "Manifold mode").

Trains the character GPT on Shakespeare with manifold Adam under each setting, for several seeds, and prints
per setting: the mean tangency violation RMS(WᵀA + AᵀW) over steps and matrices, the mean iterations used,
the final train loss (mean ± sd over seeds) and the time per step, side by side in one run.

    python docs/results/manifold/manifold_settings.py   # width 64, 200 steps, seeds 0 1 2
    python docs/results/manifold/manifold_settings.py --width 128 --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from modula_cli.data import build_dataset
from modula_cli.nn import GPT
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.optim.mode_settings import ManifoldSettings

# (iterations, step, warm start)
SETTINGS = [(0, 0.1, False), (2, 1.0, True), (4, 1.0, True), (8, 0.1, True), (8, 1.0, False), (8, 1.0, True),
            (32, 1.0, True)]


def train(width: int, steps: int, seed: int, setting: tuple, lr: float, data) -> tuple[float, float, float, float]:
    iterations, step, warm = setting
    net = GPT(data.vocab_size, data.context, 4, width, 2)
    weights = [w.requires_grad_() for w in net.onto_manifold(net.initialize(seed))]
    opt = OptimConfig(name="adam", mode="manifold", lr=lr,
                      manifold=ManifoldSettings(iterations=iterations, step=step, warm_start=warm))
    state = init_state(weights, opt)
    violations, used, losses = [], [], []
    tick = time.perf_counter()
    for t in range(steps):
        x, y = data.train_batch(t, 16, seed=seed)
        loss = F.cross_entropy(net(x, weights).reshape(-1, data.vocab_size), y.reshape(-1))
        grads = torch.autograd.grad(loss, weights)
        optimizer_step(net, weights, list(grads), state, opt, t, steps)
        violation, iters = state.mode_state.means()
        violations.append(violation[0])
        used.append(iters[0])
        losses.append(float(loss.detach()))
    per_step = (time.perf_counter() - tick) / steps
    return statistics.mean(violations), statistics.mean(used), statistics.mean(losses[-10:]), per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lr", type=float, default=0.25)
    parser.add_argument("--root", default=None, help="data root (default: $MODULA_DATA or the repository's data/)")
    args = parser.parse_args()
    data = build_dataset("shakespeare", root=args.root, context=64)
    print(f"GPT width {args.width}, 2 blocks, context 64, batch 16, {args.steps} steps, manifold Adam at lr "
          f"{args.lr:g} (linear decay), seeds {args.seeds}; loss = mean of the last 10 steps\n")
    print(f"{'iterations':>10} {'step':>5} {'warm':>5} {'tangency':>9} {'iters used':>10} "
          f"{'train loss (mean ± sd)':>23} {'ms/step':>8} {'cost ÷ first':>12}")
    first = None
    for setting in SETTINGS:
        runs = [train(args.width, args.steps, seed, setting, args.lr, data) for seed in args.seeds]
        violation, used, loss, ms = (statistics.mean(r[i] for r in runs) for i in range(4))
        sd = statistics.stdev(r[2] for r in runs) if len(runs) > 1 else float("nan")
        first = first or ms
        print(f"{setting[0]:>10} {setting[1]:>5g} {str(setting[2]):>5} {violation:>9.4f} {used:>10.1f} "
              f"{loss:>15.4f} ± {sd:.4f} {ms * 1000:>8.1f} {ms / first:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
