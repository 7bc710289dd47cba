"""How often the transfer law's 95 % prediction interval holds the true optimal LR at a target beyond the scales
measured, and how often a curved drift is caught (``analysis/law.py``).

**Synthetic** (``--synthetic``): sweeps at 3 seeds over 2, 3, 4 or 5 scales one doubling apart, each scale's
curve the one of docs/results/interval_coverage (the paper's 9-point grid 2^-6 … 2^2, noise at every point
and a tilt per seed; a parabola in log2 LR, or a skewed curve steeper above its optimum), its optimum on a
known power law: a drift of 0, ±0.25 or ±0.5 grid steps per doubling. The law is fitted as the report fits it
and asked for the LR 1, 2, 4 and 8 doublings beyond the largest scale. Then curved drifts (a quadratic term in
log2 scale added to the law): how often the report withholds the prediction.

**Leave the largest out** (``--committed``): on every committed sweep with three or more scales, the report
is re-run on its results.csv without the largest scale, with that scale as the target; the table says
whether the optimum measured there (the full report's) falls inside the predicted interval.

    python docs/results/law_coverage/law_coverage.py --synthetic --sweeps 200 > docs/results/law_coverage/synthetic.txt
    python docs/results/law_coverage/law_coverage.py --committed > docs/results/law_coverage/leave_largest_out.txt
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from modula_cli.analysis.law import LawPoint, fit_law, usable
from modula_cli.analysis.report import write_report
from modula_cli.analysis.stats import optimum

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interval_coverage"))
from interval_coverage import GRID, TRUTH, noisy, parabola, skewed  # noqa: E402

DRIFTS = (0.0, 0.25, -0.25, 0.5, -0.5)
SCALES = (2, 3, 4, 5)
BEYOND = (1, 2, 4, 8)
SHAPES = {"parabola": parabola, "skewed": skewed}
ROOT = Path(__file__).resolve().parents[3]


def sweep(shape, truths: np.ndarray, rng: np.random.Generator, seeds: int = 3):
    """The law fitted on one synthetic sweep (scales at log2 positions 0, 1, …), or None."""
    points = [LawPoint((float(x),), optimum(GRID, noisy(shape, truth, seeds, rng), resamples=400, rng=rng))
              for x, truth in enumerate(truths)]
    return fit_law(["width"], usable(points))


def synthetic(sweeps: int, rng: np.random.Generator) -> None:
    print(f"Prediction interval coverage, 3 seeds, {sweeps} synthetic sweeps per row (share of the predictions "
          f"made whose 95 % interval holds the truth; withheld: curvature falsely flagged)")
    print(f"{'curve':<9} {'scales':>6} {'drift':>6} " + " ".join(f"{f'+{d} doubl.':>11}" for d in BEYOND)
          + f" {'median width +4':>16} {'withheld':>9}")
    totals = {d: [] for d in BEYOND}
    for name, shape in SHAPES.items():
        for scales in SCALES:
            for drift in DRIFTS:
                covered = {d: 0 for d in BEYOND}
                made = withheld = 0
                widths = []
                for _ in range(sweeps):
                    positions = np.arange(scales, dtype=float)
                    law = sweep(shape, TRUTH + drift * positions, rng)
                    if law is None:
                        continue
                    for d in BEYOND:
                        target = positions[-1] + d
                        prediction = law.predict([target])
                        if prediction.withheld:
                            continue
                        covered[d] += prediction.log2_lr.covers(TRUTH + drift * target)
                        if d == 4:
                            widths.append(prediction.log2_lr.high - prediction.log2_lr.low)
                    if law.predict([positions[-1] + 1]).withheld:
                        withheld += 1
                    else:
                        made += 1
                shares = {d: covered[d] / max(made, 1) for d in BEYOND}
                for d in BEYOND:
                    totals[d].append(shares[d])
                print(f"{name:<9} {scales:>6} {drift:>+6.2f} " + " ".join(f"{shares[d]:>11.0%}" for d in BEYOND)
                      + f" {np.median(widths) if widths else math.nan:>16.2f} {withheld / sweeps:>9.0%}")
    print("lowest row: " + ", ".join(f"+{d}: {min(totals[d]):.0%}" for d in BEYOND)
          + "; mean: " + ", ".join(f"+{d}: {np.mean(totals[d]):.0%}" for d in BEYOND))
    print()
    print("Curved drifts (law + k·(log2 scale − centre)², drift +0.25): share withheld as not a power law")
    print(f"{'curve':<9} {'scales':>6} " + " ".join(f"{f'k={k:g}':>8}" for k in (0.0, 0.1, 0.2, 0.4)))
    for name, shape in SHAPES.items():
        for scales in SCALES:
            caught = []
            for k in (0.0, 0.1, 0.2, 0.4):
                positions = np.arange(scales, dtype=float)
                truths = TRUTH + 0.25 * positions + k * (positions - positions.mean()) ** 2
                laws = [sweep(shape, truths, rng) for _ in range(sweeps)]
                caught.append(np.mean([law is not None and law.curved for law in laws]))
            print(f"{name:<9} {scales:>6} " + " ".join(f"{c:>8.0%}" for c in caught))


def committed() -> None:
    print("Leave the largest scale out: the report re-run on each committed results.csv without its largest scale, "
          "that scale the target")
    print(f"{'sweep':<27} {'series':<40} {'scales':>22} {'predicted log2 η* [95 %]':>41} {'measured [95 %]':>21} "
          f"{'inside':>6}")
    inside = made = 0
    for table in sorted(ROOT.glob("docs/results/**/results.csv")):
        frame = pd.read_csv(table)
        knob = next((k for k in ("width", "depth", "batch_size", "steps") if k in frame and frame[k].nunique() >= 3),
                    None)
        if knob is None or "search_quick" in str(table):
            continue
        with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stderr(io.StringIO()):
            full = write_report(table, quiet=True, resamples=1000, out_dir=Path(scratch) / "full")
            optima = full["optimal"][full["optimal"]["complete"]]
            # per series, the largest scale with an optimum is left out and predicted from the smaller ones
            largest = optima.groupby(["mode", "setting"], dropna=False)["scale"].max()
            for cut_at in sorted(set(largest)):
                cut = Path(scratch) / f"results_{cut_at:g}.csv"
                frame[frame[knob] < cut_at].to_csv(cut, index=False)
                left = write_report(cut, quiet=True, resamples=1000, out_dir=Path(scratch) / f"cut_{cut_at:g}",
                                    target={knob: float(cut_at)})
                for row in left["law"].itertuples():
                    setting = row.setting if isinstance(row.setting, str) else ""
                    if largest.get((row.mode, setting), largest.get((row.mode, np.nan))) != cut_at:
                        continue
                    made, inside = _line(table, frame, knob, cut_at, row, optima, made, inside)
    print(f"inside: {inside} of {made} predictions with a measured optimum inside its LRs")


def _line(table: Path, frame: pd.DataFrame, knob: str, largest: float, row, optima: pd.DataFrame, made: int,
          inside: int) -> tuple[int, int]:
    setting = row.setting if isinstance(row.setting, str) else ""
    name = table.parent.relative_to(ROOT / "docs/results")
    label = f"{row.mode} {row.optimizer}" + (f" · {setting}" if setting else "")
    smaller = frame[knob][frame[knob] < largest]
    scales = f"{knob} {smaller.min():g}…{smaller.max():g}→{largest:g}"
    point = optima[(optima["mode"] == row.mode) & (optima["setting"].fillna("") == setting)
                   & (optima["scale"] == largest)].iloc[0]
    said = "edge" if point["edge"] else (f"{point['log2_optimal_lr_fit']:+.2f} [{point['log2_optimal_lr_low']:+.2f}, "
                                         f"{point['log2_optimal_lr_high']:+.2f}]")
    if row.withheld or not math.isfinite(row.predicted_lr):
        print(f"{str(name):<27} {label:<40} {scales:>22} {'withheld: ' + str(row.withheld)[:30]:>41} {said:>21} "
              f"{'-':>6}")
        return made, inside
    low, high, value = (math.log2(v) for v in (row.predicted_low, row.predicted_high, row.predicted_lr))
    hit = "edge" if point["edge"] else ("yes" if low <= point["log2_optimal_lr_fit"] <= high else "no")
    print(f"{str(name):<27} {label:<40} {scales:>22} {f'{value:+.2f} [{low:+.2f}, {high:+.2f}]':>41} {said:>21} "
          f"{hit:>6}")
    return made + (hit != "edge"), inside + (hit == "yes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--committed", action="store_true")
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.synthetic:
        synthetic(args.sweeps, np.random.default_rng(args.seed))
    if args.committed:
        committed()


if __name__ == "__main__":
    main()
