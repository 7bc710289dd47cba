"""Two variants of one experiment side by side: each mode's loss at its own best grid LR, per width, and the
paper − modular difference paired by seed (a seed fixes the initial effective weights and the batches in
both variants, so the pairing removes most of the seed-to-seed spread).

    python docs/results/variants/compare_variants.py docs/results/small_gpt_width docs/results/small_gpt_width_paper
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def best_runs(results: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, width): the runs at the grid LR with the lowest mean train loss (diverged runs count as
    not reaching it: a grid LR where any seed diverged is not a candidate)."""
    rows = []
    for _, runs in results.groupby(["mode", "width"]):
        by_lr = runs.groupby("lr")
        usable = [lr for lr, group in by_lr if (group["status"] == "completed").all()]
        means = by_lr["train_loss"].mean().loc[usable]
        best = means.idxmin()
        rows.append(runs[runs["lr"] == best])
    return pd.concat(rows)


def compare(modular: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    a, b = best_runs(modular), best_runs(paper)
    merged = a.merge(b, on=["mode", "width", "seed"], suffixes=("_modular", "_paper"))
    rows = []
    for (mode, width), pair in merged.groupby(["mode", "width"]):
        difference = pair["train_loss_paper"] - pair["train_loss_modular"]
        half = 4.30 * difference.std(ddof=1) / np.sqrt(len(difference))  # 95 %, t with 2 degrees of freedom
        rows.append({"mode": mode, "width": width, "lr_modular": pair["lr_modular"].iloc[0],
                     "lr_paper": pair["lr_paper"].iloc[0], "loss_modular": pair["train_loss_modular"].mean(),
                     "loss_paper": pair["train_loss_paper"].mean(), "difference": difference.mean(),
                     "low": difference.mean() - half, "high": difference.mean() + half, "seeds": len(pair)})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    lines = ["| mode | width | best grid LR modular → paper | train loss modular | train loss paper | "
             "paper − modular, paired by seed [95 %] |", "|---|---|---|---|---|---|"]
    for row in table.itertuples(index=False):
        lrs = f"2^{np.log2(row.lr_modular):.0f} → 2^{np.log2(row.lr_paper):.0f}"
        lines.append(f"| {row.mode} adam | {row.width} | {lrs} | {row.loss_modular:.3f} | {row.loss_paper:.3f} | "
                     f"{row.difference:+.3f} [{row.low:+.3f}, {row.high:+.3f}] |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modular", type=Path, help="report folder of the modular variant (its results.csv)")
    parser.add_argument("paper", type=Path, help="report folder of the paper variant")
    args = parser.parse_args()
    modular, paper = (pd.read_csv(folder / "results.csv") for folder in (args.modular, args.paper))
    modes = sorted(set(paper["mode"]) & set(modular["mode"]))
    table = compare(modular[modular["mode"].isin(modes)], paper[paper["mode"].isin(modes)])
    print(markdown(table))


if __name__ == "__main__":
    main()
