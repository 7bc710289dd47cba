"""Manifold mode (docs/design.md, "Manifold mode"; docs/manifold.md), one concept from its parts to whole runs:
``ManifoldState`` on known numbers; msign, the tangent direction (the documented dual ascent redone with
torch.linalg.svd polar factors) and the retraction; hyperspherical steps on basis vectors worked out by hand; each
kind of atom's update, fixed, scaled (a learned radius, issue 26) or free, against steps derived by hand; the
``Manifold`` mode's messages, settings and logged fields in full; and training that keeps every weight on its
manifold, packed as its separate runs, resumable, in every architecture, with its scales and the logits' RMS in
metrics.jsonl and a width-stable coordinate check."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from torch import Tensor

from helpers import compose_config, iterations, tiny_gpt, tiny_image
from modula_cli.config.validate import config_problems
from modula_cli.models import builtin_roles
from modula_cli.nn import GPT, Conv2D, Embed, Linear, Module, ResMLP, ResNet, with_role
from modula_cli.nn.manifold import (DualAscent, ManifoldState, atom_kinds, manifold_update, msign, onto_manifold,
                                    radius_step, scaled_sphere_step, sphere_step, tangent_direction)
from modula_cli.optim import OptimConfig, init_state, optimizer_step
from modula_cli.optim.modes.dualized import Dualized
from modula_cli.optim.modes.manifold import Manifold, layer_scale
from modula_cli.run.temperatures import logit_rms
from modula_cli.run.trainer import train
from test_train import assert_same_losses


# --- independent references ----------------------------------------------------------------------------------------


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _polar(X: Tensor) -> Tensor:
    """U Vᵀ of X = U Σ Vᵀ (the exact msign), over the last two dimensions, in float64."""
    U, _, Vh = torch.linalg.svd(X.to(F64), full_matrices=False)
    return U @ Vh


def _stiefel(m: int, n: int, seed: int, batch: tuple[int, ...] = ()) -> Tensor:
    """Orthonormal columns (m ≥ n), float64."""
    return torch.linalg.qr(torch.randn(*batch, m, n, generator=_gen(seed), dtype=F64))[0]


def _sym(X: Tensor) -> Tensor:
    return (X + X.mT) / 2


def _unit_rms(G: Tensor) -> Tensor:
    return G / G.pow(2).mean(dim=(-2, -1), keepdim=True).sqrt()


def _violation(W: Tensor, A: Tensor) -> Tensor:
    """RMS(WᵀA + AᵀW) per matrix."""
    H = W.mT @ A
    return (H + H.mT).pow(2).mean(dim=(-2, -1)).sqrt()


def _ascent(W: Tensor, G: Tensor, iterations: int, step: float, multiplier: Tensor | None = None
            ) -> tuple[Tensor, Tensor]:
    """The documented dual ascent with no early stop: G at unit RMS, Λ₀ = −¼(WᵀG + GᵀW) (+ a warm start),
    A = polar(G + 2WΛ), Λ ← Λ − α_k(WᵀA + AᵀW), α_k = step·(1 − k/K). Returns (A, Λ_K − Λ₀ without the warm
    start), i.e. what ``tangent_direction`` reports as the multiplier."""
    G = _unit_rms(G.to(F64))
    fresh = -0.5 * _sym(W.mT @ G)
    lam = fresh if multiplier is None else fresh + multiplier
    for k in range(iterations):
        A = _polar(G + 2 * W @ lam)
        lam = lam - step * (1 - k / iterations) * 2 * _sym(W.mT @ A)
    return _polar(G + 2 * W @ lam), lam - fresh


def _fixed_step(W: Tensor, G: Tensor, eta: float, r: float = 1.0, learn: bool = False) -> Tensor:
    """One manifold step of a tall unit-scale matrix W = r·U (K = 0: the projected start):
    U ← polar(U − (η/r)·polar(proj(G))), and for a learned radius r ← max(r − η·sign⟨G, U⟩, r/2)."""
    U = W.to(F64) / r
    A, _ = _ascent(U, G, 0, 1.0)
    new_r = max(r - eta * math.copysign(1.0, float((G.to(F64) * U).sum())), r / 2) if learn else r
    return new_r * _polar(U - (eta / r) * A)


def _basis(d: int, i: int) -> Tensor:
    e = torch.zeros(d, dtype=F64)
    e[i] = 1.0
    return e


def _stiefel_f32(m, n, seed=0):
    """Orthonormal columns (m ≥ n), in float32 (``_stiefel`` above: float64)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(m, n, generator=generator))[0]


def _violation_overall(W, A):
    """RMS(WᵀA + AᵀW) over all the matrices together, as a float (``_violation`` above: per matrix)."""
    H = W.mT @ A + A.mT @ W
    return float(H.pow(2).mean().sqrt())


def _polar_f32(X):
    """U Vᵀ of a square X in its own dtype (``_polar`` above: in float64)."""
    U, _, Vh = torch.linalg.svd(X)
    return U @ Vh


def _orthogonal(n, seed):
    return torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed)))[0]


def _on_manifold_error(net, weights, kinds=None):
    """Largest |WᵀW − I| over the unit-scale matrices, and |row RMS − 1| over embedding rows; a scaled
    matrix is measured after dividing by its radius (its RMS singular value); free layers are not measured."""
    worst = 0.0
    for atom, w, kind in zip(net.atoms(), weights, kinds or ["fixed"] * len(weights)):
        stack = atom.matrices(w.detach())
        if kind == "free" or (stack is None and kind == "scaled"):  # a scaled row is on its own sphere
            continue
        if stack is None:
            worst = max(worst, float((w.detach().pow(2).mean(-1).sqrt() - 1).abs().max()))
            continue
        unit = stack / atom.polar_scale
        unit = unit.mT if unit.shape[-2] < unit.shape[-1] else unit
        if kind == "scaled":
            unit = unit / (unit.pow(2).sum(dim=(-2, -1), keepdim=True) / unit.shape[-1]).sqrt()
        worst = max(worst, float((unit.mT @ unit - torch.eye(unit.shape[-1])).abs().max()))
    return worst


# --- ManifoldState and the kinds of atoms --------------------------------------------------------------------------


def test_state_means_average_each_field_over_the_recorded_steps_and_reset():
    state = ManifoldState()
    assert state.means() is None  # nothing recorded yet
    state.record(torch.tensor(1.0), torch.tensor(2.0))
    state.record(torch.tensor(0.5), torch.tensor(7.0))
    state.record(torch.tensor(3.0), torch.tensor(0.0))
    assert state.means() == (pytest.approx([1.5]), pytest.approx([3.0]))
    assert state.means() is None  # read: the sums start again
    state.record(torch.tensor(4.0), torch.tensor(1.0))
    assert state.means() == (pytest.approx([4.0]), pytest.approx([1.0]))


