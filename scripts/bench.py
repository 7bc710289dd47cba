"""Performance benchmark, every number measured side by side in one process.

1. modes: whole training step (loss and gradient → base optimiser → mode map → update) on the real
   model and optimiser code with synthetic batches, ms/step and the ratios normed ÷ unnormed,
   dualized ÷ unnormed, manifold ÷ dualized and muon ÷ dualized (Muon per layer against the modular
   dualisation), under each variant (--variants), and each mode's
   paper ÷ modular step time, for ResMLP (width 64, 8 blocks) and GPT (--gpt-widths). Every
   configuration of a network runs in the same rounds; a ratio is the median of the rounds' ratios with
   a 90 % bootstrap interval.
2. compile: torch.compile of the model step, then of the model step and the optimiser update, vs eager,
   per mode, with the dualize overhead predicted from FLOPs (orthogonalisation FLOPs ÷ the model step's
   6 · parameters · tokens; for a square d × d matrix that is Newton–Schulz steps × d ÷ tokens per step).
3. ortho: each GPT's orthogonalisation (one batched call per matrix shape, as dualized training makes
   it) against its FLOP lower bound: 3 matmuls per polynomial step at the measured matmul rate; the
   iteration in bfloat16 on CUDA (optim.ortho.dtype=auto), with its float32 time beside it.
4. pack: K LRs trained as one stacked ensemble vs K separate runs, in runs per hour.
5. throughput: GPT tokens/s, float32 and bfloat16, eager and compiled, and the model FLOPs utilisation
   (6 · parameters · tokens/s ÷ peak) where a peak is known (CUDA: --peak-tflops and the measured rate).
6. retraction: manifold mode's two polar factors per matrix, shape by shape: the direction's msign (Polar
   Express and its refinement) and the retraction, as a second msign (before 2026-12-06) and as
   ``retract`` (scaled Newton–Schulz from the step's known spectrum), with the ratio of the pair's times.

    python scripts/bench.py                  # CPU, or CUDA when present
    python scripts/bench.py --gpu --out bench_gpu.txt   # the GPU tables (64k tokens per step, bf16)
    python scripts/bench.py --tables modes --gpt-widths 128 --gpt-depth 2 --batch-size 64 --steps 4 --repeats 15
                                             # the variants' step time (docs/performance.md)
    python scripts/bench.py --defaults       # every architecture at its config defaults
    python scripts/bench.py --tables pack    # one section only (modes, compile, ortho, pack, throughput, retraction)
    python scripts/bench.py --tables retraction --gpt-widths 256 512 1024  # manifold's (docs/performance.md)

Every line printed is also appended to --out at once, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import torch
from omegaconf import OmegaConf

from modula_cli.config import CONFIG_DIR
from modula_cli.models import build_model
from modula_cli.models.variant import VARIANTS
from modula_cli.nn import orthogonalize
from modula_cli.nn.orthogonalize import DEFAULT_STEPS, iteration_dtype
from modula_cli.optim import MODES as OPTIM_MODES
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.optim.kernels import Launches, count_launches
from modula_cli.optim.step import apply_update
from modula_cli.nn.loss import grads_of, losses_and_hits
from modula_cli.nn.manifold import msign
from modula_cli.nn.retraction import RetractionSchedule, retract

MODES = ("unnormed", "normed", "dualized", "manifold", "muon")
COMPILED_MODES = ("unnormed", "normed", "dualized", "manifold", "muon")
TABLES = ("modes", "compile", "ortho", "pack", "throughput", "retraction")
ORTHO_STEPS = DEFAULT_STEPS["polar_express"]
# what each variant's YAML sets in optim (configs/variant/*.yaml)
VARIANT_OPTIM = {name: OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "variant" / f"{name}.yaml")).get("optim", {})
                 for name in VARIANTS}
OUT: Path | None = None  # --out: every emitted line is appended here as well


def emit(line: str = "") -> None:
    print(line, flush=True)
    if OUT is not None:
        with OUT.open("a") as f:
            f.write(line + "\n")


def fake_data(arch_name: str, context: int) -> SimpleNamespace:
    if arch_name in ("gpt", "standard_gpt"):
        return SimpleNamespace(kind="language", name="shakespeare", vocab_size=65, context=context)
    return SimpleNamespace(kind="image", name="cifar10", input_shape=(3, 32, 32), num_classes=10)


_STEP_FUNCTIONS: dict[tuple, tuple] = {}


def step_function(arch: dict, data: SimpleNamespace, device: str, pack: int, bf16: bool, compile: bool,
                  variant: str = "paper") -> tuple:
    """The network and its loss-and-gradient function, shared by every bench of the same configuration: the
    modes of one comparison differ only in the update, so the model step is compiled once, not per mode."""
    key = (repr(sorted(arch.items())), repr(sorted(vars(data).items())), device, pack, bf16, compile, variant)
    if key not in _STEP_FUNCTIONS:
        net = build_model(OmegaConf.create(arch), data, VARIANTS[variant])

        def loss_and_grads(w, x, y):
            if pack:  # one shared batch for the K stacked networks (a view)
                x, y = x.expand(pack, *x.shape), y.expand(pack, *y.shape)
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
                losses = losses_and_hits(net, w, x, y, pack or None)[0]
            return grads_of(losses, w)

        _STEP_FUNCTIONS[key] = (net, torch.compile(loss_and_grads) if compile else loss_and_grads)
    return _STEP_FUNCTIONS[key]


_INITIAL: dict[tuple, list] = {}


def initial_weights(net, arch: dict, data: SimpleNamespace, variant: str, device: str) -> list:
    """Seed 0's weights, drawn once per network and variant: the modes of a comparison start from the same
    ones, and a wide GPT's orthogonal initialisation (on the CPU) costs seconds each time."""
    key = (repr(sorted(arch.items())), repr(sorted(vars(data).items())), variant, device)
    if key not in _INITIAL:
        _INITIAL[key] = net.initialize(0, device=device)
    return _INITIAL[key]


