"""The coordinate check: per-layer quantities against hand-computed values, layer names, slopes and
verdicts, and the command end to end (theory: normed and dualized are width-stable, unnormed is not)."""

import json
import math
import os
import signal
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from modula_cli.coord import check as coord
from modula_cli.coord.check import measure, run_coord_check
from modula_cli.coord.verdict import fitted_slope, judge, span_warning, verdict_text, verdicts
from modula_cli.run.geometry import direction_change, stable_rank
from modula_cli.nn import GPT, Embed, Linear, ResMLP, ResNet, StandardGPT, layer_names, layer_roles
from modula_cli.plumbing.signals import StopRequested
import prewarmed
from helpers import optim_config


def compose_coord(*overrides: str):
    from hydra import compose, initialize_config_dir

    from modula_cli.config import CONFIG_DIR
    from modula_cli.config.resolvers import register_config

    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("coord_check", overrides=list(overrides))


def tiny_gpt_coord(root, *overrides: str):
    return compose_coord("arch.depth=1", "arch.heads=2", f"data.root={root}", "data.context=16", "train.device=cpu",
                         *overrides)


# --- layer names ---------------------------------------------------------------------------------------

def test_layer_names_follow_roles_and_copies():
    assert layer_names(GPT(65, 16, 2, 16, 2)) == [
        "embed.token", "embed.position",
        "attn.q[0]", "attn.k[0]", "attn.v[0]", "attn.out[0]", "mlp.in[0]", "mlp.out[0]",
        "attn.q[1]", "attn.k[1]", "attn.v[1]", "attn.out[1]", "mlp.in[1]", "mlp.out[1]", "output"]
    # ResMLP: depth 2 blocks of block_depth 2 → [block.layer]
    assert layer_names(ResMLP(16, 2, 2, 12, 10)) == ["input", "hidden[0.0]", "hidden[0.1]", "hidden[1.0]",
                                                     "hidden[1.1]", "output"]
    assert layer_names(ResNet(8, 2, 1, 3, 10)) == ["input", "hidden[0.0]", "hidden[1.0]", "output"]
    assert layer_names(StandardGPT(65, 16, 2, 16, 1))[2:8] == ["attn.q[0]", "attn.k[0]", "attn.v[0]", "attn.out[0]",
                                                              "mlp.in[0]", "mlp.out[0]"]
    # Names do not depend on width; roles drop the copy index.
    assert layer_names(GPT(65, 16, 2, 64, 2)) == layer_names(GPT(65, 16, 2, 16, 2))
    assert layer_roles(GPT(65, 16, 2, 16, 2))[8] == "attn.q"


def test_undeclared_atoms_are_numbered_within_their_copy():
    net = Linear(3, 8) @ (Linear(8, 8) @ Linear(8, 8)) ** 2 @ Linear(8, 5)
    assert layer_names(net) == ["linear1", "block.linear1[0]", "block.linear2[0]", "block.linear1[1]",
                                "block.linear2[1]", "linear2"]
    assert layer_roles(net) == ["linear1", "block.linear1", "block.linear2", "block.linear1", "block.linear2",
                                "linear2"]
    # An atom used twice inside a powered block is stamped once per copy.
    shared = Linear(8, 8)
    assert [atom.repeat for atom in ((shared @ shared) ** 2).atoms()] == [(0,), (0,), (1,), (1,)]


# --- the quantities, by hand ------------------------------------------------------------------------------

def test_direction_change_and_stable_rank_by_hand():
    h0 = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    h = torch.tensor([[3.0, 0.0], [0.0, -1.0]])  # row 1 rescaled (no change), row 2 reversed (distance 2)
    assert direction_change(h, h0) == pytest.approx(1.0)
    # A convolution's feature vector is a pixel's channels (axis -3): rescaling channels per pixel is no change.
    conv0 = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])  # (1, 2 channels, 1, 2 pixels)
    assert direction_change(3 * conv0, conv0, axis=-3) == pytest.approx(0.0)
    assert direction_change(conv0.flip(-3), conv0, axis=-3) == pytest.approx(math.sqrt(2))
    linear = Linear(2, 2)
    assert stable_rank(linear, torch.diag(torch.tensor([3.0, 4.0]))) == pytest.approx((9 + 16) / 16)
    assert stable_rank(linear, torch.zeros(2, 2)) == 0.0


def _numpy_forward(ws, x):
    h1 = x @ ws[0].T
    return h1, h1 @ ws[1].T


def _numpy_grads(ws, x, y):
    """Cross-entropy gradients of the 2-layer linear net, by the chain rule."""
    h1, z = _numpy_forward(ws, x)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p - np.eye(z.shape[1])[y]) / len(y)
    return [(dz @ ws[1]).T @ x, dz.T @ h1]


def _rms(a):
    return float(np.sqrt(np.mean(np.asarray(a, dtype=np.float64) ** 2)))


def _op_ratio(delta, lr_share):
    d_out, d_in = delta.shape
    return math.sqrt(d_in / d_out) * np.linalg.svd(delta, compute_uv=False)[0] / lr_share


