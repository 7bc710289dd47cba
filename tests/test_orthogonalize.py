"""Every orthogonalize method on tall, wide, square, batched, rank-deficient and zero inputs."""

import pytest
import torch

from modula_cli.nn import orthogonalize


def with_spectrum(rows, cols, spectrum, seed=0, batch=()):
    g = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(*batch, rows, k, generator=g))
    V, _ = torch.linalg.qr(torch.randn(*batch, cols, k, generator=g))
    return (U * spectrum) @ V.mT


# (method, smallest singular value relative to the largest, allowed |σ − 1| on the output):
# bands measured from each method's scalar polynomial, with margin for float32 rounding.
BANDS = [
    ("svd", 1e-3, 1e-5),
    ("polar_express", 1e-2, 2e-3),
    ("cubic", 1e-2, 2e-3),
    ("muon", 0.1, 0.32),
]
SHAPES = {"tall": ((48, 16), ()), "wide": ((16, 48), ()), "square": ((24, 24), ()), "batched": ((20, 12), (3, 2))}


@pytest.mark.parametrize("method, floor, band", BANDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_singular_values_land_in_band(method, floor, band, shape):
    (rows, cols), batch = SHAPES[shape]
    spectrum = torch.logspace(0, torch.log10(torch.tensor(floor)).item(), min(rows, cols))
    G = 3.7 * with_spectrum(rows, cols, spectrum, batch=batch)
    out = orthogonalize(G, method)
    assert out.shape == G.shape and out.dtype == G.dtype
    sigma = torch.linalg.svdvals(out)
    assert (sigma - 1).abs().max() <= band
    # the polar factor shares the singular vectors: O ≈ U Vᵀ, so ⟨G, O⟩ = Σσ_i(G) · σ_i(O) > 0
    assert ((G * out).sum(dim=(-2, -1)) > 0).all()


@pytest.mark.parametrize("method, floor, band", BANDS)
def test_rank_deficient_keeps_null_space(method, floor, band):
    spectrum = torch.tensor([1.0, 0.5, 0.3] + [0.0] * 9)
    G = with_spectrum(20, 12, spectrum)
    sigma = torch.linalg.svdvals(orthogonalize(G, method))
    assert (sigma[:3] - 1).abs().max() <= band
    assert sigma[3:].max() <= 1e-2


@pytest.mark.parametrize("method", ["svd", "polar_express", "muon", "cubic"])
def test_zero_input_gives_zeros(method):
    out = orthogonalize(torch.zeros(2, 6, 4), method)
    assert torch.isfinite(out).all() and torch.count_nonzero(out) == 0


def test_tiny_inputs_do_not_underflow():
    G = 1e-25 * with_spectrum(8, 8, torch.ones(8))
    assert torch.linalg.svdvals(orthogonalize(G)) == pytest.approx([1.0] * 8, abs=2e-3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="allowed: polar_express, muon, cubic, svd"):
        orthogonalize(torch.randn(3, 3), "newton")
    with pytest.raises(ValueError, match="steps"):
        orthogonalize(torch.randn(3, 3), steps=0)
    with pytest.raises(ValueError, match="shape"):
        orthogonalize(torch.randn(3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 iteration is a CUDA path")
def test_bfloat16_iteration_on_cuda():
    G = torch.randn(256, 128, device="cuda")
    sigma = torch.linalg.svdvals(orthogonalize(G, iter_dtype=torch.bfloat16).float())
    assert (sigma - 1).abs().max() < 0.1
