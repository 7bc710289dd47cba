"""The ``Manifold`` mode (docs/manifold.md): its messages, settings and logged fields in full; and training that
keeps every weight on its manifold, packed as its separate runs, resumable, in every architecture, with its
scales and the logits' RMS in metrics.jsonl and a width-stable coordinate check."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from helpers import compose_config, iterations, optim_config, tiny_gpt, tiny_image
from modula_cli.config.validate import config_problems
from modula_cli.models import builtin_roles
from modula_cli.nn import GPT, Embed, Linear, Module, ResMLP, ResNet, with_role
from modula_cli.nn.manifold import (ManifoldState, atom_kinds)
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.optim.modes.dualized import Dualized
from modula_cli.optim.modes.manifold import Manifold, layer_scale
from modula_cli.run.trainer import train
from test_train import assert_same_losses
from manifold_references import (F64, _ascent, _fixed_step, _gen, _on_manifold_error, _polar, _stiefel,
                                 scaled_step_ratio)


# --- the Manifold mode: its settings, problems and logged fields ---------------------------------------------------


def test_manifold_problems_in_full():
    mode = Manifold()
    roles = ("embed", "hidden", "output")
    cfg = optim_config(mode="manifold", wd=0.1, manifold_scaled=["output", "hidden", "embed"],
                      manifold_free=["output", "embed"])
    assert mode.problems(cfg, roles) == [
        "optim.wd=0.1 with optim.mode=manifold; each weight's size is held on its manifold (a fixed radius, or a "
        "radius it learns), never decayed, so weight decay must be 0",
        "optim.manifold.scaled and optim.manifold.free both name embed, output; a layer is either scaled on the "
        "manifold or free of it"]
    assert mode.problems(optim_config(mode="manifold", manifold_scaled=["hidden"], manifold_free=["output"]),
                         roles) == []
    typo = optim_config(mode="manifold", manifold_scaled=["hiden"], manifold_free=["outptu"])
    problems = mode.problems(typo, roles)
    assert len(problems) == 2
    assert problems[0].startswith("optim.manifold.scaled: no layer has the role 'hiden'; did you mean hidden? roles: ")
    assert problems[1].startswith("optim.manifold.free: no layer has the role 'outptu'; did you mean output? roles: ")
    assert mode.problems(typo, None) == []  # roles unknown yet: checked once the network is built


def test_manifold_settings_and_weight_decay_are_checked(tiny_text_root):
    problems = config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", "optim.wd=0.1",
                                                        "optim.manifold.iterations=-1", "optim.manifold.step=0")))
    assert any(p.startswith("optim.wd=0.1 with optim.mode=manifold") for p in problems)
    assert any(p.startswith("optim.manifold.iterations=-1") for p in problems)
    assert any(p.startswith("optim.manifold.step=0") for p in problems)
    # Its settings belong to manifold runs only: another mode's fingerprint ignores them.
    from modula_cli.config.identity import fingerprint

    normed = [compose_config(*tiny_gpt(tiny_text_root, f"optim.manifold.iterations={k}")) for k in (2, 8)]
    assert fingerprint(normed[0]) == fingerprint(normed[1])
    manifold = [compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", f"optim.manifold.iterations={k}"))
                for k in (2, 8)]
    assert fingerprint(manifold[0]) != fingerprint(manifold[1])


def test_manifold_roles_are_checked_before_launch(tiny_text_root):
    def problems(*extra):
        return config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", *extra)))

    typo = problems("optim.manifold.free=[outptu]")
    assert any(p.startswith("optim.manifold.free: no layer has the role 'outptu'; did you mean output? roles: "
                            "embed.token") for p in typo)
    both = problems("optim.manifold.free=[output]", "optim.manifold.scaled=[output]")
    assert any("both name output" in p for p in both)
    assert any("must be a list of layer roles" in p for p in problems("optim.manifold.scaled=output"))
    # one list serves every architecture: the GPT's roles are accepted for a ResMLP (they select nothing there)
    assert "attn.q" in builtin_roles()["gpt"] and "attn.q" not in builtin_roles()["resmlp"]
    assert builtin_roles()["resmlp"] == builtin_roles()["resnet"] == ("input", "hidden", "output")
    # another mode ignores them
    assert not config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.manifold.free=[outptu]")))


def _tiny_net() -> Module:
    return with_role(Linear(6, 3), "output") @ with_role(Linear(3, 3), "hidden") @ with_role(Embed(3, 5), "embed")


def test_manifold_update_reads_its_settings_and_sets_the_kinds_once():
    # embed (fixed), a tall 4×3 hidden layer (scaled: not square, so the ascent has work to do), output (free)
    net = with_role(Linear(6, 4), "output") @ with_role(Linear(4, 3), "hidden") @ with_role(Embed(3, 5), "embed")
    mode = Manifold()
    weights = mode.initial_weights(net, net.initialize(0, dtype=F64))
    grads = [torch.randn(w.shape, generator=_gen(110 + i), dtype=F64) for i, w in enumerate(weights)]
    lr, share, ps = 0.6, net.target_shares()[1], net.atom_list()[1].polar_scale
    eta = lr * share
    U = weights[1] / ps  # on the manifold at radius 1
    sign = math.copysign(1.0, float((grads[1] * U).sum()))

    def config(**settings) -> OptimConfig:
        return optim_config(mode="manifold", manifold_scaled=["hidden"], manifold_free=["output"],
                           ortho="polar_express", ortho_steps=1, **settings)

    cfg = config(manifold_iterations=3, manifold_step=0.7, manifold_tolerance=0.0, manifold_warm_start=True)
    state = mode.init_state(weights, cfg)
    deltas = mode.update(net, weights, grads, torch.tensor(lr), state, cfg)
    assert state.kinds == ["fixed", "scaled", "free"]
    assert state.means()[1] == [3.0]  # one matrix on its manifold, all K = 3 iterations (tolerance 0)
    # (an iterate passes near a singular value of 0.03, where the polar factor amplifies rounding 40-fold)
    A, correction = _ascent(U, grads[1], 3, 0.7)
    assert torch.allclose(weights[1] - deltas[1], ps * (1 - eta * sign) * _polar(U - eta * A), atol=1e-3)
    assert torch.allclose(state.multipliers[1].double(), correction[None], atol=1e-3)
    # the free readout takes dualized mode's step under the same optim.ortho.method settings (one Polar Express step
    # here, visibly short of the exact polar factor)
    dualized = Dualized().update(net, weights, grads, torch.tensor(lr), None, cfg)[2]
    assert torch.allclose(deltas[2], dualized, atol=1e-6)
    exact = lr * net.target_shares()[2] * net.atom_list()[2].polar_scale * _polar(grads[2])
    assert not torch.allclose(deltas[2], exact, atol=1e-3)
    # the next step starts from the kept correction when warm (K = 0: the start is the answer), else fresh
    for warm in (True, False):
        again = ManifoldState(multipliers=dict(state.multipliers), kinds=state.kinds)
        delta = mode.update(net, weights, grads, torch.tensor(lr), again,
                            config(manifold_iterations=0, manifold_warm_start=warm))[1]
        A, _ = _ascent(U, grads[1], 0, 1.0, multiplier=correction if warm else None)
        assert torch.allclose(weights[1] - delta, ps * (1 - eta * sign) * _polar(U - eta * A), atol=1e-3), warm
    # a tolerance above any violation (RMS(H) ≤ 2) stops before the first iteration
    loose = ManifoldState()
    mode.update(net, weights, grads, torch.tensor(lr), loose,
                config(manifold_iterations=3, manifold_tolerance=10.0, manifold_warm_start=False))
    assert loose.means()[1] == [0.0]
    # kinds already known are kept (they came from the config of the first step)
    state.kinds = ["free", "free", "free"]
    mode.update(net, weights, grads, torch.tensor(lr), state, cfg)
    assert state.kinds == ["free", "free", "free"] and state.means() is None


def test_manifold_update_of_a_single_atom_network():
    net = with_role(Linear(6, 3), "output")
    mode = Manifold()
    weights = mode.initial_weights(net, [torch.randn(6, 3, generator=_gen(120), dtype=F64)])
    grad = torch.randn(6, 3, generator=_gen(121), dtype=F64)
    cfg = optim_config(mode="manifold", manifold_scaled=[], manifold_free=[])
    delta = mode.update(net, weights, [grad], torch.tensor(0.25), mode.init_state(weights, cfg), cfg)[0]
    U = weights[0] / net.polar_scale
    assert torch.allclose(weights[0] - delta, net.polar_scale * _fixed_step(U, grad, 0.25), atol=2e-5)


def test_logged_fields_are_the_recorded_means_and_the_scales_of_unfixed_roles():
    net = _tiny_net()
    mode = Manifold()
    # tree order: embedding rows at RMS 3, hidden at radius 2, output at radius 0.5
    weights = [3.0 * torch.ones(5, 3, dtype=F64), 2.0 * _stiefel(3, 3, 131),
               0.5 * net.atom_list()[2].polar_scale * _stiefel(6, 3, 130)]
    state = ManifoldState()
    assert mode.logged(net, weights, state, packed=False) == {}
    state.record(torch.tensor(0.25), torch.tensor(2.0))
    state.record(torch.tensor(0.75), torch.tensor(4.0))
    state.kinds = ["fixed", "scaled", "free"]
    logged = mode.logged(net, weights, state, packed=False)
    assert logged == {"tangency": pytest.approx([0.5]), "dual_iterations": pytest.approx([3.0]),
                      "scale/hidden": pytest.approx([2.0]), "scale/output": pytest.approx([0.5])}
    # read once: the next log has no dual ascent to report, only the scales
    assert mode.logged(net, weights, state, packed=False).keys() == {"scale/hidden", "scale/output"}
    packed = [torch.stack([w, 2 * w]) for w in weights]
    state.kinds = ["scaled", "fixed", "scaled"]
    state.record(torch.tensor([0.1, 0.3]), torch.tensor([1.0, 0.0]))
    logged = mode.logged(net, packed, state, packed=True)
    assert logged == {"tangency": pytest.approx([0.1, 0.3]), "dual_iterations": pytest.approx([1.0, 0.0]),
                      "scale/embed": pytest.approx([3.0, 6.0]), "scale/output": pytest.approx([0.5, 1.0])}


# --- the optimiser's steps in manifold mode ------------------------------------------------------------------------


def test_a_zero_gradient_leaves_every_weight_in_place():
    net = Linear(6, 10) @ Embed(10, 7)
    weights = net.onto_manifold(net.initialize(0))
    opt = optim_config(name="sgd", mode="manifold", lr=0.3)
    state = init_state(weights, opt)
    before = [w.clone() for w in weights]
    optimizer_step(net, weights, [torch.zeros_like(w) for w in weights], state, opt, 0, 10)
    for old, new in zip(before, weights):
        assert torch.allclose(old, new, atol=1e-6)


def test_manifold_checkpoint_resume_keeps_the_multipliers(tmp_path):
    """The warm-start multipliers are optimiser state: saved and restored with a checkpoint."""
    net = Linear(4, 12) @ Linear(12, 6)
    weights = net.onto_manifold(net.initialize(0))
    opt = optim_config(name="adam", mode="manifold", lr=0.2)
    state = init_state(weights, opt)
    grads = [torch.randn_like(w) for w in weights]
    optimizer_step(net, weights, grads, state, opt, 0, 5)
    assert set(state.mode_state.multipliers) == {0, 1}
    restored = init_state(weights, opt)
    restored.load_state_dict(state.state_dict(), "cpu")
    for key, value in state.mode_state.multipliers.items():
        assert torch.equal(restored.mode_state.multipliers[key], value)
    violation, iterations = state.mode_state.means()
    assert math.isfinite(violation[0]) and iterations == [0.0]


@pytest.mark.parametrize("make_net, batch", [
    (lambda: GPT(17, 8, 2, 16, 2), lambda g: (torch.randint(0, 17, (4, 8), generator=g),) * 2),
    (lambda: ResMLP(16, 2, 2, 12, 5),
     lambda g: (torch.randn(6, 3, 2, 2, generator=g), torch.randint(0, 5, (6,), generator=g))),
    (lambda: ResNet(4, 1, 1, 3, 5),
     lambda g: (torch.randn(2, 3, 6, 6, generator=g), torch.randint(0, 5, (2,), generator=g))),
])
def test_weights_stay_on_their_manifolds_for_many_steps(make_net, batch):
    """300 steps at a constant LR of 0.5 with the configured defaults (learned radii, free readout): every
    fixed matrix and embedding row stays on its manifold, every scaled matrix on its scaled one."""
    net = make_net()
    weights = [w.requires_grad_() for w in net.onto_manifold(net.initialize(0))]
    assert _on_manifold_error(net, weights) < 2e-6
    opt = OptimConfig.of(compose_config("optim.mode=manifold", "optim.lr=0.5", "optim.schedule=constant").optim)
    state = init_state(weights, opt)
    generator = torch.Generator().manual_seed(0)
    for t in range(300):
        x, y = batch(generator)
        logits = net(x, weights)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer_step(net, weights, list(torch.autograd.grad(loss, weights)), state, opt, t, 300)
    kinds = state.mode_state.kinds
    assert set(kinds) >= {"scaled", "free"}  # the defaults exercise every kind here
    assert _on_manifold_error(net, weights, kinds) < 1e-5
    # and the radii did move: a learned scale is not held at 1
    assert any(abs(float(layer_scale(atom, w, members=False)) - 1) > 0.05
               for atom, w, kind in zip(net.atoms(), weights, kinds) if kind == "scaled")
    violation, iterations = state.mode_state.means()
    # ‖WᵀA + AᵀW‖_op ≤ 2; by default no ascent (the projected start), so no iterations
    assert 0 <= violation[0] <= 2 and iterations[0] == 0 == opt.manifold.iterations


# --- training runs -------------------------------------------------------------------------------------------------


def test_gaussian_initial_weights_are_put_on_the_manifold(tmp_path, tiny_text_root):
    """The standard GPT starts from Gaussian weights: manifold training starts from their polar factors."""
    cfg = compose_config(*tiny_gpt(tiny_text_root, "arch=standard_gpt", "optim.mode=manifold", "train.steps=3",
                                   "train.keep_checkpoint=true"))
    assert train(cfg, tmp_path / "run").status == "completed"
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["state"]["weights"]
    from modula_cli.nn import StandardGPT, layer_roles

    net = StandardGPT(vocab_size=len(set((tiny_text_root / "shakespeare" / "input.txt").read_text())), context=16,
                      num_heads=2, width=16, depth=1)
    opt = OptimConfig.of(cfg.optim)
    kinds = atom_kinds(layer_roles(net), opt.manifold.scaled, opt.manifold.free)
    assert _on_manifold_error(net, saved, kinds) < 1e-5


@pytest.mark.parametrize("arch", ["gpt", "resmlp", "resnet"])
def test_packed_manifold_run_matches_separate_runs(arch, tmp_path, tiny_text_root, cifar_root):
    def config(*extra):
        common = ["optim.mode=manifold", "train.steps=8", *extra]
        return compose_config(*(tiny_gpt(tiny_text_root, *common) if arch == "gpt"
                                else tiny_image(arch, cifar_root, *common)))

    result = train(config("optim.lr=[0.1,0.4]", "train.seed=[0,1]"), tmp_path / "pack")
    for member in result.members:
        name = f"lr={member['lr']!r},seed={member['seed']}"
        separate = train(config(f"optim.lr={member['lr']}", f"train.seed={member['seed']}"), tmp_path / name).summary
        assert_same_losses(tmp_path / "pack" / name, tmp_path / name)
        assert member["fingerprint"] == separate["fingerprint"]
        logged = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        packed = [json.loads(line) for line in (tmp_path / "pack" / name / "metrics.jsonl").read_text().splitlines()]
        tangency = [(r["step"], r["tangency"], r["dual_iterations"]) for r in logged if "tangency" in r]
        assert len(tangency) == iterations(config()) and all(0 <= v <= 2 and k == 0 for _, v, k in tangency)
        assert [r["step"] for r in packed if "tangency" in r] == [s for s, *_ in tangency]
        # the violation is a small difference of nearly equal matrices: equal to rounding at its scale
        assert [r["tangency"] for r in packed if "tangency" in r] == pytest.approx([v for _, v, _ in tangency],
                                                                                   abs=1e-3)


def applied_matrix(atom, weight: torch.Tensor) -> torch.Tensor:
    """The matrix a linear layer applies (its stored weight times any forward scale), read off its forward pass."""
    return atom.forward(torch.eye(atom.d_in), [weight]).T


def test_the_scales_and_logit_rms_are_logged(tmp_path, tiny_text_root, monkeypatch):
    """Each logged value, recomputed from the weights that step left: a layer's scale is its RMS singular value
    in the RMS→RMS unit (σ / sqrt(d_out/d_in)), a scaled matrix's is its radius, which only takes sign steps
    of LR × share from 1; logit_rms is the RMS of the logits on the first evaluation batch's first 4 samples."""
    import modula_cli.run.loop as run_module
    from omegaconf import OmegaConf

    from modula_cli.data import build_dataset
    from modula_cli.nn import layer_roles

    original, after = run_module.optimizer_step, {}

    def spy(net, weights, grads, state, cfg_, t, total, **kwargs):
        lr = original(net, weights, grads, state, cfg_, t, total, **kwargs)
        after[t] = net, [w.detach().clone() for w in weights], float(lr)
        return lr

    monkeypatch.setattr(run_module, "optimizer_step", spy)
    cfg = compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", "train.steps=6", "train.log_every=2",
                                   "optim.manifold.scaled=[attn.q,attn.k]", "optim.manifold.free=[output]"))
    train(cfg, tmp_path)
    monkeypatch.setattr(run_module, "optimizer_step", original)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "train_loss" in r]
    assert [r["step"] for r in logged] == [0, 2, 4, 6]  # the paper variant's extra step (LR 0) logs too
    assert all({"logit_rms", "scale/attn.q", "scale/attn.k", "scale/output"} <= set(r) for r in logged)
    assert not any("scale/mlp.in" in r for r in logged)  # fixed layers have no scale to report
    data = build_dataset(cfg.data.name, **OmegaConf.to_container(cfg.data, resolve=True))
    probe = data.eval_batches(cfg.train.eval_batches, cfg.train.batch_size)[0][0][:4]
    for record in logged:
        net, weights, _ = after[record["step"]]
        atoms = dict(zip(layer_roles(net), zip(net.atoms(), weights, net.target_shares())))
        for role in ("attn.q", "attn.k", "output"):
            atom, weight, share = atoms[role]
            sigma = torch.linalg.svdvals(applied_matrix(atom, weight))
            unit = math.sqrt(atom.d_out / atom.d_in)
            assert record[f"scale/{role}"] == pytest.approx(float(sigma.pow(2).mean().sqrt()) / unit, rel=1e-4)
            if role != "output":  # scaled: on its manifold, at a radius 1 ± η₀ ± η₁ …, η_t = LR_t × share
                assert float(sigma.max() / sigma.min()) == pytest.approx(1.0, abs=1e-3)
                etas = [after[t][2] * share for t in range(record["step"] + 1)]
                radii = [1 + sum(s * eta for s, eta in zip(signs, etas))
                         for signs in itertools.product((-1, 1), repeat=len(etas))]
                assert min(abs(record[f"scale/{role}"] - r) for r in radii) < 1e-4
        with torch.no_grad():
            rms = float(net(probe, weights).float().pow(2).mean().sqrt())
        assert record["logit_rms"] == pytest.approx(rms, rel=1e-4)
    assert all(abs(r["scale/attn.q"] - 1) > 1e-2 for r in logged)  # q's radius has moved from the start
    normed = compose_config(*tiny_gpt(tiny_text_root, "train.steps=2"))
    train(normed, tmp_path / "normed")
    first = json.loads((tmp_path / "normed" / "metrics.jsonl").read_text().splitlines()[0])
    assert "logit_rms" in first and not any(key.startswith("scale/") for key in first)


