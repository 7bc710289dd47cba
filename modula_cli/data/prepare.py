"""``modula-prepare-data``: download and prepare a dataset ahead of time, e.g. on a login node with internet
access, so that jobs on compute nodes without it find the data in place.

    modula-prepare-data shakespeare
    modula-prepare-data openwebtext data.num_proc=16 data.root=/shared/datasets

Takes the ``data.*`` options of ``configs/data/<dataset>.yaml``, as ``modula-sweep`` does, and prints what
was prepared. A mistyped dataset or option is one line and exit status 2; missing data that cannot be
fetched is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from pathlib import Path

from omegaconf import OmegaConf

from . import DATASETS, DataUnavailable, build_dataset

PROG = "modula-prepare-data"
USAGE_STATUS = 2  # a rejected command line, as argparse and modula-sweep exit


def _usage_error(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise SystemExit(USAGE_STATUS)


def _parser() -> argparse.ArgumentParser:
    names = ", ".join(DATASETS)
    parser = argparse.ArgumentParser(
        prog=PROG, epilog=f"datasets: {names}",
        description="Download and prepare a dataset ahead of time (e.g. on a login node with internet access), "
                    "and print what was prepared.")
    parser.add_argument("dataset", metavar="DATASET", help=f"one of: {names}")
    parser.add_argument("overrides", nargs="*", default=[], metavar="data.KEY=VALUE",
                        help="an option of configs/data/<DATASET>.yaml, e.g. data.root=/shared/datasets")
    return parser


def dataset_options(name: str, overrides: Sequence[str], config_dir: Path) -> dict:
    """The builder options of dataset ``name``: its config file's values (``config_dir/data/<name>.yaml``) with
    ``data.KEY=VALUE`` (or ``KEY=VALUE``) overrides applied, values read as YAML as on ``modula-sweep``'s
    command line."""
    options = OmegaConf.to_container(OmegaConf.load(config_dir / "data" / f"{name}.yaml"))
    options.pop("name")
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.removeprefix("data.")
        if not sep:
            _usage_error(f"expected data.KEY=VALUE, got {item!r}")
        if key not in options:
            _usage_error(f"unknown option data.{key} for {name}; allowed: {', '.join(f'data.{k}' for k in options)}")
        options[key] = OmegaConf.from_dotlist([f"value={value}"])["value"]
    return options


def main(argv: Sequence[str], config_dir: Path) -> None:
    """The command (``modula_cli.cli.prepare_data`` runs it with the package's configs)."""
    args = _parser().parse_args(argv)
    if args.dataset not in DATASETS:
        _usage_error(f"unknown dataset {args.dataset!r}; allowed: {', '.join(DATASETS)}")
    options = dataset_options(args.dataset, args.overrides, config_dir)
    start = time.perf_counter()
    try:
        dataset = build_dataset(args.dataset, **options)
    except DataUnavailable as error:  # offline: one line saying what is missing and how to get it
        print(f"{PROG}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"{dataset.describe()} (ready in {time.perf_counter() - start:.1f}s)")
    print(f"metadata: {dataset.meta}")