class StepBench:
    """One training configuration, built and warmed up once; ``run(steps)`` times a block of steps.

    ``pack=K`` trains K LRs at once as a stacked ensemble; ``compile`` runs the loss-and-gradient through
    torch.compile, and the optimiser update too unless ``compile_update`` is False (compiled in the warm-up);
    ``bf16`` runs the forward pass under bfloat16 autocast, as ``train.dtype=bfloat16`` does."""

    def __init__(self, arch: dict, optimizer: str, mode: str, args, pack: int = 0, compile: bool = False,
                 bf16: bool | None = None, batch_size: int | None = None, variant: str = "paper",
                 compile_update: bool | None = None):
        device, context = args.device, args.context
        batch_size = batch_size or args.batch_size
        bf16 = args.bf16 if bf16 is None else bf16
        data = fake_data(arch["name"], context)
        self.net, self.compute = step_function(arch, data, device, pack, bf16, compile, variant)
        weights = [w.clone() for w in initial_weights(self.net, arch, data, variant, device)]
        lrs = [1e-3 * 2**k for k in range(pack)] if pack else None
        if pack:
            weights = [w.unsqueeze(0).repeat(pack, *([1] * w.ndim)) for w in weights]
        self.weights = [w.requires_grad_() for w in weights]
        self.cfg = OptimConfig.of({"name": optimizer, "mode": mode, "lr": lrs or 1e-3, "schedule": "constant",
                                   **VARIANT_OPTIM[variant]})
        # what the mode sets on its network (Muon: which weights are its hidden matrices); the bench's modes need
        # no second width (μP, which does, is not among them)
        self.net = OPTIM_MODES[mode].network(self.net, None, self.cfg)
        self.state = init_state(self.weights, self.cfg)
        self.base_lr = torch.tensor(lrs, device=device) if pack else None
        if data.kind == "language":
            self.x = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
            self.y = torch.randint(0, data.vocab_size, (batch_size, context), device=device)
        else:
            self.x = torch.randn(batch_size, *data.input_shape, device=device)
            self.y = torch.randint(0, data.num_classes, (batch_size,), device=device)
        # plain torch.compile, not the trainer's eager fallback: a compile that fails is reported as failed
        self.update = torch.compile(apply_update) if (compile if compile_update is None else compile_update) else None
        self.device, self.t = device, 0
        self.tokens = batch_size * context if data.kind == "language" else batch_size
        self.run(3)  # warm-up (and compilation)

    def launches(self) -> Launches:
        """What one update launches (counted by the profiler on any device) and its host syncs."""
        grads = self.compute(self.weights, self.x, self.y)
        launched = count_launches(lambda: optimizer_step(self.net, self.weights, grads, self.state, self.cfg, self.t,
                                                         10**9, base_lr=self.base_lr, update=self.update))
        self.t += 1
        return launched

    def run(self, steps: int) -> float:
        """Seconds per step over ``steps`` consecutive steps."""
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            grads = self.compute(self.weights, self.x, self.y)
            optimizer_step(self.net, self.weights, grads, self.state, self.cfg, self.t, 10**9,
                           base_lr=self.base_lr, update=self.update)
            self.t += 1
        synchronize(self.device)
        return (time.perf_counter() - start) / steps


