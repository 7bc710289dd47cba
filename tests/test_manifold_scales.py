"""Manifold mode's learned scales (issue 26): a layer held at a learned radius (scaled) or freed from the
manifold (free) takes the step derived by hand here; the others are untouched by the choice; the roles are
checked before launch; the scales and the logits' RMS reach metrics.jsonl."""

import itertools
import json
import math

import pytest
import torch

from conftest import compose_config, tiny_gpt, tiny_image
from modula_cli.models import builtin_roles
from modula_cli.nn import Embed, Linear
from modula_cli.nn.manifold import DualAscent, ManifoldState, atom_kinds, radius_step, sphere_step
from modula_cli.run.trainer import train
from modula_cli.run.temperatures import logit_rms
from modula_cli.optim.modes.manifold import layer_scale
from modula_cli.config.validate import config_problems


def _polar(X):
    U, _, Vh = torch.linalg.svd(X)
    return U @ Vh


def _orthogonal(n, seed):
    return torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed)))[0]


def test_a_scaled_square_matrix_turns_by_eta_over_r_and_its_radius_takes_a_sign_step():
    """W = r·Q (Q orthogonal): the tangent direction is Q·polar(skew(QᵀG)) (exact for square matrices), the
    direction moves η/r along it and is retracted by the polar factor; r ← r − η·sign⟨G, Q⟩."""
    atom = Linear(8, 8)
    Q, r, eta = _orthogonal(8, 0), 2.5, 0.3
    G = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    S = Q.T @ G
    A = Q @ _polar((S - S.T) / 2)
    expected_r = r - eta * float(torch.sign((G * Q).sum()))
    expected = expected_r * _polar(Q - (eta / r) * A)
    delta = atom.manifold_update([r * Q], [G], eta, DualAscent(), ManifoldState(), kinds=["scaled"])
    assert torch.allclose(r * Q - delta[0], expected, atol=2e-5)
    # a fixed matrix of the same start takes the unscaled step: at r = 1 the two kinds agree exactly
    fixed = atom.manifold_update([Q], [G], eta, DualAscent(), ManifoldState(), kinds=["fixed"])[0]
    scaled = atom.manifold_update([Q], [G], eta, DualAscent(), ManifoldState(), kinds=["scaled"])[0]
    assert torch.allclose(Q - fixed, _polar(Q - eta * A), atol=2e-5)
    assert torch.allclose(Q - scaled, (1 - eta * float(torch.sign((G * Q).sum()))) * (Q - fixed), atol=2e-5)


def test_the_radius_never_falls_below_half():
    r = torch.tensor([1.0, 0.4, 3.0])
    assert radius_step(r, torch.tensor([1.0, 1.0, -1.0]), 0.5).tolist() == pytest.approx([0.5, 0.2, 3.5])
    assert radius_step(r, torch.zeros(3), 0.5).tolist() == pytest.approx(r.tolist())  # no signal, no step


def test_scaled_embedding_rows_each_learn_their_own_radius():
    atom = Embed(4, 3)  # 3 rows of width 4; unit RMS = norm 2
    generator = torch.Generator().manual_seed(2)
    u = torch.nn.functional.normalize(torch.randn(3, 4, generator=generator), dim=-1)
    radii = torch.tensor([[1.0], [2.0], [0.5]])
    weight = 2 * radii * u
    g = torch.randn(3, 4, generator=generator)
    eta = 0.2
    new = weight - atom.manifold_update([weight], [g], eta, DualAscent(), ManifoldState(), kinds=["scaled"])[0]
    expected_r = radii - eta * torch.sign((u * g).sum(-1, keepdim=True))
    expected = 2 * expected_r * sphere_step(u, g, eta / radii)
    assert torch.allclose(new, expected, atol=1e-6)
    assert torch.allclose(new.norm(dim=-1, keepdim=True) / 2, expected_r, atol=1e-6)