def test_state_means_are_per_member_when_packed():
    state = ManifoldState()
    state.record(torch.tensor([0.25, 1.0, 0.0]), torch.tensor([1.0, 0.0, 4.0]))
    state.record(torch.tensor([0.75, 3.0, 2.0]), torch.tensor([3.0, 0.0, 2.0]))
    violation, iterations = state.means()
    assert violation == pytest.approx([0.5, 2.0, 1.0]) and iterations == pytest.approx([2.0, 0.0, 3.0])


def test_state_dict_round_trip_converts_keys_and_moves_to_the_device():
    state = ManifoldState(multipliers={0: torch.eye(2)[None], 3: 2 * torch.ones(1, 3, 3)})
    saved = state.state_dict()
    assert list(saved) == ["multipliers"] and set(saved["multipliers"]) == {0, 3}
    restored = ManifoldState()
    restored.load_state_dict({"multipliers": {"0": saved["multipliers"][0], "3": saved["multipliers"][3]}})
    assert set(restored.multipliers) == {0, 3}  # string keys (JSON-like checkpoints) back to atom indices
    assert torch.equal(restored.multipliers[3], 2 * torch.ones(1, 3, 3))
    # the device argument is where the multipliers go (the meta device shows it without a GPU)
    moved = ManifoldState()
    moved.load_state_dict(saved, device="meta")
    assert {v.device.type for v in moved.multipliers.values()} == {"meta"}


def test_atom_kinds_free_wins_over_scaled_and_the_rest_are_fixed():
    roles = ["a", "b", "c", "d", "a"]
    assert atom_kinds(roles, scaled=["b", "d"], free=["c", "d"]) == ["fixed", "scaled", "free", "free", "fixed"]
    assert atom_kinds(roles, scaled=[], free=[]) == ["fixed"] * 5
    assert atom_kinds(roles, scaled=["a"], free=[]) == ["scaled", "fixed", "fixed", "fixed", "scaled"]


def test_kinds_follow_the_roles():
    roles = ["embed.token", "attn.q", "attn.k", "mlp.in", "output"]
    assert atom_kinds(roles, ["mlp.in"], ["output", "attn.q"]) == ["fixed", "free", "fixed", "scaled", "free"]


# --- msign, the tangent direction and the retraction ---------------------------------------------------------------


def test_msign_is_the_polar_factor_to_float_precision():
    X = torch.randn(3, 7, 4, generator=_gen(0), dtype=F64)
    X[1] *= 1e-3  # the scale does not matter
    assert torch.allclose(msign(X), _polar(X), atol=2e-6)
    polar = msign(X)
    assert (polar.mT @ polar - torch.eye(4, dtype=F64)).abs().max() < 1e-9  # two refinement steps: σ = 1


def test_retraction_and_msign_reach_float_precision():
    W = _stiefel_f32(64, 16)
    A = torch.randn(64, 16)
    A = A - W @ ((W.mT @ A) + (W.mT @ A).mT) / 2  # tangent
    A = A / torch.linalg.matrix_norm(A, ord=2)
    for eta in (0.01, 0.5, 2.0):
        new = msign(W - eta * A)
        assert (new.mT @ new - torch.eye(16)).abs().max() < 2e-6


def test_square_orthogonal_matrix_has_the_closed_form():
    """On a square orthogonal W the tangent direction is W · msign(skew(WᵀG)) (Modula docs): exact at once."""
    W, G = _stiefel_f32(32, 32)[None], torch.randn(1, 32, 32, generator=torch.Generator().manual_seed(1))
    S = W.mT @ G
    expected = W @ torch.linalg.svd((S - S.mT) / 2)[0] @ torch.linalg.svd((S - S.mT) / 2)[2]
    A, _, violation, iterations = tangent_direction(W, G, DualAscent(iterations=10))
    assert torch.allclose(A, expected, atol=1e-4)
    assert float(violation) < 1e-5 and float(iterations) == 0  # tangent already: no ascent needed


def test_dual_ascent_makes_a_tall_direction_tangent_and_stays_in_the_unit_ball():
    W = _stiefel_f32(96, 32)[None]
    generator = torch.Generator().manual_seed(2)
    G = torch.randn(1, 96, 32, generator=generator) + 3 * torch.randn(1, 96, 1, generator=generator) \
        @ torch.randn(1, 1, 32, generator=generator)
    results = {k: tangent_direction(W, G, DualAscent(iterations=k, step=1.0, tolerance=1e-9)) for k in (0, 8, 200)}
    violations = {k: _violation_overall(W, r[0]) for k, r in results.items()}
    assert violations[200] < violations[8] < violations[0]
    assert violations[200] < 2e-3 and float(results[200][2]) == pytest.approx(violations[200], rel=1e-3)
    for A, *_ in results.values():
        assert torch.linalg.matrix_norm(A, ord=2).max() <= 1 + 1e-4  # ‖A‖_op ≤ 1
        assert float((G * A).sum()) > 0  # a descent direction for −A
    # A zero gradient gives a zero direction (never NaN), whatever the warm start.
    A, *_ = tangent_direction(W, torch.zeros_like(G), DualAscent(), multiplier=torch.ones(1, 32, 32))
    assert torch.equal(A, torch.zeros_like(A))


def _tall_batch() -> tuple[Tensor, Tensor]:
    """Three 6×3 points with gradients of RMS 0.3, exactly 1 (±1 entries) and 7: the batch (3) matches no
    matrix dimension, so a misplaced broadcast cannot pass."""
    W = _stiefel(6, 3, seed=1, batch=(3,))
    G = torch.randn(3, 6, 3, generator=_gen(2), dtype=F64)
    G[0] = 0.3 * _unit_rms(G[0])
    G[1] = torch.sign(G[1])
    G[2] = 7.0 * _unit_rms(G[2])
    return W, G


