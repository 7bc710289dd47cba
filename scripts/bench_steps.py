"""Training-step time per architecture × optimiser × mode, measured side by side in one process.

Times the whole step (batch → loss and gradient → base optimiser → mode map → weight update) on the real
model and optimiser code with synthetic data of the right shapes, after warm-up, and prints ms/step and
the ratios normed ÷ unnormed and dualized ÷ unnormed for each architecture.

    python scripts/bench_steps.py                       # the configs' defaults, CPU
    python scripts/bench_steps.py --arch gpt --width 128 768 --batch-size 32 --device cuda
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from modula_cli.config import CONFIG_DIR
from modula_cli.models import build_model
from modula_cli.optim import OptimConfig, init_state, optimizer_step

MODES = ("unnormed", "normed", "dualized")


def fake_data(arch_name: str, context: int) -> SimpleNamespace:
    if arch_name in ("gpt", "standard_gpt"):
        return SimpleNamespace(kind="language", name="shakespeare", vocab_size=65, context=context)
    return SimpleNamespace(kind="image", name="cifar10", input_shape=(3, 32, 32), num_classes=10)


def step_time(arch: dict, optimizer: str, mode: str, batch_size: int, context: int, steps: int, device: str) -> float:
    data = fake_data(arch["name"], context)
    net = build_model(OmegaConf.create(arch), data)
    weights = [w.requires_grad_() for w in net.initialize(0, device=device)]
    cfg = OptimConfig(name=optimizer, mode=mode, lr=1e-3)
    state = init_state(weights, cfg)
    if data.kind == "language":
        x = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
        y = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
    else:
        x = torch.randn(batch_size, *data.input_shape, device=device)
        y = torch.randint(0, data.num_classes, (batch_size,), device=device)

    def step(t: int) -> None:
        logits = net(x, weights)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        grads = list(torch.autograd.grad(loss, weights))
        optimizer_step(net, weights, grads, state, cfg, t, steps + 3)

    for t in range(3):
        step(t)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for t in range(3, 3 + steps):
        step(t)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", nargs="+", default=["gpt", "standard_gpt", "resmlp", "resnet"])
    parser.add_argument("--width", type=int, nargs="+", default=None, help="default: each arch config's width")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--optim", nargs="+", default=["adam", "sgd"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    print(f"device {args.device} ({torch.get_num_threads()} threads), batch {args.batch_size}, "
          f"context {args.context}, {args.steps} timed steps after 3 warm-up steps")
    print(f"{'arch':<14}{'width':>6}{'depth':>6}{'optim':>6}" + "".join(f"{m + ' ms':>14}" for m in MODES)
          + f"{'normed/un':>11}{'dualized/un':>13}")
    for arch_name in args.arch:
        arch = dict(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "arch" / f"{arch_name}.yaml")))
        for width in args.width or [arch["width"]]:
            arch["width"] = width
            if args.depth:
                arch["depth"] = args.depth
            for optimizer in args.optim:
                times = {m: step_time(arch, optimizer, m, args.batch_size, args.context, args.steps, args.device)
                         for m in MODES}
                print(f"{arch_name:<14}{width:>6}{arch['depth']:>6}{optimizer:>6}"
                      + "".join(f"{1e3 * times[m]:>14.1f}" for m in MODES)
                      + f"{times['normed'] / times['unnormed']:>11.2f}{times['dualized'] / times['unnormed']:>13.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