def test_a_free_layer_takes_the_dualized_step_and_the_others_do_not_notice():
    net = Linear(5, 16) @ Linear(16, 16) @ Embed(16, 7)
    weights = net.onto_manifold(net.initialize(0))
    grads = [torch.randn(w.shape, generator=torch.Generator().manual_seed(i)) for i, w in enumerate(weights)]
    state = ManifoldState()
    mixed = net.manifold_update(weights, grads, 0.4, DualAscent(), state, kinds=["fixed", "scaled", "free"])
    fixed = net.manifold_update(weights, grads, 0.4, DualAscent(), ManifoldState(), kinds=["fixed"] * 3)
    dualized = net.dualize(grads, 0.4)
    assert torch.allclose(mixed[2], dualized[2], atol=1e-6)  # the readout (last atom): the duality map
    assert torch.equal(mixed[0], fixed[0])  # the embedding's step does not depend on the others' kinds
    assert not torch.allclose(mixed[1], fixed[1], atol=1e-4)  # the scaled matrix grew or shrank
    assert set(state.multipliers) == {1}  # only manifold matrices keep a multiplier


def test_kinds_follow_the_roles():
    roles = ["embed.token", "attn.q", "attn.k", "mlp.in", "output"]
    assert atom_kinds(roles, ["mlp.in"], ["output", "attn.q"]) == ["fixed", "free", "fixed", "scaled", "free"]


def test_manifold_roles_are_checked_before_launch(tiny_text_root):
    def problems(*extra):
        return config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", *extra)))

    typo = problems("optim.manifold_free=[outptu]")
    assert any(p.startswith("optim.manifold_free: no layer has the role 'outptu'; did you mean output? roles: "
                            "embed.token") for p in typo)
    both = problems("optim.manifold_free=[output]", "optim.manifold_scaled=[output]")
    assert any("both name output" in p for p in both)
    assert any("must be a list of layer roles" in p for p in problems("optim.manifold_scaled=output"))
    # one list serves every architecture: the GPT's roles are accepted for a ResMLP (they select nothing there)
    assert "attn.q" in builtin_roles()["gpt"] and "attn.q" not in builtin_roles()["resmlp"]
    assert builtin_roles()["resmlp"] == builtin_roles()["resnet"] == ("input", "hidden", "output")
    # another mode ignores them
    assert not config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.manifold_free=[outptu]")))


def test_layer_scale_is_the_radius_relative_to_the_manifold():
    linear = Linear(6, 3)  # wide: 3 columns, polar scale √2
    Q = torch.linalg.qr(torch.randn(6, 3, generator=torch.Generator().manual_seed(0)))[0]
    weight = 3.0 * linear.polar_scale * Q
    assert float(layer_scale(linear, weight, members=False)) == pytest.approx(3.0, rel=1e-5)
    stacked = torch.stack([weight, weight / 3])
    assert layer_scale(linear, stacked, members=True).tolist() == pytest.approx([3.0, 1.0], rel=1e-5)
    embed = Embed(4, 2)
    rows = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]])  # row RMS 1 and 2
    assert float(layer_scale(embed, rows, members=False)) == pytest.approx((2.5) ** 0.5)


def test_logit_rms_per_member():
    net = Linear(3, 4)
    w = torch.stack([torch.eye(3, 4), 2 * torch.eye(3, 4)])
    x = torch.ones(2, 5, 4)
    assert logit_rms(net, [w], x, members=True).tolist() == pytest.approx([1.0, 2.0])


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
                                   "optim.manifold_scaled=[attn.q,attn.k]", "optim.manifold_free=[output]"))
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

    assert train(config("optim.manifold_free=[output,gate]"), tmp_path / "ok").status == "completed"
    logged = json.loads((tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()[0])
    assert {"scale/gate", "scale/output", "scale/input"} <= set(logged)  # input: scaled by default
    with pytest.raises(ValueError, match="optim.manifold_free: no layer has the role 'gait'"):
        train(config("optim.manifold_free=[output,gait]"), tmp_path / "typo")
