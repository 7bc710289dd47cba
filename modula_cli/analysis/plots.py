"""The report's figures, from the aggregated tables (never from single runs):

- ``transfer.png``: one panel per series (one experiment: optimiser × mode, and whatever else sets it apart
  from the folder's other experiments), the mean metric over seeds against LR, one curve per scale point with
  a ±1 sd band; × where seeds diverged (with their count). In a strip below, on the same LR axis, one row per
  scale point (named on its y axis): ★ at the fitted optimal LR with its 95 % interval (within the grid) as a
  black bar: a position on the LR axis, not a measured loss. Dashed curves are unnormed (the paper's
  convention, said in the legend); dotted curves and hollow ★ are scale points whose runs have not all
  finished.
- ``scale.png``: left, the fitted optimal LR against scale with interval bars (▲ / ▼: an open side, the
  optimum at the edge of the LRs that trained; ○ an incomplete point; × at the bottom: a scale point with no
  completed run; the y axis spans the whole LR grid);
  right, the mean metric against scale at the LR tuned on the smallest scale (the paper's figure 1, right).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..models.variant import NOT_APPLICABLE
from ..plumbing import atomic
from ..results.knobs import GROUP

if TYPE_CHECKING:
    from .law import Law


def series_label(key: tuple) -> str:
    """``normed adam (gpt, shakespeare, modular)``: mode, optimiser, network, data and variant (none for a plain torch
    model, to which no variant applies); Muon with the optimiser of its other parameters, ``muon+adam``; and what
    sets the experiment apart when the folder holds several."""
    arch, data, optimizer, mode, variant, *setting = key
    extra = setting[0] if setting and isinstance(setting[0], str) and setting[0] else ""
    method = f"muon+{optimizer}" if mode == "muon" else f"{mode} {optimizer}"
    scope = ", ".join(str(part) for part in (arch, data, variant) if part not in (NOT_APPLICABLE, None, ""))
    return f"{method} ({scope})" + (f" · {extra}" if extra else "")


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on a cluster node)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _of(frame: pd.DataFrame, key: tuple) -> pd.DataFrame:
    if frame.empty:
        return frame
    return frame[(frame[list(GROUP)] == pd.Series(key, index=list(GROUP))).all(axis=1)]


def _save(fig, path: Path) -> None:
    if fig.get_layout_engine() is None:  # figures that chose their own layout keep it
        fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=150))
    pyplot().close(fig)


def _scales(frame: pd.DataFrame) -> list:
    return sorted(frame["scale"].dropna().unique()) or [None]


def _at(frame: pd.DataFrame, scale) -> pd.DataFrame:
    return frame if scale is None else frame[frame["scale"] == scale]


def _plain_ticks(axis, values, powers: bool = False) -> None:
    """Ticks at the values themselves, written plainly (32, 64, 128); ``powers``: LRs as 2⁻⁶ … 2² where they
    are powers of two (plain decimals such as 0.015625 run into each other)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    values = sorted({float(v) for v in values if v is not None and np.isfinite(v) and v > 0})
    if not values:
        return

    def label(v: float, _) -> str:
        exponent = math.log2(v)
        return f"$2^{{{int(exponent)}}}$" if powers and exponent == int(exponent) else f"{v:g}"

    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(label)
    axis.set_minor_locator(NullLocator())


def _incomplete(curves: pd.DataFrame, scale) -> bool:
    """A scale point whose runs have not all finished (``complete`` in curves.csv, from the report)."""
    return not bool(_at(curves, scale)["complete"].all())


def plot_transfer(table: pd.DataFrame, optimal: pd.DataFrame, metric: str, knob: str | None, path: Path) -> None:
    plt = pyplot()
    keys = [key for key, _ in table.groupby(list(GROUP), dropna=False)] or [("-", "-", "-", "-", "-", "")]
    every = _scales(table) if not table.empty else []  # one colour per scale value, the same in every panel
    palette = dict(zip(every, plt.cm.viridis(np.linspace(0, 0.85, max(2, len(every))))))  # no pale yellow
    strip = max(0.7, 0.28 * len(every) + 0.3)  # inches: one row per scale point
    fig, grid = plt.subplots(2, len(keys), figsize=(5.2 * len(keys), 4.2 + strip), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [4.2, strip]}, layout="constrained")
    for ax, optima, key in zip(grid[0], grid[1], keys):
        curves, best = _of(table, key), _of(optimal, key)
        scales = _scales(curves) if not curves.empty else []
        top = curves["mean"].max() if not curves.empty and curves["mean"].notna().any() else 1.0
        for row_index, scale in enumerate(scales):
            _draw_curve(ax, curves, scale, palette[scale], knob, dashed=key[3] == "unnormed", top=top)
            star = _at(best, scale)
            if not star.empty:
                _draw_optimum(optima, star.iloc[0], palette[scale], row_index, hollow=_incomplete(curves, scale))
        if ax.has_data():  # a log axis needs positive data: a sweep may have no finished run yet
            ax.set_xscale("log", base=2)
            _plain_ticks(ax.xaxis, curves["lr"], powers=True)
        seeds = int(curves["seeds"].max()) if not curves.empty and curves["seeds"].notna().any() else 0
        ax.set_ylabel(f"{metric.replace('_', ' ')} " + ("(mean ± sd over seeds)" if seeds > 1 else "(1 seed)"))
        ax.set_title(series_label(key), fontsize=10)
        ax.grid(alpha=0.3)
        ax.tick_params(labelbottom=False)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title=_legend_title(curves, best, unnormed=key[3] == "unnormed"), title_fontsize=7)
        _label_optima(optima, scales, knob, found=not best.empty)
    _save(fig, path)


