"""Compounds, bonds, the loss and the argument checks against values derived by hand (docs/design.md,
"Combining modules", "Normalising and dualising a network", "Bonds", "Architectures").

Every reference below is written from the equations, not from the code under test: forward passes with plain
tensor algebra in float64, masses, sensitivities and shares from the composition / tuple rules, messages
as the user reads them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from modula_cli.nn import (GELU, GPT, Abs, AddHeads, Attention, AvgPool, Enumerate, Flatten, FunctionalAttention,
                           Identity, LayerNorm, Linear, MeanSubtract, Module, Mul, ReLU, RemoveHeads, Residual,
                           ResMLP, ResNet, RMSDivide, ScaledGELU, ScaledReLU, StandardGPT, layer_names,
                           layer_roles)
from modula_cli.nn.checks import positive_int_problem, require_positive_ints
from modula_cli.nn.loss import grads_of, losses_and_hits

F64 = torch.float64
EPS = 1e-12  # the normalisation bonds' documented default


# --- helpers: the equations, written out -----------------------------------------------------------------


def exactly(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern for the whole message and nothing else."""
    return "^" + re.escape(message) + "$"


def gaussian_weights(net: Module, seed: int, scale: float = 0.5) -> list[Tensor]:
    """Random float64 weights of the net's shapes: generic values (not orthogonal) catch more mistakes."""
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(t.shape, generator=g, dtype=F64) for t in net.initialize(0, dtype=F64)]


def close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-9, atol=1e-11)


def ref_gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def ref_layer_norm(x: Tensor, dims: tuple[int, ...] = (-1,)) -> Tensor:
    centred = x - x.mean(dim=dims, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(dim=dims, keepdim=True) + EPS)


def ref_rms_divide(x: Tensor, dims: tuple[int, ...] = (-1,)) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=dims, keepdim=True) + EPS)