def test_projected_start_is_the_polar_factor_of_the_tangent_projection():
    W, G = _tall_batch()
    assert float(G[1].pow(2).mean()) == 1.0
    A, multiplier, violation, iterations = tangent_direction(W, G, DualAscent(iterations=0))
    projection = G - W @ _sym(W.mT @ G)  # G + 2WΛ₀
    assert torch.allclose(A, _polar(projection), atol=2e-6)
    assert torch.equal(multiplier, torch.zeros(3, 3, 3, dtype=F64))  # no ascent: no correction to Λ₀
    assert torch.allclose(violation, _violation(W, _polar(projection)), rtol=1e-5)
    assert float(violation.min()) > 1e-2  # a tall projection's polar factor is not tangent
    assert iterations.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("iterations, step", [(1, 0.5), (2, 0.7), (3, 1.0)])
def test_dual_ascent_follows_the_documented_recursion(iterations, step):
    """Λ ← Λ − α_k H with α_k = step·(1 − k/K), each gradient first scaled to unit RMS (so the same G at any
    scale gives the same direction); tolerance 0 never stops, so every matrix takes all K iterations."""
    W, G = _tall_batch()
    settings = DualAscent(iterations=iterations, step=step, tolerance=0.0)
    A, multiplier, violation, count = tangent_direction(W, G, settings)
    expected_A, expected_multiplier = _ascent(W, G, iterations, step)
    assert torch.allclose(A, expected_A, atol=2e-5)
    assert torch.allclose(multiplier, expected_multiplier, atol=2e-5)
    assert torch.allclose(violation, _violation(W, expected_A), rtol=1e-4, atol=1e-7)
    assert count.tolist() == [float(iterations)] * 3
    assert float(multiplier.abs().max()) > 1e-2  # the ascent did move the multiplier


def _tangent_and_generic() -> tuple[Tensor, Tensor]:
    """Matrix 0: W = [e1 e2] with a gradient in the orthogonal complement, so WᵀA is exactly 0 (the polar
    iteration keeps zero rows zero) and its violation is exactly 0; matrices 1, 2: generic."""
    W, G = _tall_batch()
    W[0] = torch.eye(6, 3, dtype=F64)
    G[0, :3] = 0.0
    return W, G


def test_each_matrix_stops_on_its_own_once_below_the_tolerance():
    W, G = _tangent_and_generic()
    A, multiplier, violation, count = tangent_direction(W, G, DualAscent(iterations=4, step=1.0, tolerance=1e-12))
    assert float(violation[0]) == 0.0 and count.tolist() == [0.0, 4.0, 4.0]
    # the stopped matrix keeps its start: the polar factor of its gradient, no correction
    assert torch.allclose(A[0], _polar(G[0]), atol=2e-6) and torch.equal(multiplier[0], torch.zeros(3, 3, dtype=F64))
    expected_A, _ = _ascent(W[1:], G[1:], 4, 1.0)
    assert torch.allclose(A[1:], expected_A, atol=2e-5)
    # "stop once RMS < tolerance": a violation of exactly 0 is not below a tolerance of 0
    *_, count = tangent_direction(W, G, DualAscent(iterations=4, tolerance=0.0))
    assert count.tolist() == [4.0, 4.0, 4.0]
    # every matrix converged: no iteration at all, whatever K
    *_, count = tangent_direction(W[:1], G[:1], DualAscent(iterations=5, tolerance=1e-3))
    assert count.tolist() == [0.0]


def test_a_warm_start_adds_the_previous_correction_to_the_projected_start():
    W, G = _tall_batch()
    M = _sym(torch.randn(3, 3, 3, generator=_gen(5), dtype=F64))
    A, multiplier, _, _ = tangent_direction(W, G, DualAscent(iterations=0), multiplier=M)
    expected_A, _ = _ascent(W, G, 0, 1.0, multiplier=M)
    assert torch.allclose(A, expected_A, atol=2e-6)
    assert torch.allclose(multiplier, M, atol=1e-12)  # returned as a correction to the new Λ₀
    assert not torch.allclose(A, _ascent(W, G, 0, 1.0)[0], atol=1e-2)
    A, multiplier, _, _ = tangent_direction(W, G, DualAscent(iterations=2, step=0.7, tolerance=0.0), multiplier=M)
    expected_A, expected_multiplier = _ascent(W, G, 2, 0.7, multiplier=M)
    assert torch.allclose(A, expected_A, atol=2e-5) and torch.allclose(multiplier, expected_multiplier, atol=2e-5)


def test_a_zero_gradient_in_a_batch_gives_zero_direction_violation_and_correction():
    W, G = _tall_batch()
    G[1] = 0.0
    A, multiplier, violation, _ = tangent_direction(W, G, DualAscent(iterations=0))
    assert torch.equal(A[1], torch.zeros(6, 3, dtype=F64)) and float(violation[1]) == 0.0
    assert torch.equal(multiplier[1], torch.zeros(3, 3, dtype=F64))  # finite: G = 0 is not divided by 0
    assert torch.allclose(A[[0, 2]], _ascent(W[[0, 2]], G[[0, 2]], 0, 1.0)[0], atol=2e-6)
    # with a warm start the zero gradient's msign(2WΛ) is not zero, yet it reports no direction and no violation
    M = torch.eye(3, dtype=F64).expand(3, 3, 3)
    A, multiplier, violation, _ = tangent_direction(W, G, DualAscent(iterations=0), multiplier=M)
    assert torch.equal(A[1], torch.zeros(6, 3, dtype=F64)) and float(violation[1]) == 0.0
    assert float(violation[0]) > 0 and torch.allclose(multiplier[1], M[1])


# --- hyperspherical steps and the radius, by hand ------------------------------------------------------------------


def test_hyperspherical_step():
    generator = torch.Generator().manual_seed(3)
    w = torch.nn.functional.normalize(torch.randn(5, 8, generator=generator), dim=-1)
    g = torch.randn(5, 8, generator=generator)
    g[2] = 3 * w[2]  # no tangent part: the row stays
    new = sphere_step(w, g, 0.01)
    assert torch.allclose(new.norm(dim=-1), torch.ones(5))
    assert torch.allclose(new[2], w[2])
    tangent = g - w * (w * g).sum(-1, keepdim=True)
    expected = torch.nn.functional.normalize(w - 0.01 * tangent / tangent.norm(dim=-1, keepdim=True), dim=-1)
    assert torch.allclose(new[[0, 1, 3, 4]], expected[[0, 1, 3, 4]], atol=1e-6)
    assert ((new - w).norm(dim=-1)[[0, 1, 3, 4]] - 0.01).abs().max() < 1e-4  # moved by the step along the sphere


