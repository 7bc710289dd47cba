"""The report's figures, from the aggregated tables (never from single runs):

- ``transfer.png``: one panel per series (optimiser × mode), the mean metric over seeds against LR, one
  curve per scale point with a ±1 sd band; ★ at the fitted optimum with its 95 % interval as a horizontal
  bar; × where seeds diverged (with their count). Dashed curves are unnormed (the paper's convention).
- ``scale.png``: left, the fitted optimal LR against scale with interval bars (▲ / ▼: an open side, the
  optimum at the edge of the LRs that trained; × at the bottom: a scale point with no completed run);
  right, the mean metric against scale at the LR tuned on the smallest scale (the paper's figure 1, right).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import atomic
from .results import SERIES


def series_label(key: tuple) -> str:
    arch, data, optimizer, mode = key
    return f"{mode} {optimizer} ({arch}, {data})"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _of(frame: pd.DataFrame, key: tuple) -> pd.DataFrame:
    if frame.empty:
        return frame
    return frame[(frame[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=150))
    _pyplot().close(fig)


def _scales(frame: pd.DataFrame) -> list:
    return sorted(frame["scale"].dropna().unique()) or [None]


def _at(frame: pd.DataFrame, scale) -> pd.DataFrame:
    return frame if scale is None else frame[frame["scale"] == scale]


def plot_transfer(table: pd.DataFrame, optimal: pd.DataFrame, metric: str, knob: str | None, path: Path) -> None:
    plt = _pyplot()
    keys = [key for key, _ in table.groupby(list(SERIES), dropna=False)] or [("-", "-", "-", "-")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        curves, best = _of(table, key), _of(optimal, key)
        scales = _scales(curves) if not curves.empty else []
        colors = plt.cm.viridis(np.linspace(0, 1, max(2, len(scales))))
        top = curves["mean"].max() if not curves.empty and curves["mean"].notna().any() else 1.0
        for color, scale in zip(colors, scales):
            points = _at(curves, scale).sort_values("lr")
            clean = points[(points["diverged"] == 0) & points["mean"].notna()]
            label = f"{knob} {scale:g}" if scale is not None else "runs"
            ax.plot(clean["lr"], clean["mean"], "o--" if key[3] == "unnormed" else "o-", color=color, label=label,
                    markersize=3)
            band = clean[clean["std"].notna()]
            if not band.empty:
                ax.fill_between(band["lr"], band["mean"] - band["std"], band["mean"] + band["std"], color=color,
                                alpha=0.2)
            for row in points[points["diverged"] > 0].itertuples():
                ax.plot(row.lr, top, "x", color=color, markersize=8)
                ax.annotate(str(row.diverged), (row.lr, top), textcoords="offset points", xytext=(3, 3), fontsize=6)
            star = _at(best, scale)
            if not star.empty:
                _draw_optimum(ax, star.iloc[0], metric, color)
        if ax.has_data():  # a log axis needs positive data: a sweep may have no finished run yet
            ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate")
        ax.set_ylabel(f"{metric.replace('_', ' ')} (mean over seeds)")
        ax.set_title(series_label(key), fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="★ fitted optimum, 95% interval; × diverged", title_fontsize=7)
    _save(fig, path)


def _draw_optimum(ax, row: pd.Series, metric: str, color) -> None:
    x, y = row["optimal_lr_fit"], row[f"{metric}_fit"]
    low, high = row["log2_optimal_lr_low"], row["log2_optimal_lr_high"]
    if not (math.isnan(low) or math.isnan(high)):
        ax.plot([2.0**low, 2.0**high], [y, y], "-", color=color, linewidth=2.5, alpha=0.8)
    ax.plot(x, y, "*", color=color, markersize=13, markeredgecolor="k")


def plot_scale(table: pd.DataFrame, optimal: pd.DataFrame, metric: str, knob: str | None, path: Path) -> pd.DataFrame:
    """Both panels of scale.png; returns the right panel's points (scale.csv)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = []
    keys = [key for key, _ in table.groupby(list(SERIES), dropna=False)] if knob else []
    for key in keys:
        style = "--" if key[3] == "unnormed" else "-"
        line = _plot_optima(left, _of(table, key), _of(optimal, key), style, series_label(key))
        rows += _plot_tuned(right, _of(table, key), _of(optimal, key), key, metric, style, line.get_color())
    left.set_ylabel("fitted log2 optimal LR (95% interval)")
    left.set_title("optimal LR against scale  (▲▼ open side, × no completed run)", fontsize=9)
    right.set_ylabel(f"{metric.replace('_', ' ')} (mean ± sd)")
    right.set_title("at the LR tuned on the smallest scale", fontsize=9)
    for ax in (left, right):
        if knob and ax.has_data():
            ax.set_xscale("log", base=2)
            ax.set_xlabel(knob)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    _save(fig, path)
    return pd.DataFrame(rows)


