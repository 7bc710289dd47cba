"""The atoms (modula_cli/nn/atoms.py): Linear, Embed and Conv2D, their initialisation, norms and maps against
independent references (an SVD, torch's own convolution, values by hand), Conv2D's arguments, per-slice normalisation
and strided convolution, and packed members."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modula_cli.nn import Conv2D, Embed, Linear


def rms(x, dim=-1):
    return x.pow(2).mean(dim=dim).sqrt()


def svd_polar(G):
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return (U @ Vh).float()


# --- Linear --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_out, d_in", [(16, 8), (8, 16), (12, 12)])
def test_linear_init_and_norm(d_out, d_in):
    atom = Linear(d_out, d_in)
    (w,) = atom.initialize(3)
    assert torch.linalg.svdvals(w) == pytest.approx([math.sqrt(d_out / d_in)] * min(d_out, d_in), rel=1e-5)
    assert atom.norm([w]) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("d_out, d_in", [(16, 8), (8, 16)])
def test_linear_dualize_matches_svd_reference(d_out, d_in):
    atom = Linear(d_out, d_in)
    g = torch.randn(d_out, d_in)
    expected = 0.7 * math.sqrt(d_out / d_in) * svd_polar(g)
    assert torch.allclose(atom.dualize([g], 0.7, method="svd")[0], expected, atol=1e-5)
    assert torch.allclose(atom.dualize([g], 0.7)[0], expected, atol=2e-3)


def test_linear_normalize_by_hand():
    atom = Linear(6, 3)
    g = torch.randn(6, 3)
    sigma = torch.linalg.matrix_norm(g, ord=2)
    expected = 0.5 * g / (math.sqrt(3 / 6) * sigma)
    assert torch.allclose(atom.normalize([g], 0.5)[0], expected, atol=1e-6)


# --- Embed ---------------------------------------------------------------------------------------------------------


def test_embed_maps():
    atom = Embed(d_embed=8, num_embed=5)
    (w,) = atom.initialize(0)
    assert rms(w) == pytest.approx([1.0] * 5, rel=1e-5)
    g = torch.randn(5, 8)
    g[2] = 0
    for mapped in (atom.dualize([g], 0.3)[0], atom.normalize([g], 0.3)[0]):
        assert rms(mapped)[[0, 1, 3, 4]] == pytest.approx([0.3] * 4, rel=1e-5)
        assert torch.count_nonzero(mapped[2]) == 0
        # direction of each vector kept
        assert torch.allclose(mapped[0] / mapped[0].norm(), g[0] / g[0].norm(), atol=1e-6)
    assert atom.norm([g]) == pytest.approx(rms(g).max().item(), rel=1e-6)


# --- Conv2D --------------------------------------------------------------------------------------------------------


def test_conv2d_init_norm_and_slicewise_dualize():
    atom = Conv2D(c_out=6, c_in=4, kernel_size=3)
    (w,) = atom.initialize(0)
    assert w.shape == (6, 4, 3, 3)
    for i in range(3):
        for j in range(3):
            expected = math.sqrt(6 / 4) / 9
            assert torch.linalg.svdvals(w[:, :, i, j]) == pytest.approx([expected] * 4, rel=1e-5)
    assert atom.norm([w]) == pytest.approx(1.0, rel=1e-5)
    g = torch.randn(6, 4, 3, 3)
    d = atom.dualize([g], 0.9, method="svd")[0]
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        ref = (0.9 / 9) * math.sqrt(6 / 4) * svd_polar(g[:, :, i, j])
        assert torch.allclose(d[:, :, i, j], ref, atol=1e-5)
    assert atom.norm([d]) == pytest.approx(0.9, rel=1e-5)
    # norm: k² · max_ij ||W_ij||_{rms→rms}
    slice_norms = [math.sqrt(4 / 6) * torch.linalg.matrix_norm(g[:, :, i, j], ord=2).item()
                   for i in range(3) for j in range(3)]
    assert atom.norm([g]) == pytest.approx(9 * max(slice_norms), rel=1e-5)


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


# --- every atom: well normed, packed -------------------------------------------------------------------------------


def test_atoms_are_well_normed_at_initialisation():
    torch.manual_seed(0)
    # Linear: RMS in, RMS out
    lin = Linear(32, 16)
    (w,) = lin.initialize(0)
    x = torch.randn(100, 16)
    x = x / rms(x).unsqueeze(-1)
    dw = 0.1 * torch.randn_like(w)
    assert (rms(lin(x, [w + dw]) - lin(x, [w])) <= lin.norm([dw]) * (1 + 1e-5)).all()
    dx = 0.1 * torch.randn_like(x)
    assert (rms(lin(x + dx, [w]) - lin(x, [w])) <= lin.sensitivity * rms(dx) * (1 + 1e-5)).all()
    # Embed: one-hot (ℓ1) in, RMS out; a change of index is an ℓ1 move of 2
    emb = Embed(16, 10)
    (e,) = emb.initialize(0)
    idx = torch.arange(10)
    de = 0.1 * torch.randn_like(e)
    assert (rms(emb(idx, [e + de]) - emb(idx, [e])) <= emb.norm([de]) * (1 + 1e-5)).all()
    moved = rms(emb(idx, [e]) - emb((idx + 1) % 10, [e]))
    assert (moved <= emb.sensitivity * 2 * (1 + 1e-5)).all()
    # Conv2D: max over pixels of channel-RMS, in and out
    conv = Conv2D(8, 4, 3)
    (k,) = conv.initialize(0)
    img = torch.randn(5, 4, 6, 6)
    img = img / rms(img, dim=1).amax(dim=(-2, -1)).view(5, 1, 1, 1)
    dk = 0.1 * torch.randn_like(k)
    out_change = rms(conv(img, [k + dk]) - conv(img, [k]), dim=1).amax(dim=(-2, -1))
    assert (out_change <= conv.norm([dk]) * (1 + 1e-5)).all()
    dimg = 0.1 * torch.randn_like(img)
    in_move = rms(dimg, dim=1).amax(dim=(-2, -1))
    out_move = rms(conv(img + dimg, [k]) - conv(img, [k]), dim=1).amax(dim=(-2, -1))
    assert (out_move <= conv.sensitivity * in_move * (1 + 1e-5)).all()


def test_stacked_atoms_match_per_member_calls():
    g = torch.Generator().manual_seed(0)
    conv, linear, embed = Conv2D(5, 3), Linear(6, 4), Embed(4, 9)
    cases = [(conv, torch.randn(2, 7, 3, 5, 5, generator=g)), (linear, torch.randn(2, 7, 3, 4, generator=g)),
             (embed, torch.randint(0, 9, (2, 7, 3), generator=g))]
    for atom, x in cases:
        w = torch.stack([atom.init_weight(g) for _ in range(2)])
        out = atom(x, [w])
        for k in range(2):
            assert torch.allclose(out[k], atom(x[k], [w[k]]), atol=1e-6)