def interleaved_times(benches: dict, args) -> dict:
    """Seconds per step of each configuration in each of ``args.repeats`` rounds: in a round the configurations
    take turns running a block of ``args.steps`` steps, so drifting machine load hits all of them alike."""
    times: dict = {key: [] for key in benches}
    for _ in range(args.repeats):
        for key, bench in benches.items():
            times[key].append(bench.run(args.steps))
    return times


def best_times(benches: dict, args) -> dict:
    """Seconds per step of each configuration: its best block over the interleaved rounds."""
    return {key: min(blocks) for key, blocks in interleaved_times(benches, args).items()}


def paired_ratio(numerator: list[float], denominator: list[float], draws: int = 2000) -> tuple[float, float, float]:
    """The median over rounds of numerator ÷ denominator measured in the same round (blocks run next to each
    other, so load that drifts between rounds cancels), with a 90 % bootstrap interval of that median."""
    ratios = torch.tensor(numerator, dtype=torch.float64) / torch.tensor(denominator, dtype=torch.float64)
    picks = torch.randint(len(ratios), (draws, len(ratios)), generator=torch.Generator().manual_seed(0))
    medians = ratios[picks].median(dim=1).values
    low, high = torch.quantile(medians, torch.tensor([0.05, 0.95], dtype=torch.float64)).tolist()
    return ratios.median().item(), low, high


def ratio_text(ratio: tuple[float, float, float]) -> str:
    return f"{ratio[0]:.3f} [{ratio[1]:.3f}, {ratio[2]:.3f}]"


def timing_line(args, batch_size: int | None = None, rounds: bool = False) -> str:
    """The setting of a table. Tables without a variant column time the default variant, paper (modular
    before 2026-11-26)."""
    blocks = f"{args.repeats} interleaved rounds" if rounds else f"best of {args.repeats} interleaved blocks"
    return (f"{device_name(args)}, batch {batch_size or args.batch_size}, context {args.context}"
            f"{', bfloat16 autocast' if args.bf16 else ''}{'' if rounds else ', variant paper'}, {blocks} of "
            f"{args.steps} steps after 3 warm-up steps")


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def device_name(args) -> str:
    if is_cuda(args.device):
        return torch.cuda.get_device_name()
    return f"{args.device} ({torch.get_num_threads()} threads)"


