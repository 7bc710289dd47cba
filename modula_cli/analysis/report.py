"""The transfer report of a sweep directory: does the optimal LR move when the network grows, by how much,
and how sure is that?

Files written into the sweep directory:

- ``results.csv``: one row per run (every seed), from each run's own summary.json;
- ``curves.csv``: per series (arch, data, optimiser, mode), scale point and LR: the metric's mean, standard
  deviation and seed count over completed seeds, and how many seeds diverged, failed or are missing;
- ``optimal_lr.csv``: per series and scale point: the best grid LR of the mean curve, the fitted optimum
  ``log2_optimal_lr_fit`` with its 95 % bootstrap interval (``_low``, ``_high``; open, i.e. empty, on the side
  of a grid edge), the edge flag and the seeds behind it (see ``stats.py`` for the method);
- ``transfer.csv``: per series: the shift of the fitted optimum from the smallest to the largest scale
  (log2, so grid steps of a powers-of-two grid) and the regret of keeping the smallest scale's LR, each
  with its interval; the transfer law's slope and, with ``--target``, the LR it predicts there;
- ``law.csv``: every transfer law (along the scale knob per series; over both axes of a two-axis sweep) and
  its prediction at the target (``law.py``, ``prediction.py``);
- ``transfer.png``, ``scale.png`` and ``scale.csv`` (see ``plots.py``);
- ``search.csv`` after an LR search (``sweep.search=true``): per scale, the LRs it tried, its runs and CPU time
  against the full grid's, and why it stopped (``search_spend.py``).

Works on partial and in-progress sweeps (planned runs without a summary are ``pending``) and on scale points
where every run diverged or failed (a line says so).

    modula-sweep-report outputs/sweeps/width/gpt_shakespeare --metric test_loss
    modula-sweep-report outputs/sweeps/width/gpt_shakespeare --target width=4096
    modula-sweep-report docs/results/gpu_gpt_width/results.csv --target width=4096   (a shared table)
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..plumbing import atomic
from ..plumbing.wording import counted
from ..results.files import (CURVES_FILE, LAW_FILE, OPTIMAL_FILE, REPORT_FILES, RESULTS_FILE, SCALE_FILE, SCALE_PLOT,
                             SEARCH_FILE, SPEND_FILE, TRANSFER_FILE, TRANSFER_PLOT)
from ..results.knobs import GROUP
from ..results.search_file import read_search
from ..results.status import COMPLETED
from ..results.table import collect, read_results_table, results_table, status_counts
from .plots import plot_scale, plot_transfer, series_label
from .search_spend import spend_table, spend_text
from .stats import DEFAULT_RESAMPLES, METRICS, ONE_SEED_NOISE
from .prediction import law_lines, laws
from .targets import checked_target, parse_target
from .recipe import recipe_lines, with_recipes
from .experiments import one_row_per_run, scale_axes, with_experiments
from .tables import Progress, curves, optimal_lrs, progress, transfer_table

log = logging.getLogger(__name__)
REANALYSIS = "reanalysis"  # a shared results.csv's report goes beside it, never over the table itself


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    atomic.write_with(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_report(sweep_dir: Path, metric: str = "train_loss", quiet: bool = False,
                 resamples: int = DEFAULT_RESAMPLES, out_dir: Path | None = None,
                 target: Mapping[str, Any] | str | None = None, recipe: bool = False) -> dict:
    """Write the report files into ``out_dir`` (default: ``sweep_dir``) and print the summary; returns what was
    computed. ``sweep_dir`` may also be a results.csv (its report goes into ``reanalysis/`` beside it by default);
    ``target``: the scale to predict the LR at (``{"width": 4096}`` or ``"width=4096,steps=20000"``); ``recipe``:
    also print the Python that builds the predicted LR's optimiser for the user's own loop."""
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r}; allowed: {', '.join(METRICS)}")
    if resamples < 200:
        raise ValueError(f"resamples={resamples}; use at least 200 for a 95 % interval")
    sweep_dir = Path(sweep_dir)
    out = Path(out_dir) if out_dir is not None else (sweep_dir.parent / REANALYSIS if sweep_dir.is_file()
                                                     else sweep_dir)
    if sweep_dir.is_file() and (out / RESULTS_FILE).resolve() == sweep_dir.resolve():
        raise ValueError(f"--out {out} would write over the table it reads ({sweep_dir}); choose another folder")
    frame, shared_settings = _runs(sweep_dir, metric)
    if frame[metric].isna().all() and (frame["status"] == COMPLETED).any():
        raise ValueError(f"no run in {sweep_dir} recorded {metric} (test_acc exists for image datasets only)")
    axes = scale_axes(frame)
    knob = axes[0] if axes else None  # once: every table, plot and line of the summary is by this knob
    where = "this results table" if sweep_dir.is_file() else "this sweep"
    wanted = checked_target(parse_target(target) if isinstance(target, str) else target, axes, where)
    frame = with_experiments(frame, knob, axes[1] if len(axes) > 1 else None)
    if shared_settings is not None:  # a shared table's series as its own report named them
        frame["setting"] = shared_settings
    frame = one_row_per_run(frame, knob)
    done = progress(frame, knob)  # once: every table and the printed summary read it
    table = curves(frame, metric, knob, done)
    optimal, fits = optimal_lrs(frame, metric, knob, resamples, done)
    search = read_search(sweep_dir) if sweep_dir.is_dir() else None
    # the verdict's unit: the grid step every searched series shares (a search may try half steps), else
    # each series' own LRs tell it
    steps = {entry.get("grid_step") for entry in (search or {}).get("scales", {}).values()}
    step = float(steps.pop()) if len(steps) == 1 and None not in steps else None
    transfer = transfer_table(optimal, fits, metric, done, step)
    law, transfer, fitted = laws(optimal, fits, transfer, metric, wanted, axes, _second_axis(frame, axes), done)
    law = with_recipes(law, frame)
    spend = spend_table(frame, search) if search else None
    tables = [(RESULTS_FILE, results_table(frame)), (CURVES_FILE, table), (OPTIMAL_FILE, optimal),
              (TRANSFER_FILE, transfer), (LAW_FILE, law)]
    out.mkdir(parents=True, exist_ok=True)
    for name, data in tables + ([(SPEND_FILE, spend)] if spend is not None else []):
        _write_csv(data, out / name)
    plot_transfer(table, optimal, metric, knob, out / TRANSFER_PLOT)
    _write_csv(plot_scale(table, optimal, metric, knob, out / SCALE_PLOT, fitted, wanted), out / SCALE_FILE)
    if not quiet:
        print(summary_text(frame, optimal, transfer, metric, knob, sweep_dir, done, out, law))
        if spend is not None:
            print("\n".join(spend_text(spend, search, sweep_dir / SEARCH_FILE)))
        if recipe:
            lines = recipe_lines(law, frame, sweep_dir if sweep_dir.is_dir() else sweep_dir.parent)
            print("\n".join(lines) if lines else "--recipe: no law here predicts an LR (give --target)")
    return {"results": frame, "curves": table, "optimal": optimal, "transfer": transfer, "law": law,
            "counts": status_counts(frame), "search": spend}


def _runs(source: Path, metric: str) -> tuple[pd.DataFrame, pd.Series | None]:
    """The runs of a sweep folder, or of a results.csv with the series names it recorded (None for a folder)."""
    if source.is_file():
        frame = read_results_table(source, metric)
        named = frame["setting"].astype(object).where(frame["setting"].notna(), "") if "setting" in frame else None
        return frame, named
    if not source.is_dir():
        raise FileNotFoundError(f"no sweep directory or results.csv at {source}")
    frame = collect(source)
    if frame.empty:
        inside = sorted(str(p.parent) for p in source.glob("*/sweep.json"))
        hint = f"; the sweeps in it: {', '.join(inside)}" if inside else ""
        raise FileNotFoundError(f"{source} holds no runs (no run folder with a summary.json, no sweep.json)"
                                f"{hint}")
    return frame, None


def _second_axis(frame: pd.DataFrame, axes: list[str]) -> dict[tuple, float]:
    """Per series, its one value of the second scale axis (a two-axis sweep), for the joint law."""
    if len(axes) < 2:
        return {}
    values = {}
    for key, runs in frame.groupby(list(GROUP), dropna=False):
        found = runs[axes[1]].dropna().unique()
        if len(found) == 1 and found[0] > 0:
            values[tuple(key)] = float(found[0])
    return values


def _interval_text(low: float, high: float, digits: int = 1, plus_sign: bool = True) -> str:
    sign = "+" if plus_sign else ""
    left = "(open" if math.isnan(low) else f"[{low:{sign}.{digits}f}"
    right = "open)" if math.isnan(high) else f"{high:{sign}.{digits}f}]"
    return f"{left}, {right}"


def _scale_lines(key: tuple, series: pd.DataFrame, optimal: pd.DataFrame, metric: str, knob: str | None,
                 done: dict[tuple, Progress]) -> list[str]:
    best = optimal[(optimal[list(GROUP)] == pd.Series(key, index=list(GROUP))).all(axis=1)]
    seeds = series["seed"].nunique()
    lines = [f"  {series_label(key)}  ({len(series)} runs, {seeds} seed{'s' if seeds != 1 else ''})",
             f"    {knob or 'scale':>10} {'best lr':>10} {'fitted log2 η* [95% interval]':>31} "
             f"{metric + ' (mean ± sd)':>24} {'seeds':>5}  note"]
    for scale, group in (series.groupby(knob) if knob else [(None, series)]):
        row = best[best["scale"] == scale] if knob else best
        label = "-" if scale is None else f"{scale:g}"
        point = done[(*key, scale)]
        if row.empty:  # no optimum at this point: say what happened instead
            what = ", ".join(f"{n} {status}" for status, n in group["status"].value_counts().items())
            why = "no LR trained without a diverged seed" if (group["status"] == COMPLETED).any() else \
                "no completed run"
            lines.append(f"    {label:>10}  {why}: {what}")
            continue
        row = row.iloc[0]
        spread = "" if math.isnan(row["std"]) else f" ± {row['std']:.4f}"
        interval = "(1 seed: no interval)" if row["seeds"] < 2 else _interval_text(row["log2_optimal_lr_low"],
                                                                                  row["log2_optimal_lr_high"], 2)
        notes = [] if point.complete else [f"INCOMPLETE: {point.text()}"]
        notes += [f"optimum at the {row['edge']} edge of the LRs that trained"] if row["edge"] else []
        if row["diverged_runs"]:
            notes.append(f"{counted(int(row['diverged_runs']), 'run')} diverged")
        lines.append(f"    {label:>10} {row['optimal_lr']:>10.4g} {row['log2_optimal_lr_fit']:>+7.2f} {interval:>23} "
                     f"{row['mean']:>12.4f}{spread:<11} {row['seeds']:>5}  {'; '.join(notes)}")
    return lines


def _label_of(row: Any) -> str:
    return series_label(tuple(getattr(row, column) for column in GROUP))


def _transfer_line(row: Any, width: int) -> str:
    label = _label_of(row)
    if math.isnan(row.shift_log2):
        return f"  {label:<{width}} no shift yet: fewer than two scale points have finished ({row.incomplete})"
    shift_text = f"{row.shift_log2:+.2f} " + ("" if row.seeds < 2 else _interval_text(
        row.shift_log2_low, row.shift_log2_high, 2))
    regret_text = f"{row.regret:.4f} " + ("" if row.seeds < 2 else _interval_text(
        row.regret_low, row.regret_high, 4, plus_sign=False))
    if math.isinf(row.regret):
        regret_text = "diverges at the largest scale"
    elif math.isnan(row.regret):
        regret_text = "no mean at that LR at the largest"
    scales = f"{row.scale_knob} {row.smallest:g} → {row.largest:g}"
    line = f"  {label:<{width}} {scales:>18} {shift_text:>24}   {regret_text:>30}  {row.seeds:>5}"
    if not math.isnan(row.tied_lr):  # the regret hangs on which of two equal LRs won at the smallest scale
        noise = f"under the {ONE_SEED_NOISE * 100:.1f} % by which seeds differ: one seed cannot tell them apart" \
            if row.seeds < 2 else "the seeds' 95 % interval of the difference holds 0"
        if math.isnan(row.tied_regret):  # that LR has no mean at the largest scale: nothing to compare
            other = (f"keeping {row.tied_lr:g} has no regret to show: it has no completed run at "
                     f"{row.scale_knob} {row.largest:g} (train it there, e.g. optim.lr={row.tied_lr:g})")
        else:
            regret = "diverges at the largest scale" if math.isinf(row.tied_regret) else f"{row.tied_regret:.4f}"
            other = f"keeping {row.tied_lr:g}, the regret would be {regret}"
        line += (f"\n  {'':<{width}} {row.scale_knob} {row.smallest:g}: its best LR {row.tuned_lr:g} ties with "
                 f"{row.tied_lr:g} ({abs(row.tied_gap):.4f} apart, {noise}); {other}")
    if isinstance(row.edges, str) and row.edges:  # the optimum may lie beyond the LRs: the shift is not measured
        line += (f"\n  {'':<{width}} optimum at a grid edge ({row.edges}): the shift is a bound; widen the LR grid "
                 f"there")
    return line + (f"\n  {'':<{width}} not yet included, still incomplete: {row.incomplete}" if row.incomplete else "")


def transfer_text(transfer: pd.DataFrame) -> list[str]:
    """The transfer table as printed at the end of a sweep."""
    if transfer.empty:
        return []
    rows = list(transfer.itertuples(index=False))
    width = max(38, *(len(_label_of(row)) for row in rows))  # the longest series name sets the column
    lines = [f"Transfer from the smallest to the largest finished scale ({transfer['metric'].iloc[0]}; 95% "
             f"intervals over seeds; shift in log2 LR = grid steps of a powers-of-two grid):",
             f"  {'series':<{width}} {'from → to':>18} {'shift of η*':>24}   {'regret at the small-scale LR':>30}"
             f"  seeds"]
    lines += [_transfer_line(row, width) for row in rows]
    said = [f"  {_label_of(row):<{width}} {row.verdict}" for row in rows
            if isinstance(row.verdict, str) and row.verdict]
    if said:
        lines.append("Verdict (the shift in grid steps of the LRs, 95 % intervals; docs/statistics.md, "
                     "\"The verdict\"):")
    return lines + said


def summary_text(frame: pd.DataFrame, optimal: pd.DataFrame, transfer: pd.DataFrame, metric: str,
                 knob: str | None, sweep_dir: Path, done: dict[tuple, Progress] | None = None,
                 out_dir: Path | None = None, law: pd.DataFrame | None = None) -> str:
    series = frame.groupby(list(GROUP), dropna=False)
    done = done if done is not None else progress(frame, knob)
    lines = [f"Sweep {sweep_dir}: {len(frame)} run{'s' if len(frame) != 1 else ''} in {len(series)} series"]
    for key, runs in series:
        lines += _scale_lines(key, runs, optimal, metric, knob, done)
    lines += transfer_text(transfer)
    lines += law_lines(law) if law is not None else []
    lines.append(f"  report: {(out_dir or sweep_dir) / REPORT_FILES[0]}, {', '.join(REPORT_FILES[1:])}")
    return "\n".join(lines)


def report_folder(sweep_dir: Path, metric: str) -> Path:
    """Where a rebuilt report goes: the sweep folder, unless its report is for another metric (the sweep's own,
    ``sweep.metric``), which a report for ``metric`` then leaves in place, beside it in ``report-<metric>/``."""
    try:
        written = pd.read_csv(Path(sweep_dir) / OPTIMAL_FILE, usecols=["metric"])["metric"].dropna().unique()
    except (OSError, ValueError, pd.errors.ParserError):
        return Path(sweep_dir)  # no report (or an unreadable one): this one is the sweep's
    return Path(sweep_dir) if not len(written) or metric in written else Path(sweep_dir) / f"report-{metric}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="modula-sweep-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, metavar="FOLDER_OR_RESULTS_CSV",
                        help="a sweep folder, or a results.csv that a report wrote (docs/results/*/results.csv)")
    parser.add_argument("--metric", choices=METRICS, default="train_loss",
                        help="what the optima optimise (lower loss, higher test_acc); default train_loss")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                        help=f"bootstrap resamples for the intervals (>= 200; default {DEFAULT_RESAMPLES})")
    parser.add_argument("--target", default=None, metavar="AXIS=VALUE[,AXIS=VALUE]",
                        help="predict the LR at this scale from the transfer law, e.g. width=4096 or "
                             "width=4096,steps=20000 (a sweep of both axes)")
    parser.add_argument("--recipe", action="store_true",
                        help="with --target: print the Python that builds the optimiser the predicted LR belongs to "
                             "(modula_cli.optimizer, from a run's config.yaml), for your own training loop")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the report goes (default: the sweep folder; for a results.csv, "
                             f"{REANALYSIS}/ beside it)")
    args = parser.parse_args(argv)
    out = args.out or (None if args.sweep_dir.is_file() else report_folder(args.sweep_dir, args.metric))
    try:
        result = write_report(args.sweep_dir, args.metric, resamples=args.resamples, out_dir=out,
                              target=args.target, recipe=args.recipe)
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError) as error:
        sys.exit(f"modula-sweep-report: {error}")
    counts = result["counts"]
    print("  " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))


if __name__ == "__main__":
    main()