def split_heads(t: Tensor, heads: int) -> Tensor:
    batch, tokens, channels = t.shape
    return t.reshape(batch, tokens, heads, channels // heads).permute(0, 2, 1, 3)


def merge_heads(t: Tensor) -> Tensor:
    batch, heads, tokens, d = t.shape
    return t.permute(0, 2, 1, 3).reshape(batch, tokens, heads * d)


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Tensor:
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        tokens = q.shape[-2]
        scores = scores.masked_fill(torch.ones(tokens, tokens, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def ref_paper_attention(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, heads: int, third: str,
                        causal: bool = True) -> Tensor:
    """docs/design.md "Architectures" and "Variants": 1/d_q attention, the 1/3 on the output or on q, k, v."""
    q, k, v = (split_heads(x @ w.T, heads) for w in (wq, wk, wv))
    scale = 1.0 / q.shape[-1]
    if third == "qkv":
        out = attend(q / 3, k / 3, v / 3, scale, causal)
    else:
        out = attend(q, k, v, scale, causal) / 3
    return merge_heads(out) @ wo.T


# --- checks.py ----------------------------------------------------------------------------------------------


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


# --- bonds: forward values, masses, sensitivities -----------------------------------------------------------


def test_bond_masses_and_sensitivities():
    half = 1 / math.sqrt(2)
    expected = {Abs(): 1.0, ReLU(): half, GELU(): half, ScaledReLU(): 1.0, ScaledGELU(): 1.0, MeanSubtract(): 1.0,
                RMSDivide(): 1.0, LayerNorm(): 1.0, FunctionalAttention(): 1.0, AddHeads(2): 1.0,
                RemoveHeads(): 1.0, Flatten(): 1.0, AvgPool(): 1.0, Enumerate(): 1.0, Identity(): 1.0,
                Mul(-0.25): 0.25}
    for bond, sensitivity in expected.items():
        assert bond.sensitivity == pytest.approx(sensitivity, rel=1e-15), type(bond).__name__
        assert bond.mass == 0.0 and bond.num_atoms == 0 and bond.target_shares() == []


def test_activation_values():
    x = torch.tensor([-2.0, -0.5, 0.0, 0.3, 1.7], dtype=F64)
    relu = torch.tensor([0.0, 0.0, 0.0, 0.3, 1.7], dtype=F64)
    gelu = torch.tensor([ref_gelu(torch.tensor(v, dtype=F64)).item() for v in x.tolist()], dtype=F64)
    # spot value: GELU(1.7) = 1.7 Φ(1.7), Φ(1.7) = 0.955434537...
    assert gelu[-1].item() == pytest.approx(1.7 * 0.9554345372414569, rel=1e-12)
    assert close(Abs()(x, []), torch.tensor([2.0, 0.5, 0.0, 0.3, 1.7], dtype=F64))
    assert close(ReLU()(x, []), relu)
    assert close(ScaledReLU()(x, []), math.sqrt(2) * relu)
    assert close(GELU()(x, []), gelu)
    assert close(ScaledGELU()(x, []), math.sqrt(2) * gelu)


def test_mean_subtract_along_given_dims():
    x = torch.arange(24, dtype=F64).reshape(2, 3, 4) ** 1.5
    assert close(MeanSubtract()(x, []), x - x.mean(dim=-1, keepdim=True))
    last_two = MeanSubtract((-1, -2))(x, [])
    assert close(last_two, x - x.mean(dim=(-2, -1), keepdim=True))
    assert last_two.sum(dim=(-2, -1)).abs().max() < 1e-9 and last_two.sum(dim=-1).abs().max() > 1.0
    x3 = torch.arange(8, dtype=F64).reshape(2, 2, 2) ** 2
    assert close(MeanSubtract((-3, -2, -1))(x3, []), x3 - x3.mean())
    # one hand-checked row: [0, 1, 4, 9] has mean 3.5
    assert MeanSubtract()(torch.tensor([0.0, 1.0, 4.0, 9.0], dtype=F64), []).tolist() == [-3.5, -2.5, 0.5, 5.5]


def test_rms_divide_values_dims_and_eps():
    row = torch.tensor([[3.0, 4.0], [1.0, -1.0]], dtype=F64)
    expected = torch.tensor([[3 / math.sqrt(12.5), 4 / math.sqrt(12.5)], [1.0, -1.0]], dtype=F64)
    assert close(RMSDivide()(row, []), expected)
    x = torch.randn(2, 3, 4, dtype=F64)
    assert close(RMSDivide((-1, -2))(x, []), ref_rms_divide(x, (-2, -1)))  # the order given does not matter
    assert close(RMSDivide((-3, -2, -1))(x, []), ref_rms_divide(x, (-3, -2, -1)))
    # eps = 1e-12 sits inside the square root: an input with mean square 1e-12 is divided by sqrt(2e-12)
    tiny = torch.tensor([1e-6, -1e-6, 1e-6, -1e-6], dtype=F64)
    assert close(RMSDivide()(tiny, []), tiny / math.sqrt(2e-12))
    assert close(RMSDivide(eps=1e-10)(tiny, []), tiny / math.sqrt(1e-12 + 1e-10))


def test_layer_norm_values_dims_and_eps():
    row = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=F64)  # mean 3, biased variance (4+1+0+9)/4 = 3.5
    assert close(LayerNorm()(row, []), (row - 3.0) / math.sqrt(3.5 + EPS))
    x = torch.randn(2, 3, 4, dtype=F64)
    assert close(LayerNorm()(x, []), ref_layer_norm(x))
    assert close(LayerNorm((-1, -2))(x, []), ref_layer_norm(x, (-2, -1)))
    tiny = torch.tensor([1e-6, -1e-6, 1e-6, -1e-6], dtype=F64) + 5.0
    assert close(LayerNorm()(tiny, []), (tiny - 5.0) / math.sqrt(2e-12))
    assert close(LayerNorm(eps=1e-10)(tiny, []), (tiny - 5.0) / math.sqrt(1e-12 + 1e-10))


@pytest.mark.parametrize("make", [MeanSubtract, RMSDivide, LayerNorm])
@pytest.mark.parametrize("dims, shown", [(0, "(0,)"), (2, "(2,)"), ((), "()"), ([-1, 1], "(-1, 1)")])
def test_normalisation_dims_must_be_trailing(make: Callable[..., Module], dims, shown: str):
    with pytest.raises(ValueError, match=exactly(f"normalisation dims must be trailing (negative) dimensions, "
                                                 f"got {shown}")):
        make(dims)


@pytest.mark.parametrize("make", [MeanSubtract, RMSDivide, LayerNorm])
@pytest.mark.parametrize("dims, shown", [((-3, -1), "(-3, -1)"), (-2, "(-2,)"), ((-1, -3), "(-1, -3)")])
def test_normalisation_dims_must_be_the_last_ones_without_a_gap(make: Callable[..., Module], dims, shown: str):
    # RMSDivide and LayerNorm normalise over the span of their dims, which a gap would silently widen
    with pytest.raises(ValueError, match=exactly(f"normalisation dims must be the last ones without a gap (-1, or -2 "
                                                 f"and -1, …), got {shown}")):
        make(dims)


def test_add_and_remove_heads_move_each_entry():
    batch, tokens, heads, d = 2, 3, 4, 5
    x = torch.arange(batch * tokens * heads * d, dtype=F64).reshape(batch, tokens, heads * d)
    split = AddHeads(heads)(x, [])
    assert split.shape == (batch, heads, tokens, d)
    for b, h, t, j in [(0, 0, 0, 0), (1, 3, 2, 4), (0, 2, 1, 3), (1, 1, 0, 2)]:
        assert split[b, h, t, j] == x[b, t, h * d + j]
    merged = RemoveHeads()(split, [])
    assert merged.shape == (batch, tokens, heads * d) and torch.equal(merged, x)
    y = torch.arange(batch * heads * tokens * d, dtype=F64).reshape(batch, heads, tokens, d)
    back = RemoveHeads()(y, [])
    assert back.shape == (batch, tokens, heads * d)
    for b, h, t, j in [(0, 0, 0, 0), (1, 3, 2, 4), (0, 2, 1, 3)]:
        assert back[b, t, h * d + j] == y[b, h, t, j]
    # a leading member axis (packed networks) is kept as it is, both ways
    packed = torch.randn(3, batch, tokens, heads * d, dtype=F64)
    assert AddHeads(heads)(packed, []).shape == (3, batch, heads, tokens, d)
    assert torch.equal(AddHeads(heads)(packed, [])[1], AddHeads(heads)(packed[1], []))
    packed_heads = torch.randn(3, batch, heads, tokens, d, dtype=F64)
    merged = RemoveHeads()(packed_heads, [])
    assert merged.shape == (3, batch, tokens, heads * d)
    for m, b, h, t, j in [(0, 0, 0, 0, 0), (2, 1, 3, 2, 4), (1, 0, 2, 1, 3)]:
        assert merged[m, b, t, h * d + j] == packed_heads[m, b, h, t, j]


@pytest.mark.parametrize("causal", [True, False])
def test_functional_attention_masking_scale_and_leading_axes(causal: bool):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=F64) for _ in range(3))  # (batch, heads, tokens, d)
    out = FunctionalAttention(causal=causal)((q, k, v), [])
    assert close(out, attend(q, k, v, 1 / 4, causal))
    assert close(FunctionalAttention(causal=causal, scale=0.7)((q, k, v), []), attend(q, k, v, 0.7, causal))
    # packed members: an extra leading axis, each member its own attention
    qq, kk, vv = (torch.randn(3, 2, 3, 5, 4, generator=g, dtype=F64) for _ in range(3))
    packed = FunctionalAttention(causal=causal)((qq, kk, vv), [])
    assert packed.shape == (3, 2, 3, 5, 4)
    assert close(packed, attend(qq, kk, vv, 1 / 4, causal))