def synchronize(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


def best_seconds(fn, device: str, repeats: int = 5) -> float:
    """Best of ``repeats`` timed calls of ``fn`` after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_rate(device: str, dtype: torch.dtype, size: int) -> float:
    """Measured FLOP/s of one square matmul of side ``size`` in ``dtype`` (the best of several)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return 2 * size**3 / best_seconds(lambda: a @ b, device, repeats=10)


def ortho_groups(net, weights: list[torch.Tensor]) -> Counter:
    """The matrices the duality map orthogonalises, {(rows, cols): count}, batched by shape as in training."""
    groups: Counter = Counter()
    for atom, weight in zip(net.atoms(), weights):
        stack = atom.matrices(weight.detach())
        if stack is not None:
            groups[tuple(stack.shape[-2:])] += stack.reshape(-1, *stack.shape[-2:]).shape[0]
    return groups


def ortho_flops(shape: tuple[int, int], count: int, steps: int = ORTHO_STEPS) -> float:
    """FLOPs of ``steps`` polynomial steps on ``count`` matrices: X Xᵀ, (X Xᵀ)², B X on the smaller side m."""
    m, n = sorted(shape)
    return count * steps * (2 * m * m * n + 2 * m**3 + 2 * m * m * n)


def dualize_estimate(bench: StepBench) -> float:
    """Predicted dualized ÷ unnormed − 1: orthogonalisation FLOPs over the model step's 6 · parameters · tokens."""
    flops = sum(ortho_flops(shape, count) for shape, count in ortho_groups(bench.net, bench.weights).items())
    params = sum(w.numel() for w in bench.weights)
    return flops / (6 * params * bench.tokens)


def load_arch(name: str, **changes) -> dict:
    arch = dict(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "arch" / f"{name}.yaml")))
    arch.update({k: v for k, v in changes.items() if v is not None})
    return arch


def gpt_arch(width: int, args) -> dict:
    """The GPT of the modes, compile, ortho and throughput tables: --gpt-depth blocks, --gpt-heads heads
    (default the config's, 8 from width 768 as in the paper)."""
    return load_arch("gpt", width=width, depth=args.gpt_depth, heads=args.gpt_heads or (8 if width >= 768 else None))


def mode_table(cases: list[tuple[str, dict]], optimizers: list[str], args) -> None:
    """Every mode under every variant, all interleaved in one set of rounds per network; then each mode's
    paper ÷ modular step time (the default variant's cost against the other's)."""
    emit(f"\nmode overhead on {timing_line(args, rounds=True)}; ms: median block; ratios: median of the rounds' "
         f"ratios [90 % bootstrap interval]")
    emit(f"{'arch':<14}{'width':>6}{'depth':>6}{'optim':>6}{'variant':>9}" + "".join(f"{m + ' ms':>14}" for m in MODES)
         + f"{'normed/un':>25}{'dualized/un':>25}{'manifold/dual':>25}{'muon/dual':>25}")
    variants = args.variants.split(",")
    for name, arch in cases:
        for optimizer in optimizers:
            benches = {(v, m): StepBench(arch, optimizer, m, args, variant=v) for v in variants for m in MODES}
            times = interleaved_times(benches, args)
            start = f"{name:<14}{arch['width']:>6}{arch['depth']:>6}{optimizer:>6}"
            for v in variants:
                ratios = [paired_ratio(times[(v, a)], times[(v, b)])
                          for a, b in (("normed", "unnormed"), ("dualized", "unnormed"), ("manifold", "dualized"),
                                       ("muon", "dualized"))]
                emit(f"{start}{v:>9}" + "".join(f"{1e3 * statistics.median(times[(v, m)]):>14.1f}" for m in MODES)
                     + "".join(f"{ratio_text(r):>25}" for r in ratios))
                emit(limits_line(benches, v))
            if {"modular", "paper"} <= set(variants):  # each mode's step under the default variant ÷ the other's
                emit(f"{'':<14}paper ÷ modular step time: " + ", ".join(
                    f"{m} {ratio_text(paired_ratio(times[('paper', m)], times[('modular', m)]))}" for m in MODES))


def limits_line(benches: dict, variant: str) -> str:
    """Each mode's launches per update beside the ratios' limits (docs/performance.md): normed ≤ 1.02× unnormed,
    dualized ≤ (1 + the orthogonalisation's FLOP share + 0.03)×, manifold ≤ 1.5× dualized."""
    counts = {m: benches[(variant, m)].launches() for m in MODES}
    share = dualize_estimate(benches[(variant, "dualized")])
    syncs = [m for m, c in counts.items() if c.host_syncs]
    return (f"{'':<14}{variant}: launches per update " + ", ".join(f"{m} {c.total}" for m, c in counts.items())
            + (f" (host syncs in {', '.join(syncs)})" if syncs else " (no host sync)")
            + f"; orthogonalisation FLOP share {share:.3f}: dualized/un limit {1 + share + 0.03:.3f}, normed/un 1.020,"
            f" manifold/dual 1.500")


