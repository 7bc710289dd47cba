"""Manifold mode's steps (docs/design.md, "Manifold mode"): every matrix stays on its scaled Stiefel manifold and
moves along its tangent space (manifold Muon); every embedding vector stays on its sphere (hyperspherical descent).

All maths is at unit scale: a matrix atom's slices divided by their initial scale (``polar_scale``) have
orthonormal columns (wide ones are transposed), and an embedding's rows divided by √d are unit vectors.
Same-shape matrices of all atoms, slices and packed members go through one batched solve, each with its
own step size, convergence and multiplier, so a packed run equals its separate runs.

Each atom is held in one of three ways (``KINDS``, chosen by role: docs/manifold.md):

- ``fixed``: on the manifold of radius 1 (the initial norm), as above;
- ``scaled``: its direction on the manifold, its radius r learned: W = r·U. The change is measured in the
  norm of the pair, max(|Δr|, r·‖ΔU‖) (the modular norm of a tuple), whose steepest step gives each part
  the atom's whole budget η: U moves η/r along the manifold (so W moves η, as a dualized step would) and
  r takes the dualized step of a scalar, r ← r − η·sign⟨G, U⟩ (never below r/2, so W keeps its sign);
- ``free``: off the manifold, a dualized step of size η (the readout and attention temperatures).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .duality import dualize_atoms
from .orthogonalize import orthogonalize
from .packed import per_member

REFINE_STEPS = 2  # Newton–Schulz steps after Polar Express: σ ≈ 1 ± 1e-3 → float precision (quadratic)
KINDS = ("fixed", "scaled", "free")


@dataclass(frozen=True)
class DualAscent:
    """How the tangent direction's dual problem is solved (docs/design.md, "Manifold mode")."""

    iterations: int = 0           # K: most multiplier updates per step (0: the projected start Λ₀ only)
    step: float = 1.0             # α₀: the multiplier's first step, decaying linearly to 0 over K
    tolerance: float = 1e-3       # stop a matrix once RMS(WᵀA + AᵀW) < tolerance
    warm_start: bool = True       # start from the previous step's multiplier (else −¼(WᵀG + GᵀW))


@dataclass
class ManifoldState:
    """Per matrix atom: the last multiplier's correction to its start (warm start); per member: the sums of
    each step's mean tangency violation and iterations over its matrices (what the training log reports)."""

    multipliers: dict[int, Tensor] = field(default_factory=dict)
    kinds: list[str] | None = None  # each atom's entry of KINDS (set from the config on the first step)
    _sums: list[Tensor] | None = None  # violation, iterations and steps since ``means`` was last read

    def record(self, violation: Tensor, iterations: Tensor) -> None:
        """One step's mean violation and iterations per member (0-d tensors for one network)."""
        if self._sums is None:
            self._sums = [torch.zeros_like(violation), torch.zeros_like(iterations), torch.zeros(())]
        self._sums[0] += violation
        self._sums[1] += iterations
        self._sums[2] += 1

    def means(self) -> tuple[list[float], list[float]] | None:
        """Mean violation and iterations per member over the steps since the last call (host sync)."""
        if self._sums is None:
            return None
        steps = float(self._sums[2])
        result = ((self._sums[0] / steps).reshape(-1).tolist(), (self._sums[1] / steps).reshape(-1).tolist())
        self._sums = None
        return result

    def state_dict(self) -> dict:
        return {"multipliers": {k: v.cpu() for k, v in self.multipliers.items()}}

    def load_state_dict(self, state: dict, device: torch.device | str | None = None) -> None:
        self.multipliers = {int(k): v.to(device) for k, v in state["multipliers"].items()}


def atom_kinds(roles: Sequence[str], scaled: Sequence[str], free: Sequence[str]) -> list[str]:
    """Each atom's kind from its role: free if listed in ``free``, scaled if in ``scaled``, else fixed."""
    return ["free" if role in free else "scaled" if role in scaled else "fixed" for role in roles]


def msign(X: Tensor) -> Tensor:
    """Orthogonal polar factor to float precision: Polar Express, then Newton–Schulz refinement."""
    X = orthogonalize(X)
    for _ in range(REFINE_STEPS):
        X = 1.5 * X - 0.5 * X @ (X.mT @ X)
    return X