@pytest.mark.parametrize("causal", [True, False])
def test_functional_attention_with_an_input_scale_is_the_attention_of_scaled_q_k_v(causal: bool):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 2, 3, 5, 4, generator=g, dtype=F64) for _ in range(3))  # packed: 3 members
    fused = FunctionalAttention(causal=causal, scale=0.7, input_scale=1 / 3)
    assert close(fused((q, k, v), []), attend(q / 3, k / 3, v / 3, 0.7, causal))
    assert fused.sensitivity == pytest.approx(1 / 3) and FunctionalAttention().sensitivity == 1.0
    assert fused.describe() == "FunctionalAttention(q, k, v × 0.3333)"
    for bad in (0, -1.0, math.inf, math.nan, True, "1/3"):
        with pytest.raises(ValueError, match=exactly(
                f"FunctionalAttention needs a positive, finite input_scale, got {bad!r}")):
            FunctionalAttention(input_scale=bad)


def test_functional_attention_is_causal_by_default():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 1, 4, 3, generator=g, dtype=F64) for _ in range(3))
    out = FunctionalAttention()((q, k, v), [])
    assert close(out[..., 0, :], v[..., 0, :])  # the first token sees only itself
    assert close(out, attend(q, k, v, 1 / 3, True))
    assert not torch.allclose(out, attend(q, k, v, 1 / 3, False))


