"""The transfer report of a sweep directory: results.csv, optimal_lr.csv, transfer.png (one panel per
optimiser × mode, one curve per scale), scale.png and scale.csv (loss vs scale at the LR tuned on the
smallest scale, every optimiser × mode on one figure: solid normed / dualized, dashed unnormed) and a
terminal summary with the transfer shift (max − min of log2 optimal LR across scales).

Works on partial and in-progress sweeps: runs without a summary are listed as ``running`` or ``pending``.

    modula-sweep-report outputs/sweeps/width/gpt_shakespeare
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
import yaml

from .optim import DEFAULT_LR, MODES, OPTIMIZERS

SCALE_KNOBS = ("width", "depth", "blocks_mass", "context")
SERIES = ("arch", "data", "optimizer", "mode")
COLUMNS = ("run", *SERIES, "width", "depth", "block_depth", "blocks_mass", "heads", "context", "lr", "seed",
           "status", "train_loss", "test_loss", "test_acc", "steps_done", "wall_time_s", "error")


def _run_record(run_dir: Path) -> dict | None:
    """One row: the knobs from the run's composed config, the results from its summary."""
    config_path = run_dir / ".hydra" / "config.yaml"
    summary_path = run_dir / "summary.json"
    if not config_path.is_file() and not summary_path.is_file():
        return None
    record: dict = {"run": run_dir.name}
    if config_path.is_file():
        cfg = yaml.safe_load(config_path.read_text())
        arch, data, optim = cfg.get("arch", {}), cfg.get("data", {}), cfg.get("optim", {})
        if isinstance(optim.get("lr"), list):
            return None  # a packed job's own folder: its members have folders of their own
        record.update(arch=arch.get("name"), data=data.get("name"), optimizer=optim.get("name"),
                      mode=optim.get("mode"), context=data.get("context"), seed=cfg.get("train", {}).get("seed"),
                      **{k: arch.get(k) for k in ("width", "depth", "block_depth", "blocks_mass", "heads")})
        if optim.get("name") in OPTIMIZERS and optim.get("mode") in MODES:
            record["lr"] = optim.get("lr") or DEFAULT_LR[(optim["name"], optim["mode"])]
    try:
        summary = json.loads(summary_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        summary = None
    if summary is None:
        record["status"] = "running" if (run_dir / "metrics.jsonl").is_file() else "pending"
    else:
        record.update({k: v for k, v in summary.items() if k in COLUMNS})
    return record


def collect(sweep_dir: Path) -> pd.DataFrame:
    rows = [r for p in sorted(sweep_dir.iterdir()) if p.is_dir() and (r := _run_record(p))]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in ("lr", "train_loss", "test_loss", "width", "depth", "blocks_mass", "context"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def scale_knob(frame: pd.DataFrame) -> str | None:
    """The knob a sweep scales: the first of width, depth, blocks_mass, context with several values."""
    for knob in SCALE_KNOBS:
        if frame[knob].nunique(dropna=True) > 1:
            return knob
    return None


def _series_label(key: tuple) -> str:
    arch, data, optimizer, mode = key
    return f"{mode} {optimizer} ({arch}, {data})"


def optimal_lrs(frame: pd.DataFrame, metric: str = "train_loss") -> pd.DataFrame:
    """Per series and scale: the argmin LR over completed runs, its loss, and whether it is a grid edge."""
    knob = scale_knob(frame)
    rows = []
    for key, series in frame.groupby(list(SERIES), dropna=False):
        for scale, group in (series.groupby(knob) if knob else [(None, series)]):
            grid = sorted(group["lr"].dropna().unique())
            done = group[(group["status"] == "completed") & group[metric].notna()]
            if done.empty:
                continue
            best = done.loc[done[metric].idxmin()]
            rows.append({**dict(zip(SERIES, key)), "scale_knob": knob, "scale": scale, "optimal_lr": best["lr"],
                         "log2_optimal_lr": math.log2(best["lr"]), metric: best[metric],
                         "at_grid_edge": bool(best["lr"] in (grid[0], grid[-1])) if len(grid) > 1 else True,
                         "completed_runs": len(done), "grid_size": len(grid)})
    return pd.DataFrame(rows)


def transfer_shifts(optimal: pd.DataFrame) -> dict[tuple, float]:
    """max − min of log2(optimal LR) across scales, per series (grid steps when the grid is powers of 2)."""
    if optimal.empty:
        return {}
    return {key: float(group["log2_optimal_lr"].max() - group["log2_optimal_lr"].min())
            for key, group in optimal.groupby(list(SERIES), dropna=False)}


def _plot_transfer(frame: pd.DataFrame, optimal: pd.DataFrame, metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knob = scale_knob(frame)
    series_keys = [key for key, _ in frame.groupby(list(SERIES), dropna=False)]
    fig, axes = plt.subplots(1, len(series_keys), figsize=(5.2 * len(series_keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], series_keys):
        series = frame[(frame[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
        scales = sorted(series[knob].dropna().unique()) if knob else [None]
        colors = plt.cm.viridis([i / max(1, len(scales) - 1) for i in range(len(scales))])
        finite = series.loc[series["status"] == "completed", metric].dropna()
        top = finite.max() if not finite.empty else 1.0
        for color, scale in zip(colors, scales):
            group = series if scale is None else series[series[knob] == scale]
            group = group.sort_values("lr")
            done = group[group["status"] == "completed"]
            label = f"{knob} {scale:g}" if knob else "runs"
            style = "o--" if key[3] == "unnormed" else "o-"  # the paper's convention: dashed unnormed
            ax.plot(done["lr"], done[metric], style, color=color, label=label, markersize=4)
            diverged = group[group["status"] == "diverged"]
            if not diverged.empty:
                ax.plot(diverged["lr"], [top] * len(diverged), "x", color=color, markersize=8)
            best = optimal[(optimal[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
            if knob:
                best = best[best["scale"] == scale]
            if not best.empty:
                ax.plot(best["optimal_lr"], best[metric], "*", color=color, markersize=14, markeredgecolor="k")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(_series_label(key), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="★ optimum, × diverged", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def _plot_scale(frame: pd.DataFrame, optimal: pd.DataFrame, metric: str, path: Path) -> pd.DataFrame:
    """Loss vs scale at the LR tuned on the smallest scale; solid normed/dualized, dashed unnormed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knob = scale_knob(frame)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    rows = []
    if knob and not optimal.empty:
        for key, best in optimal.groupby(list(SERIES), dropna=False):
            smallest = best.loc[best["scale"].idxmin()]
            series = frame[(frame[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
            at_lr = series[(series["lr"] == smallest["optimal_lr"]) & (series["status"] == "completed")]
            at_lr = at_lr.sort_values(knob)
            for _, row in at_lr.iterrows():
                rows.append({**dict(zip(SERIES, key)), "tuned_lr": smallest["optimal_lr"], knob: row[knob],
                             metric: row[metric]})
            style = "--" if key[3] == "unnormed" else "-"
            ax.plot(at_lr[knob], at_lr[metric], style, marker="o",
                    label=f"{_series_label(key)}, lr {smallest['optimal_lr']:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(knob)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title("loss at the LR tuned on the smallest scale", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return pd.DataFrame(rows)


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {status: int((frame["status"] == status).sum())
            for status in ("completed", "diverged", "failed", "interrupted", "running", "pending")}


def write_report(sweep_dir: Path, metric: str = "train_loss", quiet: bool = False) -> dict:
    """Write the report files into ``sweep_dir`` and print the summary; returns what was computed."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep directory at {sweep_dir}")
    frame = collect(sweep_dir)
    if frame.empty:
        raise FileNotFoundError(f"{sweep_dir} holds no runs (no subfolder with .hydra/config.yaml or summary.json)")
    optimal = optimal_lrs(frame, metric)
    shifts = transfer_shifts(optimal)
    frame.to_csv(sweep_dir / "results.csv", index=False)
    optimal.to_csv(sweep_dir / "optimal_lr.csv", index=False)
    _plot_transfer(frame, optimal, metric, sweep_dir / "transfer.png")
    scale_rows = _plot_scale(frame, optimal, metric, sweep_dir / "scale.png")
    scale_rows.to_csv(sweep_dir / "scale.csv", index=False)
    if not quiet:
        print(summary_text(frame, optimal, shifts, metric, sweep_dir))
    return {"results": frame, "optimal": optimal, "shifts": shifts, "counts": status_counts(frame)}


def summary_text(frame: pd.DataFrame, optimal: pd.DataFrame, shifts: dict, metric: str, sweep_dir: Path) -> str:
    lines = [f"Sweep {sweep_dir}: {len(frame)} runs"]
    if optimal.empty:
        lines.append("  no completed runs yet")
    knob = scale_knob(frame) or "scale"
    for key, group in optimal.groupby(list(SERIES), dropna=False) if not optimal.empty else []:
        lines.append(f"  {_series_label(key)}")
        lines.append(f"    {knob:>12} {'optimal lr':>12} {'log2':>6} {metric:>12}  note")
        for _, row in group.sort_values("scale").iterrows():
            scale = "-" if row["scale"] is None or pd.isna(row["scale"]) else f"{row['scale']:g}"
            note = "at grid edge" if row["at_grid_edge"] else ""
            lines.append(f"    {scale:>12} {row['optimal_lr']:>12.6g} {row['log2_optimal_lr']:>6.1f} "
                         f"{row[metric]:>12.4f}  {note}")
        lines.append(f"    transfer shift (max − min log2 optimal LR): {shifts[key]:.1f}")
    lines.append(f"  report: {sweep_dir / 'results.csv'}, optimal_lr.csv, transfer.png, scale.png, scale.csv")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="modula-sweep-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--metric", choices=("train_loss", "test_loss"), default="train_loss")
    args = parser.parse_args(argv)
    try:
        result = write_report(args.sweep_dir, args.metric)
    except FileNotFoundError as error:
        sys.exit(f"modula-sweep-report: {error}")
    counts = result["counts"]
    print("  " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))


if __name__ == "__main__":
    main()