def _plot_optima(ax, curves: pd.DataFrame, best: pd.DataFrame, style: str, label: str):
    best = best.sort_values("scale")
    fit, low, high = best["log2_optimal_lr_fit"], best["log2_optimal_lr_low"], best["log2_optimal_lr_high"]
    (line,) = ax.plot(best["scale"], fit, style, marker="o", markersize=4, label=label)
    color = line.get_color()
    ax.errorbar(best["scale"], fit, yerr=[(fit - low).fillna(0), (high - fit).fillna(0)], fmt="none", ecolor=color,
                capsize=3)
    for marker, open_side in (("^", high.isna()), ("v", low.isna())):
        edges = best[open_side & (best["seeds"] > 1)]
        ax.plot(edges["scale"], edges["log2_optimal_lr_fit"], marker, color=color, markersize=7, linestyle="none")
    missing = [s for s in curves["scale"].dropna().unique() if s not in set(best["scale"])]
    if missing:
        bottom = min(fit.min() if len(fit) else 0.0, 0.0) - 1
        ax.plot(missing, [bottom] * len(missing), "x", color=color, markersize=9, linestyle="none")
    return line


def _plot_tuned(ax, curves: pd.DataFrame, best: pd.DataFrame, key: tuple, metric: str, style: str,
                color) -> list[dict]:
    """The mean metric against scale at the smallest scale's best grid LR; × where it diverged there."""
    if best.empty:
        return []
    tuned = best.loc[best["scale"].idxmin(), "optimal_lr"]
    points = curves[curves["lr"] == tuned].sort_values("scale")
    clean = points[(points["diverged"] == 0) & points["mean"].notna()]
    ax.errorbar(clean["scale"], clean["mean"], yerr=clean["std"].fillna(0), fmt=style, marker="o", markersize=4,
                color=color, capsize=3, label=f"{series_label(key)}, lr {tuned:g}")
    diverged = points[points["diverged"] > 0]
    if not diverged.empty and not clean.empty:
        ax.plot(diverged["scale"], [clean["mean"].max()] * len(diverged), "x", color=color, markersize=9)
    return [{**dict(zip(SERIES, key)), "tuned_lr": tuned, "scale": row.scale, "mean": row.mean, "std": row.std,
             "seeds": row.seeds, "diverged": row.diverged, "failed": row.failed, "missing": row.missing}
            for row in points.itertuples()]


COORD_PANELS = {"act_rms": "activation RMS", "delta_rms": "RMS of output change since step 0",
                "own_delta_rms": "RMS of (W − W₀) x: own part of it",
                "dir_change": "directional change ‖h̄ − h̄₀‖", "update_ratio": "update norm ÷ (LR × share)",
                "stable_rank": "weight stable rank", "update_stable_rank": "update stable rank"}


def plot_coord(table: pd.DataFrame, axis: str, path: Path, title: str = "") -> None:
    """``coord.png``: a row per quantity, a column per mode; each at the last step against the scale, a line
    per layer coloured by its role (along depth, a role's layers averaged). Grey dashes: ∝ scale¹."""
    plt = _pyplot()
    last = table[table["step"] == table["step"].max()]
    modes = list(dict.fromkeys(last["mode"]))
    key = "layer" if axis == "width" else "role"
    roles = list(dict.fromkeys(last.sort_values(["point", "index"])["role"]))
    colors = dict(zip(roles, plt.cm.tab10(np.arange(len(roles)) % 10) if len(roles) <= 10
                      else plt.cm.tab20(np.arange(len(roles)) % 20)))
    fig, axes = plt.subplots(len(COORD_PANELS), len(modes), figsize=(3.6 * len(modes) + 1.6, 2.3 * len(COORD_PANELS)),
                             squeeze=False, sharex=True)
    for column, mode in enumerate(modes):
        points = last[last["mode"] == mode]
        series = points.groupby([key, axis], sort=False)[list(COORD_PANELS)].mean().reset_index()
        role_of = dict(zip(points[key], points["role"]))
        for row, (quantity, label) in enumerate(COORD_PANELS.items()):
            ax = axes[row][column]
            for layer, curve in series.groupby(key, sort=False):
                curve = curve.sort_values(axis)
                role = role_of[layer]
                ax.plot(curve[axis], curve[quantity], "o-", color=colors[role], markersize=2.5, linewidth=1,
                        alpha=0.85, label=role)
            values = series[quantity]
            positive = values[values > 0]
            if not positive.empty:
                ax.set_yscale("log")
                scales = np.sort(series[axis].unique())
                start = float(np.exp(np.log(positive).median()))
                ax.plot(scales, start * scales / scales[0], ":", color="0.5", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(mode, fontsize=11)
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == len(COORD_PANELS) - 1:
                ax.set_xlabel(axis)
    handles, labels = axes[0][0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), loc="center right", fontsize=7, title="layer role", title_fontsize=8)
    if title:
        fig.suptitle(f"{title}\n(last step; dotted: ∝ {axis}¹)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 1.4 / fig.get_figwidth(), 1))
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)