def _draw_curve(ax, curves: pd.DataFrame, scale, color, knob: str | None, dashed: bool, top: float) -> None:
    """One scale point's mean metric against LR, its ±1 sd band and × where seeds diverged."""
    points = _at(curves, scale).sort_values("lr")
    clean = points[(points["diverged"] == 0) & points["mean"].notna()]
    partial = _incomplete(curves, scale)
    label = (f"{knob} {scale:g}" if scale is not None else "runs") + (" (incomplete)" if partial else "")
    style = ":" if partial else "--" if dashed else "-"
    ax.plot(clean["lr"], clean["mean"], style, marker="o", color=color, label=label, markersize=3)
    band = clean[clean["std"].notna()]
    if not band.empty:
        ax.fill_between(band["lr"], band["mean"] - band["std"], band["mean"] + band["std"], color=color, alpha=0.2)
    for row in points[points["diverged"] > 0].itertuples():
        ax.plot(row.lr, top, "x", color=color, markersize=8)
        ax.annotate(str(row.diverged), (row.lr, top), textcoords="offset points", xytext=(3, 3), fontsize=6)


def _legend_title(curves: pd.DataFrame, best: pd.DataFrame, unnormed: bool) -> str:
    """What the marks mean, only those this panel shows."""
    parts = ["★ below: the fitted optimal LR"]
    if not best.empty and best[["log2_optimal_lr_low", "log2_optimal_lr_high"]].notna().all(axis=1).any():
        parts[0] += " with its 95% interval"
    if not curves.empty and (curves["diverged"] > 0).any():
        parts.append("× diverged (how many seeds)")
    return "; ".join(parts) + ("\ndashed: unnormed" if unnormed else "")


def _label_optima(ax, scales: list, knob: str | None, found: bool) -> None:
    """The strip of fitted optima: one row per scale point, named on the y axis; the LR axis below it."""
    ax.set_ylim(0.4, max(1, len(scales)) + 0.6)
    ax.set_yticks(range(1, len(scales) + 1), [f"{knob} {s:g}" if s is not None else "runs" for s in scales],
                  fontsize=7)
    ax.grid(alpha=0.3, axis="x")
    ax.set_xlabel("learning rate")
    if not found:
        ax.text(0.5, 0.5, "no fitted optimum yet", transform=ax.transAxes, ha="center", va="center", fontsize=7,
                color="0.4")


def _draw_optimum(ax, row: pd.Series, color, row_index: int, hollow: bool = False) -> None:
    """The fitted optimal LR as a position on the LR axis, in its scale point's row of the strip below the
    curves; the interval as a black bar with caps drawn over nothing but the star's edge."""
    x, y = row["optimal_lr_fit"], row_index + 1
    low, high = row["log2_optimal_lr_low"], row["log2_optimal_lr_high"]
    if not (math.isnan(low) or math.isnan(high)):
        ax.plot([2.0**low, 2.0**high], [y, y], "-|", color="k", linewidth=1.2, markersize=6, zorder=4)
    ax.plot(x, y, "*", color=color, markersize=11, markeredgecolor="k", markerfacecolor="none" if hollow else color,
            zorder=5)