def test_linear_stack_quantities_match_hand_computation():
    """Two Linear atoms, unnormed SGD with momentum, two steps: every recorded number against numpy."""
    net = Linear(3, 4) @ Linear(4, 5)  # applied right to left: 5 → 4 → 3 classes
    weights = net.initialize(seed=3)
    rng = np.random.default_rng(0)
    x_np, y_np = rng.normal(size=(6, 5)), rng.integers(0, 3, 6)
    x, y = torch.tensor(x_np, dtype=torch.float32), torch.tensor(y_np)
    lr, beta = 0.5, 0.9
    opt = optim_config(name="sgd", mode="unnormed", lr=lr, beta1=beta, schedule="constant")
    frame = pd.DataFrame(measure(net, weights, x, y, opt, steps=2))
    assert list(frame["layer"]) == ["linear1", "linear2"] * 3
    assert list(frame["share"][:2]) == [0.5, 0.5]  # masses 1 and 1, sensitivity 1: half the target each

    # By hand: momentum copies g at t = 0 (c_0 = 1), then m ← m + c_1 (g − m) with c_1 = (1 − β)^{1/2}.
    ws = [w.double().numpy() for w in weights]
    history, m = [ws], None
    for t in range(2):
        g = _numpy_grads(history[-1], x_np, y_np)
        c = (1 - beta) ** (t / (t + 1))
        m = g if m is None else [mi + c * (gi - mi) for mi, gi in zip(m, g)]
        history.append([w - lr * mi for w, mi in zip(history[-1], m)])
    outputs = [_numpy_forward(w, x_np) for w in history]
    inputs = [[x_np, out[0]] for out in outputs]
    for t in range(3):
        rows = frame[frame["step"] == t].reset_index()
        for i in range(2):
            h, h0 = outputs[t][i], outputs[0][i]
            unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
            sigma = np.linalg.svd(history[t][i], compute_uv=False)
            expected = {"act_rms": _rms(h), "delta_rms": _rms(h - h0),
                        "own_delta_rms": _rms(inputs[t][i] @ (history[t][i] - history[0][i]).T),
                        "dir_change": float(np.linalg.norm(unit(h) - unit(h0), axis=1).mean()),
                        "stable_rank": float((sigma**2).sum() / sigma[0] ** 2)}
            if t > 0:
                delta = history[t - 1][i] - history[t][i]
                expected["update_ratio"] = _op_ratio(delta, lr * 0.5)
                s = np.linalg.svd(delta, compute_uv=False)
                expected["update_stable_rank"] = float((s**2).sum() / s[0] ** 2)
                expected["update_rms"] = _rms(delta)
            for key, value in expected.items():
                assert rows.loc[i, key] == pytest.approx(value, rel=2e-4, abs=1e-6), (t, i, key)
    # Orthogonal initialisation: every singular value equal, so the stable rank is the smaller side.
    assert list(frame[frame["step"] == 0]["stable_rank"]) == pytest.approx([4.0, 3.0])
    assert frame[frame["step"] == 0][["delta_rms", "own_delta_rms", "dir_change"]].to_numpy().max() == 0
    assert frame[frame["step"] == 0]["update_ratio"].isna().all()


@pytest.mark.parametrize("mode, options, tolerance", [
    ("normed", {"power_iterations": 30}, 1e-3),   # exact up to the power iteration's error
    ("dualized", {"ortho": "svd"}, 1e-5),         # the duality map through an exact SVD
])
def test_normed_and_dualized_updates_have_ratio_one(mode, options, tolerance):
    """The update of every atom has atom norm LR × share: ratio 1 (the embedding's, exactly)."""
    net = Linear(3, 6) @ Embed(6, 7)
    x, y = torch.randint(0, 7, (16,)), torch.randint(0, 3, (16,))
    opt = optim_config(name="adam", mode=mode, lr=0.1, schedule="constant", **options)
    frame = pd.DataFrame(measure(net, net.initialize(seed=1), x, y, opt, steps=3))
    ratios = frame[frame["step"] > 0]
    assert ratios["update_ratio"].to_numpy() == pytest.approx(1.0, abs=tolerance)
    assert ratios[ratios["kind"] == "Embed"]["update_ratio"].to_numpy() == pytest.approx(1.0, abs=1e-6)


# --- slopes and verdicts --------------------------------------------------------------------------------

def test_fitted_slope():
    scales = np.array([32, 64, 128, 256])
    assert fitted_slope(scales, 3.0 * scales**0.7) == pytest.approx(0.7)
    assert fitted_slope(scales, np.full(4, 2.0)) == pytest.approx(0.0)
    assert fitted_slope(scales, np.zeros(4)) == 0.0  # nothing changed at any width
    assert math.isnan(fitted_slope(scales, np.array([0.0, 1.0, 2.0, 3.0])))
    assert math.isnan(fitted_slope(scales[:1], np.array([1.0])))


def _slope_table(entries):
    return pd.DataFrame([{"mode": m, "layer": layer, "quantity": q, "slope": s}
                         for m, layer, q, s in entries])


