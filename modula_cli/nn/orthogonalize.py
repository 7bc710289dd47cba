"""Orthogonal polar factor ``U Vᵀ`` of a (batch of) matrices, docs/design.md, "Fast maps"."""

from __future__ import annotations

import torch
from torch import Tensor

# Amsel et al. 2025, "The Polar Express", degree-5 minimax coefficients (a, b, c) per step.
_POLAR_EXPRESS_RAW = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)
_SAFETY = 1.01  # the paper's safety factor, on every step but the last, guards rounding overshoot
POLAR_EXPRESS = tuple((a / _SAFETY, b / _SAFETY**3, c / _SAFETY**5) for a, b, c in _POLAR_EXPRESS_RAW[:-1]) + (
    _POLAR_EXPRESS_RAW[-1],
)
MUON = (3.4445, -4.7750, 2.0315)
CUBIC = (1.5, -0.5, 0.0)

METHODS = ("polar_express", "muon", "cubic", "svd")
# Dtype of the polynomial iteration (the normalisation is always float32). auto: bfloat16 on CUDA, where
# tensor cores make it several times faster, float32 elsewhere (a CPU gains little and loses accuracy).
ITER_DTYPES = ("auto", "float32", "bfloat16")
DEFAULT_STEPS = {"polar_express": 8, "muon": 5, "cubic": 30}
FROBENIUS_MARGIN = 0.01  # δ of docs/design.md, "Fast maps": keeps σ strictly below 1 after normalisation


def coefficients(method: str, steps: int) -> list[tuple[float, float, float]]:
    """The (a, b, c) of each iteration; Polar Express repeats its last polynomial past its table."""
    if method == "polar_express":
        return [POLAR_EXPRESS[min(i, len(POLAR_EXPRESS) - 1)] for i in range(steps)]
    if method == "muon":
        return [MUON] * steps
    if method == "cubic":
        return [CUBIC] * steps
    raise ValueError(f"unknown orthogonalize method {method!r}; allowed: {', '.join(METHODS)}")


def iteration_dtype(setting: str, device: torch.device | str) -> torch.dtype | None:
    """The ``iter_dtype`` for ``orthogonalize`` that an ``optim.ortho.dtype`` setting means on ``device``."""
    if setting not in ITER_DTYPES:
        raise ValueError(f"unknown orthogonalisation dtype {setting!r}; allowed: {', '.join(ITER_DTYPES)}")
    if setting == "auto":
        setting = "bfloat16" if torch.device(device).type == "cuda" else "float32"
    return torch.bfloat16 if setting == "bfloat16" else None


def orthogonalize(G: Tensor, method: str = "polar_express", steps: int | None = None,
                  iter_dtype: torch.dtype | None = None, margin: float = FROBENIUS_MARGIN) -> Tensor:
    """Approximate ``U Vᵀ`` of ``G = U Σ Vᵀ`` over the last two dimensions (any leading batch).

    The normalisation is float32; ``iter_dtype=torch.bfloat16`` runs the iteration in bfloat16 (fast on
    CUDA tensor cores; ``svd`` ignores it, being the exact reference).
    Zero singular values stay zero, so an all-zero input gives zeros. ``margin``: δ of the normalisation
    (Muon as practised divides by the Frobenius norm itself: 0).
    """
    if method not in METHODS:
        raise ValueError(f"unknown orthogonalize method {method!r}; allowed: {', '.join(METHODS)}")
    if G.ndim < 2:
        raise ValueError(f"orthogonalize needs a matrix or a batch of matrices, got shape {tuple(G.shape)}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"orthogonalize steps must be a positive integer, got {steps!r}")
    out_dtype = G.dtype
    X = G.float()
    if method == "svd":
        return _svd_polar(X).to(out_dtype)

    transposed = X.shape[-2] > X.shape[-1]
    if transposed:  # iterate on the smaller Gram matrix
        X = X.mT
    # Divide by the largest entry first so that the Frobenius norm cannot underflow or overflow.
    peak = X.abs().amax(dim=(-2, -1), keepdim=True)
    X = X / torch.where(peak > 0, peak, torch.ones_like(peak))
    frob = torch.linalg.matrix_norm(X, ord="fro", keepdim=True)
    X = X / (frob * (1 + margin) + 1e-30)
    if iter_dtype is not None:
        X = X.to(iter_dtype)

    batch_shape = X.shape[:-2]
    X = X.reshape(-1, *X.shape[-2:])
    for a, b, c in coefficients(method, steps or DEFAULT_STEPS[method]):
        A = torch.bmm(X, X.mT)
        B = torch.baddbmm(A, A, A, beta=b, alpha=c) if c != 0 else b * A
        X = torch.baddbmm(X, B, X, beta=a, alpha=1.0)
    X = X.reshape(*batch_shape, *X.shape[-2:])
    if transposed:
        X = X.mT
    return X.to(out_dtype)


def _svd_polar(X: Tensor) -> Tensor:
    """Exact reference: ``U Vᵀ`` over the nonzero singular values (rank-deficient inputs stay so)."""
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    cutoff = S.amax(dim=-1, keepdim=True) * max(X.shape[-2:]) * torch.finfo(X.dtype).eps
    keep = (S > cutoff).to(X.dtype)
    return (U * keep.unsqueeze(-2)) @ Vh
