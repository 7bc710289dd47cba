"""Summarise coordinate checks of the same settings run with different seeds (one folder each), as a markdown
table: per mode, how many seeds gave a stable verdict and, over seeds, the mean [min, max] of the largest
|slope| over layers of each verdict quantity and of the median slope over matrix layers.

    for s in 0 1 2; do modula-coord-check train.seed=$s hydra.run.dir=outputs/coord/seed$s; done
    python scripts/coord_summary.py outputs/coord/seed*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

QUANTITIES = ("delta_rms", "own_delta_rms")


def per_seed(folder: Path, tolerance: float) -> pd.DataFrame:
    slopes = pd.read_csv(folder / "coord_slopes.csv")
    coord = pd.read_csv(folder / "coord.csv", usecols=["layer", "role", "kind"]).drop_duplicates()
    matrices = set(coord.loc[coord["kind"] != "Embed", "layer"]) | set(coord.loc[coord["kind"] != "Embed", "role"])
    rows = []
    for mode, group in slopes.groupby("mode", sort=False):
        checked = group[group["quantity"].isin(QUANTITIES)]
        row = {"mode": mode, "stable": bool((checked["slope"].abs() <= tolerance).all())}
        for quantity in QUANTITIES:
            values = group[group["quantity"] == quantity]
            row[f"max_abs_{quantity}"] = values["slope"].abs().max()
            row[f"median_{quantity}"] = values[values["layer"].isin(matrices)]["slope"].median()
        rows.append(row)
    return pd.DataFrame(rows)


def summary(folders: list[Path], tolerance: float) -> str:
    frames = [per_seed(folder, tolerance).assign(seed=str(folder)) for folder in folders]
    table = pd.concat(frames, ignore_index=True)
    columns = [c for c in table.columns if c.startswith(("max_abs_", "median_"))]
    lines = ["| mode | stable verdicts | " + " | ".join(c.replace("_", " ") for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for mode, group in table.groupby("mode", sort=False):
        cells = [f"{np.mean(group[c]):+.2f} [{group[c].min():+.2f}, {group[c].max():+.2f}]" for c in columns]
        lines.append(f"| {mode} | {int(group['stable'].sum())} of {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="coordinate-check output folders (one per seed)")
    parser.add_argument("--tolerance", type=float, default=0.3)
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "coord_slopes.csv").exists()]
    if missing:
        sys.exit(f"coord_summary: no coord_slopes.csv in {', '.join(missing)}")
    print(f"{len(args.folders)} seeds; cells: mean [min, max] over seeds; median over matrix layers\n")
    print(summary(args.folders, args.tolerance))


if __name__ == "__main__":
    main()