def test_verdicts_name_the_worst_layers():
    table = _slope_table([
        ("normed", "a", "delta_rms", 0.1), ("normed", "a", "own_delta_rms", -0.2),
        ("normed", "b", "delta_rms", 0.05), ("normed", "b", "own_delta_rms", 0.0),
        ("unnormed", "a", "delta_rms", 0.1), ("unnormed", "a", "own_delta_rms", 0.8),
        ("unnormed", "b", "delta_rms", 0.95), ("unnormed", "b", "own_delta_rms", 0.9),
        ("unnormed", "c", "delta_rms", 0.2), ("unnormed", "c", "own_delta_rms", 0.1),
        ("unnormed", "c", "act_rms", 5.0),  # not a verdict quantity
    ])
    result = verdicts(table, 0.3)
    assert result["normed"].startswith("width-stable") and "-0.20, a own_delta_rms" in result["normed"]
    assert result["unnormed"] == "not width-stable: slope beyond ±0.3 in b delta_rms +0.95, a own_delta_rms +0.80"
    # A layer without a slope (a diverged point, or zero change at some widths) may be the one that fails:
    # no verdict then, unless another layer already fails.
    nan_table = _slope_table([("m", "a", "delta_rms", 0.1), ("m", "z", "delta_rms", float("nan"))])
    assert verdicts(nan_table, 0.3)["m"].startswith("no verdict: every measured layer is within ±0.3; no slope for z")
    nan_table = _slope_table([("m", "a", "delta_rms", 0.9), ("m", "z", "delta_rms", float("nan"))])
    assert verdicts(nan_table, 0.3)["m"].startswith("not width-stable: slope beyond ±0.3 in a delta_rms +0.90")
    # The layers each verdict names, for the plot to highlight: worst first, then those without a slope.
    assert {m: v.layers for m, v in judge(table, 0.3).items()} == {"normed": ("a",), "unnormed": ("b", "a")}
    assert judge(nan_table, 0.3)["m"].layers == ("a", "z")
    assert judge(table, 0.3, shown=1)["unnormed"].layers == ("b",)
    # Over a short span the verdict is tentative, and says so right after its head.
    short = verdicts(table, 0.3, scales=[16, 32, 64])
    assert short["unnormed"].startswith("not width-stable (tentative: widths span only 4×): slope beyond ±0.3 in b")
    assert short["normed"].startswith("width-stable (tentative: widths span only 4×): every layer's")


def test_a_failing_verdict_says_whether_the_initialisation_or_the_updates_grow():
    """nanoGPT under μP (a fixed 0.02 init): each failing layer's total change grows as its activations already do
    at step 0 while its own update is stable: init-dominated, an LR that can transfer. A growing own update
    predicts a falling optimal LR; a shrinking one a rising LR; without init slopes, nothing is claimed."""
    init = [("m", "a", "init_act_rms", 1.0), ("m", "b", "init_act_rms", 0.5)]
    dominated = _slope_table([("m", "a", "delta_rms", 0.5), ("m", "a", "own_delta_rms", 0.2),
                              ("m", "b", "delta_rms", 0.4), ("m", "b", "own_delta_rms", -0.25), *init])
    verdict = judge(dominated, 0.3)["m"]
    assert verdict.head == "not width-stable (init-dominated)"
    assert verdict.detail == (
        "slope beyond ±0.3 in a delta_rms +0.50, b delta_rms +0.40; init-dominated: these layers' activations "
        "already grow at step 0 (init_act_rms slope a +1.00, b +0.50) while each one's own update is width-stable "
        "(own_delta_rms within ±0.3): the optimal LR can still transfer (a sweep tells); the initialisation does not "
        "scale (μP and the modular norm want hidden weights ∝ 1/√fan-in, not a fixed std such as 0.02)")
    growing = _slope_table([("m", "a", "delta_rms", 0.5), ("m", "a", "own_delta_rms", 1.2), *init])
    assert verdicts(growing, 0.3)["m"].endswith("; the updates themselves grow along the width (own_delta_rms): "
                                                 "expect the optimal LR to fall as the width grows")
    shrinking = _slope_table([("m", "a", "delta_rms", -0.5), ("m", "a", "own_delta_rms", -0.9), *init])
    assert "shrink along the width (own_delta_rms): expect the optimal LR to rise" in verdicts(shrinking, 0.3)["m"]
    flat_init = _slope_table([("m", "a", "delta_rms", 0.5), ("m", "a", "own_delta_rms", 0.1),
                              ("m", "a", "init_act_rms", 0.1)])
    assert verdicts(flat_init, 0.3)["m"] == "not width-stable: slope beyond ±0.3 in a delta_rms +0.50"