def _rows() -> tuple[Tensor, Tensor]:
    """Four unit rows of width 5 and their gradients, each with a tangent part found by hand:
    e1 with (2, 3, 0, 0, 0): tangent +e2; e2 with (0, 5, 0, −0.5, 0): tangent −e4 (norm 0.5 < 1);
    e3 with 1000·e3 + 10⁻³·e1: tangent 10⁻³ ≤ 10⁻⁵·‖g‖, rounding level, stays;
    e4 with e4 + 10⁻⁴·e1: tangent 10⁻⁴ > 10⁻⁵·‖g‖ (though tiny next to the third row's ‖g‖), moves along +e1."""
    w = torch.stack([_basis(5, 0), _basis(5, 1), _basis(5, 2), _basis(5, 3)])
    g = torch.stack([2 * _basis(5, 0) + 3 * _basis(5, 1), 5 * _basis(5, 1) - 0.5 * _basis(5, 3),
                     1000 * _basis(5, 2) + 1e-3 * _basis(5, 0), _basis(5, 3) + 1e-4 * _basis(5, 0)])
    return w, g


def _rows_after(step: float, radii: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)) -> Tensor:
    """The unit rows of ``_rows`` after a step that turns row i by step/radii[i]: (w − ε·a)/√(1 + ε²)."""
    eps = [step / r for r in radii]
    c = [1 / math.sqrt(1 + e**2) for e in eps]
    return torch.stack([c[0] * (_basis(5, 0) - eps[0] * _basis(5, 1)), c[1] * (_basis(5, 1) + eps[1] * _basis(5, 3)),
                        _basis(5, 2), c[3] * (_basis(5, 3) - eps[3] * _basis(5, 0))])


def _rotation(seed: int = 7) -> Tensor:
    """A 5×5 orthogonal R: the steps commute with it (step(wR, gR) = step(w, g)R), and rotated rows are no
    longer basis vectors, whose sums over the wrong axis would agree with the right ones."""
    return torch.linalg.qr(torch.randn(5, 5, generator=_gen(seed), dtype=F64))[0]


def test_sphere_step_on_basis_rows():
    w, g = _rows()
    assert torch.allclose(sphere_step(w, g, 0.25), _rows_after(0.25), atol=1e-12)
    R = _rotation()
    assert torch.allclose(sphere_step(w @ R, g @ R, 0.25), _rows_after(0.25) @ R, atol=1e-9)
    # packed (members, rows, d), a step per member: each member as its own call
    packed = sphere_step(torch.stack([w @ R, w]), torch.stack([g @ R, g]),
                         torch.tensor([0.25, 0.5], dtype=F64)[:, None, None])
    assert torch.allclose(packed, torch.stack([_rows_after(0.25) @ R, _rows_after(0.5)]), atol=1e-9)


def test_scaled_sphere_step_turns_each_row_by_step_over_its_radius():
    w, g = _rows()
    radii = (0.5, 2.0, 1.5, 3.0)
    # ⟨u, g⟩ of the rows: 2, 5, 1000, 1, all positive, so every radius takes −step, floored at r/2
    step = 0.4
    new_radii = torch.tensor([max(r - step, r / 2) for r in radii], dtype=F64)[:, None]
    assert new_radii.flatten().tolist() == pytest.approx([0.25, 1.6, 1.1, 2.6])
    rows = torch.tensor(radii, dtype=F64)[:, None] * w
    expected = new_radii * _rows_after(step, radii)
    assert torch.allclose(scaled_sphere_step(rows, g, step), expected, atol=1e-12)
    R = _rotation()
    packed = scaled_sphere_step(torch.stack([rows @ R, rows @ R]), torch.stack([g @ R, -g @ R]), step)
    # −g: the same tangent turn reversed, and every radius grows by the step
    reversed_rows = torch.tensor([r + step for r in radii], dtype=F64)[:, None] * _rows_after(-step, radii)
    assert torch.allclose(packed, torch.stack([expected @ R, reversed_rows @ R]), atol=1e-9)
    # rows of both signs in one call: each row's radius follows its own ⟨u, g⟩ (row 1's is −5: it grows)
    signs = (1.0, -1.0, 1.0, 1.0)
    g = torch.tensor(signs, dtype=F64)[:, None] * g
    mixed = scaled_sphere_step(torch.stack([rows, rows @ R]), torch.stack([g, g @ R]), step)
    expected = torch.stack([max(r - s * step, r / 2) * _rows_after(s * step, radii)[i]
                            for i, (r, s) in enumerate(zip(radii, signs))])
    assert torch.allclose(mixed, torch.stack([expected, expected @ R]), atol=1e-9)


def test_radius_step_signs_and_floor():
    r = torch.tensor([2.0, 2.0, 2.0, 0.6])
    assert radius_step(r, torch.tensor([3.0, -0.1, 0.0, 5.0]), 0.5).tolist() == pytest.approx([1.5, 2.5, 2.0, 0.3])
    assert radius_step(r, torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([0.1, 0.9, 1.5, 0.2])).tolist() \
        == pytest.approx([1.9, 1.1, 1.0, 0.4])


def test_the_radius_never_falls_below_half():
    r = torch.tensor([1.0, 0.4, 3.0])
    assert radius_step(r, torch.tensor([1.0, 1.0, -1.0]), 0.5).tolist() == pytest.approx([0.5, 0.2, 3.5])
    assert radius_step(r, torch.zeros(3), 0.5).tolist() == pytest.approx(r.tolist())  # no signal, no step


# --- manifold_update: embeddings -----------------------------------------------------------------------------------


def test_embedding_rows_take_the_hand_computed_sphere_step_at_their_share():
    """Embed(5, 4): rows at RMS 1 are √5 × unit rows; η = target × share = 0.5 × 0.5."""
    w, g = _rows()
    weight = math.sqrt(5) * w
    state = ManifoldState()
    delta = manifold_update([Embed(5, 4)], [weight], [g], [0.5], 0.5, DualAscent(), state)[0]
    assert delta.dtype == F64  # the change comes back in the weight's dtype
    assert torch.allclose(weight - delta, math.sqrt(5) * _rows_after(0.25), atol=1e-6)
    assert state.means() is None and state.multipliers == {}  # no matrix: nothing to record
    # scaled rows: each turns by η/r and its radius takes −η (all alignments are positive here)
    radii = (0.5, 2.0, 1.5, 3.0)
    rows = math.sqrt(5) * torch.tensor(radii, dtype=F64)[:, None] * w
    delta = manifold_update([Embed(5, 4)], [rows], [g], [0.5], 0.8, DualAscent(), state, kinds=["scaled"])[0]
    new_radii = torch.tensor([max(r - 0.4, r / 2) for r in radii], dtype=F64)[:, None]
    assert torch.allclose(rows - delta, math.sqrt(5) * new_radii * _rows_after(0.4, radii), atol=1e-6)


