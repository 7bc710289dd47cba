"""Manifold mode's pieces (docs/design.md, "Manifold mode"; docs/manifold.md): ``ManifoldState`` on known numbers;
msign, the tangent direction (the documented dual ascent redone with torch.linalg.svd polar factors) and the
retraction; hyperspherical steps and the radius on basis vectors worked out by hand."""

from __future__ import annotations


import pytest
import torch
from torch import Tensor

from modula_cli.nn.manifold import (DualAscent, ManifoldState, atom_kinds, msign, radius_step, scaled_sphere_step,
                                    sphere_step, tangent_direction)
from modula_cli.nn.retraction import retract
from manifold_references import (F64, _ascent, _gen, _polar, _rows, _rows_after, _stiefel, _stiefel_f32, _sym,
                                 _unit_rms, _violation, _violation_overall)


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


@pytest.mark.parametrize("m, n", [(48, 48), (96, 24)])
def test_the_retraction_is_the_polar_factor_of_the_step(m, n):
    """retract(U, A, ε) = U' V'ᵀ of U − εA (float64 SVD) to float32 precision, with orthonormal columns, for steps
    from 0 to 100 times the weight's norm, along a tangent A and along one that is not (the projected start leaves
    ‖UᵀA + AᵀU‖ near 0.8 on tall matrices): the range its fixed number of steps is made for."""
    steps = torch.tensor([0.0, 1e-3, 0.1, 0.5, 2.0, 8.0, 32.0, 100.0])
    U = _stiefel(m, n, seed=3, batch=(len(steps),)).float()
    G = torch.randn(len(steps), m, n, generator=_gen(4), dtype=F64)
    tangent = _polar(G - U.to(F64) @ _sym(U.to(F64).mT @ G)).float()
    for A in (tangent, _polar(G).float()):
        new = retract(U, A, steps)
        expected = _polar(U.to(F64) - steps.to(F64).reshape(-1, 1, 1) * A.to(F64))
        assert (new.to(F64) - expected).abs().amax(dim=(-2, -1)).max() < 2e-6
        assert (new.mT @ new - torch.eye(n)).abs().max() < 3e-6
    # past the table (a radius all but gone): a step of the table's largest, still on the manifold, whatever A's rank
    far = torch.tensor([200.0, 1e3, 1e6])
    v = torch.linalg.qr(torch.randn(n, 2, generator=_gen(5)))[0]
    turn = U[:3] @ (v[:, :1] @ v[:, 1:].T - v[:, 1:] @ v[:, :1].T)  # tangent, of rank 2: U turning in one plane
    for A in (torch.zeros(3, m, n), turn):
        new = retract(U[:3], A, far)
        assert (new.mT @ new - torch.eye(n)).abs().max() < 3e-6
        assert torch.allclose(new, retract(U[:3], A, torch.full((3,), 100.0)), atol=1e-6)


def test_msign_reaches_float_precision_on_a_step():
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
