"""The module algebra (modula_cli/nn/module.py): the composition and tuple rules for masses, sensitivities, norms and
shares, worked out by hand; tare; the operators, including their less common forms; the printed tree with its masses
and shares, display names and layer names; initialisation, feature sizes and bad construction."""

from __future__ import annotations

import pytest
import torch

from modula_cli.nn import (GPT, Add, Composite, Embed, Identity, Linear, Mul, ReLU, ResMLP, StandardGPT, TupleModule,
                           layer_names, layer_roles, named, with_role)


def scaled_orthogonal(d_out, d_in, atom_norm, seed=0):
    """A Linear weight whose RMS→RMS norm is exactly ``atom_norm``."""
    w = Linear(d_out, d_in).initialize(seed)[0]
    return w * atom_norm


# --- the composition and tuple rules, by hand ----------------------------------------------------------------------


def test_composition_norm_rule_by_hand():
    inner = Linear(4, 3)
    outer = Mul(0.5) @ Linear(5, 4, mass=2.0)
    net = outer @ inner
    assert net.mass == 3.0 and net.sensitivity == pytest.approx(0.5)
    w = [scaled_orthogonal(4, 3, 0.3), scaled_orthogonal(5, 4, 0.8)]
    # ||w2||_{M2} = 0.5 · 0.8 (the Mul follows the Linear inside M2), so
    # max(s2 · (m/m1) · ||w1||, (m/m2) · ||w2||_{M2}) = max(0.5·3·0.3, 1.5·0.4) = 0.6
    assert net.norm(w) == pytest.approx(0.6, rel=1e-5)
    w = [scaled_orthogonal(4, 3, 2.0), scaled_orthogonal(5, 4, 0.8)]
    assert net.norm(w) == pytest.approx(3.0, rel=1e-5)  # 0.5·3·2.0
    # Shares: M1 gets (m1/m)/s2 = (1/3)/0.5; M2 gets m2/m = 2/3, and its Linear (2/3)/0.5 behind the Mul.
    assert net.target_shares() == pytest.approx([2 / 3, 4 / 3])


def test_tuple_norm_rule_by_hand():
    net = TupleModule(Linear(4, 3, mass=1.0), Linear(4, 3, mass=3.0))
    assert net.mass == 4.0 and net.sensitivity == 2.0
    w = [scaled_orthogonal(4, 3, 0.5), scaled_orthogonal(4, 3, 0.5, seed=1)]
    assert net.norm(w) == pytest.approx(max(4 * 0.5, 4 / 3 * 0.5), rel=1e-5)
    assert net.target_shares() == pytest.approx([0.25, 0.75])


def test_zero_mass_atom_is_dropped_and_frozen():
    net = Linear(4, 4) @ Linear(4, 3, mass=0.0)
    w = [scaled_orthogonal(4, 3, 100.0), scaled_orthogonal(4, 4, 0.5)]
    assert net.norm(w) == pytest.approx(0.5, rel=1e-5)
    g = [torch.randn(4, 3), torch.randn(4, 4)]
    assert torch.count_nonzero(net.normalize(g, 1.0)[0]) == 0
    assert torch.count_nonzero(net.dualize(g, 1.0)[0]) == 0


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


def test_tare_rescales_every_mass_by_one_factor():
    net = Linear(2, 2, mass=1.0) @ Linear(2, 2, mass=3.0)
    assert [a.mass for a in net.tare(8.0).atoms()] == [6.0, 2.0]  # application order: the mass-3 layer first
    assert [a.mass for a in (Linear(2, 2) @ Linear(2, 2)).tare().atoms()] == [0.5, 0.5]  # default: total 1
    assert [a.mass for a in (Linear(2, 2) @ Linear(2, 2)).tare(0).atoms()] == [0.0, 0.0]  # allowed: mass 0
    with pytest.raises(ValueError, match=r"^tare: mass must be >= 0, got -1$"):
        Linear(2, 2).tare(-1)


