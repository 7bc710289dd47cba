"""``manifold_update`` per kind of atom, fixed, scaled (a learned radius) or free, against steps derived by hand,
packed as its members; and ``onto_manifold``, ``layer_scale`` and the logits' RMS."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from modula_cli.nn import Conv2D, Embed, Linear
from modula_cli.nn.manifold import DualAscent, ManifoldState, manifold_update, onto_manifold, sphere_step
from modula_cli.optim.modes.manifold import layer_scale
from modula_cli.run.temperatures import logit_rms
from manifold_references import (F64, _ascent, _fixed_step, _gen, _on_manifold_error, _orthogonal, _polar,
                                 _polar_f32, _rows, _rows_after, _stiefel, _stiefel_f32, _violation,
                                 scaled_step_ratio)


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


def test_a_bfloat16_direction_keeps_the_step_on_the_manifold_and_near_the_float32_step():
    """optim.ortho.dtype=bfloat16 (auto's choice on CUDA) iterates the tangent direction's polar factor in
    bfloat16, refined in float32; the retraction stays float32. So the new weight is on its manifold to float
    precision, and the step is the float32 one within bfloat16's precision (here on the CPU, which emulates it)."""
    atoms = [Linear(64, 32), Linear(64, 32)]
    weights = [_linear_weight(a, _stiefel(64, 32, 30 + i)).float() for i, a in enumerate(atoms)]
    grads = [torch.randn(w.shape, generator=_gen(40 + i)) for i, w in enumerate(weights)]
    steps = {dtype: manifold_update(atoms, weights, grads, [0.5, 0.5], 0.2, DualAscent(), ManifoldState(),
                                    free_dualize={"method": "polar_express", "steps": None, "iter_dtype": dtype})
             for dtype in (None, torch.bfloat16)}
    for atom, w, exact, fast in zip(atoms, weights, steps[None], steps[torch.bfloat16]):
        new = (w - fast) / atom.polar_scale
        assert torch.allclose(new.mT @ new, torch.eye(32), atol=2e-6)
        relative = float((fast - exact).norm() / exact.norm())
        assert 1e-5 < relative < 2e-2, relative  # bfloat16 took effect, within its precision
