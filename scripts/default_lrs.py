"""Evidence for the single-run default LRs (``Mode.default_lrs``): does each architecture × optimiser × mode ×
variant train at its default, and where not, which LR does?

For every combination asked for, one packed run through the real command line trains the LRs
default × 2^k (k in --offsets) with every seed at the architecture's default sizes, and the table says per LR
how many seeds diverged and the mean final train loss ± its spread over seeds. GPTs train on the real
Shakespeare text; the image networks on CIFAR-10 when --cifar-root holds it, else on photo patches in CIFAR-10's
exact layout (--photos: a folder of photographs, cut into 32 × 32 patches, one class per photograph), which
have natural images' pixel statistics, unlike noise.

    python scripts/default_lrs.py --photos PHOTOS --out docs/results/default_lrs
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
IMAGE_ARCHS = ("resmlp", "resnet")


def photo_patches(photos: Path, root: Path, per_batch: int = 1000, test_size: int = 500, seed: int = 0) -> int:
    """CIFAR-10's python layout under ``root/cifar10/cifar-10-batches-py`` from the photographs in ``photos``
    (the first 10 by name, one class each): random square crops of 32 px up to half the photo's short side,
    resized to 32 × 32, half of them mirrored. Returns the number of classes."""
    from PIL import Image

    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))[:10]
    if len(files) < 2:
        raise SystemExit(f"--photos {photos}: needs at least 2 photographs (.png, .jpg), found {len(files)}")
    images = [Image.open(f).convert("RGB") for f in files]
    rng = np.random.default_rng(seed)
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        n = test_size if name == "test_batch" else per_batch
        labels = rng.integers(0, len(images), n)
        data = np.empty((n, 3072), np.uint8)
        for i, label in enumerate(labels):
            image = images[label]
            w, h = image.size
            side = int(rng.integers(32, max(33, min(w, h) // 2)))
            x, y = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
            patch = np.asarray(image.crop((x, y, x + side, y + side)).resize((32, 32), Image.BILINEAR))
            if rng.random() < 0.5:
                patch = patch[:, ::-1]
            data[i] = patch.transpose(2, 0, 1).reshape(-1)
        with open(folder / name, "wb") as handle:
            pickle.dump({"batch_label": name, "labels": [int(v) for v in labels], "data": data,
                         "filenames": [f"patch_{i}.png" for i in range(n)]}, handle)
    return len(images)


def default_lr(optimizer: str, mode: str, arch: str, variant: str) -> float:
    """What a run with ``optim.lr`` unset trains at (the variant's ``scales`` can matter: plain SGD)."""
    from modula_cli.models.variant import VARIANTS
    from modula_cli.optim.modes import MODES

    return MODES[mode].default_lr(optimizer, arch, VARIANTS[variant].scales)


def packed_run(arch: str, optimizer: str, mode: str, variant: str, lrs: list[float], seeds: list[int], steps: int,
               data_root: Path, out: Path, threads: int) -> list[dict]:
    data = ["data=cifar10", "data.augment=none"] if arch in IMAGE_ARCHS else ["data=shakespeare"]
    args = [f"arch={arch}", f"optim={optimizer}", f"optim.mode={mode}", f"variant={variant}", *data,
            f"data.root={data_root}", f"optim.lr=[{','.join(repr(lr) for lr in lrs)}]",
            f"train.seed=[{','.join(map(str, seeds))}]", f"train.steps={steps}", "train.progress=false",
            "train.eval_every=0", "train.eval_batches=1", "train.checkpoint_every=0", f"train.threads={threads}",
            f"hydra.run.dir={out}"]
    done = subprocess.run([sys.executable, "-m", "modula_cli.train", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return [json.loads((folder / "summary.json").read_text()) for folder in sorted(out.iterdir())
            if (folder / "summary.json").is_file()]


def rows_of(summaries: list[dict], default: float) -> list[dict]:
    rows = []
    for lr in sorted({s["lr"] for s in summaries}):
        members = [s for s in summaries if s["lr"] == lr]
        losses = [s["train_loss"] for s in members if s["status"] == "completed" and s.get("train_loss") is not None]
        rows.append({"lr": lr, "log2_lr": float(np.log2(lr)), "default": lr == default, "seeds": len(members),
                     "diverged": sum(s["status"] == "diverged" for s in members),
                     "loss_mean": statistics.fmean(losses) if losses else None,
                     "loss_sd": statistics.stdev(losses) if len(losses) > 1 else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", nargs="+", default=["gpt", "standard_gpt", "resmlp", "resnet"])
    parser.add_argument("--optimizers", nargs="+", default=["adam", "sgd"])
    parser.add_argument("--modes", nargs="+", default=["unnormed", "normed", "dualized", "manifold", "mup"])
    parser.add_argument("--variants", nargs="+", default=["paper", "modular"])
    parser.add_argument("--offsets", nargs="+", type=int, default=[0],
                        help="LRs tried: the default × 2^k for each k (0: the default alone)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shakespeare", type=Path, help="Shakespeare's input.txt (default: where data.root has it)")
    parser.add_argument("--cifar-root", type=Path, help="a data root holding cifar10/cifar-10-batches-py")
    parser.add_argument("--photos", type=Path, help="without --cifar-root: photographs to cut into patches")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if any(a in IMAGE_ARCHS for a in args.archs) and not (args.cifar_root or args.photos):
        parser.error("the image networks need --cifar-root or --photos")
    if args.shakespeare is None:
        from modula_cli.data.storage import data_root

        args.shakespeare = data_root() / "shakespeare" / "input.txt"
    language = any(a not in IMAGE_ARCHS for a in args.archs)
    if language and not args.shakespeare.is_file():
        parser.error(f"--shakespeare {args.shakespeare}: no such file (copy input.txt there, or name it)")
    scratch = Path(tempfile.mkdtemp(prefix="default_lrs-"))
    data_root = scratch / "data"
    data_root.mkdir()
    if language:  # the image networks alone need no text
        (data_root / "shakespeare").mkdir()
        shutil.copy(args.shakespeare, data_root / "shakespeare" / "input.txt")
    images = "CIFAR-10"
    if args.cifar_root:
        (data_root / "cifar10").symlink_to((args.cifar_root / "cifar10").resolve())
    elif args.photos:
        images = f"photo patches ({photo_patches(args.photos, data_root)} photographs of {args.photos})"
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "default_lrs.jsonl"
    seeds = list(range(args.seeds))
    print(f"# {args.steps} steps, seeds {seeds}, default sizes; GPTs on Shakespeare, image networks on {images}",
          flush=True)
    for arch, optimizer, mode, variant in itertools.product(args.archs, args.optimizers, args.modes, args.variants):
        default = default_lr(optimizer, mode, arch, variant)
        lrs = sorted(default * 2.0**k for k in args.offsets)
        start = time.time()
        summaries = packed_run(arch, optimizer, mode, variant, lrs, seeds, args.steps, data_root,
                               scratch / f"{arch}-{optimizer}-{mode}-{variant}", args.threads)
        for row in rows_of(summaries, default):
            record = {"arch": arch, "optimizer": optimizer, "mode": mode, "variant": variant, "steps": args.steps,
                      "data": "shakespeare" if arch not in IMAGE_ARCHS else images, **row}
            with open(table, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            loss = "—" if row["loss_mean"] is None else f"{row['loss_mean']:.3f} ± {row['loss_sd'] or 0:.3f}"
            mark = "*" if row["default"] else " "
            print(f"{arch:13s} {optimizer:4s} {mode:9s} {variant:7s} 2^{row['log2_lr']:+.0f}{mark} diverged "
                  f"{row['diverged']}/{row['seeds']}  loss {loss}", flush=True)
        print(f"  ({time.time() - start:.0f} s)", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
