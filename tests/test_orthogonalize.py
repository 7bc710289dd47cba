"""Every orthogonalize method on tall, wide, square, batched, rank-deficient and zero inputs; the iteration's
dtype setting; the exact (SVD) polar factor's per-matrix cut-off, the argument checks and each method's
coefficients."""

import pytest
import torch

from modula_cli.nn import Linear, orthogonalize
from modula_cli.nn.orthogonalize import iteration_dtype
from modula_cli.optim import init_state, optimizer_step
from helpers import optim_config


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


def test_iteration_dtype_setting():
    """optim.ortho.dtype: auto is bfloat16 on CUDA only; the explicit settings hold on any device."""
    assert iteration_dtype("auto", "cpu") is None
    assert iteration_dtype("auto", torch.device("cuda", 0)) is torch.bfloat16
    assert iteration_dtype("float32", "cuda") is None
    assert iteration_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="'fp16'; allowed: auto, float32, bfloat16"):
        iteration_dtype("fp16", "cpu")


def relative_distance(out, G):
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return float((out.double() - U @ Vh).norm() / (U @ Vh).norm())


def test_bfloat16_iteration_lands_at_its_rounding_floor():
    """bfloat16 keeps 8 significant bits (2^-8 = 3.9e-3): measured max |σ − 1| 4.3e-3 to 4.6e-3 and 0.7 % to
    1.4 % distance to U Vᵀ at widths 128 to 4096 (docs/performance.md), against 1e-6 in float32."""
    G = with_spectrum(48, 96, torch.linspace(1.0, 0.05, 48))
    out16, out32 = orthogonalize(G, iter_dtype=torch.bfloat16), orthogonalize(G)
    assert out16.dtype == torch.float32
    assert 1e-3 < float((torch.linalg.svdvals(out16) - 1).abs().max()) < 1e-2
    assert float((torch.linalg.svdvals(out32) - 1).abs().max()) < 1e-5
    assert 1e-3 < relative_distance(out16, G) < 3e-2


def dualized_update(ortho_dtype, grad):
    weights = [torch.zeros(16, 32)]
    cfg = optim_config(name="sgd", mode="dualized", lr=1.0, schedule="constant", ortho_dtype=ortho_dtype)
    optimizer_step(Linear(16, 32), weights, [grad], init_state(weights, cfg), cfg, 0, total_steps=1)
    return -weights[0]


def test_dualized_training_uses_the_ortho_dtype_setting():
    grad = with_spectrum(16, 32, torch.linspace(1.0, 0.1, 16))
    auto, float32, bf16 = (dualized_update(d, grad) for d in ("auto", "float32", "bfloat16"))
    assert torch.equal(auto, float32)  # auto on CPU: the float32 iteration, bit for bit
    assert not torch.equal(bf16, float32)
    scale = (16 / 32) ** 0.5  # Linear(16, 32): Δ = lr · sqrt(d_out / d_in) · U Vᵀ
    assert relative_distance(float32 / scale, grad) < 1e-5
    assert 1e-3 < relative_distance(bf16 / scale, grad) < 3e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bfloat16 iteration is a CUDA path")
def test_bfloat16_iteration_on_cuda():
    G = torch.randn(256, 128, device="cuda")
    sigma = torch.linalg.svdvals(orthogonalize(G, iter_dtype=torch.bfloat16).float())
    assert (sigma - 1).abs().max() < 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="ortho_dtype=auto picks bfloat16 on CUDA only")
def test_dualized_training_on_cuda_iterates_in_bfloat16(monkeypatch):
    from modula_cli.nn import duality

    seen = []
    real = duality.orthogonalize
    monkeypatch.setattr(duality, "orthogonalize", lambda *a, **k: seen.append(k["iter_dtype"]) or real(*a, **k))
    weights = [torch.zeros(16, 32, device="cuda")]
    cfg = optim_config(name="adam", mode="dualized", lr=1.0, schedule="constant")
    optimizer_step(Linear(16, 32), weights, [torch.randn(16, 32, device="cuda")], init_state(weights, cfg), cfg, 0, 1)
    assert seen == [torch.bfloat16]


def test_settings_added_later_keep_old_fingerprints():
    """A run folder written before optim.ortho.dtype (or warmup_fraction) existed keeps its fingerprint, so a
    relaunched sweep skips it; a non-default value is a different run."""
    from omegaconf import OmegaConf

    from modula_cli.config.identity import LATER_DEFAULTS, fingerprint
    from modula_cli.optim.mode_settings import OLD_SPELLINGS
    from helpers import compose_config

    current = compose_config("optim.mode=dualized")
    older = OmegaConf.create(OmegaConf.to_container(current))
    for key in LATER_DEFAULTS:  # by their flat names (optim.ortho_dtype is optim.ortho.dtype)
        group, name = key.split(".")
        path = OLD_SPELLINGS.get(key, key).split(".")[1:]
        node = older[group]
        for part in path[:-1]:
            node = node[part]
        node.pop(path[-1], None)  # a setting this config's groups never had (arch.residual_scale) stays out
    assert {"optim.ortho_dtype", "optim.warmup_fraction"} <= set(LATER_DEFAULTS)
    assert fingerprint(older) == fingerprint(current)
    assert fingerprint(compose_config("optim.mode=dualized", "optim.ortho.dtype=bfloat16")) != fingerprint(current)


# --- the exact (SVD) polar factor, argument checks and each method's coefficients ----------------------------------


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