COMPILE_LEVELS = {"eager": (False, False), "model": (True, False), "model+update": (True, True)}


def compile_table(cases: list[tuple[str, dict]], args) -> None:
    """Eager against the model step compiled, and against the model step and the optimiser update compiled. A
    level that fails to compile (Inductor on torch 2.11 on an H100 failed on the update) is reported and
    the others are still measured."""
    emit(f"\ntorch.compile vs eager, Adam, ms/step: the model step compiled, then the optimiser update too; "
         f"{timing_line(args)}")
    emit(f"{'arch':<14}{'width':>6}{'mode':>10}" + "".join(f"{level + ' ms':>18}" for level in COMPILE_LEVELS)
         + f"{'model speed-up':>16}{'all speed-up':>14}"
         + "".join(f"{level + ' mode/un':>22}" for level in COMPILE_LEVELS)
         + f"{'dualize est.':>14}")
    for name, arch in cases:
        torch.compiler.reset()  # a fresh recompile budget for this architecture's three modes
        benches, failed = {}, set()
        levels = {level: flags for level, flags in COMPILE_LEVELS.items() if args.compile_update or not flags[1]}
        for level, (model, update) in levels.items():
            for mode in COMPILED_MODES:
                if level in failed:
                    continue
                try:
                    benches[(mode, level)] = StepBench(arch, "adam", mode, args, compile=model, compile_update=update)
                except Exception as error:  # noqa: BLE001 - a compiler bug ends this level, not the table
                    failed.add(level)
                    emit(f"# {name} {arch['width']} {mode}: compiling '{level}' failed: {type(error).__name__}: "
                         f"{str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}")
        benches = {key: bench for key, bench in benches.items() if key[1] not in failed}  # not timed half
        times = best_times(benches, args)
        estimate = dualize_estimate(benches[("dualized", "eager")])

        def cell(mode: str, level: str, width: int, value=lambda t: f"{1e3 * t:.1f}") -> str:
            missing = "failed" if level in failed else "-"
            return f"{value(times[(mode, level)]) if (mode, level) in times else missing:>{width}}"

        for mode in COMPILED_MODES:
            eager = times[(mode, "eager")]
            emit(f"{name:<14}{arch['width']:>6}{mode:>10}" + "".join(cell(mode, level, 18) for level in COMPILE_LEVELS)
                 + cell(mode, "model", 16, lambda t: f"{eager / t:.2f}x") + cell(mode, "model+update", 14,
                                                                               lambda t: f"{eager / t:.2f}x")
                 + "".join(cell(mode, level, 22, lambda t, level=level: f"{t / times[('unnormed', level)]:.2f}")
                           if ("unnormed", level) in times else cell("unnormed", level, 22) for level in COMPILE_LEVELS)
                 + (f"{1 + estimate:>14.3f}" if mode == "dualized" else f"{'':>14}"))