def test_flatten_avgpool_enumerate():
    x = torch.arange(2 * 3 * 4 * 5 * 6, dtype=F64).reshape(2, 3, 4, 5, 6)
    assert Flatten()(x, []).shape == (2, 3, 120)  # the last three axes, every leading one kept
    assert torch.equal(Flatten()(x, [])[1, 2], x[1, 2].reshape(-1))
    assert Flatten(2)(x, []).shape == (2, 3, 4, 30)
    img = torch.arange(2 * 3 * 2 * 4, dtype=F64).reshape(2, 3, 2, 4)
    pooled = AvgPool()(img, [])
    assert pooled.shape == (2, 3, 1, 1)
    assert pooled[0, 0, 0, 0].item() == pytest.approx(3.5) and pooled[1, 2, 0, 0].item() == pytest.approx(43.5)
    packed = torch.stack([img, 2 * img])  # a leading member axis: still a mean over H and W only
    assert AvgPool()(packed, []).shape == (2, 2, 3, 1, 1)
    assert close(AvgPool()(packed, []), torch.stack([pooled, 2 * pooled]))
    tokens = torch.zeros(2, 3, 5, dtype=torch.long)
    positions = Enumerate()(tokens, [])
    assert positions.shape == (1, 1, 5) and positions.dtype == torch.long
    assert positions.flatten().tolist() == [0, 1, 2, 3, 4]
    assert Enumerate()(torch.zeros(7, dtype=torch.long), []).tolist() == list(range(7))
    # positions live on the input's device (the meta device stands in for an accelerator)
    assert Enumerate()(torch.empty(2, 6, device="meta"), []).device.type == "meta"


# --- Residual -----------------------------------------------------------------------------------------------


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


# --- ResMLP -------------------------------------------------------------------------------------------------


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


# --- ResNet -------------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("kernel", [2, 4])
def test_resnet_even_kernel_is_refused(kernel: int):
    with pytest.raises(ValueError, match=exactly(f"ResNet: kernel_size must be odd to keep the image size, "
                                                 f"got {kernel}")):
        ResNet(width=4, depth=1, block_depth=1, in_channels=3, num_classes=2, kernel_size=kernel)


# --- Attention ----------------------------------------------------------------------------------------------


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


def test_attention_defaults_are_causal_with_the_third_on_the_output():
    net = Attention(1, 3, 3, 3)
    w = gaussian_weights(net, 9, scale=1.0)
    x = torch.randn(1, 4, 3, dtype=F64)
    assert close(net(x, w), ref_paper_attention(x, *w, heads=1, third="output", causal=True))