GATED = '''
import math
from modula_cli.nn import Flatten, Linear, with_role

def net(arch, data):
    first = with_role(Linear(arch.width, math.prod(data.input_shape)), "input") @ Flatten()
    gate = with_role(Linear(arch.width, arch.width), "gate")
    return with_role(Linear(data.num_classes, arch.width), "output") @ gate @ first
'''


def test_a_user_networks_own_roles_are_checked_once_it_is_built(tmp_path, cifar_root, monkeypatch):
    (tmp_path / "gated_models.py").write_text(GATED)
    monkeypatch.chdir(tmp_path)

    def config(*roles):
        return compose_config(*tiny_image("resmlp", cifar_root, "arch.name=gated_models:net", "optim.mode=manifold",
                                          "train.steps=3", *roles))

    assert train(config("optim.manifold.free=[output,gate]"), tmp_path / "ok").status == "completed"
    logged = json.loads((tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()[0])
    assert {"scale/gate", "scale/output", "scale/input"} <= set(logged)  # input: scaled by default
    with pytest.raises(ValueError, match="optim.manifold.free: no layer has the role 'gait'"):
        train(config("optim.manifold.free=[output,gait]"), tmp_path / "typo")


def _is_one_of(value: float, candidates) -> bool:
    return min(abs(value - c) for c in candidates) < 1e-3


def _radius_path(ratios, eta: float) -> list[float]:
    """The radii a scaled square matrix had before each of its steps, read off its update ratios: each step's
    ratio must be the closed form's at the radius so far, for one sign of the radial step."""
    radius, path = 1.0, []
    for ratio in ratios:
        sign = next((s for s in (-1, 1) if abs(ratio - scaled_step_ratio(radius, s, eta)) < 1e-3), None)
        assert sign is not None, (ratio, radius, [scaled_step_ratio(radius, s, eta) for s in (-1, 1)])
        path.append(radius)
        radius += sign * eta
    return path


@pytest.mark.parametrize("design", ["default", "fixed"])
def test_coordinate_check_of_manifold_adam_is_width_stable(design, tiny_text_root, tmp_path):
    from test_coord import tiny_gpt_coord

    from modula_cli.coord.check import run_coord_check

    fixed = ["optim.manifold.scaled=[]", "optim.manifold.free=[]"] if design == "fixed" else []
    cfg = tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", "coord.modes=[manifold]", *fixed)
    table, _, verdict = run_coord_check(cfg, tmp_path)
    assert verdict["manifold"].startswith("width-stable"), verdict["manifold"]
    moved = table[table["step"] == 4]
    assert (moved["dir_change"] > 0).all() and (moved["dir_change"] <= 2).all()
    free = tuple(cfg.optim.manifold.free) if design == "default" else ()
    scaled = tuple(cfg.optim.manifold.scaled) if design == "default" else ()
    if design == "default":  # the roles this test's closed forms are matched to
        assert set(free) == {"output", "attn.q", "attn.k"} and {"embed.token", "attn.v", "attn.out"} <= set(scaled)
    steps = table[table["step"] > 0].sort_values(["point", "step"])
    for _, row in steps.iterrows():
        eta, ratio = row["lr"] * row["share"], row["update_ratio"]
        if row["role"] in free:  # the duality map: exactly its share
            assert ratio == pytest.approx(1.0, abs=1e-3), row
        elif row["kind"] == "Embed" or row["role"].startswith("attn."):  # rows; the width × width matrices
            if row["role"] not in scaled:  # on the sphere / the orthogonal matrices: a pure turn
                assert ratio == pytest.approx(scaled_step_ratio(1.0, 0, eta), abs=1e-3), row
            elif row["kind"] == "Embed":  # the largest row's: its radius has taken t − 1 sign steps of η
                t = int(row["step"])
                assert _is_one_of(ratio, [scaled_step_ratio(1 + j * eta, s, eta) for j in range(1 - t, t)
                                          for s in (-1, 1)]), row
        else:
            # non-square (the MLP's 4·width × width, a fixed readout): no closed form, their tangent direction is
            # only projected; measured 1.479–1.542 scaled, 1.058–1.151 fixed (a unit turn and the residue)
            assert (1.45 <= ratio <= 1.57) if row["role"] in scaled else (1.03 <= ratio <= 1.17), row
    # a scaled square matrix: one radius path, from 1, explains all four of its steps
    square = steps[steps["role"].isin([r for r in scaled if r.startswith("attn.")])]
    for _, layer in square.groupby(["point", "layer"]):
        eta = float(layer["lr"].iloc[0] * layer["share"].iloc[0])
        radii = _radius_path(layer["update_ratio"], eta)
        assert radii[0] == 1.0 and len(radii) == 4 and len(set(radii)) > 1  # the radius is learnt