def ortho_table(widths: list[int], args) -> None:
    """Each GPT's orthogonalisation, shape by shape, against 3 matmuls per step at the measured matmul rate."""
    iter_dtype = iteration_dtype("auto", args.device)  # None: float32
    dtype = iter_dtype or torch.float32
    rate, name = matmul_rate(args.device, dtype, args.matmul_size), str(dtype).removeprefix("torch.")
    emit(f"\northogonalisation on {device_name(args)}: Polar Express, {ORTHO_STEPS} steps, {name} iteration "
         f"(optim.ortho.dtype=auto) vs its lower bound: 3 matmuls per step at the measured {name} matmul rate, "
         f"{rate / 1e12:.2f} TFLOP/s ({args.matmul_size}-square); float32 iteration beside it")
    emit(f"{'width':>6}{'shape':>14}{'count':>7}{'GFLOP':>9}{'bound ms':>10}{'ms':>9}{'÷ bound':>9}"
         f"{'fp32 ms':>10}{'fp32 ÷ it':>11}")
    for width in widths:
        arch = gpt_arch(width, args)
        net = build_model(OmegaConf.create(arch), fake_data("gpt", args.context))
        weights = net.initialize(0, device=args.device)
        totals = [0.0, 0.0, 0.0]
        for shape, count in sorted(ortho_groups(net, weights).items()):
            G = torch.randn(count, *shape, device=args.device)
            seconds = best_seconds(lambda: orthogonalize(G, iter_dtype=iter_dtype), args.device)
            float32 = best_seconds(lambda: orthogonalize(G), args.device)
            flops = ortho_flops(shape, count)
            for i, value in enumerate((flops / rate, seconds, float32)):
                totals[i] += value
            emit(f"{width:>6}{'x'.join(map(str, shape)):>14}{count:>7}{flops / 1e9:>9.3g}{1e3 * flops / rate:>10.3f}"
                 f"{1e3 * seconds:>9.3f}{seconds * rate / flops:>9.2f}{1e3 * float32:>10.3f}{float32 / seconds:>11.2f}")
        bound, seconds, float32 = totals
        emit(f"{width:>6}{'all':>14}{'':>7}{bound * rate / 1e9:>9.3g}{1e3 * bound:>10.3f}{1e3 * seconds:>9.3f}"
             f"{seconds / bound:>9.2f}{1e3 * float32:>10.3f}{float32 / seconds:>11.2f}")


def retraction_table(widths: list[int], args, step: float = 0.5) -> None:
    """Manifold mode's polar factors per matrix shape of each GPT (tall, as the manifold step holds them): the
    direction's msign, and the retraction of a step ``step`` as msign did it and as ``retract`` does."""
    emit(f"\nmanifold's polar factors on {device_name(args)}, float32, a step ε = {step} along a unit direction: "
         "the direction's msign, the retraction as a second msign (before) and as retract (after); "
         "pair = direction + retraction")
    emit(f"{'width':>6}{'shape':>14}{'count':>7}{'msign ms':>10}{'retract ms':>12}{'÷':>7}"
         f"{'pair before':>13}{'pair after':>12}{'÷':>7}")
    for width in widths:
        net = build_model(OmegaConf.create(gpt_arch(width, args)), fake_data("gpt", args.context))
        totals = [0.0, 0.0]
        talls: Counter = Counter()
        for shape, count in ortho_groups(net, net.initialize(0, device=args.device)).items():
            talls[max(shape), min(shape)] += count
        for tall, count in sorted(talls.items()):
            U = msign(torch.randn(count, *tall, device=args.device))
            A = msign(torch.randn(count, *tall, device=args.device))
            eps = torch.full((count,), step, device=args.device)
            schedule = RetractionSchedule.on(args.device)  # made once per run, as the manifold state keeps it
            general = best_seconds(lambda: msign(U - step * A), args.device)
            known = best_seconds(lambda: retract(U, A, eps, schedule), args.device)
            totals[0] += general
            totals[1] += known
            emit(f"{width:>6}{'x'.join(map(str, tall)):>14}{count:>7}{1e3 * general:>10.2f}{1e3 * known:>12.2f}"
                 f"{known / general:>7.2f}{2e3 * general:>13.2f}{1e3 * (general + known):>12.2f}"
                 f"{(general + known) / (2 * general):>7.2f}")
        general, known = totals
        emit(f"{width:>6}{'all':>14}{'':>7}{1e3 * general:>10.2f}{1e3 * known:>12.2f}{known / general:>7.2f}"
             f"{2e3 * general:>13.2f}{1e3 * (general + known):>12.2f}{(general + known) / (2 * general):>7.2f}")