def test_attention_third_is_checked():
    with pytest.raises(ValueError, match=exactly("Attention: third='middle'; allowed: output, qkv")):
        Attention(2, 4, 2, 2, third="middle")


# --- GPT ----------------------------------------------------------------------------------------------------


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


def test_gpt_width_must_divide_into_heads():
    with pytest.raises(ValueError, match=exactly("GPT: width 7 is not divisible by num_heads 3; "
                                                 "choose a width that is a multiple of num_heads")):
        GPT(vocab_size=5, context=4, num_heads=3, width=7, depth=1)
    with pytest.raises(ValueError, match=exactly("StandardGPT: width 6 is not divisible by num_heads 4; "
                                                 "choose a width that is a multiple of num_heads")):
        StandardGPT(vocab_size=5, context=4, num_heads=4, width=6, depth=1)


# --- StandardGPT --------------------------------------------------------------------------------------------


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


# --- argument checks of every compound ----------------------------------------------------------------------

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


# --- the loss -----------------------------------------------------------------------------------------------


def ref_cross_entropy(logits: Tensor, targets: Tensor) -> tuple[float, int]:
    """Mean of log Σ exp(z) − z_target over positions, and the count of argmax hits, one position at a time."""
    rows, labels = logits.reshape(-1, logits.shape[-1]).tolist(), targets.reshape(-1).tolist()
    total, hits = 0.0, 0
    for row, label in zip(rows, labels):
        top = max(row)
        total += top + math.log(sum(math.exp(z - top) for z in row)) - row[label]
        hits += int(row.index(top) == label)
    return total / len(rows), hits


def test_losses_and_hits_of_one_network():
    net = Linear(5, 3)  # logits (batch 2, tokens 4, vocab 5): no axis size repeats
    g = torch.Generator().manual_seed(0)
    w = [torch.randn(5, 3, generator=g, dtype=F64)]
    x = torch.randn(2, 4, 3, generator=g, dtype=F64)
    logits = x @ w[0].T
    y = logits.argmax(-1)
    y[0, 1] = (y[0, 1] + 1) % 5  # three misses out of eight
    y[1, 0] = (y[1, 0] + 2) % 5
    y[1, 3] = (y[1, 3] + 4) % 5
    loss, hits = losses_and_hits(net, w, x, y)
    expected_loss, expected_hits = ref_cross_entropy(logits, y)
    assert expected_hits == 5
    assert loss.shape == (1,) and hits.shape == (1,)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6) and hits.item() == 5


def test_losses_and_hits_of_packed_members():
    K = 3
    net = Linear(5, 3)
    g = torch.Generator().manual_seed(1)
    w = [torch.randn(K, 5, 3, generator=g, dtype=F64)]
    x = torch.randn(2, 4, 3, generator=g, dtype=F64)
    y = torch.randint(0, 5, (2, 4), generator=g)
    loss, hits = losses_and_hits(net, w, x.expand(K, *x.shape), y.expand(K, *y.shape), members=K)
    assert loss.shape == (K,) and hits.shape == (K,)
    for k in range(K):
        expected_loss, expected_hits = ref_cross_entropy(x @ w[0][k].T, y)
        assert loss[k].item() == pytest.approx(expected_loss, rel=1e-6) and hits[k].item() == expected_hits
    assert len(set(loss.tolist())) == K  # members differ, so a mix-up of members shows


def test_grads_of_sums_the_member_losses():
    a = torch.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    b = torch.tensor([2.0, -1.0, 4.0], requires_grad=True)
    losses = torch.stack([(a ** 2).sum(), (3 * b).sum() + (a[0, 0] * b[0])])
    ga, gb = grads_of(losses, [a, b])
    assert torch.equal(ga, torch.tensor([[2.0 + 2.0, -4.0], [1.0, 6.0]]))  # 2a, plus b[0] at a[0, 0]
    assert torch.equal(gb, torch.tensor([3.0 + 1.0, 3.0, 3.0]))  # 3, plus a[0, 0] at b[0]
