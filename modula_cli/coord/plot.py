"""``coord.png``, the coordinate check's figure: a row per quantity, a column per mode, each layer's value at
the last step against width (or depth). The layers the verdict names are drawn thick, in distinct colours
and with their exact names in the legend; every other layer is a thin grey line behind them."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..analysis.plots import pyplot
from ..plumbing import atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COORD_PANELS = {"act_rms": "activation RMS", "delta_rms": "RMS of output change\nsince step 0",
                "own_delta_rms": "RMS of (W − W₀) x:\nown part of it",
                "dir_change": "directional change\n‖h̄ − h̄₀‖", "update_ratio": "update norm ÷\n(LR × share)",
                "stable_rank": "weight stable rank", "update_stable_rank": "update stable rank"}
OTHER_COLOR = "0.72"  # light grey: the layers the verdict does not name, for context
HIGHLIGHT_STYLES = ("-", "--", "-.")  # cycled after the colours run out, so every named layer stays distinct
COLUMN_INCHES, CHARS_PER_INCH = 3.4, 13  # a mode's column; characters of 9 pt text per inch, for wrapping


def _plain(value: float, _pos: object = None) -> str:
    return f"{value:g}"  # 32, 64, 0.1, 10 rather than 2^5 or 10^-1


def _plain_log_axes(ax: Axes, scales: Sequence[int], log_y: bool) -> None:
    """Log axes a paper can print: a tick at every measured scale, numbers written out, and on a short y
    axis ticks at 1, 2, 5 (or every digit) per decade so that it still carries a few labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(scales))
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.xaxis.set_minor_locator(NullLocator())
    if log_y:
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        decades = math.log10(high / low)
        subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0) if decades > 0.8 else tuple(map(float, range(1, 10)))
        ax.yaxis.set_major_locator(LogLocator(10, subs=subs))
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _highlight_styles(named: Mapping[str, Sequence[str]]) -> dict[str, tuple]:
    """One (colour, line style) per named layer, the same in every column; tab10 without its grey."""
    plt = pyplot()
    colors = [c for i, c in enumerate(plt.cm.tab10.colors) if i != 7]
    names = list(dict.fromkeys(name for layers in named.values() for name in layers))
    return {name: (colors[i % len(colors)], HIGHLIGHT_STYLES[i // len(colors) % len(HIGHLIGHT_STYLES)])
            for i, name in enumerate(names)}


def _draw_panel(ax: Axes, series: pd.DataFrame, key: str, axis: str, quantity: str, named: Sequence[str],
                styles: Mapping[str, tuple]) -> None:
    """One quantity of one mode: grey context lines first, the named layers on top, the ∝ scale¹ guide."""
    curves = {layer: curve.sort_values(axis) for layer, curve in series.groupby(key, sort=False)}
    for layer, curve in curves.items():
        if layer not in named:
            ax.plot(curve[axis], curve[quantity], "-", color=OTHER_COLOR, linewidth=0.8, zorder=1)
    for layer in named:
        if layer in curves:
            color, style = styles[layer]
            ax.plot(curves[layer][axis], curves[layer][quantity], style, marker="o", color=color, markersize=3.5,
                    linewidth=2.2, label=layer, zorder=3)
    values = series[quantity]
    positive = values[values > 0]
    scales = np.sort(series[axis].unique())
    if not positive.empty:  # a log axis needs positive values; a frozen layer's change is 0 everywhere
        start = float(np.exp(np.log(positive).median()))
        ax.plot(scales, start * scales / scales[0], ":", color="0.35", linewidth=1, zorder=2)
    _plain_log_axes(ax, scales, log_y=not positive.empty)
    ax.grid(alpha=0.3, which="major")


def _legend(fig: Figure, styles: Mapping[str, tuple], axis: str, drawn: str) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], linestyle=style, marker="o", color=color, markersize=3.5, linewidth=2.2, label=name)
               for name, (color, style) in styles.items()]
    handles += [Line2D([], [], color=OTHER_COLOR, linewidth=0.8, label=f"other {drawn}"),
                Line2D([], [], linestyle=":", color="0.35", linewidth=1, label=f"∝ {axis}¹")]
    fig.legend(handles=handles, loc="center right", fontsize=8, title="named in the verdict", title_fontsize=8,
               frameon=False)


def plot_coord(table: pd.DataFrame, axis: str, path: Path, title: str = "",
               named: Mapping[str, Sequence[str]] | None = None,
               subtitles: Mapping[str, str] | None = None) -> Figure:
    """Write ``coord.png`` and return its (closed) figure. ``named``: per mode, the layers its verdict
    names (drawn thick and labelled in that mode's column); ``subtitles``: per mode, a line under the
    column's title (the verdict's head: ``not width-stable``). Along depth a role's layers are averaged into
    one line, and the verdict names roles."""
    plt = pyplot()
    named = named or {}
    last = table[table["step"] == table["step"].max()]
    modes = list(dict.fromkeys(last["mode"]))
    key = "layer" if axis == "width" else "role"
    styles = _highlight_styles(named)
    size = (COLUMN_INCHES * len(modes) + 2.4, 1.9 * len(COORD_PANELS))  # + the legend's margin
    fig, axes = plt.subplots(len(COORD_PANELS), len(modes), figsize=size, squeeze=False, sharex=True)
    for column, mode in enumerate(modes):
        series = last[last["mode"] == mode].groupby([key, axis], sort=False)[list(COORD_PANELS)].mean().reset_index()
        for row, (quantity, label) in enumerate(COORD_PANELS.items()):
            ax = axes[row][column]
            _draw_panel(ax, series, key, axis, quantity, named.get(mode, ()), styles)
            ax.tick_params(labelsize=7, which="both")
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == len(COORD_PANELS) - 1:
                ax.set_xlabel(axis, fontsize=9)
        subtitle = (subtitles or {}).get(mode)
        heading = [mode] + textwrap.wrap(subtitle or "", int(CHARS_PER_INCH * COLUMN_INCHES))  # "(tentative: …)"
        axes[0][column].set_title("\n".join(heading), fontsize=9)
    drawn = "layers" if axis == "width" else "roles"
    _legend(fig, styles, axis, drawn)
    note = f"last step; thick: the {drawn} each column's verdict names; grey: the others; dotted: ∝ {axis}¹"
    wrap = int(CHARS_PER_INCH * fig.get_figwidth())  # a one-column figure is narrow
    fig.suptitle("\n".join(textwrap.wrap(title, wrap) + textwrap.wrap(f"({note})", wrap)), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 2.0 / fig.get_figwidth(), 1))
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=150))
    plt.close(fig)
    return fig