def test_span_warning_below_8x_or_3_points():
    assert span_warning("width", [16, 32, 64, 128]) is None
    assert span_warning("width", [32, 64, 128, 256, 512]) is None
    assert span_warning("width", [32, 64, 128]) == (
        "widths span only 4× (32–128): slopes over a short span are noisy; the verdict is reliable from 8× with at "
        "least 3 widths (e.g. coord.widths=[32,64,128,256])")
    # Depth: the same rule in its own words; two points are warned about, not refused (a quick look).
    assert span_warning("depth", [2, 1]) == (
        "depths span only 2× (1–2): slopes over a short span are noisy; only 2 depths: a slope through two points "
        "cannot show a bending curve; the verdict is reliable from 8× with at least 3 depths "
        "(e.g. coord.depths=[1,2,4,8])")
    assert span_warning("width", [16, 128]).startswith("only 2 widths: a slope through two points")
    # Floored, so 7.95× never reads 8×; the example keeps the given widths (re-runs reuse them).
    assert span_warning("width", [20, 159]).startswith("widths span only 7.9× (20–159)")
    assert span_warning("width", [20, 48, 100]).endswith("(e.g. coord.widths=[20,40,48,80,100,160])")


# --- end to end ----------------------------------------------------------------------------------------

def _slopes_of(slope_table, mode, quantity):
    rows = slope_table[(slope_table["mode"] == mode) & (slope_table["quantity"] == quantity)]
    return rows.set_index("layer")["slope"]