def packing_table(cases: list[tuple[str, dict]], args) -> None:
    k, batch = args.pack, args.pack_batch_size or args.batch_size
    emit(f"\npacked sweep of K = {k} LRs vs {k} separate runs, normed Adam{', compiled' if args.pack_compile else ''}, "
         f"runs per hour at {args.run_steps} steps per run; {timing_line(args, batch)}")
    emit(f"{'arch':<14}{'width':>6}{'separate ms/step':>18}{'packed ms/step':>16}{'separate runs/h':>17}"
         f"{'packed runs/h':>15}{'speed-up':>10}")
    for name, arch in cases:
        torch.compiler.reset()
        single = StepBench(arch, "adam", "normed", args, compile=args.pack_compile, batch_size=batch)
        packed = StepBench(arch, "adam", "normed", args, pack=k, compile=args.pack_compile, batch_size=batch)
        times = best_times({"single": single, "packed": packed}, args)
        separate_rate = 3600 / (times["single"] * args.run_steps)
        packed_rate = 3600 * k / (times["packed"] * args.run_steps)
        emit(f"{name:<14}{arch['width']:>6}{1e3 * times['single']:>18.1f}{1e3 * times['packed']:>16.1f}"
             f"{separate_rate:>17.0f}{packed_rate:>15.0f}{packed_rate / separate_rate:>9.2f}x")


def throughput_table(widths: list[int], args) -> None:
    """GPT tokens/s for float32 and bfloat16 autocast, eager (and compiled unless --no-compile); MFU where a
    peak is known."""
    peaks = {f"MFU@{args.peak_tflops:g}": args.peak_tflops * 1e12} if args.peak_tflops else {}
    if is_cuda(args.device):
        peaks["MFU@measured"] = matmul_rate(args.device, torch.bfloat16, args.matmul_size)
    emit(f"\nGPT throughput, normed Adam; {timing_line(args)}"
         + "".join(f"; {key} = 6 · parameters · tokens/s ÷ {peak / 1e12:.0f} TFLOP/s" for key, peak in peaks.items()))
    emit(f"{'width':>6}{'dtype':>10}{'compiled':>10}{'tokens/s':>14}" + "".join(f"{key:>16}" for key in peaks))
    for width in widths:
        arch = gpt_arch(width, args)
        torch.compiler.reset()
        benches = {(bf16, c): StepBench(arch, "adam", "normed", args, compile=c, bf16=bf16)
                   for bf16 in (False, True) for c in ((False, True) if args.compile else (False,))}
        params = sum(w.numel() for w in benches[(False, False)].weights)
        for (bf16, compile), seconds in best_times(benches, args).items():
            tokens = args.batch_size * args.context / seconds
            emit(f"{width:>6}{'bfloat16' if bf16 else 'float32':>10}{'yes' if compile else 'no':>10}{tokens:>14,.0f}"
                 + "".join(f"{6 * params * tokens / peak:>16.1%}" for peak in peaks.values()))


# compile last: Inductor on torch 2.11 failed compiling the update on an H100, which ended the first GPU run's bench
GPU_PRESET = dict(tables="modes,ortho,throughput,pack,compile", gpt_widths=[128, 768, 2048], tokens_per_step=65536,
                  context=256, bf16=True, pack_widths=[64, 256], pack_batch_size=64, steps=4, repeats=5)


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true",
                        help="the GPU tables, compile last: GPT widths 128, 768, 2048 at 65 536 tokens per step "
                             "(context 256), bfloat16 autocast, packed GPT widths 64 and 256 (batch 64), 5 rounds "
                             "of 4 steps; flags after it still apply")
    parser.add_argument("--defaults", action="store_true", help="every architecture at its config defaults")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tokens-per-step", type=int, help="GPT batch size = this ÷ context (overrides --batch-size)")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=False,
                        help="bfloat16 autocast in every table (throughput has both)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=3, help="rounds in which the configurations take turns "
                        "running a block (modes: medians of the rounds' ratios; other tables: the best block)")
    parser.add_argument("--gpt-widths", type=int, nargs="+", help="GPT widths of modes, compile, ortho, throughput "
                        "(default 128 768)")
    parser.add_argument("--gpt-depth", type=int, help="GPT blocks (default the config's, 3)")
    parser.add_argument("--gpt-heads", type=int, help="GPT heads (default the config's 4; 8 from width 768)")
    parser.add_argument("--variants", default="modular,paper",
                        help=f"variants of the modes table, comma-separated (allowed: {', '.join(VARIANTS)})")
    parser.add_argument("--skip-gpt768", action="store_true", help="GPT width 128 only (768 is slow on CPU)")
    parser.add_argument("--pack", type=int, default=8)
    parser.add_argument("--pack-widths", type=int, nargs="+", default=[32], help="GPT widths of the pack table")
    parser.add_argument("--pack-batch-size", type=int, help="batch of one run in the pack table (default --batch-size)")
    parser.add_argument("--pack-compile", action=argparse.BooleanOptionalAction, default=False,
                        help="compile both sides of the pack table")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="the throughput table's compiled rows (--no-compile: eager only)")
    parser.add_argument("--compile-update", action=argparse.BooleanOptionalAction, default=True,
                        help="the compile table's column with the optimiser update compiled too")
    parser.add_argument("--run-steps", type=int, default=10000, help="steps of one run, for runs per hour")
    parser.add_argument("--peak-tflops", type=float, help="peak for MFU (default on CUDA 989, H100 dense bf16)")
    parser.add_argument("--matmul-size", type=int, help="side of the matmul whose rate is measured "
                        "(default 8192 on CUDA, 1024 on CPU)")
    parser.add_argument("--tables", default="modes,compile,pack,throughput",
                        help=f"comma-separated subset of: {', '.join(TABLES)}")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, help="append every printed line to this file as it is measured")
    return parser