def plot_scale(table: pd.DataFrame, optimal: pd.DataFrame, metric: str, knob: str | None, path: Path,
               laws: Mapping[tuple, Law] | None = None, target: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Both panels of scale.png; returns the right panel's points (scale.csv). Every mark and interval a label
    speaks of is drawn, and only those. ``laws``: per series, its transfer law along ``knob`` (drawn with its
    band, out to ``target`` when it names the knob alone)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows, marks, reach = [], set(), []
    keys = [key for key, _ in table.groupby(list(GROUP), dropna=False)] if knob else []
    out_to = target.get(knob) if target and knob and set(target) == {knob} else None
    for key in keys:
        style = "--" if key[3] == "unnormed" else "-"
        line, drawn = _plot_optima(left, _of(table, key), _of(optimal, key), style, series_label(key))
        marks |= drawn
        if laws and key in laws:
            stacked = sum(1 for k in keys[:keys.index(key)] if k in laws)
            reached, banded = _plot_law(left, laws[key], out_to, line.get_color(), knob, stacked)
            reach += reached
            marks.add("law band" if banded else "law")
        rows += _plot_tuned(right, _of(table, key), _of(optimal, key), key, metric, style, line.get_color())
    # At least two grid steps either side of the optima (within the grid): a 0.3-step move neither fills
    # the panel nor vanishes in it; and the law's prediction, wherever it lies.
    fits = optimal["log2_optimal_lr_fit"].dropna() if not optimal.empty else pd.Series(dtype=float)
    if not table.empty and len(fits):
        low, high = max(fits.min() - 2, table["log2_lr"].min()), min(fits.max() + 2, table["log2_lr"].max())
        # the law's reach, but not so far that the measured optima flatten into a line (at most 8 log2 units
        # beyond them; a prediction past that is labelled where the panel ends)
        finite = [min(max(y, fits.min() - 8), fits.max() + 8) for y in reach if math.isfinite(y)]
        low, high = min([low, *finite]) - 0.5, max([high, *finite]) + 0.5
        labelled = sum(1 for key in keys if laws and key in laws) if out_to else 0
        room = 0.07 * labelled + 0.03 if labelled else 0.0  # the predictions' lines, written at the top
        left.set_ylim(low, high + room * (high - low) / (1 - room))
    left.set_ylabel("fitted log2 optimal LR" + (" (95% interval)" if "interval" in marks else " (1 seed: no interval)"))
    legend = [text for mark, text in (("incomplete", "○ incomplete"), ("open", "▲▼ open side"),
                                      ("missing", "× no completed run"),
                                      ("law band", "band: law's 95 %, dotted: extrapolated"),
                                      ("law", "dash-dot: law, dotted: extrapolated; no band: one seed"))
              if mark in marks]
    left.set_title("optimal LR against scale" + (f"\n({', '.join(legend)})" if legend else ""), fontsize=9)
    seeds = int(table["seeds"].max()) if not table.empty and table["seeds"].notna().any() else 0
    right.set_ylabel(f"{metric.replace('_', ' ')} " + ("(mean ± sd over seeds)" if seeds > 1 else "(1 seed)"))
    right.set_title("at the smallest scale's tuned LR (solid), each scale's best LR (dotted):\n"
                    "the gap between them is the regret" + ("; × diverged" if any(r["diverged"] for r in rows) else ""),
                    fontsize=9)
    for ax in (left, right):
        if knob and ax.has_data():
            ax.set_xscale("log", base=2)
            _plain_ticks(ax.xaxis, pd.concat([table["scale"], pd.Series([out_to] if out_to else [], dtype=float)]))
            ax.set_xlabel(knob)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # below the panel: over it, it hid the curves it names
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    _save(fig, path)
    return pd.DataFrame(rows)


def _plot_optima(ax, curves: pd.DataFrame, best: pd.DataFrame, style: str, label: str):
    """One series' fitted optima against scale; returns its line and which marks it drew (interval, incomplete,
    open, missing)."""
    best = best.sort_values("scale")
    fit, low, high = best["log2_optimal_lr_fit"], best["log2_optimal_lr_low"], best["log2_optimal_lr_high"]
    (line,) = ax.plot(best["scale"], fit, style, marker="o", markersize=4, label=label)
    color, drawn = line.get_color(), set()
    if (low.notna() | high.notna()).any():
        ax.errorbar(best["scale"], fit, yerr=[(fit - low).fillna(0), (high - fit).fillna(0)], fmt="none",
                    ecolor=color, capsize=3)
        drawn.add("interval")
    partial = best[best["scale"].map(lambda scale: _incomplete(curves, scale)).astype(bool)]
    if not partial.empty:
        ax.plot(partial["scale"], partial["log2_optimal_lr_fit"], "o", color="white", markeredgecolor=color,
                markersize=7, linestyle="none")
        drawn.add("incomplete")
    for marker, open_side in (("^", high.isna()), ("v", low.isna())):
        edges = best[open_side & (best["seeds"] > 1)]
        if not edges.empty:
            ax.plot(edges["scale"], edges["log2_optimal_lr_fit"], marker, color=color, markersize=7, linestyle="none")
            drawn.add("open")
    missing = [s for s in curves["scale"].dropna().unique() if s not in set(best["scale"])]
    if missing:
        bottom = curves["log2_lr"].min()
        ax.plot(missing, [bottom] * len(missing), "x", color=color, markersize=9, linestyle="none")
        drawn.add("missing")
    return line, drawn


def _plot_law(ax, law: Law, target: float | None, color, knob: str, index: int = 0) -> tuple[list[float], bool]:
    """The law's line (dash-dot, apart from the optima's own line) and its 95 % band over the scales it was
    fitted on and out to ``target`` (dotted, lighter), with the prediction there marked, and its LR written in the
    panel's corner (the ``index``-th law's line under the others'); returns the log2 LRs it reaches, and whether
    a band was drawn (one seed gives the law no interval)."""
    first, last = float(law.positions[:, 0].min()), float(law.positions[:, 0].max())
    ends = [first, last] + ([math.log2(target)] if target else [])
    xs = np.unique(np.concatenate([np.linspace(min(ends), max(ends), 60), [first, last]]))
    predictions = [law.predict([x]).log2_lr for x in xs]
    value = np.array([p.value for p in predictions])
    low, high = np.array([p.low for p in predictions]), np.array([p.high for p in predictions])
    inside = (xs >= first - 1e-9) & (xs <= last + 1e-9)
    ax.plot(2.0**xs[inside], value[inside], "-.", color=color, linewidth=1, alpha=0.8)
    for part in (xs <= first + 1e-9, xs >= last - 1e-9):  # below and beyond the scales measured
        if part.sum() > 1:
            ax.plot(2.0**xs[part], value[part], ":", color=color, linewidth=1.2)
    banded = bool(np.isfinite(low).any())
    if banded:
        ax.fill_between(2.0**xs, low, high, where=inside, color=color, alpha=0.15, linewidth=0)
        ax.fill_between(2.0**xs, low, high, where=~inside | np.isclose(xs, first) | np.isclose(xs, last),
                        color=color, alpha=0.07, linewidth=0)
    if not target:
        return [float(v) for v in (*value, *low, *high)], banded
    prediction = law.predict([math.log2(target)])
    estimate, lr = prediction.log2_lr, prediction.lr
    ax.plot(target, estimate.value, "*", color=color, markersize=13, markeredgecolor="k",
            markerfacecolor="none" if prediction.withheld else color, zorder=5)
    said = f"{knob} {target:g}: " + (f"cannot tell ({lr.value:.3g})" if prediction.withheld else
                                     f"{lr.value:.3g} [{lr.low:.3g}, {lr.high:.3g}]")
    ax.text(0.02, 0.97 - 0.07 * index, "★ " + said, transform=ax.transAxes, ha="left", va="top", fontsize=7,
            color=color)  # stacked in a corner: two series' predictions at one target would overlap at the stars
    return [float(v) for v in (*value, *low, *high)], banded


def _plot_tuned(ax, curves: pd.DataFrame, best: pd.DataFrame, key: tuple, metric: str, style: str,
                color) -> list[dict]:
    """The mean metric against scale at the smallest scale's best grid LR (× where it diverged there), and
    beside it the best grid LR's mean at each scale (dotted): the vertical gap at a scale is the regret."""
    if best.empty:
        return []
    ready = best[best["complete"]] if best["complete"].any() else best  # as the transfer table: finished points
    tuned = ready.loc[ready["scale"].idxmin(), "optimal_lr"]
    points = curves[curves["lr"] == tuned].sort_values("scale")
    clean = points[(points["diverged"] == 0) & points["mean"].notna()]
    ax.errorbar(clean["scale"], clean["mean"], yerr=clean["std"].fillna(0), fmt=style, marker="o", markersize=4,
                color=color, capsize=3, label=f"{series_label(key)}, lr {tuned:g}")
    tuned_best = best.sort_values("scale")[["scale", "optimal_lr", "mean"]].dropna()
    ax.plot(tuned_best["scale"], tuned_best["mean"], ":", marker="s", markersize=3, color=color, alpha=0.8,
            label=f"{series_label(key)}, best LR at each scale")
    at_best = dict(zip(tuned_best["scale"], tuned_best["mean"]))
    for row in clean.itertuples():  # the regret, drawn as the gap it is
        if row.scale in at_best:
            ax.plot([row.scale, row.scale], [at_best[row.scale], row.mean], "-", color=color, alpha=0.35,
                    linewidth=4, solid_capstyle="butt")
    diverged = points[points["diverged"] > 0]
    if not diverged.empty and not clean.empty:
        ax.plot(diverged["scale"], [clean["mean"].max()] * len(diverged), "x", color=color, markersize=9)
    best_lr = dict(zip(tuned_best["scale"], tuned_best["optimal_lr"]))
    return [{**dict(zip(GROUP, key)), "tuned_lr": tuned, "scale": row.scale, "mean": row.mean, "std": row.std,
             "seeds": row.seeds, "diverged": row.diverged, "failed": row.failed, "missing": row.missing,
             "best_lr": best_lr.get(row.scale, math.nan), "best_mean": at_best.get(row.scale, math.nan),
             "regret": abs(row.mean - at_best[row.scale]) if row.scale in at_best and row.diverged == 0 else math.nan}
            for row in points.itertuples()]
