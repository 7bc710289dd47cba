"""The module algebra's plumbing against values worked out by hand: the printed tree with its masses and
shares, display names, the operators' less common forms, layer names, the SVD polar factor's cut-off, the
atoms' per-slice normalisation and strided convolutions, and state that moves between devices."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from modula_cli.nn import (Add, Composite, Conv2D, Embed, Identity, Linear, Mul, PowerIterationState, TupleModule,
                           layer_names, layer_roles, named, orthogonalize, with_role)

HEADER = "share = fraction of the target norm each atom receives]"


def test_the_printed_tree_of_a_sum_feeding_a_linear_layer():
    # E5 + E7 feeds L: masses 1 + 1 + 1; the tuple's sensitivity is 2, so each embedding gets (2/3)/2 = 1/3
    net = named(Linear(2, 3) @ (Embed(3, 5) + Embed(3, 7)), "Net")
    assert repr(net).splitlines() == [
        f"Net  [mass 3, sensitivity 2, 3 atoms; {HEADER}",
        "├─ Tuple  mass 2",
        "│  ├─ Embed(3, 5)  mass 1  share 0.3333",
        "│  └─ Embed(3, 7)  mass 1  share 0.3333",
        "├─ Add",
        "└─ Linear(2, 3)  mass 1  share 0.3333",
    ]


def test_the_printed_tree_of_a_tuple_ending_in_a_composite():
    pair = Linear(3, 3) @ Mul(0.5) @ Linear(3, 3)  # the first layer's share is divided by 0.5 after it
    tree = TupleModule(Linear(3, 3), pair)
    assert repr(tree).splitlines() == [
        f"Tuple  [mass 3, sensitivity 1.5, 3 atoms; {HEADER}",
        "├─ Linear(3, 3)  mass 1  share 0.3333",
        "└─ Composite  mass 2",
        "   ├─ Linear(3, 3)  mass 1  share 0.6667",
        "   ├─ Mul(0.5)",
        "   └─ Linear(3, 3)  mass 1  share 0.3333",
    ]
    assert repr(Linear(2, 3)).splitlines() == [
        f"Linear(2, 3)  [mass 1, sensitivity 1, 1 atoms; {HEADER}", "└─ Linear(2, 3)  mass 1  share 1"]


def test_display_names():
    assert Add().describe() == "Add" and Identity().describe() == "Identity"
    assert Composite(Linear(2, 2), Linear(2, 2)).describe() == "Composite"
    assert TupleModule(Linear(2, 2)).describe() == "Tuple"
    assert named(TupleModule(Linear(2, 2)), "Heads").describe() == "Heads"
    assert named(Composite(Linear(2, 2), Identity()), "Block").describe() == "Block"
    assert Mul(0.25).describe() == "Mul(0.25)" and Add().norm([]) == 0.0


def test_a_tuple_on_the_left_of_at_applies_the_module_first():
    first, a, b = Linear(3, 2), Linear(4, 3), Linear(5, 3)
    net = (a, b) @ first
    assert isinstance(net, Composite) and net.num_atoms == 3
    w = net.initialize(seed=3)
    assert [tuple(piece.shape) for piece in w] == [(3, 2), (4, 3), (5, 3)]  # weights in application order
    x = torch.randn(7, 2)
    ya, yb = net(x, w)
    assert torch.allclose(ya, x @ w[0].T @ w[1].T, atol=1e-6) and torch.allclose(yb, x @ w[0].T @ w[2].T, atol=1e-6)


def test_dividing_a_module_scales_its_input():
    layer = Linear(3, 2)
    half = layer / 2
    assert half.sensitivity == 0.5 and half.mass == 1.0
    w, x = half.initialize(seed=1), torch.randn(4, 2)
    assert torch.allclose(half(x, w), 0.5 * x @ w[0].T, atol=1e-6)
    assert (layer / 1).sensitivity == 1.0
    with pytest.raises(ValueError, match=r"^cannot divide module Linear\(3, 2\) by 0$"):
        layer / 0


def test_layer_names_number_undeclared_atoms_per_copy_and_mark_repeats():
    block = with_role(Linear(3, 3), "hidden") @ Linear(3, 3)
    net = Linear(4, 3) @ block ** 2 @ Linear(3, 2)
    assert layer_roles(net) == ["linear1", "block.linear1", "hidden", "block.linear1", "hidden", "linear2"]
    assert layer_names(net) == ["linear1", "block.linear1[0]", "hidden[0]", "block.linear1[1]", "hidden[1]",
                                "linear2"]
    nested = (Linear(3, 3) ** 2) ** 3
    assert layer_names(nested)[:3] == ["block.block.linear1[0.0]", "block.block.linear1[0.1]",
                                       "block.block.linear1[1.0]"]
    twice = with_role(Linear(3, 3), "x") @ with_role(Linear(3, 3), "x") @ with_role(Linear(3, 3), "x")
    assert layer_names(twice) == ["x", "x#2", "x#3"]
    assert layer_roles(Embed(3, 4) + Embed(3, 5)) == ["embed1", "embed2"]


# --- atoms -----------------------------------------------------------------------------------------------------


def test_per_slice_normalisation_sets_each_slice_and_keeps_zero_slices_zero():
    conv = Conv2D(2, 3, kernel_size=1)
    conv.normalize_slices = True
    conv3 = Conv2D(2, 3, kernel_size=3)
    conv3.normalize_slices = True
    update = torch.randn(2, 3, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    update[:, :, 1, 1] = 0.0  # the centre slice is zero
    out = conv3.normalize_piece(update, 0.9)
    sigmas = torch.linalg.matrix_norm(conv3.matrices(out), ord=2)  # (9,)
    expected = torch.full((9,), 0.9 * conv3.polar_scale, dtype=torch.float64)
    expected[4] = 0.0
    assert out.dtype == torch.float64 and torch.allclose(sigmas, expected)
    # packed: one target per member
    stacked = torch.stack([update, 2 * update])
    out = conv3.normalize_piece(stacked, torch.tensor([0.5, 2.0]))
    sigmas = torch.linalg.matrix_norm(conv3.matrices(out), ord=2)  # (2, 9)
    assert torch.allclose(sigmas[:, 0], torch.tensor([0.5, 2.0], dtype=torch.float64) * conv3.polar_scale)
    assert conv.polar_scale == pytest.approx((2 / 3) ** 0.5)
    # a low-precision update stays in its dtype (the factor is computed in float32, then cast)
    for atom in (conv3, Conv2D(2, 3, kernel_size=3)):
        assert atom.normalize_piece(update.to(torch.bfloat16), 0.9).dtype == torch.bfloat16


@pytest.mark.parametrize("stride", [1, 2])
def test_strided_convolution_alone_and_packed(stride):
    conv = Conv2D(4, 3, kernel_size=3, stride=stride, padding=1)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(2, 4, 3, 3, 3, generator=g)
    x = torch.randn(2, 5, 3, 8, 8, generator=g)  # (members, batch, c_in, H, W)
    alone = conv.apply(x[0], w[0])
    reference = F.conv2d(x[0], w[0], stride=stride, padding=1)
    assert alone.shape == reference.shape == (5, 4, 8 // stride, 8 // stride)
    assert torch.allclose(alone, reference, atol=1e-5)
    packed = conv.apply(x, w)
    assert packed.shape == (2, 5, 4, 8 // stride, 8 // stride)
    for k in range(2):
        assert torch.allclose(packed[k], F.conv2d(x[k], w[k], stride=stride, padding=1), atol=1e-5)


# --- the polar factor and the power iteration's state ------------------------------------------------------------


def test_svd_polar_cuts_each_matrix_at_its_own_scale():
    # a tiny matrix beside a large one keeps its own polar factor; the cut-off is per matrix
    batch = torch.stack([torch.eye(2), 1e-9 * torch.eye(2)])
    assert torch.allclose(orthogonalize(batch, method="svd"), torch.stack([torch.eye(2), torch.eye(2)]))
    # and scales with the matrix size, not the batch size: σ = 1e-5 is kept in a batch of 100 2×2 matrices
    many = torch.diag(torch.tensor([1.0, 1e-5])).expand(100, 2, 2)
    assert torch.allclose(orthogonalize(many, method="svd"), torch.eye(2).expand(100, 2, 2))
    rank_one = torch.outer(torch.tensor([1.0, 2.0, 2.0]), torch.tensor([3.0, 4.0]))  # σ2 = 0 stays 0
    polar = orthogonalize(rank_one, method="svd")
    assert torch.allclose(polar, rank_one / 15.0, atol=1e-6)


def test_power_iteration_state_round_trips_onto_another_device():
    state = PowerIterationState(iterations=3, seed=7)
    state.spectral_norms({2: torch.randn(4, 3)})
    fresh = PowerIterationState()
    fresh.load_state_dict(state.state_dict(), "meta")
    assert (fresh.iterations, fresh.seed) == (3, 7)
    assert list(fresh.vectors) == [2] and fresh.vectors[2].device.type == "meta"
    assert fresh.vectors[2].shape == (3,)
    with pytest.raises(ValueError, match="^power iteration needs at least 1 iteration, got 0$"):
        PowerIterationState(iterations=0)


def test_power_iteration_starts_from_seeded_unit_vectors_and_keeps_them_unit():
    state = PowerIterationState()
    assert (state.iterations, state.seed) == (2, 0)  # two warm-started steps; start vectors seeded per atom
    small = 0.01 * torch.eye(3)[:2]  # σ = 0.01: the kept vector must still be a unit vector
    sigmas = state.spectral_norms({0: small, 5: torch.randn(2, 3, generator=torch.Generator().manual_seed(1))})
    assert float(sigmas[0]) == pytest.approx(0.01, rel=1e-4)
    for index in (0, 5):
        assert float(state.vectors[index].norm()) == pytest.approx(1.0, rel=1e-5)
    fresh = PowerIterationState(iterations=1, seed=3)
    fresh.spectral_norms({2: torch.eye(4)})  # one step from the start vector: A = I keeps it
    start = torch.randn(4, generator=torch.Generator().manual_seed(3 + 2))
    assert torch.allclose(fresh.vectors[2], start / start.norm(), atol=1e-6)


def test_a_kept_vector_on_another_device_is_drawn_again():
    state = PowerIterationState()
    state.vectors[0] = torch.ones(3, device="meta")
    matrix = torch.diag(torch.tensor([3.0, 1.0, 0.5]))
    assert float(state.spectral_norms({0: matrix})[0]) == pytest.approx(3.0, rel=1e-2)
    assert state.vectors[0].device.type == "cpu"


def test_conv2d_arguments_defaults_and_feature_axis():
    conv = Conv2D(4, 3)  # kernel 3, stride 1, padding 1: keeps the image size
    y = conv.apply(torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3))
    assert y.shape == (2, 4, 5, 5) and y.shape[conv.feature_axis] == 4  # one feature vector per pixel
    assert (conv.mass, conv.sensitivity, conv.slice_count) == (1.0, 1.0, 9)
    assert Conv2D(4, 3, mass=0.5).mass == 0.5
    for key, kwargs in (("c_out", {"c_out": 0}), ("c_in", {"c_in": -1}), ("kernel_size", {"kernel_size": 0}),
                        ("stride", {"stride": 0})):
        value = next(iter(kwargs.values()))
        with pytest.raises(ValueError, match=rf"^Conv2D: {key} must be a positive integer, got {value}$"):
            Conv2D(**{"c_out": 4, "c_in": 3, **kwargs})
    for padding in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"^Conv2D: padding must be a non-negative integer, got {padding!r}$"):
            Conv2D(4, 3, padding=padding)
    assert Conv2D(4, 3, padding=0).padding == 0


def test_orthogonalize_checks_its_arguments_and_runs_past_its_table():
    G = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    for steps in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=rf"^orthogonalize steps must be a positive integer, got {steps!r}$"):
            orthogonalize(G, steps=steps)
    with pytest.raises(ValueError, match=r"^unknown orthogonalize method 'qr'; allowed: polar_express, muon, cubic, "
                                         r"svd$"):
        orthogonalize(G, method="qr")
    with pytest.raises(ValueError, match=r"^orthogonalize needs a matrix or a batch of matrices, got shape \(3,\)$"):
        orthogonalize(torch.ones(3))
    # Polar Express repeats its last polynomial past its 8-step table: 12 steps reach U Vᵀ
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    assert torch.allclose(orthogonalize(G, steps=12), U @ Vh, atol=2e-3)


def test_the_iteration_coefficients_per_method():
    from modula_cli.nn.orthogonalize import CUBIC, MUON, POLAR_EXPRESS, coefficients

    assert coefficients("polar_express", 10) == [*POLAR_EXPRESS, POLAR_EXPRESS[-1], POLAR_EXPRESS[-1]]
    assert coefficients("muon", 2) == [MUON, MUON] and coefficients("cubic", 1) == [CUBIC]
    with pytest.raises(ValueError, match=r"^unknown orthogonalize method 'svd'; allowed: polar_express, muon, cubic, "
                                         r"svd$"):
        coefficients("svd", 3)  # the exact method has no polynomial


def test_tare_rescales_every_mass_by_one_factor():
    net = Linear(2, 2, mass=1.0) @ Linear(2, 2, mass=3.0)
    assert [a.mass for a in net.tare(8.0).atoms()] == [6.0, 2.0]  # application order: the mass-3 layer first
    assert [a.mass for a in (Linear(2, 2) @ Linear(2, 2)).tare().atoms()] == [0.5, 0.5]  # default: total 1
    assert [a.mass for a in (Linear(2, 2) @ Linear(2, 2)).tare(0).atoms()] == [0.0, 0.0]  # allowed: mass 0
    with pytest.raises(ValueError, match=r"^tare: mass must be >= 0, got -1$"):
        Linear(2, 2).tare(-1)


def test_atom_defaults_and_a_massless_atoms_share():
    layer = Linear(2, 3)
    assert (layer.mass, layer.sensitivity) == (1.0, 1.0)
    assert Linear(2, 3, mass=0).target_shares() == [0.0] and layer.target_shares() == [1.0]
    with pytest.raises(ValueError, match=r"^Mul needs a nonzero number, got True$"):
        Mul(True)
    with pytest.raises(ValueError, match=r"^Composite needs at least one module$"):
        Composite()
    with pytest.raises(ValueError, match=r"^TupleModule takes modules, got 3$"):
        TupleModule(Linear(2, 2), 3)


def test_initialize_defaults_to_seed_0_and_moves_to_the_device():
    net = Linear(3, 2) @ Linear(2, 4)
    assert all(torch.equal(a, b) for a, b in zip(net.initialize(), net.initialize(seed=0)))
    assert not torch.equal(net.initialize()[0], net.initialize(seed=1)[0])
    assert {w.device.type for w in net.initialize(device="meta")} == {"meta"}
    assert {w.dtype for w in net.initialize(dtype=torch.float64)} == {torch.float64}


def test_feature_sizes_are_checked_when_modules_are_combined():
    from modula_cli.nn import Flatten, GELU

    net = Linear(5, 4) @ GELU() @ Linear(4, 3)  # a shape-preserving bond passes the size through
    assert (net.features_in, net.features_out) == (3, 5)
    with pytest.raises(ValueError, match=r"^shapes cannot compose: Linear\(5, 4\) takes 4 features but the module "
                                         r"before it produces 6$"):
        Linear(5, 4) @ GELU() @ Linear(6, 3)
    # after a reshape the input size is not the chain's
    assert (Linear(2, 12) @ Flatten() @ Linear(4, 3)).features_in == 3
    assert (Linear(2, 12) @ Flatten()).features_in is None
    pair = TupleModule(Linear(4, 3), Linear(4, 3))
    assert (pair.features_in, pair.features_out) == (3, 4)
    assert TupleModule(Linear(4, 3), Linear(5, 3)).features_out is None  # outputs differ: unknown after
    assert TupleModule(Linear(4, 3), Flatten()).features_in == 3
    with pytest.raises(ValueError, match=r"^shapes cannot compose: the inputs of a tuple expect different feature "
                                         r"sizes: Linear\(4, 3\) \(3\), Linear\(4, 5\) \(5\)$"):
        TupleModule(Linear(4, 3), GELU(), Linear(4, 5))
    assert (Embed(3, 5) + Embed(3, 7)).features_out == 3  # the sum of agreeing branches keeps their size
