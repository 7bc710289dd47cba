"""The bonds (modula_cli/nn/bonds.py) against the equations written out in float64 (tests/nn_reference.py,
docs/design.md "Bonds"): masses and sensitivities, activations, the normalisations and their dims, heads,
functional attention, flatten, pooling and positions."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from helpers import exactly
from modula_cli.nn import (GELU, Abs, AddHeads, AvgPool, Enumerate, Flatten, FunctionalAttention, Identity, LayerNorm,
                           MeanSubtract, Module, Mul, ReLU, RemoveHeads, RMSDivide, ScaledGELU, ScaledReLU)
from nn_reference import EPS, F64, attend, close, ref_gelu, ref_layer_norm, ref_rms_divide


# --- masses and sensitivities --------------------------------------------------------------------------------------


def test_bond_masses_and_sensitivities():
    half = 1 / math.sqrt(2)
    expected = {Abs(): 1.0, ReLU(): half, GELU(): half, ScaledReLU(): 1.0, ScaledGELU(): 1.0, MeanSubtract(): 1.0,
                RMSDivide(): 1.0, LayerNorm(): 1.0, FunctionalAttention(): 1.0, AddHeads(2): 1.0,
                RemoveHeads(): 1.0, Flatten(): 1.0, AvgPool(): 1.0, Enumerate(): 1.0, Identity(): 1.0,
                Mul(-0.25): 0.25}
    for bond, sensitivity in expected.items():
        assert bond.sensitivity == pytest.approx(sensitivity, rel=1e-15), type(bond).__name__
        assert bond.mass == 0.0 and bond.num_atoms == 0 and bond.target_shares() == []


# --- activations ---------------------------------------------------------------------------------------------------


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


# --- normalisations ------------------------------------------------------------------------------------------------


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


# --- heads and functional attention --------------------------------------------------------------------------------


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


def test_functional_attention_uses_one_over_dq():
    q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
    out = FunctionalAttention(causal=False)((q, k, v), [])
    ref = torch.softmax(q @ k.mT / 4, dim=-1) @ v
    assert torch.allclose(out, ref, atol=1e-6)


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


# --- flatten, pooling and positions --------------------------------------------------------------------------------


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