def test_packed_embedding_rows_each_take_their_members_step():
    w, g = _rows()
    weight = math.sqrt(5) * torch.stack([w, w])
    targets = torch.tensor([0.5, 1.0])
    delta = manifold_update([Embed(5, 4)], [weight], [torch.stack([g, g])], [0.5], targets, DualAscent(),
                            ManifoldState())[0]
    expected = math.sqrt(5) * torch.stack([_rows_after(0.25), _rows_after(0.5)])
    assert torch.allclose(weight - delta, expected, atol=1e-6)


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


# --- manifold_update: matrices -------------------------------------------------------------------------------------


def _linear_weight(atom: Linear, U: Tensor) -> Tensor:
    """A Linear's weight from a tall unit-scale matrix (transposed back when the atom is wide)."""
    return atom.polar_scale * (U.mT if atom.d_out < atom.d_in else U)


def test_fixed_tall_and_wide_matrices_step_along_their_manifold_in_one_group():
    """Linear(6, 3) is tall, Linear(3, 6) wide (its transpose is the 6×3 unit matrix): both, a third 6×3 at
    another share and a 4×3 (another group) each take polar(U − η·polar(proj G)) at η = target × share."""
    atoms = [Linear(6, 3), Linear(3, 6), Linear(6, 3), Linear(4, 3)]
    units = [_stiefel(6, 3, 10), _stiefel(6, 3, 11), _stiefel(6, 3, 12), _stiefel(4, 3, 13)]
    weights = [_linear_weight(a, U) for a, U in zip(atoms, units)]
    grads = [torch.randn(w.shape, generator=_gen(20 + i), dtype=F64) for i, w in enumerate(weights)]
    shares, target = [0.5, 0.25, 1.0, 0.125], 0.8
    state = ManifoldState()
    deltas = manifold_update(atoms, weights, grads, shares, target, DualAscent(), state)
    violations = []
    for atom, U, w, grad, share, delta in zip(atoms, units, weights, grads, shares, deltas):
        G = (grad.mT if atom.d_out < atom.d_in else grad) / atom.polar_scale  # tall, unit scale
        expected = _linear_weight(atom, _fixed_step(U, G, target * share))
        assert torch.allclose(w - delta, expected, atol=2e-5), atom.describe()
        violations.append(float(_violation(U, _ascent(U, G, 0, 1.0)[0])))
    assert sorted(state.multipliers) == [0, 1, 2, 3]
    for i in range(4):  # one 3×3 correction per slice, zero after the projected start alone
        assert torch.equal(state.multipliers[i], torch.zeros(1, 3, 3))
    violation, iterations = state.means()  # the mean over the four matrices
    assert violation == pytest.approx([sum(violations) / 4], rel=1e-4) and iterations == [0.0]


def test_a_zero_share_leaves_the_atom_and_the_default_kind_is_fixed():
    atoms = [Linear(6, 3), Embed(5, 4)]
    weights = [_linear_weight(atoms[0], _stiefel(6, 3, 1)), math.sqrt(5) * _rows()[0]]
    grads = [torch.randn(6, 3, generator=_gen(2), dtype=F64), _rows()[1]]
    state = ManifoldState()
    deltas = manifold_update(atoms, weights, grads, [0.0, 0.0], 0.5, DualAscent(), state)
    assert all(torch.equal(d, torch.zeros_like(w)) for d, w in zip(deltas, weights))
    assert state.means() is None
    fixed = manifold_update(atoms, weights, grads, [1.0, 1.0], 0.5, DualAscent(), ManifoldState(),
                            kinds=["fixed", "fixed"])
    default = manifold_update(atoms, weights, grads, [1.0, 1.0], 0.5, DualAscent(), ManifoldState())
    assert all(torch.equal(a, b) for a, b in zip(fixed, default))
    assert float(fixed[0].abs().max()) > 0.1


def test_mismatched_lists_are_an_error_not_a_silent_truncation():
    atoms = [Linear(6, 3), Embed(5, 4)]
    weights = [_linear_weight(atoms[0], _stiefel(6, 3, 3))]
    with pytest.raises(ValueError, match="zip"):
        manifold_update(atoms, weights, weights, [1.0, 1.0], 0.5, DualAscent(), ManifoldState())
    with pytest.raises(ValueError, match="zip"):
        onto_manifold(atoms, weights)


def test_the_change_comes_back_in_the_weights_dtype():
    atom = Linear(6, 3)
    weight = _linear_weight(atom, _stiefel(6, 3, 4)).to(torch.bfloat16)
    grad = torch.randn(6, 3, generator=_gen(5)).to(torch.bfloat16)
    delta = manifold_update([atom], [weight], [grad], [1.0], 0.5, DualAscent(), ManifoldState())[0]
    assert delta.dtype == torch.bfloat16


def test_a_scaled_square_matrix_turns_by_eta_over_r_and_its_radius_takes_a_sign_step():
    """W = r·Q (Q orthogonal): the tangent direction is Q·polar(skew(QᵀG)) (exact for square matrices), the
    direction moves η/r along it and is retracted by the polar factor; r ← r − η·sign⟨G, Q⟩."""
    atom = Linear(8, 8)
    Q, r, eta = _orthogonal(8, 0), 2.5, 0.3
    G = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    S = Q.T @ G
    A = Q @ _polar_f32((S - S.T) / 2)
    expected_r = r - eta * float(torch.sign((G * Q).sum()))
    expected = expected_r * _polar_f32(Q - (eta / r) * A)
    delta = atom.manifold_update([r * Q], [G], eta, DualAscent(), ManifoldState(), kinds=["scaled"])
    assert torch.allclose(r * Q - delta[0], expected, atol=2e-5)
    # a fixed matrix of the same start takes the unscaled step: at r = 1 the two kinds agree exactly
    fixed = atom.manifold_update([Q], [G], eta, DualAscent(), ManifoldState(), kinds=["fixed"])[0]
    scaled = atom.manifold_update([Q], [G], eta, DualAscent(), ManifoldState(), kinds=["scaled"])[0]
    assert torch.allclose(Q - fixed, _polar_f32(Q - eta * A), atol=2e-5)
    assert torch.allclose(Q - scaled, (1 - eta * float(torch.sign((G * Q).sum()))) * (Q - fixed), atol=2e-5)