def test_target_shares_follow_mass_changes_after_caching():
    """Shares are cached on each module; changing masses (tare of the whole net or of a sub-module held
    elsewhere) must give the shares of a net built with those masses from the start."""
    first, second = Linear(5, 6), Linear(4, 5, mass=3.0)
    net = second @ first
    assert net.target_shares() == pytest.approx([1 / 4, 3 / 4])
    first.tare(3.0)  # through the sub-module: the parent's cache must notice
    assert net.target_shares() == pytest.approx([1 / 2, 1 / 2])
    gpt = GPT(vocab_size=10, context=8, num_heads=2, width=8, depth=2)
    before = gpt.target_shares()
    gpt.tare(2.0)
    fresh = GPT(vocab_size=10, context=8, num_heads=2, width=8, depth=2).tare(2.0)
    assert gpt.target_shares() == pytest.approx(fresh.target_shares()) and gpt.target_shares() != before


# --- operators -----------------------------------------------------------------------------------------------------


def test_operators_and_precedence():
    lin = Linear(4, 4)
    w = lin.initialize(0)
    x = torch.randn(3, 4)
    assert torch.allclose(((1 / 3) * lin)(x, w), lin(x, w) / 3)
    assert torch.allclose((lin * 2)(x, w), lin(2 * x, w))
    assert torch.allclose((lin / 4)(x, w), lin(x / 4, w))
    assert ((1 / 3) * lin).sensitivity == pytest.approx(1 / 3)
    summed = lin + Identity()
    assert torch.allclose(summed(x, w), lin(x, w) + x)
    assert summed.sensitivity == 2.0
    # Without parentheses Python reads `lin @ 1/3 * lin` as `(lin @ 1) / 3 * lin`: refused, never silent.
    with pytest.raises(TypeError):
        lin @ 1 / 3 * lin  # noqa: B018


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


def test_power_makes_independent_copies():
    block = Linear(4, 4)
    stack = block ** 3
    assert stack.num_atoms == 3 and stack.mass == 3.0
    w = stack.initialize(0)
    assert not torch.allclose(w[0], w[1])
    stack.tare(1.0)
    assert [a.mass for a in stack.atoms()] == pytest.approx([1 / 3] * 3)
    assert block.mass == 1.0  # the original is untouched
    assert isinstance(block ** 0, Identity)


# --- the printed tree, display names and layer names ---------------------------------------------------------------


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


def test_tare_and_print_shows_shares():
    net = ResMLP(width=8, depth=2, block_depth=1, input_dim=4, output_dim=3, blocks_mass=2.0)
    assert net.mass == pytest.approx(4.0)
    text = repr(net)
    assert "Linear(8, 4)" in text and "share 0.25" in text and "mass 4" in text


def test_display_names():
    assert Add().describe() == "Add" and Identity().describe() == "Identity"
    assert Composite(Linear(2, 2), Linear(2, 2)).describe() == "Composite"
    assert TupleModule(Linear(2, 2)).describe() == "Tuple"
    assert named(TupleModule(Linear(2, 2)), "Heads").describe() == "Heads"
    assert named(Composite(Linear(2, 2), Identity()), "Block").describe() == "Block"
    assert Mul(0.25).describe() == "Mul(0.25)" and Add().norm([]) == 0.0


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


# --- initialisation, feature sizes and bad construction ------------------------------------------------------------


def test_initialize_is_deterministic_per_seed():
    net = GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2)
    a, b, c = net.initialize(1), net.initialize(1), net.initialize(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[2], c[2])
    assert all(t.dtype == torch.float64 for t in net.initialize(1, dtype=torch.float64))


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


@pytest.mark.parametrize("make, message", [
    (lambda: Linear(4, 3) @ Linear(5, 6), "3 features"),
    (lambda: Linear(4, 3) ** -1, "-1"),
    (lambda: Linear(4, 3) ** 1.5, "1.5"),
    (lambda: Mul(0), "nonzero"),
    (lambda: ReLU().tare(1.0), "massless"),
    (lambda: GPT(vocab_size=10, context=8, num_heads=3, width=8, depth=1), "not divisible by num_heads 3"),
    (lambda: StandardGPT(vocab_size=10, context=8, num_heads=3, width=8, depth=1), "width 8"),
    (lambda: Linear(0, 3), "d_out"),
    (lambda: ResMLP(width=8, depth=0, block_depth=1, input_dim=4, output_dim=3), "depth"),
])
def test_bad_construction_raises_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()
