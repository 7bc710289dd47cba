"""Independent references for the manifold tests: the documented dual ascent redone with torch.linalg.svd polar
factors in float64, Stiefel draws, and the distance of a network's weights from their manifolds."""

from __future__ import annotations

import math

import torch
from torch import Tensor





# --- independent references ----------------------------------------------------------------------------------------


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _polar(X: Tensor) -> Tensor:
    """U Vᵀ of X = U Σ Vᵀ (the exact msign), over the last two dimensions, in float64."""
    U, _, Vh = torch.linalg.svd(X.to(F64), full_matrices=False)
    return U @ Vh


def _stiefel(m: int, n: int, seed: int, batch: tuple[int, ...] = ()) -> Tensor:
    """Orthonormal columns (m ≥ n), float64."""
    return torch.linalg.qr(torch.randn(*batch, m, n, generator=_gen(seed), dtype=F64))[0]


def _sym(X: Tensor) -> Tensor:
    return (X + X.mT) / 2


def _unit_rms(G: Tensor) -> Tensor:
    return G / G.pow(2).mean(dim=(-2, -1), keepdim=True).sqrt()


def _violation(W: Tensor, A: Tensor) -> Tensor:
    """RMS(WᵀA + AᵀW) per matrix."""
    H = W.mT @ A
    return (H + H.mT).pow(2).mean(dim=(-2, -1)).sqrt()


def _ascent(W: Tensor, G: Tensor, iterations: int, step: float, multiplier: Tensor | None = None
            ) -> tuple[Tensor, Tensor]:
    """The documented dual ascent with no early stop: G at unit RMS, Λ₀ = −¼(WᵀG + GᵀW) (+ a warm start),
    A = polar(G + 2WΛ), Λ ← Λ − α_k(WᵀA + AᵀW), α_k = step·(1 − k/K). Returns (A, Λ_K − Λ₀ without the warm
    start), i.e. what ``tangent_direction`` reports as the multiplier."""
    G = _unit_rms(G.to(F64))
    fresh = -0.5 * _sym(W.mT @ G)
    lam = fresh if multiplier is None else fresh + multiplier
    for k in range(iterations):
        A = _polar(G + 2 * W @ lam)
        lam = lam - step * (1 - k / iterations) * 2 * _sym(W.mT @ A)
    return _polar(G + 2 * W @ lam), lam - fresh


def _fixed_step(W: Tensor, G: Tensor, eta: float, r: float = 1.0, learn: bool = False) -> Tensor:
    """One manifold step of a tall unit-scale matrix W = r·U (K = 0: the projected start):
    U ← polar(U − (η/r)·polar(proj(G))), and for a learned radius r ← max(r − η·sign⟨G, U⟩, r/2)."""
    U = W.to(F64) / r
    A, _ = _ascent(U, G, 0, 1.0)
    new_r = max(r - eta * math.copysign(1.0, float((G.to(F64) * U).sum())), r / 2) if learn else r
    return new_r * _polar(U - (eta / r) * A)


def _basis(d: int, i: int) -> Tensor:
    e = torch.zeros(d, dtype=F64)
    e[i] = 1.0
    return e


def _stiefel_f32(m, n, seed=0):
    """Orthonormal columns (m ≥ n), in float32 (``_stiefel`` above: float64)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(m, n, generator=generator))[0]


def _violation_overall(W, A):
    """RMS(WᵀA + AᵀW) over all the matrices together, as a float (``_violation`` above: per matrix)."""
    H = W.mT @ A + A.mT @ W
    return float(H.pow(2).mean().sqrt())


def _polar_f32(X):
    """U Vᵀ of a square X in its own dtype (``_polar`` above: in float64)."""
    U, _, Vh = torch.linalg.svd(X)
    return U @ Vh


def _orthogonal(n, seed):
    return torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(seed)))[0]


def _on_manifold_error(net, weights, kinds=None):
    """Largest |WᵀW − I| over the unit-scale matrices, and |row RMS − 1| over embedding rows; a scaled
    matrix is measured after dividing by its radius (its RMS singular value); free layers are not measured."""
    worst = 0.0
    for atom, w, kind in zip(net.atoms(), weights, kinds or ["fixed"] * len(weights)):
        stack = atom.matrices(w.detach())
        if kind == "free" or (stack is None and kind == "scaled"):  # a scaled row is on its own sphere
            continue
        if stack is None:
            worst = max(worst, float((w.detach().pow(2).mean(-1).sqrt() - 1).abs().max()))
            continue
        unit = stack / atom.polar_scale
        unit = unit.mT if unit.shape[-2] < unit.shape[-1] else unit
        if kind == "scaled":
            unit = unit / (unit.pow(2).sum(dim=(-2, -1), keepdim=True) / unit.shape[-1]).sqrt()
        worst = max(worst, float((unit.mT @ unit - torch.eye(unit.shape[-1])).abs().max()))
    return worst


def scaled_step_ratio(r: float, sign: int, eta: float) -> float:
    """‖ΔW‖ / η of one manifold step of a square matrix W = r·Q (or of an embedding row at RMS r) whose radius
    steps by sign·η (0: a fixed layer): the direction turns by ε = η/r along a unit tangent and is retracted.
    For a square matrix the tangent direction is Q·S with S = polar(skew(QᵀG)) skew and orthogonal (an even
    size: full rank), so Q' = Q(I − εS)/√(1 + ε²) and ΔW = r'Q' − rQ = Q((r'c − r)I − r'cεS), c = 1/√(1 + ε²):
    S's eigenvalues are ±i, so every singular value is |r'c − r ∓ i·r'cε|. A row u with unit tangent a: the
    same, u' = (u − εa)c."""
    eps = eta / r
    c = 1 / math.sqrt(1 + eps**2)
    moved = r + sign * eta
    return math.hypot(moved * c - r, moved * c * eps) / eta


def _rows() -> tuple[Tensor, Tensor]:
    """Four unit rows of width 5 and their gradients, each with a tangent part found by hand:
    e1 with (2, 3, 0, 0, 0): tangent +e2; e2 with (0, 5, 0, −0.5, 0): tangent −e4 (norm 0.5 < 1);
    e3 with 1000·e3 + 10⁻³·e1: tangent 10⁻³ ≤ 10⁻⁵·‖g‖, rounding level, stays;
    e4 with e4 + 10⁻⁴·e1: tangent 10⁻⁴ > 10⁻⁵·‖g‖ (though tiny next to the third row's ‖g‖), moves along +e1."""
    w = torch.stack([_basis(5, 0), _basis(5, 1), _basis(5, 2), _basis(5, 3)])
    g = torch.stack([2 * _basis(5, 0) + 3 * _basis(5, 1), 5 * _basis(5, 1) - 0.5 * _basis(5, 3),
                     1000 * _basis(5, 2) + 1e-3 * _basis(5, 0), _basis(5, 3) + 1e-4 * _basis(5, 0)])
    return w, g


def _rows_after(step: float, radii: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)) -> Tensor:
    """The unit rows of ``_rows`` after a step that turns row i by step/radii[i]: (w − ε·a)/√(1 + ε²)."""
    eps = [step / r for r in radii]
    c = [1 / math.sqrt(1 + e**2) for e in eps]
    return torch.stack([c[0] * (_basis(5, 0) - eps[0] * _basis(5, 1)), c[1] * (_basis(5, 1) + eps[1] * _basis(5, 3)),
                        _basis(5, 2), c[3] * (_basis(5, 3) - eps[3] * _basis(5, 0))])
