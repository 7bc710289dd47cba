"""Module algebra: combination rules, hand-computed masses and shares, operators, bad input."""

import math

import pytest
import torch

from modula_cli.nn import (GPT, Attention, Conv2D, Embed, FunctionalAttention, Identity, Linear, Mul, ReLU,
                           ResMLP, ResNet, StandardGPT, TupleModule)


def scaled_orthogonal(d_out, d_in, atom_norm, seed=0):
    """A Linear weight whose RMS→RMS norm is exactly ``atom_norm``."""
    w = Linear(d_out, d_in).initialize(seed)[0]
    return w * atom_norm


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


def test_resmlp_masses_and_shares_by_hand():
    L, B = 3, 2
    net = ResMLP(width=16, depth=L, block_depth=B, input_dim=12, output_dim=5)
    assert net.mass == pytest.approx(3.0) and net.sensitivity == pytest.approx(1.0)
    atoms = list(net.atoms())
    assert len(atoms) == 2 + L * B
    assert [a.mass for a in atoms[1:-1]] == pytest.approx([1 / (L * B)] * (L * B))
    # input and output get τ/3; the 1/L residual multiplier gives every hidden layer τ/(3B).
    assert net.target_shares() == pytest.approx([1 / 3] + [1 / (3 * B)] * (L * B) + [1 / 3])


def test_depth_one_residual_is_the_residue():
    net = ResMLP(width=8, depth=1, block_depth=2, input_dim=4, output_dim=3)
    assert net.mass == pytest.approx(3.0) and net.sensitivity == pytest.approx(1.0)
    assert net.target_shares() == pytest.approx([1 / 3, 1 / 6, 1 / 6, 1 / 3])


def test_resnet_masses_and_shares_by_hand():
    L, B = 2, 2
    net = ResNet(width=8, depth=L, block_depth=B, in_channels=3, num_classes=10)
    assert net.mass == pytest.approx(22.0) and net.sensitivity == pytest.approx(1.0)
    assert net.target_shares() == pytest.approx([1 / 22] + [20 / (22 * B)] * (L * B) + [1 / 22])


def test_gpt_masses_and_shares_by_hand():
    L = 3
    net = GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=L)
    atoms = list(net.atoms())
    assert net.mass == pytest.approx(7.0) and net.sensitivity == pytest.approx(1.0)
    assert len(atoms) == 2 + 6 * L + 1
    assert [a.mass for a in atoms[:2]] == pytest.approx([0.5, 0.5])
    assert sum(a.mass for a in atoms[2:-1]) == pytest.approx(5.0)
    # Each embedding: τ/7 · 1/2 (tuple) · 2 (the 1/2 multiplier) = τ/7. Q, K, V: 5/7 each (the 1/3 after
    # the tuple triples their share); attention exit and both MLP layers: 5/21. Output: 1/7.
    block = [5 / 7, 5 / 7, 5 / 7, 5 / 21, 5 / 21, 5 / 21]
    assert net.target_shares() == pytest.approx([1 / 7, 1 / 7] + block * L + [1 / 7])


def test_attention_sensitivity_is_one():
    att = Attention(num_heads=2, d_embed=8, d_query=4, d_value=4)
    assert att.sensitivity == pytest.approx(1.0) and att.mass == 4.0


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


def test_tare_and_print_shows_shares():
    net = ResMLP(width=8, depth=2, block_depth=1, input_dim=4, output_dim=3, blocks_mass=2.0)
    assert net.mass == pytest.approx(4.0)
    text = repr(net)
    assert "Linear(8, 4)" in text and "share 0.25" in text and "mass 4" in text


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


def test_forward_shapes():
    gpt = GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2)
    tokens = torch.randint(0, 11, (3, 8))
    assert gpt(tokens, gpt.initialize()).shape == (3, 8, 11)
    std = StandardGPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2)
    assert std(tokens[:, :5], std.initialize()).shape == (3, 5, 11)
    mlp = ResMLP(width=16, depth=2, block_depth=2, input_dim=3 * 4 * 4, output_dim=10)
    assert mlp(torch.randn(5, 3, 4, 4), mlp.initialize()).shape == (5, 10)
    resnet = ResNet(width=8, depth=2, block_depth=2, in_channels=3, num_classes=10)
    assert resnet(torch.randn(5, 3, 8, 8), resnet.initialize()).shape == (5, 10)
    att = Attention(num_heads=2, d_embed=8, d_query=4, d_value=4)
    assert att(torch.randn(2, 6, 8), att.initialize()).shape == (2, 6, 8)


def test_functional_attention_uses_one_over_dq():
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
    out = FunctionalAttention(causal=False)((q, k, v), [])
    ref = torch.softmax(q @ k.mT / 4, dim=-1) @ v
    assert torch.allclose(out, ref, atol=1e-6)


def test_initialize_is_deterministic_per_seed():
    net = GPT(vocab_size=11, context=8, num_heads=2, width=8, depth=2)
    a, b, c = net.initialize(1), net.initialize(1), net.initialize(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[2], c[2])
    assert all(t.dtype == torch.float64 for t in net.initialize(1, dtype=torch.float64))


def test_standard_gpt_init_std():
    net = StandardGPT(vocab_size=50, context=16, num_heads=2, width=64, depth=2)
    w = net.initialize(0)
    assert w[0].std().item() == pytest.approx(0.02, rel=0.1)
    # the attention output projection of block 1 is scaled by 1/sqrt(2L)
    out_proj = [t for a, t in zip(net.atoms(), w) if isinstance(a, Linear)][3]
    assert out_proj.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    assert isinstance(list(net.atoms())[0], Embed) and not any(isinstance(a, Conv2D) for a in net.atoms())
