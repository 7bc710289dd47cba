"""Performance benchmark, every number measured side by side in one process.

1. Mode overhead: whole training step (loss and gradient → base optimiser → mode map → update) on the
   real model and optimiser code with synthetic batches, ms/step and the ratios normed ÷ unnormed and
   dualized ÷ unnormed, for ResMLP (width 64, 8 blocks) and GPT (widths 128 and 768).
2. torch.compile of the model step and the optimiser update vs eager, per mode.
3. Packed sweeps: K LRs trained as one stacked ensemble vs K separate runs, in runs per hour.
4. GPT tokens/s, float32 and bfloat16, eager and compiled; on CUDA also the model FLOPs utilisation
   (6 · parameters · tokens / time / peak).

    python scripts/bench.py                  # CPU, or CUDA when present
    python scripts/bench.py --defaults       # issue 4's table: every architecture at its config defaults
    python scripts/bench.py --tables pack    # one section only (modes, compile, pack, throughput)
"""

from __future__ import annotations

import argparse
import math
import time
from types import SimpleNamespace

import torch
from omegaconf import OmegaConf

from modula_cli.config import CONFIG_DIR
from modula_cli.models import build_model
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.run import grads_of, losses_and_hits

MODES = ("unnormed", "normed", "dualized", "manifold")
COMPILED_MODES = ("unnormed", "normed", "dualized")  # manifold's dual ascent stops on a host-side test


def fake_data(arch_name: str, context: int) -> SimpleNamespace:
    if arch_name in ("gpt", "standard_gpt"):
        return SimpleNamespace(kind="language", name="shakespeare", vocab_size=65, context=context)
    return SimpleNamespace(kind="image", name="cifar10", input_shape=(3, 32, 32), num_classes=10)


class StepBench:
    """One training configuration, built and warmed up once; ``run(steps)`` times a block of steps.

    ``pack=K`` trains K LRs at once as a stacked ensemble; ``compile`` runs the loss-and-gradient and the
    optimiser update through torch.compile (compiled in the warm-up); ``bf16`` runs the forward pass under
    bfloat16 autocast, as ``train.dtype=bfloat16`` does."""

    def __init__(self, arch: dict, optimizer: str, mode: str, args, pack: int = 0, compile: bool = False,
                 bf16: bool = False):
        device, batch_size, context = args.device, args.batch_size, args.context
        data = fake_data(arch["name"], context)
        self.net = net = build_model(OmegaConf.create(arch), data)
        weights = net.initialize(0, device=device)
        lrs = [1e-3 * 2**k for k in range(pack)] if pack else None
        if pack:
            weights = [w.unsqueeze(0).repeat(pack, *([1] * w.ndim)) for w in weights]
        self.weights = [w.requires_grad_() for w in weights]
        self.cfg = OptimConfig(name=optimizer, mode=mode, lr=lrs or 1e-3, schedule="constant")
        self.state = init_state(self.weights, self.cfg)
        self.base_lr = torch.tensor(lrs, device=device) if pack else None
        if data.kind == "language":
            self.x = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
            self.y = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
        else:
            self.x = torch.randn(batch_size, *data.input_shape, device=device)
            self.y = torch.randint(0, data.num_classes, (batch_size,), device=device)

        def loss_and_grads(w, x, y):
            if pack:  # one shared batch for the K stacked networks (a view)
                x, y = x.expand(pack, *x.shape), y.expand(pack, *y.shape)
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
                losses = losses_and_hits(net, w, x, y, pack or None)[0]
            return grads_of(losses, w)

        self.compute = torch.compile(loss_and_grads) if compile else loss_and_grads
        self.compile, self.device, self.t = compile, device, 0
        self.run(3)  # warm-up (and compilation)

    def run(self, steps: int) -> float:
        """Seconds per step over ``steps`` consecutive steps."""
        if self.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            grads = self.compute(self.weights, self.x, self.y)
            optimizer_step(self.net, self.weights, grads, self.state, self.cfg, self.t, 10**9,
                           base_lr=self.base_lr, compile=self.compile)
            self.t += 1
        if self.device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps


def best_times(benches: dict[str, StepBench], args) -> dict[str, float]:
    """Seconds per step of each configuration: blocks of ``args.steps`` steps, the configurations taking
    turns ``args.repeats`` times, best block kept, so drifting machine load hits all of them alike."""
    best = dict.fromkeys(benches, math.inf)
    for _ in range(args.repeats):
        for key, bench in benches.items():
            best[key] = min(best[key], bench.run(args.steps))
    return best


def timing_line(args) -> str:
    return (f"{args.device} ({torch.get_num_threads()} threads), batch {args.batch_size}, context {args.context}, "
            f"best of {args.repeats} interleaved blocks of {args.steps} steps after 3 warm-up steps")


def load_arch(name: str, **changes) -> dict:
    arch = dict(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "arch" / f"{name}.yaml")))
    arch.update({k: v for k, v in changes.items() if v is not None})
    return arch


def mode_table(cases: list[tuple[str, dict]], optimizers: list[str], args) -> None:
    print(f"\nmode overhead on {timing_line(args)}")
    print(f"{'arch':<14}{'width':>6}{'depth':>6}{'optim':>6}" + "".join(f"{m + ' ms':>14}" for m in MODES)
          + f"{'normed/un':>11}{'dualized/un':>13}{'manifold/dual':>15}")
    for name, arch in cases:
        for optimizer in optimizers:
            times = best_times({m: StepBench(arch, optimizer, m, args) for m in MODES}, args)
            print(f"{name:<14}{arch['width']:>6}{arch['depth']:>6}{optimizer:>6}"
                  + "".join(f"{1e3 * times[m]:>14.1f}" for m in MODES)
                  + f"{times['normed'] / times['unnormed']:>11.2f}{times['dualized'] / times['unnormed']:>13.2f}"
                  + f"{times['manifold'] / times['dualized']:>15.2f}", flush=True)