def scaled_step_ratio(r: float, sign: int, eta: float) -> float:
    """‖ΔW‖ / η of one manifold step of a square matrix W = r·Q (or of an embedding row at RMS r) whose radius
    steps by sign·η (0: a fixed layer): the direction turns by ε = η/r along a unit tangent and is retracted.
    For a square matrix the tangent direction is Q·S with S = polar(skew(QᵀG)) skew and orthogonal (an even
    size: full rank), so Q' = Q(I − εS)/√(1 + ε²) and ΔW = r'Q' − rQ = Q((r'c − r)I − r'cεS), c = 1/√(1 + ε²):
    S's eigenvalues are ±i, so every singular value is |r'c − r ∓ i·r'cε|. A row u with unit tangent a: the
    same, u' = (u − εa)c."""
    eps = eta / r
    c = 1 / math.sqrt(1 + eps**2)
    moved = r + sign * eta
    return math.hypot(moved * c - r, moved * c * eps) / eta


def test_scaled_step_ratio_is_the_step_of_a_square_matrix():
    """The closed form above against a real step (the manifold update itself is checked against the steps derived
    by hand above): at r = 1 a scaled matrix's radial and turning parts are orthogonal, ≈ √2."""
    from modula_cli.nn.manifold import DualAscent, ManifoldState

    atom, eta = Linear(8, 8), 0.3
    Q = _stiefel_f32(8, 8, seed=3)
    G = torch.randn(8, 8, generator=torch.Generator().manual_seed(4))
    for kind, r in (("scaled", 1.0), ("scaled", 1.7), ("fixed", 1.0)):
        delta = atom.manifold_update([r * Q], [G], eta, DualAscent(), ManifoldState(), kinds=[kind])[0]
        sign = -float(torch.sign((G * Q).sum())) if kind == "scaled" else 0
        spectral = float(torch.linalg.matrix_norm(delta, ord=2))  # a square matrix's atom norm: σ_max
        assert spectral / eta == pytest.approx(scaled_step_ratio(r, sign, eta), rel=1e-4)
    assert scaled_step_ratio(1.0, 1, 1e-4) == pytest.approx(math.sqrt(2), rel=1e-3)


def test_scaled_non_square_matrices_learn_each_slices_and_members_radius():
    """W = ps·r·U: r is the RMS singular value of W/ps (each slice, each member its own); U turns by η/r."""
    atom = Linear(3, 6)  # wide: transposed to 6×3
    radii, targets = [1.7, 0.6], torch.tensor([0.3, 0.2])
    units = [_stiefel(6, 3, 30), _stiefel(6, 3, 31)]
    weight = torch.stack([_linear_weight(atom, r * U) for r, U in zip(radii, units)])
    grad = torch.randn(weight.shape, generator=_gen(32), dtype=F64)
    delta = manifold_update([atom], [weight], [grad], [1.0], targets, DualAscent(), ManifoldState(),
                            kinds=["scaled"])[0]
    for k in range(2):
        G = grad[k].mT / atom.polar_scale
        expected = _linear_weight(atom, _fixed_step(radii[k] * units[k], G, float(targets[k]), radii[k], learn=True))
        assert torch.allclose(weight[k] - delta[k], expected, atol=2e-5), k
    # a unit matrix with exact zeros (the first columns of I): the radius's signal is ⟨G, U⟩, whatever U's zeros
    atom = Linear(6, 3)
    U = torch.eye(6, 3, dtype=F64)
    grad = torch.randn(6, 3, generator=_gen(33), dtype=F64)
    delta = manifold_update([atom], [atom.polar_scale * 1.2 * U], [grad], [0.5], 0.5, DualAscent(), ManifoldState(),
                            kinds=["scaled"])[0]
    expected = atom.polar_scale * _fixed_step(1.2 * U, grad, 0.25, 1.2, learn=True)
    assert torch.allclose(atom.polar_scale * 1.2 * U - delta, expected, atol=2e-5)
    # a convolution (4 slices of 4×2, polar scale √2/4) with a radius per slice
    conv = Conv2D(4, 2, kernel_size=2, padding=0)
    slice_radii = [0.8, 1.0, 2.5, 1.3]
    slices = torch.stack([r * _stiefel(4, 2, 40 + s) for s, r in enumerate(slice_radii)])
    weight = conv.from_matrices(conv.polar_scale * slices)
    grad = torch.randn(weight.shape, generator=_gen(41), dtype=F64)
    delta = manifold_update([conv], [weight], [grad], [0.5], 0.6, DualAscent(), ManifoldState(), kinds=["scaled"])[0]
    new = conv.matrices(weight - delta) / conv.polar_scale
    G = conv.matrices(grad)
    for s, r in enumerate(slice_radii):
        assert torch.allclose(new[s], _fixed_step(slices[s], G[s], 0.3, r, learn=True), atol=2e-5), s


def test_packed_matrices_match_their_members_and_log_per_member_means():
    """Member 0: W = [e1 e2 e3] with a gradient outside its span (tangent: violation 0, no iteration); member 1
    generic (K iterations, the recursion's violation). Two steps: the log is their mean per member."""
    atom = Linear(6, 3)
    units = torch.stack([torch.eye(6, 3, dtype=F64), _stiefel(6, 3, 50)])
    weight = atom.polar_scale * units
    grad = torch.randn(2, 6, 3, generator=_gen(51), dtype=F64)
    grad[0, :3] = 0.0
    targets = torch.tensor([0.4, 0.1])
    settings = DualAscent(iterations=2, step=1.0, tolerance=1e-9, warm_start=False)
    state = ManifoldState()
    for _ in range(2):
        delta = manifold_update([atom], [weight], [grad], [1.0], targets, settings, state)[0]
    assert state.multipliers[0].shape == (2, 1, 3, 3)
    A1, _ = _ascent(units[1], grad[1], 2, 1.0)
    expected = [_polar(units[0] - 0.4 * _polar(grad[0])), _polar(units[1] - 0.1 * A1)]
    for k in range(2):
        assert torch.allclose(weight[k] - delta[k], atom.polar_scale * expected[k], atol=2e-5), k
    violation, iterations = state.means()
    assert iterations == [0.0, 2.0]
    assert violation[0] < 1e-6 and violation[1] == pytest.approx(float(_violation(units[1], A1)), rel=1e-3)


