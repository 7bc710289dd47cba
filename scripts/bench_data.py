"""Loader throughput: training batches per second for each dataset at the paper's batch size (128).

Uses whatever is prepared under data.root (or $MODULA_DATA); a dataset that is not there is skipped with
the reason. ``--generated-cifar`` measures CIFAR-10 on generated images in the official layout.
On CUDA it also measures the GPU-resident CIFAR path (``on_gpu=True``).

    python scripts/bench_data.py [--batch-size 128] [--batches 50] [--generated-cifar]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from modula_cli.data import DataUnavailable, build_dataset


def rate(dataset, batch_size: int, batches: int, device: str) -> float:
    dataset.train_batch(0, batch_size, seed=0, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(1, batches + 1):
        dataset.train_batch(step, batch_size, seed=0, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    return batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--root", default=None)
    parser.add_argument("--generated-cifar", action="store_true")
    args = parser.parse_args()

    cases = [("shakespeare", {"context": 128}), ("tinystories", {"context": 128}),
             ("openwebtext", {"context": 128})]
    cifar_root = args.root
    if args.generated_cifar:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from conftest import write_cifar_batches

        cifar_root = tempfile.mkdtemp()
        write_cifar_batches(Path(cifar_root), per_batch=2000, test_size=1000)
    for augment in ("none", "crop_flip", "autoaugment"):
        cases.append(("cifar10", {"augment": augment, "root": cifar_root}))
    if torch.cuda.is_available():
        cases.append(("cifar10", {"augment": "autoaugment", "root": cifar_root, "on_gpu": True}))

    print(f"batch size {args.batch_size}, {args.batches} batches each")
    for name, options in cases:
        options = {"root": args.root, **options}
        label = name + "".join(f" {k}={v}" for k, v in options.items() if k not in ("root", "context"))
        try:
            dataset = build_dataset(name, **options)
        except (DataUnavailable, FileNotFoundError, RuntimeError, ValueError) as error:
            print(f"{label:<40} skipped: {str(error).splitlines()[0][:100]}")
            continue
        device = "cuda" if options.get("on_gpu") else "cpu"
        print(f"{label:<40} {rate(dataset, args.batch_size, args.batches, device):9.1f} batches/s", flush=True)


if __name__ == "__main__":
    main()