def bench_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The command line, checked, with the GPU preset and the device's defaults filled in."""
    argv = parser.parse_known_args()[0]
    if argv.gpu:  # the preset's values are defaults: flags given on the command line still win
        parser.set_defaults(**GPU_PRESET)
    args = parser.parse_args()
    tables = set(args.tables.split(","))
    if unknown := tables - set(TABLES):
        parser.error(f"--tables: unknown {sorted(unknown)}; allowed: {', '.join(TABLES)}")
    if unknown := set(args.variants.split(",")) - set(VARIANTS):
        parser.error(f"--variants: unknown {sorted(unknown)}; allowed: {', '.join(VARIANTS)}")
    if args.tokens_per_step:
        if args.tokens_per_step % args.context:
            parser.error(f"--tokens-per-step {args.tokens_per_step} is not a multiple of --context {args.context}")
        args.batch_size = args.tokens_per_step // args.context
    if args.peak_tflops is None and is_cuda(args.device):
        args.peak_tflops = 989.0
    args.matmul_size = args.matmul_size or (8192 if is_cuda(args.device) else 1024)
    return args


def main() -> None:
    global OUT
    args = bench_args(bench_parser())
    OUT = args.out
    emit(f"# scripts/bench.py {time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, {device_name(args)}")
    if args.defaults:
        cases = [(name, load_arch(name)) for name in ("gpt", "standard_gpt", "resmlp", "resnet")]
        mode_table(cases, ["adam", "sgd"], args)
        return
    widths = args.gpt_widths or ([128] if args.skip_gpt768 else [128, 768])
    gpts = [("gpt", gpt_arch(w, args)) for w in widths]
    resmlp = ("resmlp", load_arch("resmlp", width=64, depth=8))
    pack_cases = [("gpt", load_arch("gpt", width=w)) for w in args.pack_widths]
    run_table = {  # in the order given: a run cut short by a time limit loses the last ones
        "modes": lambda: mode_table([resmlp, *gpts], ["adam"], args),
        "compile": lambda: compile_table(gpts if args.gpt_widths else [resmlp, *gpts[:1]], args),
        "ortho": lambda: ortho_table(widths, args),
        "pack": lambda: packing_table(pack_cases if args.gpu else [resmlp, *pack_cases], args),
        "throughput": lambda: throughput_table(widths, args),
        "retraction": lambda: retraction_table(widths, args),
    }
    for table in dict.fromkeys(args.tables.split(",")):
        try:
            run_table[table]()
        except Exception as error:  # noqa: BLE001 - one table's failure (a compiler bug, say) must not cost the rest
            emit(f"# table {table} failed: {type(error).__name__}: {str(error).strip().splitlines()[0][:300]}")


if __name__ == "__main__":
    main()