def test_the_warm_start_carries_the_last_correction_to_the_next_step():
    """Two packed members (each its own multiplier): step 1 takes one ascent iteration and keeps its correction
    to Λ₀; step 2 (K = 0) starts from Λ₀ + that correction when warm, from Λ₀ when not."""
    atom = Linear(6, 3)
    U = _stiefel(6, 3, 60, batch=(2,))
    weight = atom.polar_scale * U
    G1, G2 = (torch.randn(2, 6, 3, generator=_gen(s), dtype=F64) for s in (61, 62))
    state = ManifoldState()
    manifold_update([atom], [weight], [G1], [1.0], 0.3, DualAscent(iterations=1, step=0.5, tolerance=0.0), state)
    _, correction = _ascent(U, G1, 1, 0.5)
    assert state.multipliers[0].shape == (2, 1, 3, 3)  # per member, per slice
    assert torch.allclose(state.multipliers[0].double(), correction[:, None], atol=2e-5)
    assert float(correction.abs().max()) > 1e-2

    def second(warm: bool, multipliers: dict) -> Tensor:
        s = ManifoldState(multipliers=dict(multipliers))
        return weight - manifold_update([atom], [weight], [G2], [1.0], 0.3, DualAscent(warm_start=warm), s)[0]

    warm_A, _ = _ascent(U, G2, 0, 1.0, multiplier=correction)
    cold_A, _ = _ascent(U, G2, 0, 1.0)
    assert torch.allclose(second(True, state.multipliers), atom.polar_scale * _polar(U - 0.3 * warm_A), atol=2e-5)
    assert torch.allclose(second(False, state.multipliers), atom.polar_scale * _polar(U - 0.3 * cold_A), atol=2e-5)
    assert not torch.allclose(warm_A, cold_A, atol=1e-2)
    # a multiplier of another shape (an unpacked run's) is not this atom's: a fresh start, not an error
    assert torch.allclose(second(True, {0: torch.ones(1, 3, 3)}), atom.polar_scale * _polar(U - 0.3 * cold_A),
                          atol=2e-5)
    # a convolution's slices each keep their own correction
    conv = Conv2D(4, 2, kernel_size=2, padding=0)
    slices = _stiefel(4, 2, 63, batch=(4,))
    weight_c = conv.from_matrices(conv.polar_scale * slices)
    G1c, G2c = (torch.randn(weight_c.shape, generator=_gen(s), dtype=F64) for s in (64, 65))
    conv_state = ManifoldState()
    manifold_update([conv], [weight_c], [G1c], [1.0], 0.3, DualAscent(iterations=1, step=0.5, tolerance=0.0),
                    conv_state)
    _, correction_c = _ascent(slices, conv.matrices(G1c), 1, 0.5)
    assert torch.allclose(conv_state.multipliers[0].double(), correction_c, atol=2e-5)
    delta = manifold_update([conv], [weight_c], [G2c], [1.0], 0.3, DualAscent(), conv_state)[0]
    A, _ = _ascent(slices, conv.matrices(G2c), 0, 1.0, multiplier=correction_c)
    assert torch.allclose(conv.matrices(weight_c - delta) / conv.polar_scale, _polar(slices - 0.3 * A), atol=2e-5)
    # one atom of the group without a multiplier: the whole group starts fresh
    twin = manifold_update([atom, atom], [weight, weight], [G2, G2], [1.0, 1.0], 0.3, DualAscent(),
                           ManifoldState(multipliers={0: state.multipliers[0]}))
    assert torch.allclose(weight - twin[0], atom.polar_scale * _polar(U - 0.3 * cold_A), atol=2e-5)


def test_free_atoms_take_the_duality_map_at_their_share():
    """Free: Δ = η·ps·polar(G) for a matrix, rows at RMS η for an embedding (no constraint, no multiplier)."""
    atoms = [Embed(5, 4), Linear(6, 3), Linear(6, 3), Linear(3, 6)]
    weights = [math.sqrt(5) * _rows()[0]] + [_linear_weight(a, _stiefel(6, 3, 70 + i)) for i, a in
                                             enumerate(atoms[1:])]
    grads = [torch.randn(w.shape, generator=_gen(80 + i), dtype=F64) for i, w in enumerate(weights)]
    shares = [0.5, 0.25, 1.0, 0.125]
    state = ManifoldState()
    deltas = manifold_update(atoms, weights, grads, shares, 0.8, DualAscent(), state,
                             kinds=["free", "free", "fixed", "free"])
    rms = grads[0].pow(2).mean(dim=-1, keepdim=True).sqrt()
    assert torch.allclose(deltas[0], 0.4 * grads[0] / rms, atol=1e-6)
    for i in (1, 3):
        expected = 0.8 * shares[i] * atoms[i].polar_scale * _polar(grads[i])
        assert torch.allclose(deltas[i], expected, atol=2e-5), i
    U = _stiefel(6, 3, 71)
    assert torch.allclose(weights[2] - deltas[2], atoms[2].polar_scale * _fixed_step(U, grads[2] / atoms[2].polar_scale,
                                                                                      0.8), atol=2e-5)
    assert list(state.multipliers) == [2]
    # the duality map's settings are passed on (the exact SVD agrees with the default's Polar Express)
    svd = manifold_update(atoms, weights, grads, shares, 0.8, DualAscent(), ManifoldState(),
                          kinds=["free", "free", "fixed", "free"], free_dualize={"method": "svd", "steps": None})
    assert all(torch.allclose(a, b, atol=2e-5) for a, b in zip(svd, deltas))


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


# --- onto_manifold, layer_scale and logit_rms ----------------------------------------------------------------------


def test_onto_manifold_is_the_scaled_polar_factor_and_unit_rows():
    atoms = [Linear(6, 3), Linear(3, 6), Conv2D(4, 2, kernel_size=2, padding=0), Embed(5, 4)]
    weights = [torch.randn(6, 3, generator=_gen(90), dtype=F64), torch.randn(3, 6, generator=_gen(91), dtype=F64),
               torch.randn(4, 2, 2, 2, generator=_gen(92), dtype=F64), torch.randn(4, 5, generator=_gen(93), dtype=F64)]
    out = onto_manifold(atoms, weights)
    assert [o.dtype for o in out] == [F64] * 4
    for atom, w, o in zip(atoms[:3], weights[:3], out[:3]):
        expected = atom.from_matrices(atom.polar_scale * _polar(atom.matrices(w)))
        assert torch.allclose(o, expected, atol=2e-6), atom.describe()
    assert torch.allclose(out[3], weights[3] / weights[3].pow(2).mean(dim=-1, keepdim=True).sqrt(), atol=1e-6)