def test_gpt_normed_and_dualized_are_width_stable_unnormed_is_not(tiny_text_root, tmp_path):
    widths = [16, 32, 64, 128]
    cfg = tiny_gpt_coord(tiny_text_root, f"coord.widths={widths}")
    table, slope_table, verdict = run_coord_check(cfg, tmp_path)
    layers = 9  # 2 embeddings, 6 per block, the output
    assert len(table) == 3 * len(widths) * layers * 5  # modes × widths × layers × steps 0…4
    assert {"mode", "width", "depth", "layer", "step", "act_rms", "delta_rms", "dir_change", "update_ratio",
            "stable_rank"} <= set(table.columns)
    assert len(slope_table) == 3 * layers * (8 + 1)  # the quantities of run/geometry.py, and init_act_rms
    for mode in ("normed", "dualized"):
        assert verdict[mode].startswith("width-stable"), verdict[mode]
        for quantity in ("delta_rms", "own_delta_rms"):
            assert _slopes_of(slope_table, mode, quantity).abs().max() <= 0.3
    assert verdict["unnormed"].startswith("not width-stable")
    assert _slopes_of(slope_table, "unnormed", "delta_rms").max() >= 0.5
    # Normed: the power iteration only underestimates σ, so a matrix's ratio is ≥ 1; its warm start (one
    # step per update in the paper variant, the default) brings it towards 1: the first step's worst is far
    # off, the fourth's closer. (The paper variant's embeddings go back on their sphere after the step, so
    # their applied change is not the normed update: they are left out.)
    normed = table[(table["mode"] == "normed") & (table["step"] > 0) & ~table["layer"].str.startswith("embed")]
    assert normed["update_ratio"].min() >= 1 - 1e-4
    worst = normed.groupby("step")["update_ratio"].max()
    # measured: the fourth step's worst is 1.5 with the paper's one power-iteration step, ≤ 1.1 with two
    assert worst[4] <= (1.1 if cfg.optim.normed.power_iterations >= 2 else 1.6) and worst[4] < worst[1]
    dualized = table[(table["mode"] == "dualized") & (table["step"] > 0)]
    assert dualized["update_ratio"].to_numpy() == pytest.approx(1.0, abs=0.05)
    # Files: the tables as returned, the verdict and a PNG.
    saved = pd.read_csv(tmp_path / "coord.csv")
    assert len(saved) == len(table) and saved["point"].nunique() == 12
    assert len(pd.read_csv(tmp_path / "coord_slopes.csv")) == len(slope_table)
    assert (tmp_path / "coord.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    verdict_lines = (tmp_path / "verdict.txt").read_text().splitlines()
    assert verdict_lines[1].startswith("normed: width-stable: ")  # 16–128 spans 8×: no tentative, no warning
    assert len(verdict_lines) == 3 and not any("warning" in line for line in verdict_lines)


def test_resmlp_normed_and_dualized_are_width_stable_unnormed_is_not(cifar_root, tmp_path):
    """On ResMLP the input layer's change (fan-in 3072, fixed) dominates every later layer's delta_rms at these
    widths; the layers' own updates (own_delta_rms) still show unnormed Adam growing with width."""
    cfg = compose_coord("arch=resmlp", "arch.depth=2", "data=cifar10", f"data.root={cifar_root}", "data.augment=none",
                        "train.device=cpu", "coord.widths=[32,64,128,256]")
    _, slope_table, verdict = run_coord_check(cfg, tmp_path)
    for mode in ("normed", "dualized"):
        assert verdict[mode].startswith("width-stable"), verdict[mode]
    assert verdict["unnormed"].startswith("not width-stable")
    hidden = _slopes_of(slope_table, "unnormed", "own_delta_rms").filter(like="hidden")
    assert len(hidden) == 4 and hidden.min() >= 0.5


ROLES = ("embed.token", "embed.position", "attn.q", "attn.k", "attn.v", "attn.out", "mlp.in", "mlp.out", "output")


def test_resnet_and_standard_gpt_and_depth_axis(tiny_text_root, cifar_root, tmp_path):
    cfg = compose_coord("arch=resnet", "arch.depth=1", "arch.block_depth=1", "data=cifar10", f"data.root={cifar_root}",
                        "data.augment=none", "train.device=cpu", "coord.widths=[4,8]", "coord.modes=[dualized]",
                        "coord.steps=1", "coord.batch_size=2")
    table, _, verdict = run_coord_check(cfg, tmp_path / "resnet")
    assert list(table[table["step"] == 0]["layer"][:3]) == ["input", "hidden[0.0]", "output"]
    assert set(verdict) == {"dualized"}
    cfg = tiny_gpt_coord(tiny_text_root, "arch=standard_gpt", "coord.widths=[16,32]", "coord.modes=[unnormed]",
                         "coord.steps=1")
    table, _, _ = run_coord_check(cfg, tmp_path / "standard")
    assert table["layer"].nunique() == 9 and sorted(table["width"].unique()) == [16, 32]
    # Along depth the layers differ between depths: a role's blocks are averaged into one line.
    cfg = tiny_gpt_coord(tiny_text_root, "arch.width=16", "coord.axis=depth", "coord.depths=[1,2]",
                         "coord.modes=[normed,dualized]", "coord.steps=1")
    table, slope_table, verdict = run_coord_check(cfg, tmp_path / "depth")
    assert sorted(table["depth"].unique()) == [1, 2] and set(table["width"]) == {16}
    assert list(slope_table["layer"].unique()) == list(ROLES)
    # The slopes, recomputed: each role's mean over its blocks at the last step, log2(depth 2 / depth 1).
    last = table[table["step"] == 1].groupby(["mode", "role", "depth"])[["delta_rms", "own_delta_rms",
                                                                         "update_ratio"]].mean()
    slope = {(mode, role, q): math.log2(last.loc[(mode, role, 2), q] / last.loc[(mode, role, 1), q])
             for mode, role, _ in last.index for q in last.columns}
    for _, row in slope_table[slope_table["quantity"].isin(["delta_rms", "own_delta_rms"])].iterrows():
        assert row["slope"] == pytest.approx(slope[(row["mode"], row["layer"], row["quantity"])], abs=1e-6)
    # Dualized steps have exactly their share at every depth (update_ratio 1, so no slope) and the modular
    # norm's depth split keeps every layer's change flat: depth-stable. Normed steps are as large only up
    # to the power iteration's error (one step per update, the paper variant's), which differs between the
    # depths: attn.k's update is 1.05× its target at depth 1 and 1.61× at depth 2, attn.out's 1.46× and
    # 1.12×, and their changes follow (own_delta_rms slopes +0.52 and -0.40 against update_ratio slopes
    # +0.62 and -0.38): not depth-stable, and the verdict names those two.
    assert max(abs(slope[("dualized", role, "update_ratio")]) for role in ROLES) < 1e-3
    assert max(abs(slope[("dualized", role, q)]) for role in ROLES for q in ("delta_rms", "own_delta_rms")) < 0.3
    assert verdict["dualized"].startswith("depth-stable (tentative: depths span only 2×, only 2 depths): ")
    assert verdict["normed"].startswith("not depth-stable (tentative: depths span only 2×, only 2 depths): slope "
                                        "beyond ±0.3 in attn.k delta_rms +0.56, attn.out own_delta_rms -0.40")
    for role in ("attn.k", "attn.out"):
        excess = slope[("normed", role, "update_ratio")]
        assert abs(excess) > 0.3 and slope[("normed", role, "own_delta_rms")] == pytest.approx(excess, abs=0.15)
    assert (tmp_path / "depth" / "verdict.txt").read_text().splitlines()[-1].startswith(
        "warning: depths span only 2× (1–2)")


def test_short_span_warns_and_the_plot_highlights_every_named_layer(tiny_text_root, tmp_path, monkeypatch):
    """Widths 16–64 (4×): tentative verdicts and the warning in verdict.txt; coord.png draws each layer a
    verdict names thick, in its own colour, under its exact name in the legend; the others thin and grey."""
    figures = []
    real_plot = coord.plot_coord
    monkeypatch.setattr(coord, "plot_coord", lambda *args, **kwargs: figures.append(real_plot(*args, **kwargs)))
    cfg = tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", "coord.modes=[unnormed,normed]", "coord.steps=1")
    _, slope_table, verdict = run_coord_check(cfg, tmp_path)
    assert all(" (tentative: widths span only 4×): " in text for text in verdict.values()), verdict
    warning = "warning: widths span only 4× (16–64): slopes over a short span are noisy; the verdict is reliable " \
              "from 8× with at least 3 widths (e.g. coord.widths=[16,32,64,128])"
    assert (tmp_path / "verdict.txt").read_text().splitlines() == [
        *(f"{mode}: {text}" for mode, text in verdict.items()), warning]
    assert verdict_text(verdict, warning[9:]).splitlines()[-1] == "  " + warning

    judged = judge(slope_table, 0.3, scales=[16, 32, 64])
    named = {mode: v.layers for mode, v in judged.items()}
    assert len(named["unnormed"]) == 4 and len(named["normed"]) >= 1  # 4 worst shown, "… (n of 9 layers)"
    (fig,) = figures
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert legend == list(dict.fromkeys(named["unnormed"] + named["normed"])) + ["other layers", "∝ width¹"]
    for column, mode in enumerate(("unnormed", "normed")):
        for ax in fig.axes[column::2]:  # the axes of a column, row by row
            thick = {line.get_label() for line in ax.get_lines() if line.get_linewidth() > 2}
            assert thick == set(named[mode])  # a layer named in the other column only is grey here
            colors = {line.get_color() for line in ax.get_lines() if line.get_linewidth() > 2}
            assert len(colors) == len(thick)  # distinct colours
        assert fig.axes[column].get_title().replace("\n", " ") == f"{mode} {judged[mode].head}"  # wrapped
    bottom = fig.axes[-1]
    assert [t.get_text() for t in bottom.get_xticklabels()] == ["16", "32", "64"]  # plain numbers, not 2^4
    assert bottom.get_xlabel() == "width" and fig.axes[0].get_ylabel() == "activation RMS"
    assert (tmp_path / "coord.png").stat().st_size > 10_000


# --- bad input, resume, signals ------------------------------------------------------------------------

def test_bad_settings_are_all_reported_before_any_work(tiny_text_root):
    cfg = tiny_gpt_coord(tiny_text_root, "coord.widths=[16]", "coord.modes=[normed,sideways]", "coord.steps=0",
                         "train.seed=[0,1]", "arch.heads=3")
    problems = coord.coord_problems(cfg)
    assert any("coord.widths=[16]" in p and "two different values" in p for p in problems)
    assert any("coord.modes=" in p and "sideways" in p and "unnormed" in p for p in problems)
    assert any(p.startswith("coord.steps=0") for p in problems)
    assert any(p.startswith("train.seed=[0, 1]") for p in problems)
    assert coord.coord_problems(tiny_gpt_coord(tiny_text_root, "coord.axis=length")) == [
        "coord.axis='length'; allowed: width, depth"]
    assert coord.coord_problems(tiny_gpt_coord(tiny_text_root, "coord.tolerance=0")) == [
        "coord.tolerance=0; must be a finite number > 0"]
    # A point's own config is checked too: width 48 is not divisible by 5 heads.
    problems = coord.coord_problems(tiny_gpt_coord(tiny_text_root, "arch.heads=5", "coord.widths=[20,48]"))
    assert problems == ["arch.width=48 is not divisible by arch.heads=5"]


def test_command_line_rejects_bad_input_before_any_work(tiny_text_root, tmp_path):
    """(The command's successful run is tested from a user's folder in test_extending.py.)"""
    base = [sys.executable, "-m", "modula_cli.coord.check", "arch.depth=1", "arch.heads=2",
            f"data.root={tiny_text_root}", "data.context=16", "train.device=cpu"]
    bad = prewarmed.run([*base, "coord.modes=[normed,bogus]", "coord.steps=0", f"hydra.run.dir={tmp_path / 'bad'}"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[-2:] == [
        "  - coord.modes=['normed', 'bogus']; a list of distinct modes from: unnormed, normed, dualized, manifold, "
        "mup, muon",
        "  - coord.steps=0; must be an integer >= 1"]
    assert not (tmp_path / "bad" / "coord.csv").exists()


def test_command_line_missing_data_is_one_line_and_writes_nothing(tmp_path):
    """An empty data.root offline (downloads refused by a dead proxy): one line naming the problem, no
    traceback, and no coordinate-check file anywhere under the working folder."""
    empty = tmp_path / "empty"
    empty.mkdir()
    dead = "http://127.0.0.1:9"  # nothing listens: the download fails at once, as it does without a network
    env = {**os.environ, "http_proxy": dead, "https_proxy": dead, "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
           "no_proxy": "", "NO_PROXY": ""}
    result = prewarmed.run([sys.executable, "-m", "modula_cli.coord.check", f"data.root={empty}", "train.device=cpu",
                             "coord.widths=[16,32,128]", "coord.steps=1"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 1 and len(lines) <= 2, lines
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("modula-coord-check: ") and "input.txt" in result.stderr
    written = {path.name for path in tmp_path.rglob("*")}
    assert not written & {coord.CSV_FILE, coord.SLOPES_FILE, coord.PLOT_FILE, coord.VERDICT_FILE}


def _counting(monkeypatch, after_first=None):
    calls = []
    real = coord.measure

    def counted(*args, **kwargs):
        calls.append(1)
        rows = real(*args, **kwargs)
        if after_first and len(calls) == 1:
            after_first()
        return rows
    monkeypatch.setattr(coord, "measure", counted)
    return calls


def test_resume_measures_only_missing_points_and_distrusts_a_truncated_file(tiny_text_root, tmp_path, monkeypatch):
    settings = ["coord.modes=[normed]", "coord.steps=1"]
    calls = _counting(monkeypatch)
    run_coord_check(tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32]", *settings), tmp_path)
    assert len(calls) == 2
    first = pd.read_csv(tmp_path / "coord.csv")
    table, _, _ = run_coord_check(tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", *settings), tmp_path)
    assert len(calls) == 3  # only width 64 is new
    kept = table[table["width"] < 64].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first, check_dtype=False)
    # A changed setting changes every point: nothing is reused.
    run_coord_check(tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", "optim.lr=0.1", *settings), tmp_path)
    assert len(calls) == 6
    # A file cut mid-write by another tool: recomputed, not trusted.
    text = (tmp_path / "coord.csv").read_text()
    (tmp_path / "coord.csv").write_text(text[: len(text) // 3].rsplit(",", 1)[0])
    run_coord_check(tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", *settings), tmp_path)
    assert len(calls) == 9
    assert pd.read_csv(tmp_path / "coord.csv")["point"].nunique() == 3


def test_sigterm_keeps_finished_points_and_a_rerun_finishes(tiny_text_root, tmp_path, monkeypatch):
    """A scheduler's SIGTERM during the first point: that point is saved, no later one starts, and the same
    command into the same folder measures only the other two."""
    cfg = tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", "coord.modes=[dualized]", "coord.steps=1")
    real = coord.measure
    calls = _counting(monkeypatch, after_first=lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(StopRequested):
        run_coord_check(cfg, tmp_path)
    assert len(calls) == 1 and pd.read_csv(tmp_path / "coord.csv")["width"].unique().tolist() == [16]
    assert not (tmp_path / "coord_slopes.csv").exists()
    monkeypatch.setattr(coord, "measure", real)
    calls = _counting(monkeypatch)
    table, _, verdict = run_coord_check(cfg, tmp_path)
    assert len(calls) == 2 and sorted(table["width"].unique()) == [16, 32, 64] and "dualized" in verdict


# --- per-layer statistics during ordinary training ---------------------------------------------------------

def _layer_records(run_dir):
    return [json.loads(line) for line in (run_dir / "layer_stats.jsonl").read_text().splitlines()]


def test_layer_stats_during_training_packed_equals_separate(tiny_text_root, tmp_path):
    from helpers import compose_config, tiny_gpt

    from modula_cli.run.trainer import train

    # the modular variant: its embeddings' applied change is exactly the normed update (the paper variant puts
    # them back on their sphere after it)
    common = ["variant=modular", "optim.mode=normed", "train.steps=12", "train.layer_stats_every=4",
              "optim.schedule=constant"]
    train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=[0.05,0.2]", "train.seed=[0,1]")),
          tmp_path / "packed")
    train(compose_config(*tiny_gpt(tiny_text_root, *common, "optim.lr=0.2", "train.seed=1")), tmp_path / "alone")
    alone = _layer_records(tmp_path / "alone")
    names = layer_names(GPT(65, 16, 2, 16, 1))
    assert [r["step"] for r in alone] == [s for s in (4, 8, 12) for _ in names]
    assert [r["layer"] for r in alone] == names * 3
    # Normed: the embeddings' updates have exactly their target norm; the matrices' within the power
    # iteration's gap; the change from the start grows.
    assert all(abs(r["update_ratio"] - 1) < 1e-5 for r in alone if r["layer"].startswith("embed"))
    assert all(1 - 1e-4 <= r["update_ratio"] < 2 for r in alone)
    token = [r["delta_rms"] for r in alone if r["layer"] == "embed.token"]
    assert 0 < token[0] < token[1] < token[2]
    packed = _layer_records(tmp_path / "packed" / "lr=0.2,seed=1")
    assert [(r["step"], r["layer"]) for r in packed] == [(r["step"], r["layer"]) for r in alone]
    for mine, theirs in zip(packed, alone):
        for key in ("act_rms", "delta_rms", "own_delta_rms", "dir_change", "update_ratio", "stable_rank"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-3, abs=1e-6), (mine["step"], mine["layer"], key)


def test_layer_stats_resume_drops_records_past_the_checkpoint(tmp_path):
    from modula_cli.run.loggers import keep_until

    path = tmp_path / "layer_stats.jsonl"
    lines = [json.dumps({"step": s, "layer": "a", "act_rms": 1.0}) for s in (4, 8, 12)]
    path.write_text("\n".join(lines) + "\n" + '{"step": 16, "lay')  # a line cut by a crash
    keep_until(path, 8)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [4, 8]


def test_layer_stats_of_a_resumed_run_equal_an_uninterrupted_one(tiny_text_root, tmp_path, monkeypatch):
    """SIGTERM at step 12 of 20 (measured every 5, checkpoint every 7): the resumed file equals the reference."""
    from helpers import compose_config, interrupted_at_step_12, tiny_gpt

    import modula_cli.run.trainer as run_module

    cfg = compose_config(*tiny_gpt(tiny_text_root, "optim.mode=dualized", "train.steps=20", "train.checkpoint_every=7",
                                   "train.layer_stats_every=5"))
    run_module.train(cfg, tmp_path / "reference")
    interrupted_at_step_12(cfg, tmp_path / "resumed", monkeypatch)
    assert [r["step"] for r in _layer_records(tmp_path / "resumed")][-1] == 10
    run_module.train(cfg, tmp_path / "resumed")
    resumed, reference = _layer_records(tmp_path / "resumed"), _layer_records(tmp_path / "reference")
    assert [(r["step"], r["layer"]) for r in resumed] == [(r["step"], r["layer"]) for r in reference]
    for mine, theirs in zip(resumed, reference):
        for key in mine.keys() - {"layer", "role"}:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-7), (mine["step"], mine["layer"], key)


def test_layer_stats_in_bfloat16_and_when_turned_on_for_a_resumed_run(tiny_text_root, tmp_path, monkeypatch):
    """Inputs captured under bfloat16 autocast are measured in float32; a run resumed from a checkpoint made
    without layer stats starts its file at the resumed step."""
    from helpers import compose_config, interrupted_at_step_12, tiny_gpt

    import modula_cli.run.trainer as run_module

    bf16 = compose_config(*tiny_gpt(tiny_text_root, "train.steps=4", "train.layer_stats_every=2",
                                    "train.dtype=bfloat16"))
    assert run_module.train(bf16, tmp_path / "bf16").status == "completed"
    assert [r["step"] for r in _layer_records(tmp_path / "bf16")][::9] == [2, 4]

    plain = tiny_gpt(tiny_text_root, "train.steps=20", "train.checkpoint_every=7")
    interrupted_at_step_12(compose_config(*plain), tmp_path / "late", monkeypatch)
    summary = run_module.train(compose_config(*plain, "train.layer_stats_every=5"), tmp_path / "late").summary
    assert summary["status"] == "completed"
    assert sorted({r["step"] for r in _layer_records(tmp_path / "late")}) == [15, 20]


def test_layer_stats_reach_disk_at_each_checkpoint(tiny_text_root, tmp_path, monkeypatch):
    """A process killed after a checkpoint (no chance to close its files) keeps the records it covers."""
    from helpers import compose_config, tiny_gpt

    import modula_cli.run.loggers as loggers
    import modula_cli.run.trainer as run_module

    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=20", "train.checkpoint_every=7",
                                   "train.layer_stats_every=5"))
    saved = []
    original = run_module.checkpoint.save

    def save_and_read(path, state, fingerprint):
        original(path, state, fingerprint)
        saved.append((state["step"], (path.parent / loggers.LAYER_STATS_FILE).read_text().count("\n")))

    monkeypatch.setattr(run_module.checkpoint, "save", save_and_read)
    run_module.train(cfg, tmp_path / "run")
    layers = 9
    assert saved == [(7, 1 * layers), (14, 2 * layers)]  # on disk when the checkpoint is written


def test_layer_stats_never_log_a_step_before_the_train_loss_of_an_earlier_one(tiny_text_root, tmp_path, monkeypatch):
    """W&B drops a step lower than one it has seen: every record of one member goes out in step order."""
    from helpers import compose_config, tiny_gpt

    import modula_cli.run.loggers as loggers
    import modula_cli.run.trainer as run_module

    steps = []
    emit, emit_layers = loggers.RunLoggers.emit, loggers.RunLoggers.emit_layers
    monkeypatch.setattr(loggers.RunLoggers, "emit",
                        lambda self, k, record: (steps.append(record["step"]), emit(self, k, record)))
    monkeypatch.setattr(loggers.RunLoggers, "emit_layers",
                        lambda self, k, step, records: (steps.append(step), emit_layers(self, k, step, records)))
    run_module.train(compose_config(*tiny_gpt(tiny_text_root, "train.steps=10", "train.log_every=3",
                                              "train.eval_every=5", "train.layer_stats_every=5")), tmp_path / "run")
    # train losses at 0, 3, 6, 9 and 10 (the paper variant's extra iteration, the last); evaluations at 5 and
    # 11 (after the last); layer records at 5 and 10
    assert steps == [0, 3, 5, 5, 6, 9, 10, 10, 11]


# --- W&B output -------------------------------------------------------------------------------------------

def test_wandb_prints_one_line_per_run_instead_of_its_summary(tiny_text_root, tmp_path, monkeypatch, capfd, caplog):
    """wandb's own banner, history and summary (~25 lines a run) are silenced; our log says in one line
    where the run went (offline: the folder to `wandb sync`)."""
    import logging

    from helpers import compose_config, tiny_gpt

    from modula_cli.run.trainer import train

    for variable in ("WANDB_SILENT", "WANDB_QUIET", "WANDB_API_KEY", "WANDB_CONSOLE"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_config(*tiny_gpt(tiny_text_root, "logger=wandb", "logger.mode=offline", "train.steps=3"))
    with caplog.at_level(logging.INFO, logger="modula_cli.run.loggers"):
        assert train(cfg, tmp_path / "run").status == "completed"
    out, err = capfd.readouterr()
    printed = [line for line in (out + err).splitlines() if line.startswith("wandb:")]
    assert printed == [], printed  # unsilenced: "wandb: Run history:", "wandb: Run summary:", … 25 lines
    (sync_dir,) = (tmp_path / "run" / "wandb").glob("offline-run-*")
    ours = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B:")]
    assert ours == [f"W&B: run offline; upload later with: wandb sync {sync_dir}"]
