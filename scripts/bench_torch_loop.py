"""What does modula-sweep's loop cost on a plain torch model over a bare PyTorch loop? Both timed side by side in
one process, taking turns round after round:

- ``tool``: a real run (``modula_cli.run.trainer.train``) of examples/torch_gpt on Shakespeare, Adam at a
  constant LR in ``--mode`` (unnormed, or mup: μP's per-parameter LRs, which ``mup.MuAdam`` gives as torch
  Adam's param groups, the same work per step as the bare loop's); its own per-step times from metrics.jsonl
  (data prefetch, logging and evaluation off the clock, as the run counts them), the first ``--warmup`` steps
  left out;
- ``bare``: the same model class, built by the same function, trained as one writes it by hand: the same batches
  (drawn before the clock starts), ``model(x)``, cross-entropy, ``backward``, ``torch.optim.Adam`` (foreach),
  ``zero_grad``; each step timed on its own.

Prints each round's median ms/step of both and the ratio tool ÷ bare: the median of the rounds' ratios with a
90 % bootstrap interval. (The tool's Adam is the paper's, with its own bias correction; the work per step is the
same: two moment updates, a square root and a division per weight.)

    python scripts/bench_torch_loop.py --width 128 --batch-size 16 --context 64 --steps 60 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "torch_gpt"
sys.path.insert(0, str(EXAMPLE))

from torch_gpt import torch_gpt  # noqa: E402

from modula_cli.config import CONFIG_DIR  # noqa: E402
from modula_cli.config.resolvers import register_config  # noqa: E402
from modula_cli.data import build_dataset  # noqa: E402
from modula_cli.run.trainer import train  # noqa: E402


def config(args):
    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"optim.mode={args.mode}", "optim.mup.base_width=32", f"optim.lr={args.lr}", "optim.schedule=constant",
            "variant=modular",
            f"train.batch_size={args.batch_size}", f"data.context={args.context}", f"train.steps={args.steps}",
            "train.log_every=1", "train.eval_every=0", "train.eval_batches=1", "train.progress=false",
            "train.checkpoint_every=0", "train.device=cpu", "train.rerun=true", f"data.root={args.data_root}"])
    arch = OmegaConf.load(EXAMPLE / "configs" / "arch" / "torch_gpt.yaml")
    arch.width, arch.depth = args.width, args.depth
    with open_dict(cfg):
        cfg.arch = arch
    return cfg


def tool_ms(cfg, folder: Path, warmup: int) -> float:
    """Median ms of the run's own steps after the warm-up (from the cumulative ``elapsed`` it logs)."""
    train(cfg, folder)
    elapsed = [json.loads(line)["elapsed"] for line in (folder / "metrics.jsonl").read_text().splitlines()
               if '"train_loss"' in line]
    return 1e3 * statistics.median(b - a for a, b in zip(elapsed[warmup:], elapsed[warmup + 1:]))


def bare_ms(cfg, data, warmup: int) -> float:
    """The same model, batches and optimiser written by hand; median ms of the steps after the warm-up."""
    torch.manual_seed(0)
    model = torch_gpt(cfg.arch, data)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                 eps=1e-30, foreach=True)
    batches = [data.train_batch(step, cfg.train.batch_size, seed=0) for step in range(cfg.train.steps)]
    times = []
    model.train()
    for x, y in batches:
        tick = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss.detach())  # the tool reads each step's loss too (one step late): the same sync
        times.append(time.perf_counter() - tick)
    return 1e3 * statistics.median(times[warmup:])


def bootstrap(ratios: list[float], level: float = 0.9, draws: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int((1 - level) / 2 * draws)], medians[int((1 + level) / 2 * draws) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lr", type=float, default=2.0**-8)
    parser.add_argument("--mode", default="unnormed", choices=["unnormed", "mup"])
    parser.add_argument("--data-root", default=str(REPO / "data"))
    args = parser.parse_args()
    cfg = config(args)
    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    print(f"optim.mode={args.mode}, examples/torch_gpt width {args.width}, {args.depth} blocks, batch "
          f"{args.batch_size}, context {args.context}, {args.steps} steps (median after {args.warmup}), "
          f"{torch.get_num_threads()} threads, CPU, torch {torch.__version__}")
    print(f"{'round':>6}{'tool ms':>10}{'bare ms':>10}{'tool/bare':>11}", flush=True)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            tool = tool_ms(cfg, Path(tmp) / f"round{index}", args.warmup)
            bare = bare_ms(cfg, data, args.warmup)
            ratios.append(tool / bare)
            print(f"{index:>6}{tool:>10.2f}{bare:>10.2f}{tool / bare:>11.3f}", flush=True)
    low, high = bootstrap(ratios)
    print(f"tool ÷ bare: {statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}] (median of {args.rounds} rounds, "
          f"90 % bootstrap interval)")


if __name__ == "__main__":
    main()
