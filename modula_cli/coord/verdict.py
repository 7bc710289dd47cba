"""The coordinate check's verdict: the slope of log(value) against log(scale) per layer and quantity
(``slopes``), and per mode whether every layer is stable along the axis (``judge``), tentative when the
scales span too little (``span_warning``). A layer that fails says where its slope comes from: its activations
already growing at step 0 (the initialisation: ``init_act_rms``, the slope of ``act_rms`` before any step), with
updates that keep their size beside them, or the updates themselves, and what that predicts for an LR sweep."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..run.geometry import QUANTITIES


def fitted_slope(scales: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of log(value) against log(scale); 0 when the value is 0 at every scale (nothing
    changed anywhere), NaN when some values are 0, negative or missing (no power law to fit)."""
    values = np.asarray(values, dtype=float)
    if len(values) >= 2 and np.all(values == 0):
        return 0.0
    if len(values) < 2 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        return math.nan
    return float(np.polyfit(np.log(np.asarray(scales, dtype=float)), np.log(values), 1)[0])


INIT_ACT = "init_act_rms"  # the slope of act_rms at the first step: how the initialisation alone scales a layer


def slopes(frame: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per mode, layer and quantity: the slope at the last step, and ``init_act_rms``, that of ``act_rms`` at the
    first (before any update). Along depth, layers differ between depths, so a role's layers (every block's
    ``attn.q``) are averaged first and the role is the layer."""
    last = frame[frame["step"] == frame["step"].max()]
    first = frame[frame["step"] == frame["step"].min()]
    key = "layer" if axis == "width" else "role"
    order = {name: i for i, name in enumerate(dict.fromkeys(last.sort_values(["point", "index"])[key]))}
    initial = {name: group.groupby(axis)["act_rms"].mean().sort_index()
               for name, group in first.groupby(["mode", key], sort=False)}
    rows = []
    for (mode, layer), group in last.groupby(["mode", key], sort=False):
        by_scale = group.groupby(axis)[list(QUANTITIES)].mean().sort_index()
        columns = {quantity: by_scale[quantity] for quantity in QUANTITIES}
        columns[INIT_ACT] = initial.get((mode, layer), pd.Series(dtype=float))
        for quantity, series in columns.items():
            values = series.to_numpy()
            rows.append({"mode": mode, "layer": layer, "quantity": quantity,
                         "slope": fitted_slope(series.index.to_numpy(), values),
                         "smallest": values[0] if len(values) else math.nan,
                         "largest": values[-1] if len(values) else math.nan,
                         "points": int(np.isfinite(values).sum()), "_order": order[layer]})
    result = pd.DataFrame(rows)
    if result.empty:
        return result
    modes = {m: i for i, m in enumerate(dict.fromkeys(frame["mode"]))}
    result["_mode"] = result["mode"].map(modes)
    return result.sort_values(["_mode", "_order"], kind="stable").drop(columns=["_mode", "_order"]) \
        .reset_index(drop=True)


VERDICT_QUANTITIES = ("delta_rms", "own_delta_rms")
RELIABLE_SPAN, RELIABLE_POINTS = 8, 3  # below either, slopes are noisy and the verdict is tentative


def _scale_caveats(axis: str, scales: Sequence[int]) -> list[tuple[str, str]]:
    """Why slopes over ``scales`` are not to be trusted yet, as (short tag, explanation); empty when they are.
    Measured (GPT on Shakespeare, seed 0): normed Adam's attn.out[2] reads +0.41 over widths 32–128, every
    layer is within ±0.21 over 32–256, and over 32–512 three seeds' largest is 0.18 (docs/coord_check.md)."""
    low, high, count = min(scales), max(scales), len(set(scales))
    caveats = []
    if high < RELIABLE_SPAN * low:
        span = f"{axis}s span only {math.floor(10 * high / low) / 10:g}×"  # floored: 7.96 must not read 8
        caveats.append((span, f"{span} ({low}–{high}): slopes over a short span are noisy"))
    if count < RELIABLE_POINTS:
        few = f"only {count} {axis}s"
        caveats.append((few, f"{few}: a slope through two points cannot show a bending curve"))
    return caveats


def span_warning(axis: str, scales: Sequence[int]) -> str | None:
    """The warning printed beside a tentative verdict (None when the scales are enough), with scales that
    would do: the given ones, doubled from the smallest up to 8× (measured points are reused on a re-run)."""
    caveats = _scale_caveats(axis, scales)
    if not caveats:
        return None
    low = min(scales)
    example = sorted(set(scales) | {low * 2**k for k in range(4)})
    return (f"{'; '.join(text for _, text in caveats)}; the verdict is reliable from {RELIABLE_SPAN}× with at "
            f"least {RELIABLE_POINTS} {axis}s (e.g. coord.{axis}s=[{','.join(map(str, example))}])")


@dataclass(frozen=True)
class Verdict:
    head: str  # "width-stable", "not width-stable (tentative: widths span only 4×)", "no verdict"
    detail: str
    layers: tuple[str, ...]  # every layer the detail names (the plot highlights them)

    def __str__(self) -> str:
        return f"{self.head}: {self.detail}"


