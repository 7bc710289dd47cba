"""Prepare a dataset ahead of time, e.g. on a cluster login node that has internet access.

    python scripts/prepare_data.py shakespeare
    python scripts/prepare_data.py openwebtext data.num_proc=16 data.root=/shared/datasets

Takes the same ``data.*`` overrides as ``modula-sweep`` and prints what was prepared.
"""

from __future__ import annotations

import sys
import time

from omegaconf import OmegaConf

from modula_cli.config import CONFIG_DIR
from modula_cli.data import DATASETS, DataUnavailable, build_dataset


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in DATASETS:
        sys.exit(f"usage: prepare_data.py <dataset> [data.key=value ...]; datasets: {', '.join(DATASETS)}")
    name, overrides = argv[0], argv[1:]
    cfg = OmegaConf.load(CONFIG_DIR / "data" / f"{name}.yaml")
    for item in overrides:
        key, _, value = item.partition("=")
        OmegaConf.update(cfg, key.removeprefix("data."), OmegaConf.create({"v": value}).v if value else None)
    options = OmegaConf.to_container(cfg)
    options.pop("name")
    start = time.perf_counter()
    try:
        dataset = build_dataset(name, **options)
    except DataUnavailable as error:  # offline: one line saying what is missing and how to get it
        sys.exit(f"prepare_data.py: {error}")
    print(f"{dataset.describe()} (ready in {time.perf_counter() - start:.1f}s)")
    print(f"metadata: {dataset.meta}")


if __name__ == "__main__":
    main(sys.argv[1:])
