"""The optimiser (modula_cli/optim/) against values worked out by hand: the schedule, the EMA weights, the base
directions, one whole step in each mode on a two-atom network, its state and checkpoints, the modes' grids
and defaults, and every problem of the optim settings (the exact line a user reads): the schema's, then
``validate_optim``'s."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from omegaconf import OmegaConf

from modula_cli.nn import Embed, Linear, PowerIterationState
from modula_cli.nn.manifold import ManifoldState
from modula_cli.optim import (MODES, OptimConfig, apply_update, ema_weight, init_state, lr_grid, optimizer_step,
                              schedule_factor, single_lr, validate_optim)
from modula_cli.nn.orthogonalize import ITER_DTYPES, METHODS
from modula_cli.optim.config import OPTIMIZERS
from modula_cli.optim.mode_settings import ORTHO_DTYPES, ORTHO_METHODS, nested_settings
from modula_cli.optim.directions import DIRECTIONS, adam_direction, sgd_direction
from modula_cli.plumbing.settings import checked
from modula_cli.optim.modes import Mode, unknown_mode
from modula_cli.optim.modes.dualized import dualize_settings
from modula_cli.optim.state import OptimState, StepScalars
from helpers import optim_config

# --- the schedule and the EMA weights ------------------------------------------------------------------------


def test_schedules():
    assert schedule_factor("linear", 0, 100) == 1.0 and schedule_factor("linear", 50, 100) == 0.5
    assert schedule_factor("linear", 99, 100) == pytest.approx(0.01)
    assert schedule_factor("cosine", 50, 100) == pytest.approx(0.5)
    assert schedule_factor("cosine", 25, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert schedule_factor("cosine", 0, 100) == 1.0
    assert schedule_factor("constant", 99, 100) == 1.0
    for kind in ("linear", "cosine", "constant"):  # past the end: the paper variant's extra iteration
        assert schedule_factor(kind, 100, 100) == 0.0 and schedule_factor(kind, 101, 100, warmup=5) == 0.0


def test_warmup_ramps_then_the_schedule_runs_over_the_steps_after_it():
    # warm-up 4 of 10: (t + 1)/4, then linear decay over the remaining 6 steps
    assert [schedule_factor("linear", t, 10, warmup=4) for t in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert schedule_factor("linear", 4, 10, warmup=4) == 1.0
    assert schedule_factor("linear", 7, 10, warmup=4) == pytest.approx(0.5)
    assert schedule_factor("cosine", 7, 10, warmup=4) == pytest.approx(0.5)
    assert schedule_factor("constant", 2, 10, warmup=4) == 0.75
    assert schedule_factor("linear", 4, 5, warmup=5) == 1.0  # the run is all warm-up


def test_the_modes_own_defaults_and_names_by_hand():
    sgd = dict(name="sgd", lr=None)
    assert single_lr(optim_config(mode="unnormed", **sgd), "resmlp", "weights") == 2.0**-7  # its own exception
    assert single_lr(optim_config(mode="unnormed", **sgd), "resmlp", None) == MODES["unnormed"].default_lrs["sgd"]
    assert single_lr(optim_config(mode="mup", **sgd), "resmlp", "weights") == 2.0**-8  # any scales
    assert single_lr(optim_config(mode="mup", **sgd), "gpt", "weights") == MODES["mup"].default_lrs["sgd"]
    assert single_lr(optim_config(lr=[0.25, 0.5])) == 0.25 and single_lr(optim_config(lr=2)) == 2.0
    assert unknown_mode("NORMED") == f"optim.mode='NORMED'; did you mean normed? allowed: {MODE_LIST}"
    with pytest.raises(ValueError, match=rf"^optim.mode='normd'; did you mean normed\? allowed: {MODE_LIST}$"):
        lr_grid("adam", "normd")


def test_a_modes_state_starts_from_the_weights(monkeypatch):
    seen = []
    monkeypatch.setattr(MODES["unnormed"], "init_state", lambda weights, cfg: seen.append(weights) or "mine")
    weights = [torch.ones(2, 3)]
    assert init_state(weights, optim_config(mode="unnormed")).mode_state == "mine" and seen == [weights]


def test_unknown_schedule_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"^unknown schedule 'step'; allowed: linear, cosine, constant, wsd$"):
        schedule_factor("step", 3, 10)


def test_ema_weight_is_the_papers_bias_correction():
    assert ema_weight(0.9, 0) == 1.0  # the first step copies the gradient
    assert ema_weight(0.9, 1) == pytest.approx(0.1**0.5)
    assert ema_weight(0.9, 3) == pytest.approx(0.1**0.75)
    assert ema_weight(0.99, 9) == pytest.approx(0.01**0.9)
    assert ema_weight(0.0, 5) == 1.0


# --- the base directions ------------------------------------------------------------------------------------


def _state(grads: list[torch.Tensor], adam: bool) -> OptimState:
    zeros = [torch.zeros_like(g) for g in grads]
    return OptimState(momentum=zeros, second_moment=[z.clone() for z in zeros] if adam else [], mode="unnormed",
                      scalars=StepScalars.on(torch.device("cpu")))


def test_sgd_direction_is_the_momentum_average():
    g1, g2 = torch.tensor([[2.0, -4.0]]), torch.tensor([[6.0, 0.0]])
    state = _state([g1], adam=False)
    state.scalars.set(1.0, 1.0, 1.0)
    assert torch.equal(sgd_direction(state, [g1], optim_config(name="sgd"))[0], g1)
    state.scalars.set(1.0, 0.25, 1.0)  # m ← 0.75 m + 0.25 g
    assert torch.allclose(sgd_direction(state, [g2], optim_config(name="sgd"))[0], torch.tensor([[3.0, -3.0]]))


def test_adam_direction_by_hand():
    g = torch.tensor([[3.0, -4.0], [0.0, 0.5]])
    state = _state([g], adam=True)
    state.scalars.set(1.0, 1.0, 1.0)  # step 0: m = g, v = g², u = g/|g|, and 0/0 → 0
    u = adam_direction(state, [g], OptimConfig())[0]
    assert torch.equal(u, torch.tensor([[1.0, -1.0], [0.0, 1.0]]))
    assert torch.equal(state.second_moment[0], g * g)
    state.scalars.set(1.0, 0.5, 0.2)  # m = (g + g2)/2, v = 0.8 g² + 0.2 g2²
    g2 = torch.tensor([[1.0, 4.0], [2.0, 0.5]])
    u = adam_direction(state, [g2], OptimConfig())[0]
    m = 0.5 * g + 0.5 * g2
    v = 0.8 * g * g + 0.2 * g2 * g2
    assert torch.allclose(u, m / v.sqrt())
    eps_state = _state([g], adam=True)
    eps_state.scalars.set(1.0, 1.0, 1.0)
    u = adam_direction(eps_state, [g], optim_config(eps=1.0))[0]  # ε added to √v: no 0/0 left
    assert torch.allclose(u, g / (g.abs() + 1.0))


# --- one whole step, per mode, on Linear(3, 4) ∘ Embed(4, 5): each atom's share of the target is 1/2 --------


def _net():
    return Linear(3, 4) @ Embed(4, 5)


def _grads(members: int | None = None) -> list[torch.Tensor]:
    # rank one, so that power iteration finds the spectral norm exactly: σ(a bᵀ) = |a| |b|
    a, b = torch.tensor([1.0, 2.0, 2.0]), torch.tensor([0.0, 3.0, 0.0, 4.0])
    linear, embed = torch.outer(a, b), torch.arange(20.0).reshape(5, 4) - 7.0
    if members is None:
        return [embed, linear]
    return [embed.expand(members, 5, 4).clone(), linear.expand(members, 3, 4).clone()]


def _row_rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(dim=-1).sqrt()


def _delta(mode: str, t: int = 0, total: int = 4, members: int | None = None, **settings) -> tuple:
    net = _net()
    weights = net.initialize(seed=1)
    if members is not None:
        weights = [w.expand(members, *w.shape).clone() for w in weights]
    before = [w.clone() for w in weights]
    cfg = optim_config(name="sgd", mode=mode, beta1=0.9, **settings)
    state = init_state(weights, cfg)
    lr = optimizer_step(net, weights, _grads(members), state, cfg, t, total,
                        base_lr=settings.pop("base_lr", None))
    return [b - w for b, w in zip(before, weights)], lr, state, before, weights


def test_unnormed_sgd_step_is_lr_times_schedule_times_momentum():
    # t = 2 of 4, linear: factor 1/2; momentum from zero: c_2 = 0.1^(2/3)
    delta, lr, *_ = _delta("unnormed", t=2, lr=0.5)
    factor = 0.5 * 0.5 * 0.1 ** (2 / 3)
    for d, g in zip(delta, _grads()):
        assert torch.allclose(d, factor * g, rtol=1e-6)
    assert float(lr) == 0.25


def test_normed_step_gives_each_atom_its_share():
    delta, lr, state, *_ = _delta("normed", lr=0.5)  # t = 0: u = g
    embed, linear = delta
    assert torch.allclose(_row_rms(embed), torch.full((5,), 0.25))  # every row at RMS η·share = 0.25
    # the linear piece: g scaled to spectral norm η·share·√(d_out/d_in) (σ(g) = 3·5 = 15)
    assert torch.allclose(linear, _grads()[1] * (0.25 * math.sqrt(3 / 4) / 15.0), rtol=1e-5)
    assert isinstance(state.mode_state, PowerIterationState) and state.mode_state.iterations == 2
    assert set(state.mode_state.vectors) == {1}  # the linear atom's vector, kept for the next step


def test_dualized_step_is_the_polar_factor_at_each_share():
    delta, *_ = _delta("dualized", lr=2.0, ortho="svd")
    embed, linear = delta
    U, _, Vh = torch.linalg.svd(_grads()[1], full_matrices=False)
    polar = U[:, :1] @ Vh[:1]  # rank one
    assert torch.allclose(linear, 1.0 * math.sqrt(3 / 4) * polar, atol=1e-6)
    assert torch.allclose(_row_rms(embed), torch.ones(5))


def test_weight_decay_shrinks_by_lr_times_wd_times_share():
    _, lr, _, before, after = _delta("unnormed", lr=0.5, wd=0.1)
    g = _grads()
    for w0, w1, grad in zip(before, after, g):
        assert torch.allclose(w1, (w0 - 0.5 * grad) * (1 - 0.5 * 0.1 * 0.5), atol=1e-6)


def test_warmup_fraction_is_rounded_to_steps():
    # 0.3 × 5 = 1.5 steps rounds to 2: step 0's factor is 1/2 (1 if it were truncated to 1 step)
    _, lr, *_ = _delta("unnormed", t=0, total=5, lr=1.0, warmup_fraction=0.3)
    assert float(lr) == 0.5
    _, lr, *_ = _delta("unnormed", t=0, total=10, lr=1.0, warmup_steps=4)
    assert float(lr) == 0.25


def test_packed_members_step_at_their_own_lr_and_a_frozen_one_not_at_all():
    net = _net()
    weights = [w.expand(2, *w.shape).clone() for w in net.initialize(seed=1)]
    before = [w.clone() for w in weights]
    for mode in ("unnormed", "normed"):
        cfg = optim_config(name="sgd", mode=mode, lr=[0.5, 0.25])
        state = init_state(weights, cfg)
        lr = optimizer_step(net, weights, _grads(2), state, cfg, 0, 4, base_lr=torch.tensor([0.5, 0.25]),
                            active=torch.tensor([True, False]))
        assert lr.tolist() == [0.5, 0.0]
        for w0, w1 in zip(before, weights):
            assert torch.equal(w1[1], w0[1])  # the frozen member: no step, no decay
            assert not torch.equal(w1[0], w0[0])
        weights = [w.clone() for w in before]
    cfg = optim_config(name="sgd", mode="unnormed")
    weights = [w.clone() for w in before]
    optimizer_step(net, weights, _grads(2), init_state(weights, cfg), cfg, 0, 4, base_lr=torch.tensor([0.5, 0.25]))
    for w0, w1, g in zip(before, weights, _grads(2)):
        assert torch.allclose(w0[0] - w1[0], 0.5 * g[0]) and torch.allclose(w0[1] - w1[1], 0.25 * g[1])


def test_renormalised_embeddings_are_put_back_on_their_sphere_except_in_manifold_mode():
    net = _net()
    net.atom_list()[0].renormalize_each_step = True
    weights = net.initialize(seed=1)
    cfg = optim_config(name="sgd", mode="unnormed", lr=0.5)
    optimizer_step(net, weights, _grads(), init_state(weights, cfg), cfg, 0, 4)
    assert torch.allclose(_row_rms(weights[0]), torch.ones(5))
    assert MODES["manifold"].holds_norms and not any(MODES[m].holds_norms for m in ("unnormed", "normed", "dualized"))


def test_apply_update_uses_the_scalars_already_set():
    net = _net()
    weights = net.initialize(seed=1)
    before = [w.clone() for w in weights]
    cfg = optim_config(name="sgd", mode="unnormed")
    state = init_state(weights, cfg)
    state.scalars.set(0.5, 1.0, 1.0)
    lr = apply_update(net, weights, _grads(), state, cfg, 0.25, None)
    assert float(lr) == 0.125
    assert torch.allclose(before[1] - weights[1], 0.125 * _grads()[1])


# --- state and checkpoints ------------------------------------------------------------------------------------


def test_init_state_per_optimiser_and_mode():
    weights = _net().initialize()
    sgd = init_state(weights, optim_config(name="sgd", mode="unnormed"))
    assert sgd.second_moment == [] and [m.shape for m in sgd.momentum] == [(5, 4), (3, 4)]
    assert all(not m.any() for m in sgd.momentum) and sgd.mode_state is None and sgd.mode == "unnormed"
    adam = init_state(weights, optim_config(name="adam", mode="normed", power_iterations=3))
    assert [v.shape for v in adam.second_moment] == [(5, 4), (3, 4)] and not any(v.any() for v in adam.second_moment)
    assert adam.mode_state.iterations == 3
    assert isinstance(init_state(weights, optim_config(mode="manifold")).mode_state, ManifoldState)
    assert init_state(weights, optim_config(mode="dualized")).mode_state is None
    scalars = adam.scalars
    assert [float(s) for s in (scalars.schedule, scalars.momentum_weight, scalars.second_moment_weight)] == [0, 0, 0]
    scalars.set(0.5, 0.25, 0.125)
    assert [float(s) for s in (scalars.schedule, scalars.momentum_weight, scalars.second_moment_weight)] == \
        [0.5, 0.25, 0.125]


def test_checkpoint_layout_is_shared_by_every_mode_and_round_trips():
    weights = _net().initialize()
    _, _, state, *_ = _delta("normed", lr=0.5)
    saved = state.state_dict()
    assert set(saved) == {"momentum", "second_moment", "power", "manifold"} and saved["manifold"] is None
    assert saved["power"]["iterations"] == 2 and set(saved["power"]["vectors"]) == {1}
    assert set(init_state(weights, optim_config(mode="unnormed")).state_dict()) == set(saved)
    assert init_state(weights, optim_config(mode="unnormed")).state_dict()["power"] is None
    # a stateful mode whose state is not made yet saves None in its place
    assert OptimState(momentum=[], second_moment=[], mode="normed").state_dict()["power"] is None

    fresh = init_state(weights, optim_config(name="sgd", mode="normed"))
    fresh.load_state_dict(saved, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(fresh.momentum, saved["momentum"]))
    assert fresh.second_moment == []
    assert torch.equal(fresh.mode_state.vectors[1], saved["power"]["vectors"][1])
    # a checkpoint without this mode's state leaves the fresh state as it is
    empty = init_state(weights, optim_config(name="sgd", mode="normed"))
    empty.load_state_dict({**saved, "power": None}, "cpu")
    assert empty.mode_state.vectors == {}
    adam = init_state(weights, optim_config(name="adam", mode="unnormed"))
    adam.load_state_dict({"momentum": [torch.ones(5, 4), torch.ones(3, 4)],
                          "second_moment": [torch.full((5, 4), 2.0), torch.full((3, 4), 2.0)]}, "cpu")
    assert float(adam.momentum[1].sum()) == 12.0 and float(adam.second_moment[0].sum()) == 40.0
    # resumed onto another device: every tensor moves there, the mode's vectors too
    moved = init_state(weights, optim_config(name="adam", mode="normed"))
    moved.load_state_dict({**saved, "second_moment": [torch.ones(5, 4), torch.ones(3, 4)]}, "meta")
    tensors = [*moved.momentum, *moved.second_moment, *moved.mode_state.vectors.values()]
    assert len(tensors) == 5 and {t.device.type for t in tensors} == {"meta"}


# --- the modes' grids, defaults and hooks ------------------------------------------------------------------------


def test_lr_grids_and_single_run_defaults():
    paper = [2.0**e for e in range(-6, 3)]
    assert lr_grid("adam", "unnormed") == lr_grid("adam", "mup") == [2.0**e for e in range(-13, -2)]
    assert lr_grid("sgd", "mup") == paper and single_lr(optim_config(mode="mup")) == 2.0**-8
    for optimizer, mode in (("sgd", "unnormed"), ("adam", "normed"), ("sgd", "dualized"), ("adam", "manifold")):
        assert lr_grid(optimizer, mode) == paper
    assert single_lr(optim_config(mode="unnormed")) == 2.0**-8
    assert single_lr(optim_config(name="sgd", mode="unnormed")) == 2.0**-3
    assert single_lr(optim_config(mode="normed")) == single_lr(optim_config(name="sgd", mode="dualized")) == 0.25
    assert single_lr(optim_config(lr=[0.5, 0.125])) == 0.5 and single_lr(optim_config(lr=(3,))) == 3.0
    assert single_lr(optim_config(lr=2)) == 2.0 and isinstance(single_lr(optim_config(lr=2)), float)
    assert list(MODES) == ["unnormed", "normed", "dualized", "manifold", "mup", "muon"]
    assert lr_grid("adam", "muon") == lr_grid("sgd", "muon") == [2.0**e for e in range(-12, 1)]
    assert single_lr(optim_config(mode="muon")) == 2.0**-6


def test_the_base_mode_hooks_do_nothing():
    class Bare(Mode):
        name = "bare"

    bare, weights = Bare(), _net().initialize()
    with pytest.raises(NotImplementedError):
        bare.update(_net(), weights, weights, torch.tensor(1.0), None, OptimConfig())
    assert bare.init_state(weights, OptimConfig()) is None and bare.runs_eagerly(None) is False
    assert bare.initial_weights(_net(), weights) is weights and bare.problems(OptimConfig(), None) == []
    assert bare.logged(_net(), weights, None, False) == {}
    assert bare.summary_fields(OptimConfig(), torch.device("cpu")) == {}
    assert bare.lr_grid("sgd") == [2.0**e for e in range(-6, 3)]
    net = _net()
    assert bare.network(net, lambda width: None, OptimConfig()) is net  # the network as built
    decayed = bare.regularize(net, weights, torch.tensor(0.25))  # split over the network by its masses
    assert all(torch.equal(a, b) for a, b in zip(decayed, net.regularize(weights, torch.tensor(0.25))))


def test_normed_runs_eagerly_only_until_its_vectors_are_drawn():
    _, _, state, *_ = _delta("normed", lr=0.5)
    assert MODES["normed"].runs_eagerly(PowerIterationState()) is True
    assert MODES["normed"].runs_eagerly(state.mode_state) is False


def test_dualized_settings_and_summary_name_the_iteration_dtype():
    cpu = torch.device("cpu")
    cfg = optim_config(mode="dualized", ortho="muon", ortho_steps=3)
    bfloat16 = optim_config(mode="dualized", ortho="muon", ortho_steps=3, ortho_dtype="bfloat16")
    assert dualize_settings(cfg, cpu) == {"method": "muon", "steps": 3, "iter_dtype": None}
    assert dualize_settings(bfloat16, cpu)["iter_dtype"] is torch.bfloat16
    assert MODES["dualized"].summary_fields(cfg, cpu) == {"ortho_dtype": "float32"}
    assert MODES["dualized"].summary_fields(bfloat16, cpu) == \
        {"ortho_dtype": "bfloat16"}
    assert MODES["dualized"].summary_fields(cfg, torch.device("cuda")) == {"ortho_dtype": "bfloat16"}


def test_settings_are_read_from_a_composed_node_with_interpolations_resolved():
    node = OmegaConf.create({"name": "sgd", "mode": "dualized", "lr": "${base}", "base": 0.5})
    with pytest.raises(TypeError, match="base"):  # a key the schema lacks
        OptimConfig.of(node)
    del node["base"]
    node.lr = "${mode}"
    cfg = OptimConfig.of(node)
    assert (cfg.name, cfg.mode, cfg.lr, cfg.beta1) == ("sgd", "dualized", "dualized", 0.9)


# --- validate_optim: the line a user reads for each bad setting ---------------------------------------------------


def problems(**settings) -> list[str]:
    """As before a launch: each setting against the schema (its type, range and choices), then the rest."""
    values = dataclasses.asdict(OptimConfig())
    for key, value in nested_settings(settings).items():  # a block's settings over its defaults
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    found, values = checked("optim", values, OptimConfig)
    return found + validate_optim(OptimConfig.of(values))


MODE_LIST = "unnormed, normed, dualized, manifold, mup, muon"


@pytest.mark.parametrize("settings, expected", [
    ({"name": "rmsprop"}, "optim.name='rmsprop'; allowed: sgd, adam"),
    ({"mode": "normd"}, f"optim.mode='normd'; did you mean normed? allowed: {MODE_LIST}"),
    ({"mode": "xyz"}, f"optim.mode='xyz'; allowed: {MODE_LIST}"),
    ({"lr": 0}, "optim.lr=0; every learning rate must be a number > 0"),
    ({"lr": -0.5}, "optim.lr=-0.5; every learning rate must be a number > 0"),
    ({"lr": True}, "optim.lr=True; every learning rate must be a number > 0"),
    ({"lr": []}, "optim.lr=[]; every learning rate must be a number > 0"),
    ({"lr": "2**-3"}, "optim.lr=2**-3; every learning rate must be a number > 0 (write powers as 2^-3)"),
    ({"lr": [0.5, "a"]}, "optim.lr=[0.5, 'a']; every learning rate must be a number > 0"),
    ({"lr": "1/8"}, "optim.lr=1/8; every learning rate must be a number > 0 (write fractions as decimals: 0.125)"),
    ({"lr": "1/0"}, "optim.lr=1/0; every learning rate must be a number > 0"),
    ({"lr": "a/b"}, "optim.lr=a/b; every learning rate must be a number > 0"),
    ({"lr": [0.5, 0.25, 0.5]}, "optim.lr=[0.5, 0.25, 0.5]; a packed list must not repeat a learning rate"),
    ({"beta1": 1.0}, "optim.beta1=1.0; must be a number in [0, 1)"),
    ({"beta2": -0.1}, "optim.beta2=-0.1; must be a number in [0, 1)"),
    ({"eps": -1.0}, "optim.eps=-1.0; must be a finite number >= 0"),
    ({"wd": -0.1}, "optim.wd=-0.1; must be a finite number >= 0"),
    ({"wd": float("nan")}, "optim.wd=nan; must be a finite number >= 0"),
    ({"schedule": "step"}, "optim.schedule='step'; allowed: linear, cosine, constant, wsd"),
    ({"warmup_fraction": 1.0}, "optim.warmup_fraction=1.0; must be a number in [0, 1) or null"),
    ({"warmup_fraction": -0.1}, "optim.warmup_fraction=-0.1; must be a number in [0, 1) or null"),
    ({"warmup_fraction": "a"}, "optim.warmup_fraction='a'; must be a number in [0, 1) or null"),
    ({"warmup_fraction": 0.1, "warmup_steps": 5},
     "optim.warmup_fraction=0.1 and optim.warmup_steps=5; set one of them (the other to null / 0)"),
    ({"ortho": "qr"}, "optim.ortho.method='qr'; allowed: polar_express, muon, cubic, svd"),
    ({"ortho_dtype": "fp16"}, "optim.ortho.dtype='fp16'; allowed: auto, float32, bfloat16"),
    ({"ortho_steps": 0}, "optim.ortho.steps=0; must be an integer >= 1 or null"),
    ({"manifold_step": 0.0}, "optim.manifold.step=0.0; must be a finite number > 0"),
    ({"manifold_tolerance": 0.0}, "optim.manifold.tolerance=0.0; must be a finite number > 0"),
    ({"mode": "manifold", "wd": 0.1},
     "optim.wd=0.1 with optim.mode=manifold; each weight's size is held on its manifold (a fixed radius, or a "
     "radius it learns), never decayed, so weight decay must be 0"),
])
def test_each_bad_setting_is_one_exact_line(settings, expected):
    assert problems(**settings) == [expected]


@pytest.mark.parametrize("settings", [
    {}, {"lr": 1}, {"lr": 0.5}, {"lr": [0.5, 0.25]}, {"beta1": 0.0, "beta2": 0.0}, {"eps": 0.0, "wd": 0.0},
    {"eps": 1e-8, "wd": 0.1}, {"warmup_fraction": 0.0}, {"warmup_fraction": 0.5}, {"warmup_steps": 5},
    {"ortho_steps": 1}, {"ortho_steps": None}, {"mode": "manifold"}, {"schedule": "cosine"},
    {"name": "sgd", "mode": "dualized", "ortho": "svd", "ortho_dtype": "bfloat16"},
])
def test_good_settings_at_the_edges_pass(settings):
    assert problems(**settings) == []


def test_the_schemas_choices_are_what_the_code_implements():
    """The schema names them without importing torch (the command line checks them before torch loads)."""
    assert OPTIMIZERS == tuple(DIRECTIONS) and ORTHO_METHODS == METHODS and ORTHO_DTYPES == ITER_DTYPES


def test_every_problem_is_reported_at_once():
    found = problems(name="rmsprop", beta1=2.0, schedule="step", ortho="qr")
    assert [line.split("=")[0] for line in found] == ["optim.name", "optim.beta1", "optim.schedule",
                                                      "optim.ortho.method"]


def test_adam_turns_every_non_finite_entry_into_zero():
    # m / √v with v = 0: 0/0 is NaN, ±m/0 is ±inf; the paper's Adam (no ε) sets all three to 0
    g = torch.zeros(1, 3)
    state = _state([g], adam=True)
    state.momentum[0].copy_(torch.tensor([[0.0, 2.0, -3.0]]))
    state.scalars.set(1.0, 0.0, 0.0)  # keep the moments as they are
    assert torch.equal(adam_direction(state, [g], OptimConfig())[0], torch.zeros(1, 3))


def test_step_scalars_live_on_the_weights_device():
    weights = [torch.zeros(2, 3, device="meta")]
    state = init_state(weights, optim_config(mode="unnormed"))
    assert {s.device.type for s in (state.scalars.schedule, state.scalars.momentum_weight,
                                    state.scalars.second_moment_weight)} == {"meta"}
    assert StepScalars.on(torch.device("meta")).schedule.device.type == "meta"


def test_the_compiled_update_is_used_only_when_given_and_the_mode_allows():
    calls = []

    def compiled(*args):
        calls.append("compiled")
        return apply_update(*args)

    for mode, update, expected in (("unnormed", compiled, ["compiled"]), ("unnormed", None, []),
                                   ("normed", compiled, [])):  # normed's first step draws its start vectors eagerly
        calls.clear()
        net = _net()
        weights = net.initialize(seed=1)
        cfg = optim_config(name="sgd", mode=mode, lr=0.5)
        optimizer_step(net, weights, _grads(), init_state(weights, cfg), cfg, 0, 4, update=update)
        assert calls == expected, (mode, update)