def _origin(bad: pd.DataFrame, group: pd.DataFrame, initial: dict[str, float], tolerance: float,
            axis: str) -> tuple[str, str]:
    """Where the failing layers' slopes come from, and what that predicts for an LR sweep. ``init-dominated`` when
    each fails on its total change alone (``delta_rms``: what arrives from below too) while its own update's effect
    is stable (``own_delta_rms``) and its activations already grow at step 0 (``init_act_rms``); else, where some
    layer's own update grows or shrinks, the direction in which the optimal LR should move. (A word for the
    verdict's head, the sentence for its detail.)"""
    own = dict(zip(*group[group["quantity"] == "own_delta_rms"][["layer", "slope"]].to_numpy().T))
    layers = list(bad["layer"])
    moving = [own[layer] for layer in layers if layer in own and abs(own[layer]) > tolerance]
    if moving:
        grow = np.mean(moving) > 0
        return "", (f"; the updates themselves {'grow' if grow else 'shrink'} along the {axis} (own_delta_rms): "
                    f"expect the optimal LR to {'fall' if grow else 'rise'} as the {axis} grows")
    grown = {layer: initial.get(layer, math.nan) for layer in layers}
    if not all(abs(g) > tolerance for g in grown.values()):
        return "", ""
    named = ", ".join(f"{layer} {g:+.2f}" for layer, g in list(grown.items())[:3])
    more = ", …" if len(grown) > 3 else ""
    detail = (f"; init-dominated: these layers' activations already grow at step 0 ({INIT_ACT} slope {named}{more}) "
              f"while each one's own update is {axis}-stable (own_delta_rms within ±{tolerance:g}): the optimal LR "
              f"can still transfer (a sweep tells); the initialisation does not scale (μP and the modular norm want "
              f"hidden weights ∝ 1/√fan-in, not a fixed std such as 0.02)")
    return " (init-dominated)", detail


def _judge_mode(group: pd.DataFrame, tolerance: float, axis: str, tag: str, shown: int,
                initial: dict[str, float] | None = None) -> Verdict:
    layers = group["layer"].nunique()
    measured = group[np.isfinite(group["slope"])]
    unmeasured = sorted(set(group["layer"]) - set(measured["layer"]))
    worst = measured.reindex(measured["slope"].abs().sort_values(ascending=False).index)
    worst = worst.drop_duplicates("layer")  # a layer's worst quantity only
    bad = worst[worst["slope"].abs() > tolerance]
    note = (f"; no slope for {', '.join(unmeasured)} (a zero or non-finite value at some {axis}s: a frozen "
            f"layer or a diverged point)" if unmeasured else "")
    if bad.empty and unmeasured:  # a layer that could not be measured may be the one that fails
        return Verdict("no verdict", f"every measured layer is within ±{tolerance:g}{note}", tuple(unmeasured))
    if bad.empty and not measured.empty:
        top = worst.iloc[0]
        return Verdict(f"{axis}-stable{tag}", f"every layer's delta_rms and own_delta_rms slopes are within "
                       f"±{tolerance:g} (largest {top['slope']:+.2f}, {top['layer']} {top['quantity']}){note}",
                       (top["layer"], *unmeasured))
    if bad.empty:
        return Verdict("no verdict", f"no layer has a delta_rms slope{note}", tuple(unmeasured))
    named = bad.head(shown)
    names = ", ".join(f"{r['layer']} {r['quantity']} {r['slope']:+.2f}" for _, r in named.iterrows())
    more = f", … ({len(bad)} of {layers} layers)" if len(bad) > shown else ""
    kind, origin = _origin(bad, group, initial, tolerance, axis) if initial else ("", "")
    return Verdict(f"not {axis}-stable{kind}{tag}", f"slope beyond ±{tolerance:g} in {names}{more}{note}{origin}",
                   (*named["layer"], *unmeasured))


def judge(slope_table: pd.DataFrame, tolerance: float, axis: str = "width", shown: int = 4,
          scales: Sequence[int] = ()) -> dict[str, Verdict]:
    """Per mode: stable along the axis when every layer's ``delta_rms`` and ``own_delta_rms`` slopes are
    within ±tolerance (the second catches a layer's own growing update hidden under a large change from
    below); else the worst layers, by |slope|, with the quantity that failed. Tentative when ``scales``
    span less than 8× or are fewer than 3 (``span_warning`` says why)."""
    caveats = _scale_caveats(axis, scales) if scales else []
    tag = f" (tentative: {', '.join(short for short, _ in caveats)})" if caveats else ""
    checked = slope_table[slope_table["quantity"].isin(VERDICT_QUANTITIES)]
    init = slope_table[slope_table["quantity"] == INIT_ACT]
    initial = {mode: dict(zip(group["layer"], group["slope"])) for mode, group in init.groupby("mode", sort=False)}
    return {mode: _judge_mode(group, tolerance, axis, tag, shown, initial.get(mode))
            for mode, group in checked.groupby("mode", sort=False)}


def verdicts(slope_table: pd.DataFrame, tolerance: float, axis: str = "width", shown: int = 4,
             scales: Sequence[int] = ()) -> dict[str, str]:
    """``judge`` as one line per mode: ``<head>: <detail>``."""
    return {mode: str(v) for mode, v in judge(slope_table, tolerance, axis, shown, scales).items()}


def verdict_text(verdict: dict[str, str], warning: str | None = None) -> str:
    width = max(map(len, verdict), default=0)
    lines = [f"  {mode:<{width}}  {text}" for mode, text in verdict.items()]
    return "\n".join(lines + ([f"  warning: {warning}"] if warning else []))