def tangent_direction(W: Tensor, G: Tensor, settings: DualAscent, multiplier: Tensor | None = None
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """argmax ⟨G, A⟩ over ‖A‖_op ≤ 1 with WᵀA + AᵀW = 0, for a batch (B, m, n) of W with orthonormal columns.

    Dual ascent on a symmetric Λ: A = msign(G + 2WΛ), Λ ← Λ − α_k (WᵀA + AᵀW). Each matrix stops on its own
    once its violation is below the tolerance. G is scaled to unit RMS first (msign ignores its scale; the
    step α then means the same for every layer). Returns (A, Λ, violation, iterations), the last two (B,).
    A matrix with G = 0 gets A = 0."""
    rms = G.pow(2).mean(dim=(-2, -1), keepdim=True).sqrt()
    zero = rms.reshape(-1) == 0
    G = G / torch.where(rms > 0, rms, torch.ones_like(rms))
    WtG = W.mT @ G
    fresh = -0.25 * (WtG + WtG.mT)
    # Warm start: the previous step's correction to the projection's multiplier (W and G have moved since).
    lam = fresh if multiplier is None else fresh + multiplier
    active = torch.ones(W.shape[0], dtype=torch.bool, device=W.device)
    iterations = torch.zeros(W.shape[0], device=W.device)
    for k in range(settings.iterations + 1):
        A = msign(G + 2 * W @ lam)
        H = W.mT @ A
        H = H + H.mT
        violation = H.pow(2).mean(dim=(-2, -1)).sqrt()
        active = active & (violation >= settings.tolerance)
        if k == settings.iterations or not bool(active.any()):
            break
        alpha = settings.step * (1 - k / settings.iterations)
        lam = lam - (alpha * active.to(H.dtype)).reshape(-1, 1, 1) * H
        iterations += active.to(iterations.dtype)
    A = torch.where(zero.reshape(-1, 1, 1), torch.zeros_like(A), A)
    return A, lam - fresh, torch.where(zero, torch.zeros_like(violation), violation), iterations


def retract(X: Tensor) -> Tensor:
    """Back onto the Stiefel manifold: the polar factor."""
    return msign(X)


def sphere_step(w: Tensor, g: Tensor, step: Tensor | float) -> Tensor:
    """Hyperspherical descent of unit rows w along g: a = g − w⟨w, g⟩, a/‖a‖, w ← (w − step·a)/‖·‖.
    Rows whose tangent part is zero stay."""
    a = g - w * (w * g).sum(dim=-1, keepdim=True)
    norm = a.norm(dim=-1, keepdim=True)
    # A tangent part at rounding level (g along w) is no direction: normalising it would move the row at random.
    moving = norm > 1e-5 * g.norm(dim=-1, keepdim=True)
    a = torch.where(moving, a / norm.clamp_min(1e-30), torch.zeros_like(a))
    moved = w - step * a
    return moved / moved.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def radius_step(r: Tensor, alignment: Tensor, step: Tensor | float) -> Tensor:
    """A learned radius's dualized step: r − step·sign⟨G, U⟩, never below r/2 (the weight keeps its sign)."""
    return torch.maximum(r - step * torch.sign(alignment), r / 2)


def scaled_sphere_step(w: Tensor, g: Tensor, step: Tensor | float) -> Tensor:
    """Rows w = r·u with learned radii r: u moves step/r on its sphere, r takes its own step (module doc)."""
    r = w.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    u = w / r
    return radius_step(r, (u * g).sum(dim=-1, keepdim=True), step) * sphere_step(u, g, step / r)


def _unit_matrices(atom, piece: Tensor) -> tuple[Tensor, bool]:
    """The atom's slices at unit scale, tall (m ≥ n); whether they were transposed."""
    stack = atom.matrices(piece).float() / atom.polar_scale
    wide = stack.shape[-2] < stack.shape[-1]
    return (stack.mT if wide else stack), wide


def _embedding_step(weight: Tensor, direction: Tensor, step: Tensor | float, scaled: bool) -> Tensor:
    """An embedding's change: each row on its sphere (radius √d at unit RMS, or its learned radius)."""
    d = weight.shape[-1]
    w = weight.float() / d**0.5
    moved = (scaled_sphere_step if scaled else sphere_step)(w, direction.float(), step)
    return ((w - moved) * d**0.5).to(weight.dtype)


def manifold_update(atoms: Sequence, weights: Sequence[Tensor], directions: Sequence[Tensor],
                    shares: Sequence[float], target_norm: float | Tensor, settings: DualAscent,
                    state: ManifoldState, kinds: Sequence[str] | None = None,
                    free_dualize: dict | None = None) -> list[Tensor]:
    """The change Δ = W − W_new of every atom (so the caller's ``w ← w − Δ`` lands on the manifold), with
    each atom's step = target × its share (a tensor (K,) of targets for packed members). ``kinds``: each
    atom's ``KINDS`` entry (default all fixed); ``free_dualize``: the duality map's settings for free atoms
    (``dualize_atoms``' method, steps, iter_dtype)."""
    kinds = kinds or ["fixed"] * len(atoms)
    out: list[Tensor | None] = [None] * len(atoms)
    groups: dict[tuple, list[int]] = defaultdict(list)
    free = []
    for i, (atom, weight, share) in enumerate(zip(atoms, weights, shares, strict=True)):
        if share == 0:
            out[i] = torch.zeros_like(weight)
        elif kinds[i] == "free":
            free.append(i)
        elif (stack := atom.matrices(weight)) is not None:  # grouped by their tall (unit-scale) shape
            groups[(tuple(sorted(stack.shape[-2:], reverse=True)), stack.device)].append(i)
        else:  # an embedding: one sphere per row
            out[i] = _embedding_step(weight, directions[i], per_member(target_norm * share, weight),
                                     kinds[i] == "scaled")
    if free:
        steps = dualize_atoms([atoms[i] for i in free], [directions[i] for i in free], [shares[i] for i in free],
                              target_norm, **(free_dualize or {"method": "polar_express", "steps": None}))
        for i, step in zip(free, steps):
            out[i] = step
    stats = [_matrix_group(indices, atoms, weights, directions, shares, target_norm, settings, state, kinds, out)
             for indices in groups.values()]
    if stats:
        state.record(torch.cat([v for v, _ in stats]).mean(dim=0), torch.cat([k for _, k in stats]).mean(dim=0))
    return out  # type: ignore[return-value]


def _matrix_group(indices: list[int], atoms: Sequence, weights: Sequence[Tensor], directions: Sequence[Tensor],
                  shares: Sequence[float], target_norm: float | Tensor, settings: DualAscent, state: ManifoldState,
                  kinds: Sequence[str], out: list) -> tuple[Tensor, Tensor]:
    """One batched manifold step for same-shape matrices (fills ``out``); each atom's mean violation and
    iterations per member, stacked (atoms, *members)."""
    Ws, Gs, etas, lams, learned, shapes = [], [], [], [], [], []
    for i in indices:
        W, wide = _unit_matrices(atoms[i], weights[i])
        G, _ = _unit_matrices(atoms[i], directions[i])
        step = torch.as_tensor(per_member(target_norm * shares[i], W), dtype=W.dtype, device=W.device)
        eta = step.expand(*W.shape[:-2], 1, 1).reshape(-1)  # one step per matrix (member × slice)
        lam = state.multipliers.get(i) if settings.warm_start else None
        Ws.append(W.reshape(-1, *W.shape[-2:]))
        Gs.append(G.reshape(-1, *G.shape[-2:]))
        etas.append(eta)
        learned.append(torch.full_like(eta, kinds[i] == "scaled", dtype=torch.bool))
        lams.append(lam.reshape(-1, *lam.shape[-2:]) if lam is not None and lam.shape[:-2] == W.shape[:-2]
                    else None)
        shapes.append((W.shape, wide))
    W, G, eta, learn = torch.cat(Ws), torch.cat(Gs), torch.cat(etas), torch.cat(learned)
    start = None if any(lam is None for lam in lams) else torch.cat(lams)  # else a fresh start for all
    # W = r·U: a fixed matrix has r = 1 exactly (its numbers are those of the unscaled step); a scaled one's
    # r is its RMS singular value, all of which are equal on the manifold.
    r = torch.where(learn, W.pow(2).mean(dim=(-2, -1)).mul(W.shape[-2]).sqrt(), torch.ones_like(eta))
    U = W / r.reshape(-1, 1, 1)
    A, lam, violation, iterations = tangent_direction(U, G, settings, start)
    new = retract(U - (eta / r).reshape(-1, 1, 1) * A)
    r_new = torch.where(learn, radius_step(r, (G * U).sum(dim=(-2, -1)), eta), r)
    new = new * r_new.reshape(-1, 1, 1)
    sizes = [w.shape[0] for w in Ws]
    stats_v, stats_k = [], []
    for i, (shape, wide), piece, multiplier, v, k in zip(indices, shapes, new.split(sizes), lam.split(sizes),
                                                        violation.split(sizes), iterations.split(sizes)):
        piece = piece.reshape(shape)
        piece = piece.mT if wide else piece
        new_weight = atoms[i].from_matrices(piece * atoms[i].polar_scale).to(weights[i].dtype)
        out[i] = weights[i] - new_weight
        state.multipliers[i] = multiplier.reshape(*shape[:-2], *multiplier.shape[-2:])
        members = shape[:-3]  # (K,) for a packed run, () otherwise; then the atom's slices
        stats_v.append(v.reshape(*members, -1).mean(dim=-1))
        stats_k.append(k.reshape(*members, -1).mean(dim=-1))
    return torch.stack(stats_v), torch.stack(stats_k)


def onto_manifold(atoms: Sequence, weights: Sequence[Tensor]) -> list[Tensor]:
    """Every matrix slice to its scaled Stiefel manifold (its polar factor), every embedding row to RMS 1:
    the initial weights of manifold training (the modular initialisation is there already)."""
    result = []
    for atom, weight in zip(atoms, weights, strict=True):
        if (stack := atom.matrices(weight)) is not None:
            unit = stack.float() / atom.polar_scale
            result.append(atom.from_matrices(msign(unit) * atom.polar_scale).to(weight.dtype))
        else:  # embedding rows: the atom's own projection (each row to RMS 1)
            result.append(atom.project_piece(weight))
    return result
