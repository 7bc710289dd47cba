"""Does the training loop cost anything beyond the step? The same configuration timed two ways, side by
side in one process, the modes taking turns:

- ``loop``: the real run (``modula_cli.run.trainer.train`` on Shakespeare: data, prefetch, logging, evaluation off
  the clock), its own throughput from summary.json, the first ``--warmup`` steps left out;
- ``step``: ``scripts/bench.py``'s bare step (loss and gradient → optimiser update) on a fixed batch,
  timed one step at a time, the median kept as for the loop.

Prints ms/step of each and the mode ratios over unnormed; the loop's ratios should match the step's
within noise.

    python docs/results/loop_overhead/bench_loop.py --width 128 --batch-size 64 --steps 120
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
from modula_cli.run.trainer import train  # noqa: E402


def loop_ms(mode: str, args, folder: Path) -> float:
    """Median ms of the run's own steps after the warm-up (from the cumulative ``elapsed`` it logs)."""
    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"optim.mode={mode}", f"arch.width={args.width}", f"train.batch_size={args.batch_size}",
            f"data.context={args.context}", f"train.steps={args.steps}", "train.log_every=1", "train.eval_every=0",
            "train.progress=false", "train.checkpoint_every=0", "train.device=cpu", "train.rerun=true"])
    train(cfg, folder / mode)
    elapsed = [json.loads(line)["elapsed"] for line in (folder / mode / "metrics.jsonl").read_text().splitlines()
               if '"train_loss"' in line]
    per_step = [b - a for a, b in zip(elapsed[args.warmup:], elapsed[args.warmup + 1:])]
    return 1e3 * statistics.median(per_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of (loop, step) per mode; medians kept")
    args = parser.parse_args()
    bench_args = argparse.Namespace(batch_size=args.batch_size, context=args.context, device="cpu", steps=10)
    arch = load_arch("gpt", width=args.width)
    benches = {m: StepBench(arch, "adam", m, bench_args) for m in MODES}
    loop, step = {m: [] for m in MODES}, {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for mode in MODES:
                loop[mode].append(loop_ms(mode, args, Path(tmp)))
                step[mode].append(1e3 * statistics.median(benches[mode].run(1) for _ in range(args.steps)))
    print(f"GPT width {args.width}, batch {args.batch_size}, context {args.context}, {args.steps} steps, "
          f"median of {args.repeats} rounds (CPU)")
    print(f"{'':<6}" + "".join(f"{m + ' ms':>14}" for m in MODES) + f"{'normed/un':>11}{'dualized/un':>13}")
    for label, table in (("loop", loop), ("step", step)):
        ms = {m: statistics.median(v) for m, v in table.items()}
        print(f"{label:<6}" + "".join(f"{ms[m]:>14.1f}" for m in MODES)
              + f"{ms['normed'] / ms['unnormed']:>11.2f}{ms['dualized'] / ms['unnormed']:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
