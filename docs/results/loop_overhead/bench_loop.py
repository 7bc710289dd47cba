"""Does the training loop cost anything beyond the step? The same configuration timed two ways, side by
side in one process, the modes taking turns:

- ``loop``: the real run (``modula_cli.run.trainer.train`` on Shakespeare: data, prefetch, logging, evaluation off
  the clock), its own throughput from summary.json, the first ``--warmup`` steps left out;
- ``step``: ``scripts/bench.py``'s bare step (loss and gradient → optimiser update) on a fixed batch,
  timed one step at a time, the median kept as for the loop.

Prints ms/step of each and the mode ratios over unnormed; the loop's ratios should match the step's
within noise. ``--variants modular,paper`` times each variant (paper is the configs' default), and prints
each mode's paper ÷ modular ratio for the loop and the step.

    python docs/results/loop_overhead/bench_loop.py --width 128 --batch-size 64 --steps 120
    python docs/results/loop_overhead/bench_loop.py --depth 2 --variants modular,paper --modes unnormed,normed,dualized
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))  # the bare step is bench.py's

from bench import MODES, StepBench, load_arch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from modula_cli.config import CONFIG_DIR  # noqa: E402
from modula_cli.config.resolvers import register_config  # noqa: E402
from modula_cli.models.variant import VARIANTS  # noqa: E402
from modula_cli.run.trainer import train  # noqa: E402


def loop_ms(mode: str, variant: str, args, folder: Path) -> float:
    """Median ms of the run's own steps after the warm-up (from the cumulative ``elapsed`` it logs)."""
    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"optim.mode={mode}", f"variant={variant}", f"arch.width={args.width}", f"arch.depth={args.depth}",
            f"train.batch_size={args.batch_size}",
            f"data.context={args.context}", f"train.steps={args.steps}", "train.log_every=1", "train.eval_every=0",
            "train.progress=false", "train.checkpoint_every=0", "train.device=cpu", "train.rerun=true"])
    run = folder / f"{mode}_{variant}"
    train(cfg, run)
    elapsed = [json.loads(line)["elapsed"] for line in (run / "metrics.jsonl").read_text().splitlines()
               if '"train_loss"' in line]
    per_step = [b - a for a, b in zip(elapsed[args.warmup:], elapsed[args.warmup + 1:])]
    return 1e3 * statistics.median(per_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--variants", default="paper", help="comma-separated: modular, paper")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of the modes")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of (loop, step) per mode; medians kept")
    args = parser.parse_args()
    modes, variants = args.modes.split(","), args.variants.split(",")
    for flag, given, allowed in (("--modes", modes, MODES), ("--variants", variants, tuple(VARIANTS))):
        if unknown := sorted(set(given) - set(allowed)):
            parser.error(f"{flag}: unknown {unknown}; allowed: {', '.join(allowed)}")
    bench_args = argparse.Namespace(batch_size=args.batch_size, context=args.context, device="cpu", steps=10,
                                    bf16=False)
    arch = load_arch("gpt", width=args.width, depth=args.depth)
    cases = [(m, v) for m in modes for v in variants]
    benches = {(m, v): StepBench(arch, "adam", m, bench_args, variant=v) for m, v in cases}
    loop, step = {c: [] for c in cases}, {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for mode, variant in cases:
                loop[(mode, variant)].append(loop_ms(mode, variant, args, Path(tmp)))
                step[(mode, variant)].append(
                    1e3 * statistics.median(benches[(mode, variant)].run(1) for _ in range(args.steps)))
    print(f"GPT width {args.width}, {args.depth} blocks, batch {args.batch_size}, context {args.context}, "
          f"{args.steps} steps, median of {args.repeats} rounds (CPU)")
    ratios = [m for m in ("normed", "dualized") if m in modes and "unnormed" in modes]
    print(f"{'':<6}{'variant':>9}" + "".join(f"{m + ' ms':>14}" for m in modes)
          + "".join(f"{m + '/un':>13}" for m in ratios))
    for label, table in (("loop", loop), ("step", step)):
        ms = {case: statistics.median(values) for case, values in table.items()}
        for variant in variants:
            print(f"{label:<6}{variant:>9}" + "".join(f"{ms[(m, variant)]:>14.1f}" for m in modes)
                  + "".join(f"{ms[(m, variant)] / ms[('unnormed', variant)]:>13.2f}" for m in ratios), flush=True)
        if {"modular", "paper"} <= set(variants):
            print(f"{label:<6}{'pap/mod':>9}" + "".join(f"{ms[(m, 'paper')] / ms[(m, 'modular')]:>14.3f}"
                                                         for m in modes), flush=True)


if __name__ == "__main__":
    main()
