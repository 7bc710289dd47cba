"""Performance benchmark, every number measured side by side in one process.

1. Mode overhead: whole training step (loss and gradient → base optimiser → mode map → update) on the
   real model and optimiser code with synthetic batches, ms/step and the ratios normed ÷ unnormed and
   dualized ÷ unnormed, for ResMLP (width 64, 8 blocks) and GPT (widths 128 and 768).
2. Packed sweeps: K LRs trained as one stacked ensemble vs K separate runs, in runs per hour.
3. On CUDA: GPT tokens/s and model FLOPs utilisation (6 · parameters · tokens / time / peak).

    python scripts/bench.py                  # CPU, or CUDA when present
    python scripts/bench.py --defaults       # issue 4's table: every architecture at its config defaults
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


def step_time(arch: dict, optimizer: str, mode: str, batch_size: int, context: int, steps: int, device: str,
              pack: int = 0) -> float:
    """Seconds per training step; ``pack=K`` trains K LRs at once as a stacked ensemble."""
    data = fake_data(arch["name"], context)
    net = build_model(OmegaConf.create(arch), data)
    weights = net.initialize(0, device=device)
    lrs = [1e-3 * 2**k for k in range(pack)] if pack else None
    if pack:
        weights = [w.unsqueeze(0).repeat(pack, *([1] * w.ndim)) for w in weights]
    else:
        weights = [w.requires_grad_() for w in weights]
    cfg = OptimConfig(name=optimizer, mode=mode, lr=lrs or 1e-3)
    state = init_state(weights, cfg)
    base_lr = torch.tensor(lrs, device=device) if pack else None
    if data.kind == "language":
        x = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
        y = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
    else:
        x = torch.randn(batch_size, *data.input_shape, device=device)
        y = torch.randint(0, data.num_classes, (batch_size,), device=device)

    def loss_fn(w, x, y):
        logits = net(x, w)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    packed_grads = torch.func.vmap(torch.func.grad(loss_fn), in_dims=(0, None, None))

    def step(t: int) -> None:
        if pack:
            grads = list(packed_grads(weights, x, y))
        else:
            grads = list(torch.autograd.grad(loss_fn(weights, x, y), weights))
        optimizer_step(net, weights, grads, state, cfg, t, steps + 3, base_lr=base_lr)

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


def load_arch(name: str, **changes) -> dict:
    arch = dict(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "arch" / f"{name}.yaml")))
    arch.update({k: v for k, v in changes.items() if v is not None})
    return arch


def mode_table(cases: list[tuple[str, dict]], optimizers: list[str], args) -> None:
    print(f"\nmode overhead on {args.device} ({torch.get_num_threads()} threads), batch {args.batch_size}, "
          f"context {args.context}, {args.steps} timed steps after 3 warm-up steps")
    print(f"{'arch':<14}{'width':>6}{'depth':>6}{'optim':>6}" + "".join(f"{m + ' ms':>14}" for m in MODES)
          + f"{'normed/un':>11}{'dualized/un':>13}")
    for name, arch in cases:
        for optimizer in optimizers:
            times = {m: step_time(arch, optimizer, m, args.batch_size, args.context, args.steps, args.device)
                     for m in MODES}
            print(f"{name:<14}{arch['width']:>6}{arch['depth']:>6}{optimizer:>6}"
                  + "".join(f"{1e3 * times[m]:>14.1f}" for m in MODES)
                  + f"{times['normed'] / times['unnormed']:>11.2f}{times['dualized'] / times['unnormed']:>13.2f}",
                  flush=True)


def packing_table(cases: list[tuple[str, dict]], args) -> None:
    k = args.pack
    print(f"\npacked sweep of K = {k} LRs vs {k} separate runs (normed Adam, {args.device}, batch {args.batch_size}); "
          f"runs per hour at {args.run_steps} steps per run")
    print(f"{'arch':<14}{'width':>6}{'separate ms/step':>18}{'packed ms/step':>16}{'separate runs/h':>17}"
          f"{'packed runs/h':>15}{'speed-up':>10}")
    for name, arch in cases:
        single = step_time(arch, "adam", "normed", args.batch_size, args.context, args.steps, args.device)
        packed = step_time(arch, "adam", "normed", args.batch_size, args.context, args.steps, args.device, pack=k)
        separate_rate = 3600 / (single * args.run_steps)
        packed_rate = 3600 * k / (packed * args.run_steps)
        print(f"{name:<14}{arch['width']:>6}{1e3 * single:>18.1f}{1e3 * packed:>16.1f}{separate_rate:>17.0f}"
              f"{packed_rate:>15.0f}{packed_rate / separate_rate:>9.2f}x", flush=True)


def gpu_throughput(widths: list[int], args) -> None:
    peak = args.peak_tflops * 1e12
    print(f"\nGPT throughput on {torch.cuda.get_device_name()} (float32 step, peak {args.peak_tflops} TFLOP/s)")
    for width in widths:
        arch = load_arch("gpt", width=width)
        net = build_model(OmegaConf.create(arch), fake_data("gpt", args.context))
        params = sum(w.numel() for w in net.initialize(0))
        seconds = step_time(arch, "adam", "normed", args.batch_size, args.context, args.steps, "cuda")
        tokens = args.batch_size * args.context / seconds
        print(f"  width {width:>5}: {tokens:>12,.0f} tokens/s   MFU {6 * params * tokens / peak:6.1%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--defaults", action="store_true", help="every architecture at its config defaults")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--pack", type=int, default=8)
    parser.add_argument("--run-steps", type=int, default=10000, help="steps of one run, for runs per hour")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="GPU peak (H100 dense bf16: 989)")
    parser.add_argument("--skip-gpt768", action="store_true", help="leave out the width-768 GPT (slow on CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.defaults:
        cases = [(name, load_arch(name)) for name in ("gpt", "standard_gpt", "resmlp", "resnet")]
        mode_table(cases, ["adam", "sgd"], args)
        return
    cases = [("resmlp", load_arch("resmlp", width=64, depth=8)), ("gpt", load_arch("gpt", width=128))]
    if not args.skip_gpt768:
        cases.append(("gpt", load_arch("gpt", width=768, heads=8)))
    mode_table(cases, ["adam"], args)
    packing_table([("resmlp", load_arch("resmlp", width=64, depth=8)), ("gpt", load_arch("gpt", width=32))], args)
    if args.device == "cuda":
        gpu_throughput([128, 768], args)


if __name__ == "__main__":
    main()
