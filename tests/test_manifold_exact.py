"""Manifold mode against values derived independently of the implementation: the documented dual ascent redone
with torch.linalg.svd polar factors, hyperspherical steps on basis vectors worked out by hand, the bookkeeping
of ``ManifoldState`` on known numbers, and ``Manifold``'s messages and logged fields in full (docs/design.md,
"Manifold mode"; docs/manifold.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from modula_cli.nn import Conv2D, Embed, Linear, Module, with_role
from modula_cli.nn.manifold import (DualAscent, ManifoldState, atom_kinds, manifold_update, msign, onto_manifold,
                                    radius_step, scaled_sphere_step, sphere_step, tangent_direction)
from modula_cli.optim import OptimConfig
from modula_cli.optim.modes.dualized import Dualized
from modula_cli.optim.modes.manifold import Manifold, layer_scale

F64 = torch.float64


# --- independent references -------------------------------------------------------------------------------

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


# --- ManifoldState ----------------------------------------------------------------------------------------

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


# --- msign and the tangent direction ------------------------------------------------------------------------

def test_msign_is_the_polar_factor_to_float_precision():
    X = torch.randn(3, 7, 4, generator=_gen(0), dtype=F64)
    X[1] *= 1e-3  # the scale does not matter
    assert torch.allclose(msign(X), _polar(X), atol=2e-6)
    polar = msign(X)
    assert (polar.mT @ polar - torch.eye(4, dtype=F64)).abs().max() < 1e-9  # two refinement steps: σ = 1


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


# --- hyperspherical steps, by hand ---------------------------------------------------------------------------

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


# --- manifold_update: embeddings --------------------------------------------------------------------------

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


# --- manifold_update: matrices ----------------------------------------------------------------------------

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


# --- onto_manifold, layer_scale ---------------------------------------------------------------------------

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


# --- the Manifold mode ------------------------------------------------------------------------------------

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
