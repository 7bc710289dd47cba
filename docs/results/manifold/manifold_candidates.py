"""Manifold Adam beside dualized Adam, per width: each one's loss at its own best grid LR, the gap paired by
seed (a seed fixes the initial weights and the batches of both), and manifold's fitted shift of log2 η*
from the smallest to the largest width with its bootstrap interval (the report's transfer.csv).

    python docs/results/manifold/manifold_candidates.py     # every manifold_candidates.sh sweep
    python docs/results/manifold/manifold_candidates.py docs/results/small_gpt_width_paper  # a report folder
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

# each mode's runs at its best grid LR: the variants study's definition, so both studies pick them alike
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "variants"))
from compare_variants import best_runs  # noqa: E402

CANDIDATES = "outputs/sweeps/manifold_candidates_*/gpt_shakespeare_paper"
DUALIZED = Path("docs/results/small_gpt_width_paper")


def _shift(row: pd.Series) -> str:
    """``+0.02 [-0.22, +0.29]``; an open end (an optimum at the grid's edge) is shown as ?."""
    ends = [f"{row[k]:+.2f}" if pd.notna(row[k]) else "?" for k in ("shift_log2_low", "shift_log2_high")]
    note = f" ({row['edges']})" if isinstance(row.get("edges"), str) else ""
    return f"{row['shift_log2']:+.2f} [{ends[0]}, {ends[1]}]{note}"


def rows(folder: Path, dualized: pd.DataFrame) -> list[str]:
    results = pd.read_csv(folder / "results.csv")
    mine = best_runs(results[results["mode"] == "manifold"])
    merged = mine.merge(dualized, on=["width", "seed"], suffixes=("", "_dualized"))
    transfer = pd.read_csv(folder / "transfer.csv")
    shift = transfer[transfer["mode"] == "manifold"]
    name = folder.parent.name.removeprefix("manifold_candidates_") if "candidates" in str(folder) else folder.name
    lines = []
    for width, pair in merged.groupby("width"):
        gap = pair["train_loss"] - pair["train_loss_dualized"]
        half = 4.30 * gap.std(ddof=1) / np.sqrt(len(gap))  # 95 %, t with 2 degrees of freedom (3 seeds)
        moved = _shift(shift.iloc[0]) if len(shift) and width == merged["width"].max() else ""
        lines.append(f"| {name} | {width} | 2^{np.log2(pair['lr'].iloc[0]):.0f} | {pair['train_loss'].mean():.3f} "
                     f"± {pair['train_loss'].std(ddof=1):.3f} | {pair['train_loss_dualized'].mean():.3f} | "
                     f"{gap.mean():+.3f} [{gap.mean() - half:+.3f}, {gap.mean() + half:+.3f}] | {moved} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", type=Path, nargs="*", help="report or sweep folders (default: the candidates)")
    parser.add_argument("--dualized", type=Path, default=DUALIZED, help="report folder holding dualized Adam")
    args = parser.parse_args()
    folders = args.folders or sorted(Path().glob(CANDIDATES))
    dualized = pd.read_csv(args.dualized / "results.csv")
    dualized = best_runs(dualized[dualized["mode"] == "dualized"])[["width", "seed", "train_loss"]]
    print("| candidate | width | manifold η* | manifold loss (mean ± sd) | dualized loss | manifold − dualized, "
          "paired [95 %] | shift of log2 η* [95 %] |")
    print("|---|---|---|---|---|---|---|")
    for folder in folders:
        if (folder / "transfer.csv").exists():
            print("\n".join(rows(folder, dualized)))


if __name__ == "__main__":
    main()