def test_conv_slices_are_each_on_their_manifold():
    net = Conv2D(6, 4, kernel_size=3) @ Conv2D(4, 4, kernel_size=1, padding=0)
    weights = [1.3 * w for w in net.initialize(0)]  # off the manifold
    assert _on_manifold_error(net, weights) > 0.5
    assert _on_manifold_error(net, net.onto_manifold(weights)) < 2e-6


def test_layer_scale_of_known_radii():
    conv = Conv2D(2, 4, kernel_size=1, padding=0)  # one wide 2×4 slice: 2 columns after transposing
    weight = conv.from_matrices(conv.polar_scale * 1.5 * _stiefel(4, 2, 100).mT[None])
    assert float(layer_scale(conv, weight, members=False)) == pytest.approx(1.5, rel=1e-6)
    conv = Conv2D(4, 2, kernel_size=2, padding=0)  # 4 slices at radii 1, 1, 2, 2: RMS √2.5
    slices = torch.stack([r * _stiefel(4, 2, 101 + s) for s, r in enumerate([1.0, 1.0, 2.0, 2.0])])
    weight = conv.from_matrices(conv.polar_scale * slices)
    assert float(layer_scale(conv, weight, members=False)) == pytest.approx(math.sqrt(2.5), rel=1e-6)
    packed = torch.stack([weight, 3 * weight])
    assert layer_scale(conv, packed, members=True).tolist() == pytest.approx([math.sqrt(2.5), 3 * math.sqrt(2.5)])
    linear = Linear(6, 3)
    packed = torch.stack([0.5 * linear.polar_scale * _stiefel(6, 3, 102), 4 * linear.polar_scale * _stiefel(6, 3, 103)])
    scales = layer_scale(linear, packed, members=True)
    assert scales.shape == (2,) and scales.tolist() == pytest.approx([0.5, 4.0])
    assert float(layer_scale(linear, packed, members=False)) == pytest.approx(math.sqrt((0.25 + 16) / 2))
    embed = Embed(4, 3)
    rows = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 2.0]])  # mean squares 1, 4, 1
    assert float(layer_scale(embed, rows, members=False)) == pytest.approx(math.sqrt(2))
    assert layer_scale(embed, torch.stack([rows, 2 * rows]), members=True).tolist() \
        == pytest.approx([math.sqrt(2), 2 * math.sqrt(2)])


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


# --- the Manifold mode: its settings, problems and logged fields ---------------------------------------------------


def test_manifold_problems_in_full():
    mode = Manifold()
    roles = ("embed", "hidden", "output")
    cfg = OptimConfig(mode="manifold", wd=0.1, manifold_scaled=["output", "hidden", "embed"],
                      manifold_free=["output", "embed"])
    assert mode.problems(cfg, roles) == [
        "optim.wd=0.1 with optim.mode=manifold; each weight's size is held on its manifold (a fixed radius, or a "
        "radius it learns), never decayed, so weight decay must be 0",
        "optim.manifold_scaled and optim.manifold_free both name embed, output; a layer is either scaled on the "
        "manifold or free of it"]
    assert mode.problems(OptimConfig(mode="manifold", manifold_scaled=["hidden"], manifold_free=["output"]),
                         roles) == []
    typo = OptimConfig(mode="manifold", manifold_scaled=["hiden"], manifold_free=["outptu"])
    problems = mode.problems(typo, roles)
    assert len(problems) == 2
    assert problems[0].startswith("optim.manifold_scaled: no layer has the role 'hiden'; did you mean hidden? roles: ")
    assert problems[1].startswith("optim.manifold_free: no layer has the role 'outptu'; did you mean output? roles: ")
    assert mode.problems(typo, None) == []  # roles unknown yet: checked once the network is built


def test_manifold_settings_and_weight_decay_are_checked(tiny_text_root):
    problems = config_problems(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", "optim.wd=0.1",
                                                        "optim.manifold_iterations=-1", "optim.manifold_step=0")))
    assert any(p.startswith("optim.wd=0.1 with optim.mode=manifold") for p in problems)
    assert any(p.startswith("optim.manifold_iterations=-1") for p in problems)
    assert any(p.startswith("optim.manifold_step=0") for p in problems)
    # Its settings belong to manifold runs only: another mode's fingerprint ignores them.
    from modula_cli.config.identity import fingerprint

    normed = [compose_config(*tiny_gpt(tiny_text_root, f"optim.manifold_iterations={k}")) for k in (2, 8)]
    assert fingerprint(normed[0]) == fingerprint(normed[1])
    manifold = [compose_config(*tiny_gpt(tiny_text_root, "optim.mode=manifold", f"optim.manifold_iterations={k}"))
                for k in (2, 8)]
    assert fingerprint(manifold[0]) != fingerprint(manifold[1])


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
        return OptimConfig(mode="manifold", manifold_scaled=["hidden"], manifold_free=["output"],
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
    # the free readout takes dualized mode's step under the same optim.ortho settings (one Polar Express step
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
    cfg = OptimConfig(mode="manifold", manifold_scaled=[], manifold_free=[])
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
    opt = OptimConfig(name="sgd", mode="manifold", lr=0.3)
    state = init_state(weights, opt)
    before = [w.clone() for w in weights]
    optimizer_step(net, weights, [torch.zeros_like(w) for w in weights], state, opt, 0, 10)
    for old, new in zip(before, weights):
        assert torch.allclose(old, new, atol=1e-6)


def test_manifold_checkpoint_resume_keeps_the_multipliers(tmp_path):
    """The warm-start multipliers are optimiser state: saved and restored with a checkpoint."""
    net = Linear(4, 12) @ Linear(12, 6)
    weights = net.onto_manifold(net.initialize(0))
    opt = OptimConfig(name="adam", mode="manifold", lr=0.2)
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
    assert 0 <= violation[0] <= 2 and iterations[0] == 0 == opt.manifold_iterations


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
    kinds = atom_kinds(layer_roles(net), opt.manifold_scaled, opt.manifold_free)
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

    fixed = ["optim.manifold_scaled=[]", "optim.manifold_free=[]"] if design == "fixed" else []
    cfg = tiny_gpt_coord(tiny_text_root, "coord.widths=[16,32,64]", "coord.modes=[manifold]", *fixed)
    table, _, verdict = run_coord_check(cfg, tmp_path)
    assert verdict["manifold"].startswith("width-stable"), verdict["manifold"]
    moved = table[table["step"] == 4]
    assert (moved["dir_change"] > 0).all() and (moved["dir_change"] <= 2).all()
    free = tuple(cfg.optim.manifold_free) if design == "default" else ()
    scaled = tuple(cfg.optim.manifold_scaled) if design == "default" else ()
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
