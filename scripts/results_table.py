"""Markdown tables of sweep reports (optimal_lr.csv and transfer.csv), for docs and papers; several report
folders (e.g. the two variants of one experiment) go into one table, each row named by its variant.

    python scripts/results_table.py docs/results/small_gpt_width
    python scripts/results_table.py docs/results/small_gpt_width docs/results/small_gpt_width_paper
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd


def _bound(value: float) -> str:
    return "open" if math.isnan(value) else f"{value:+.2f}"


def _label(row) -> str:
    """``normed adam``, with the variant when the tables hold several (reports before variants: modular)."""
    return f"{row.mode} {row.optimizer}" + (f" ({row.variant})" if getattr(row, "several", False) else "")


def _read(folders: list[Path], name: str, metric: str = "train_loss") -> pd.DataFrame:
    frame = pd.concat([_columns_of_now(pd.read_csv(folder / name), metric) for folder in folders],
                      ignore_index=True)
    if "variant" not in frame:
        frame["variant"] = "modular"
    frame["variant"] = frame["variant"].fillna("modular")
    return frame.assign(several=frame["variant"].nunique() > 1)


def _columns_of_now(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """optimal_lr.csv files written before its columns were named ``mean``, ``std``, ``fit`` (they carried
    the metric's name: ``train_loss``, ``train_loss_std``, ``train_loss_fit``)."""
    if "mean" in frame or f"{metric}_fit" not in frame:
        return frame
    renamed = frame.rename(columns={metric: "mean", f"{metric}_std": "std", f"{metric}_fit": "fit"})
    return renamed.assign(metric=metric)


def optima_table(optimal: pd.DataFrame, metric: str) -> str:
    knob = optimal["scale_knob"].iloc[0]
    lines = [f"| mode | {knob} | best grid LR | fitted log2 η* [95 % interval] | {metric} (mean ± sd) | seeds |",
             "|---|---|---|---|---|---|"]
    for row in optimal.sort_values(["mode", "variant", "scale"]).itertuples(index=False):
        spread = "" if math.isnan(row.std) else f" ± {row.std:.3f}"
        edge = f" (at the {row.edge} edge)" if isinstance(row.edge, str) and row.edge else ""
        lines.append(f"| {_label(row)} | {row.scale:g} | 2^{row.log2_optimal_lr:.0f} | "
                     f"{row.log2_optimal_lr_fit:+.2f} [{_bound(row.log2_optimal_lr_low)}, "
                     f"{_bound(row.log2_optimal_lr_high)}]{edge} | {row.mean:.3f}{spread} | {row.seeds} |")
    return "\n".join(lines)


def transfer_table(transfer: pd.DataFrame) -> str:
    lines = ["| mode | from → to | shift of log2 η* [95 % interval] | regret [95 % interval] | seeds |",
             "|---|---|---|---|---|"]
    for row in transfer.sort_values(["mode", "variant"]).itertuples(index=False):
        regret = ("diverges" if math.isinf(row.regret) else
                  f"{row.regret:.3f} [{row.regret_low:.3f}, {row.regret_high:.3f}]")
        lines.append(f"| {_label(row)} | {row.scale_knob} {row.smallest:g} → {row.largest:g} | "
                     f"{row.shift_log2:+.2f} [{_bound(row.shift_log2_low)}, {_bound(row.shift_log2_high)}] | "
                     f"{regret} | {row.seeds} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report_dirs", type=Path, nargs="+")
    args = parser.parse_args()
    transfer = _read(args.report_dirs, "transfer.csv")
    metric = transfer["metric"].iloc[0] if not transfer.empty else "train_loss"
    print(optima_table(_read(args.report_dirs, "optimal_lr.csv", metric), metric))
    print()
    print(transfer_table(transfer))


if __name__ == "__main__":
    main()
