"""The compounds (modula_cli/nn/compounds.py) against values derived by hand (docs/design.md, "Combining modules",
"Normalising and dualising a network", "Architectures"): Residual, ResMLP, ResNet, Attention, GPT and StandardGPT,
their forward passes against the equations in float64 (tests/nn_reference.py), masses, shares, names, roles and
initial weights; and the argument checks of every compound (modula_cli/nn/checks.py), as the user reads them."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from helpers import exactly
from modula_cli.nn import (GPT, Abs, AddHeads, Attention, Conv2D, Embed, Linear, Module, Residual, ResMLP, ResNet,
                           StandardGPT, layer_names, layer_roles)
from modula_cli.nn.checks import positive_int_problem, require_positive_ints
from nn_reference import (F64, attend, close, gaussian_weights, merge_heads, ref_gelu, ref_layer_norm,
                          ref_paper_attention, ref_rms_divide, split_heads)


# --- Residual ------------------------------------------------------------------------------------------------------


def test_residual_forward_mass_shares_and_name():
    L, mass = 3, 2.0
    net = Residual(Linear(4, 4), depth=L, blocks_mass=mass)
    assert net.describe() == "Residual(depth=3)"
    assert net.num_atoms == L and net.mass == pytest.approx(mass)
    assert [a.mass for a in net.atoms()] == pytest.approx([mass / L] * L)
    assert net.sensitivity == pytest.approx(1.0)  # (1 − 1/L) + (1/L)·1 per block
    # each block gets τ/L (equal masses, sensitivity-1 blocks after it); the 1/L multiplier gives the residue ×L
    assert net.target_shares() == pytest.approx([1.0] * L)
    w = gaussian_weights(net, 1)
    x = torch.randn(5, 4, dtype=F64)
    expected = x
    for weight in w:
        expected = (1 - 1 / L) * expected + (1 / L) * (expected @ weight.T)
    assert close(net(x, w), expected)


def test_residual_of_depth_one_is_its_residue():
    residue = Linear(3, 3) @ Abs() @ Linear(3, 3)
    net = Residual(residue, depth=1, blocks_mass=4.0)
    assert net.describe() == "Residual(depth=1)" and net.num_atoms == 2 and net.mass == pytest.approx(4.0)
    assert net.sensitivity == pytest.approx(1.0)
    assert net.target_shares() == pytest.approx([0.5, 0.5])
    w = gaussian_weights(net, 2)
    x = torch.randn(4, 3, dtype=F64)
    assert close(net(x, w), (x @ w[0].T).abs() @ w[1].T)


def test_residual_of_depth_two_weights_half_and_half():
    net = Residual(Linear(3, 3), depth=2, blocks_mass=1.0)
    w = gaussian_weights(net, 3)
    x = torch.randn(2, 3, dtype=F64)
    h = 0.5 * x + 0.5 * (x @ w[0].T)
    assert close(net(x, w), 0.5 * h + 0.5 * (h @ w[1].T))
    assert net.target_shares() == pytest.approx([1.0, 1.0])


# --- ResMLP --------------------------------------------------------------------------------------------------------


def ref_resmlp(x: Tensor, w: list[Tensor], depth: int, block_depth: int) -> Tensor:
    h = x.flatten(start_dim=-3) @ w[0].T
    hidden = iter(w[1:-1])
    for _ in range(depth):
        r = h
        for _ in range(block_depth):
            r = ref_rms_divide(r) @ next(hidden).T
            r = r.abs()
            r = r - r.mean(dim=-1, keepdim=True)
        h = r if depth == 1 else (1 - 1 / depth) * h + (1 / depth) * r
    return h @ w[-1].T


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_resmlp_forward_by_hand(depth: int):
    B = 2
    net = ResMLP(width=6, depth=depth, block_depth=B, input_dim=2 * 2 * 2, output_dim=3)
    w = gaussian_weights(net, depth)
    assert [tuple(t.shape) for t in w] == [(6, 8)] + [(6, 6)] * (depth * B) + [(3, 6)]
    x = torch.randn(4, 2, 2, 2, dtype=F64)
    assert close(net(x, w), ref_resmlp(x, w, depth, B))


def test_resmlp_names_roles_masses_and_blocks_mass():
    L, B = 2, 3
    net = ResMLP(width=5, depth=L, block_depth=B, input_dim=7, output_dim=4, blocks_mass=0.5)
    assert net.describe() == "ResMLP(width=5, depth=2, block_depth=3)"
    assert layer_roles(net) == ["input"] + ["hidden"] * (L * B) + ["output"]
    assert layer_names(net) == ["input"] + [f"hidden[{i}.{j}]" for i in range(L) for j in range(B)] + ["output"]
    assert [a.mass for a in net.atoms()] == pytest.approx([1.0] + [0.5 / (L * B)] * (L * B) + [1.0])
    assert net.mass == pytest.approx(2.5) and net.sensitivity == pytest.approx(1.0)
    # input and output τ/2.5; the blocks τ·0.5/2.5 in all, each hidden layer of a residue of B: (0.2/B)·... ×L/L
    assert net.target_shares() == pytest.approx([0.4] + [0.2 / B] * (L * B) + [0.4])
    assert [(a.d_out, a.d_in) for a in net.atoms()] == [(5, 7)] + [(5, 5)] * (L * B) + [(4, 5)]


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


# --- ResNet --------------------------------------------------------------------------------------------------------


def ref_resnet(x: Tensor, w: list[Tensor], depth: int, block_depth: int, kernel: int) -> Tensor:
    chw = (-3, -2, -1)
    pad = (kernel - 1) // 2
    h = torch.nn.functional.conv2d(x, w[0], padding=pad)
    hidden = iter(w[1:-1])
    for _ in range(depth):
        r = h
        for _ in range(block_depth):
            r = torch.nn.functional.conv2d(ref_rms_divide(r, chw), next(hidden), padding=pad).abs()
            r = r - r.mean(dim=chw, keepdim=True)
        h = r if depth == 1 else (1 - 1 / depth) * h + (1 / depth) * r
    return h.mean(dim=(-2, -1)) @ w[-1].T


@pytest.mark.parametrize("kernel", [3, 5])
def test_resnet_forward_by_hand(kernel: int):
    L, B = 2, 2
    net = ResNet(width=4, depth=L, block_depth=B, in_channels=3, num_classes=5, kernel_size=kernel)
    w = gaussian_weights(net, kernel)
    assert [tuple(t.shape) for t in w] == ([(4, 3, kernel, kernel)] + [(4, 4, kernel, kernel)] * (L * B)
                                           + [(5, 4)])
    x = torch.randn(3, 3, 6, 5, dtype=F64)
    assert close(net(x, w), ref_resnet(x, w, L, B, kernel))


def test_resnet_names_roles_masses_and_default_kernel():
    net = ResNet(width=4, depth=3, block_depth=1, in_channels=2, num_classes=6, blocks_mass=6.0)
    assert net.describe() == "ResNet(width=4, depth=3, block_depth=1)"
    assert layer_roles(net) == ["input", "hidden", "hidden", "hidden", "output"]
    assert [a.mass for a in net.atoms()] == pytest.approx([1.0, 2.0, 2.0, 2.0, 1.0])
    assert net.target_shares() == pytest.approx([1 / 8, 6 / 8, 6 / 8, 6 / 8, 1 / 8])
    convs = list(net.atoms())[:-1]
    assert all(c.kernel_size == 3 and c.padding == 1 and c.stride == 1 for c in convs)
    one = ResNet(width=4, depth=1, block_depth=2, in_channels=2, num_classes=6)
    w = gaussian_weights(one, 0)
    x = torch.randn(2, 2, 4, 4, dtype=F64)
    assert close(one(x, w), ref_resnet(x, w, 1, 2, 3))


def test_resnet_masses_and_shares_by_hand():
    L, B = 2, 2
    net = ResNet(width=8, depth=L, block_depth=B, in_channels=3, num_classes=10)
    assert net.mass == pytest.approx(22.0) and net.sensitivity == pytest.approx(1.0)
    assert net.target_shares() == pytest.approx([1 / 22] + [20 / (22 * B)] * (L * B) + [1 / 22])


@pytest.mark.parametrize("kernel", [2, 4])
def test_resnet_even_kernel_is_refused(kernel: int):
    with pytest.raises(ValueError, match=exactly(f"ResNet: kernel_size must be odd to keep the image size, "
                                                 f"got {kernel}")):
        ResNet(width=4, depth=1, block_depth=1, in_channels=3, num_classes=2, kernel_size=kernel)


# --- Attention -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("third", ["output", "qkv"])
@pytest.mark.parametrize("causal", [True, False])
def test_attention_forward_by_hand(third: str, causal: bool):
    heads, d_embed, d_q, d_v = 2, 6, 3, 5
    net = Attention(heads, d_embed, d_q, d_v, causal=causal, third=third)
    w = gaussian_weights(net, 7, scale=1.0)
    assert [tuple(t.shape) for t in w] == [(6, 6), (6, 6), (10, 6), (6, 10)]
    x = torch.randn(2, 4, d_embed, dtype=F64)
    assert close(net(x, w), ref_paper_attention(x, *w, heads=heads, third=third, causal=causal))


def test_attention_thirds_share_masses_and_shares_but_not_outputs():
    nets = {third: Attention(2, 4, 2, 2, third=third) for third in ("output", "qkv")}
    for net in nets.values():
        assert net.describe() == "Attention(heads=2)"
        assert layer_roles(net) == ["attn.q", "attn.k", "attn.v", "attn.out"]
        assert net.mass == 4.0 and net.sensitivity == pytest.approx(1.0)
        # (Q, K, V) gets τ·(3/4)/(1/3) = 9τ/4, a third each; the exit τ/4
        assert net.target_shares() == pytest.approx([3 / 4, 3 / 4, 3 / 4, 1 / 4])
    w = gaussian_weights(nets["output"], 5, scale=1.5)
    x = torch.randn(1, 5, 4, dtype=F64)
    assert not torch.allclose(nets["output"](x, w), nets["qkv"](x, w), atol=1e-6)


def test_attention_sensitivity_is_one():
    att = Attention(num_heads=2, d_embed=8, d_query=4, d_value=4)
    assert att.sensitivity == pytest.approx(1.0) and att.mass == 4.0


def test_attention_defaults_are_causal_with_the_third_on_the_output():
    net = Attention(1, 3, 3, 3)
    w = gaussian_weights(net, 9, scale=1.0)
    x = torch.randn(1, 4, 3, dtype=F64)
    assert close(net(x, w), ref_paper_attention(x, *w, heads=1, third="output", causal=True))


def test_attention_third_is_checked():
    with pytest.raises(ValueError, match=exactly("Attention: third='middle'; allowed: output, qkv")):
        Attention(2, 4, 2, 2, third="middle")


# --- GPT -----------------------------------------------------------------------------------------------------------


def ref_gpt(tokens: Tensor, w: list[Tensor], heads: int, depth: int, third: str) -> Tensor:
    positions = torch.arange(tokens.shape[-1])
    h = 0.5 * w[0][tokens] + 0.5 * w[1][positions]
    a = 1 / (2 * depth)
    for block in range(depth):
        wq, wk, wv, wo, w_in, w_out = w[2 + 6 * block: 8 + 6 * block]
        h = (1 - a) * h + a * ref_paper_attention(ref_layer_norm(h), wq, wk, wv, wo, heads, third)
        h = (1 - a) * h + a * (math.sqrt(2) * ref_gelu(ref_layer_norm(h) @ w_in.T) @ w_out.T)
    return ref_layer_norm(h) @ w[-1].T


GPT_ROLES = ["attn.q", "attn.k", "attn.v", "attn.out", "mlp.in", "mlp.out"]


@pytest.mark.parametrize("third", ["output", "qkv"])
@pytest.mark.parametrize("depth", [1, 2])
def test_gpt_forward_by_hand(third: str, depth: int):
    vocab, context, heads, width = 7, 6, 2, 4
    net = GPT(vocab, context, heads, width, depth, attention_third=third)
    w = gaussian_weights(net, depth, scale=1.0)
    block = [(4, 4), (4, 4), (4, 4), (4, 4), (16, 4), (4, 16)]
    assert [tuple(t.shape) for t in w] == [(7, 4), (6, 4)] + block * depth + [(7, 4)]
    tokens = torch.tensor([[1, 6, 0, 3, 3], [2, 2, 5, 4, 0]])
    assert close(net(tokens, w), ref_gpt(tokens, w, heads, depth, third))


def test_gpt_names_roles_masses_and_shares():
    L, mu = 2, 3.0
    net = GPT(vocab_size=9, context=5, num_heads=2, width=4, depth=L, blocks_mass=mu, attention_third="qkv")
    assert net.describe() == "GPT(width=4, depth=2, heads=2, context=5)"
    assert layer_roles(net) == ["embed.token", "embed.position"] + GPT_ROLES * L + ["output"]
    assert layer_names(net)[2:8] == [f"{role}[0]" for role in GPT_ROLES]
    blocks = [child for child in net.children if child.describe() == "Blocks(depth=2)"]
    assert len(blocks) == 1 and blocks[0].num_atoms == 6 * L and blocks[0].mass == pytest.approx(mu)
    assert [a.mass for a in net.atoms()] == pytest.approx([0.5, 0.5] + [mu / (6 * L)] * (6 * L) + [1.0])
    assert net.mass == pytest.approx(2 + mu) and net.sensitivity == pytest.approx(1.0)
    # total mass M = 5. Embeddings: τ/M each (a half of τ/M, doubled by the 1/2). Attention block (mass 4 of
    # 6 per pair) then ×2L for the 1/(2L) multiplier: 4μ/(3M); Q, K, V get 3/4 of it, the exit 1/4; the MLP
    # block (2 of 6) gives its residue 2μ/(3M), half to each layer.
    block = [mu / 5] * 3 + [mu / 15] * 3
    assert net.target_shares() == pytest.approx([1 / 5, 1 / 5] + block * L + [1 / 5])


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


def test_gpt_width_must_divide_into_heads():
    with pytest.raises(ValueError, match=exactly("GPT: width 7 is not divisible by num_heads 3; "
                                                 "choose a width that is a multiple of num_heads")):
        GPT(vocab_size=5, context=4, num_heads=3, width=7, depth=1)
    with pytest.raises(ValueError, match=exactly("StandardGPT: width 6 is not divisible by num_heads 4; "
                                                 "choose a width that is a multiple of num_heads")):
        StandardGPT(vocab_size=5, context=4, num_heads=4, width=6, depth=1)


# --- StandardGPT ---------------------------------------------------------------------------------------------------


def ref_standard_gpt(tokens: Tensor, w: list[Tensor], heads: int, depth: int) -> Tensor:
    h = w[0][tokens] + w[1][torch.arange(tokens.shape[-1])]
    for block in range(depth):
        wq, wk, wv, wo, w_in, w_out = w[2 + 6 * block: 8 + 6 * block]
        x = ref_layer_norm(h)
        q, k, v = (split_heads(x @ m.T, heads) for m in (wq, wk, wv))
        h = h + merge_heads(attend(q, k, v, 1 / math.sqrt(q.shape[-1]), True)) @ wo.T
        h = h + ref_gelu(ref_layer_norm(h) @ w_in.T) @ w_out.T
    return ref_layer_norm(h) @ w[-1].T


@pytest.mark.parametrize("depth", [1, 2])
def test_standard_gpt_forward_by_hand(depth: int):
    net = StandardGPT(vocab_size=7, context=6, num_heads=2, width=8, depth=depth)
    w = gaussian_weights(net, 11 + depth, scale=1.0)
    block = [(8, 8)] * 4 + [(32, 8), (8, 32)]
    assert [tuple(t.shape) for t in w] == [(7, 8), (6, 8)] + block * depth + [(7, 8)]
    tokens = torch.tensor([[1, 6, 0, 3], [2, 2, 5, 4]])
    assert close(net(tokens, w), ref_standard_gpt(tokens, w, 2, depth))


def test_standard_gpt_names_roles_masses_and_init_stds():
    L = 3
    net = StandardGPT(vocab_size=40, context=8, num_heads=2, width=16, depth=L)
    assert net.describe() == "StandardGPT(width=16, depth=3, heads=2, context=8)"
    assert layer_roles(net) == ["embed.token", "embed.position"] + GPT_ROLES * L + ["output"]
    blocks = [child for child in net.children if child.describe() == "Blocks(depth=3)"]
    assert len(blocks) == 1 and blocks[0].num_atoms == 6 * L
    assert all(a.mass == 1.0 for a in net.atoms()) and net.mass == 3 + 6 * L
    # untared plain sums: embeddings 1 + 1; per block (1 + 3·1) for attention, (1 + 1/√2) for the GELU MLP
    assert net.sensitivity == pytest.approx(2 * (4 * (1 + 1 / math.sqrt(2))) ** L)
    out_std = 0.02 / math.sqrt(2 * L)
    stds = {role: (out_std if role in ("attn.out", "mlp.out") else 0.02) for role in layer_roles(net)}
    assert [a.init_std for a in net.atoms()] == pytest.approx([stds[r] for r in layer_roles(net)], rel=1e-12)
    # the drawn weights have those stds: Gaussian, mean 0 (orthogonal or unit-row weights would be far larger)
    for role, weight in zip(layer_roles(net), net.initialize(0, dtype=F64)):
        assert weight.std().item() == pytest.approx(stds[role], rel=0.15), role
        assert abs(weight.mean().item()) < 4 * stds[role] / math.sqrt(weight.numel()), role


def test_standard_gpt_init_std():
    net = StandardGPT(vocab_size=50, context=16, num_heads=2, width=64, depth=2)
    w = net.initialize(0)
    assert w[0].std().item() == pytest.approx(0.02, rel=0.1)
    # the attention output projection of block 1 is scaled by 1/sqrt(2L)
    out_proj = [t for a, t in zip(net.atoms(), w) if isinstance(a, Linear)][3]
    assert out_proj.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    assert isinstance(list(net.atoms())[0], Embed) and not any(isinstance(a, Conv2D) for a in net.atoms())


# --- every architecture: shapes ------------------------------------------------------------------------------------


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


# --- argument checks (checks.py) of every compound -----------------------------------------------------------------


def test_positive_int_problem_exact():
    assert positive_int_problem("width", 1) is None
    assert positive_int_problem("width", 7) is None
    assert positive_int_problem("width", 0) == "width=0; must be an integer >= 1"
    assert positive_int_problem("width", -3) == "width=-3; must be an integer >= 1"
    assert positive_int_problem("width", 1.5) == "width=1.5; must be an integer >= 1"  # a float is not an int
    assert positive_int_problem("width", 2.0) == "width=2.0; must be an integer >= 1"
    assert positive_int_problem("flag", True) == "flag=True; must be an integer >= 1"  # bools are not integers
    assert positive_int_problem("name", "4") == "name='4'; must be an integer >= 1"
    assert positive_int_problem("steps", 2, minimum=3) == "steps=2; must be an integer >= 3"
    assert positive_int_problem("steps", 3, minimum=3) is None
    assert positive_int_problem("steps", 0, minimum=0) is None


def test_require_positive_ints_names_the_first_bad_argument():
    require_positive_ints("Owner", a=1, b=2)  # all fine: no error
    with pytest.raises(ValueError, match=exactly("Owner: b must be a positive integer, got 0")):
        require_positive_ints("Owner", a=1, b=0, c=-1)
    with pytest.raises(ValueError, match=exactly("Owner: a must be a positive integer, got False")):
        require_positive_ints("Owner", a=False)
    with pytest.raises(ValueError, match=exactly("AddHeads: num_heads must be a positive integer, got 0")):
        AddHeads(0)


GOOD: dict[str, tuple[Callable[..., Module], dict]] = {
    "ResMLP": (ResMLP, dict(width=4, depth=1, block_depth=1, input_dim=3, output_dim=2)),
    "ResNet": (ResNet, dict(width=4, depth=1, block_depth=1, in_channels=3, num_classes=2, kernel_size=3)),
    "Attention": (Attention, dict(num_heads=2, d_embed=4, d_query=2, d_value=2)),
    "GPT": (GPT, dict(vocab_size=5, context=4, num_heads=2, width=4, depth=1)),
    "StandardGPT": (StandardGPT, dict(vocab_size=5, context=4, num_heads=2, width=4, depth=1)),
}
INT_CASES = [(owner, key, bad) for owner, (_, kwargs) in GOOD.items() for key in kwargs for bad in (0, -2)]


@pytest.mark.parametrize("owner, key, bad", INT_CASES)
def test_every_integer_argument_is_checked_by_its_owner(owner: str, key: str, bad: int):
    make, kwargs = GOOD[owner]
    with pytest.raises(ValueError, match=exactly(f"{owner}: {key} must be a positive integer, got {bad}")):
        make(**{**kwargs, key: bad})


@pytest.mark.parametrize("owner", list(GOOD))
def test_integer_arguments_refuse_floats_and_bools(owner: str):
    make, kwargs = GOOD[owner]
    first = next(iter(kwargs))
    with pytest.raises(ValueError, match=exactly(f"{owner}: {first} must be a positive integer, got 2.0")):
        make(**{**kwargs, first: 2.0})
    with pytest.raises(ValueError, match=exactly(f"{owner}: {first} must be a positive integer, got True")):
        make(**{**kwargs, first: True})


@pytest.mark.parametrize("owner", ["ResMLP", "ResNet", "GPT"])
@pytest.mark.parametrize("bad, shown", [(0, "0"), (-1.5, "-1.5"), ("2", "'2'"), (None, "None"), (True, "True"),
                                        (math.inf, "inf"), (math.nan, "nan")])
def test_blocks_mass_must_be_a_positive_number(owner: str, bad, shown: str):
    # NaN or inf would give NaN shares; a bool is not a mass
    make, kwargs = GOOD[owner]
    with pytest.raises(ValueError, match=exactly(f"{owner}: blocks_mass must be a positive finite number, "
                                                 f"got {shown}")):
        make(**kwargs, blocks_mass=bad)


@pytest.mark.parametrize("owner, blocks_mass", [("ResMLP", 1.0), ("ResNet", 20.0), ("GPT", 5.0)])
def test_default_blocks_masses(owner: str, blocks_mass: float):
    """docs/design.md "Architectures": blocks mass 1 (ResMLP), 20 (ResNet), 5 (GPT), between input and output
    of mass 1 each."""
    make, kwargs = GOOD[owner]
    net = make(**kwargs)
    assert net.mass == pytest.approx(2 + blocks_mass)
    assert sum(a.mass for a in net.atoms() if a.role not in ("input", "output", "embed.token", "embed.position")) \
        == pytest.approx(blocks_mass)


@pytest.mark.parametrize("owner, mass", [("ResMLP", 0.25), ("ResNet", 0.5), ("GPT", 1)])
def test_small_blocks_masses_are_accepted(owner: str, mass: float):
    make, kwargs = GOOD[owner]
    net = make(**kwargs, blocks_mass=mass)
    assert net.mass == pytest.approx(2 + mass)