def compile_table(cases: list[tuple[str, dict]], args) -> None:
    print(f"\ntorch.compile (model step and optimiser update) vs eager, Adam, ms/step; {timing_line(args)}")
    print(f"{'arch':<14}{'width':>6}{'mode':>10}{'eager':>10}{'compiled':>10}{'speed-up':>10}"
          f"{'compiled mode/un':>18}")
    for name, arch in cases:
        torch._dynamo.reset()  # a fresh recompile budget for this architecture's three modes
        benches = {(m, c): StepBench(arch, "adam", m, args, compile=c) for m in COMPILED_MODES
                   for c in (False, True)}
        times = best_times(benches, args)
        for mode in COMPILED_MODES:
            eager, compiled = times[(mode, False)], times[(mode, True)]
            print(f"{name:<14}{arch['width']:>6}{mode:>10}{1e3 * eager:>10.1f}{1e3 * compiled:>10.1f}"
                  f"{eager / compiled:>9.2f}x{compiled / times[('unnormed', True)]:>18.2f}", flush=True)


def packing_table(cases: list[tuple[str, dict]], args) -> None:
    k = args.pack
    print(f"\npacked sweep of K = {k} LRs vs {k} separate runs, normed Adam, runs per hour at {args.run_steps} "
          f"steps per run; {timing_line(args)}")
    print(f"{'arch':<14}{'width':>6}{'separate ms/step':>18}{'packed ms/step':>16}{'separate runs/h':>17}"
          f"{'packed runs/h':>15}{'speed-up':>10}")
    for name, arch in cases:
        times = best_times({"single": StepBench(arch, "adam", "normed", args),
                            "packed": StepBench(arch, "adam", "normed", args, pack=k)}, args)
        separate_rate = 3600 / (times["single"] * args.run_steps)
        packed_rate = 3600 * k / (times["packed"] * args.run_steps)
        print(f"{name:<14}{arch['width']:>6}{1e3 * times['single']:>18.1f}{1e3 * times['packed']:>16.1f}"
              f"{separate_rate:>17.0f}{packed_rate:>15.0f}{packed_rate / separate_rate:>9.2f}x", flush=True)


def throughput_table(widths: list[int], args) -> None:
    """GPT tokens/s for float32 and bfloat16 autocast, eager and compiled; MFU against the peak on CUDA."""
    peak = args.peak_tflops * 1e12 if args.device == "cuda" else None
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"\nGPT throughput on {device_name}, normed Adam; {timing_line(args)}"
          + (f"; MFU = 6 · parameters · tokens/s ÷ {args.peak_tflops} TFLOP/s" if peak else ""))
    print(f"{'width':>6}{'dtype':>10}{'compiled':>10}{'tokens/s':>14}" + (f"{'MFU':>8}" if peak else ""))
    for width in widths:
        arch = load_arch("gpt", width=width, heads=8 if width >= 768 else None)
        torch._dynamo.reset()
        benches = {(bf16, c): StepBench(arch, "adam", "normed", args, compile=c, bf16=bf16)
                   for bf16 in (False, True) for c in (False, True)}
        params = sum(w.numel() for w in benches[(False, False)].weights)
        for (bf16, compile), seconds in best_times(benches, args).items():
            tokens = args.batch_size * args.context / seconds
            print(f"{width:>6}{'bfloat16' if bf16 else 'float32':>10}{'yes' if compile else 'no':>10}"
                  f"{tokens:>14,.0f}" + (f"{6 * params * tokens / peak:>8.1%}" if peak else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--defaults", action="store_true", help="every architecture at its config defaults")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=3, help="timed blocks per configuration (best kept)")
    parser.add_argument("--pack", type=int, default=8)
    parser.add_argument("--run-steps", type=int, default=10000, help="steps of one run, for runs per hour")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="GPU peak (H100 dense bf16: 989)")
    parser.add_argument("--skip-gpt768", action="store_true", help="leave out the width-768 GPT (slow on CPU)")
    parser.add_argument("--tables", default="modes,compile,pack,throughput",
                        help="comma-separated subset of: modes, compile, pack, throughput")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.defaults:
        cases = [(name, load_arch(name)) for name in ("gpt", "standard_gpt", "resmlp", "resnet")]
        mode_table(cases, ["adam", "sgd"], args)
        return
    tables = set(args.tables.split(","))
    unknown = tables - {"modes", "compile", "pack", "throughput"}
    if unknown:
        parser.error(f"--tables: unknown {sorted(unknown)}; allowed: modes, compile, pack, throughput")
    cases = [("resmlp", load_arch("resmlp", width=64, depth=8)), ("gpt", load_arch("gpt", width=128))]
    if not args.skip_gpt768:
        cases.append(("gpt", load_arch("gpt", width=768, heads=8)))
    if "modes" in tables:
        mode_table(cases, ["adam"], args)
    if "compile" in tables:
        compile_table(cases[:2], args)
    if "pack" in tables:
        packing_table([("resmlp", load_arch("resmlp", width=64, depth=8)), ("gpt", load_arch("gpt", width=32))],
                      args)
    if "throughput" in tables:
        throughput_table([128] if args.skip_gpt768 else [128, 768], args)


if __name__ == "__main__":
    main()
