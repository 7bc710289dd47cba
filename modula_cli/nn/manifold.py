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
from .groups import AtomGroup, atom_groups
from ..plumbing.torch_internals import graph_break
from .orthogonalize import orthogonalize
from .retraction import RetractionSchedule, retract

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
    _schedules: dict[str, RetractionSchedule] = field(default_factory=dict)  # by device: copied there once

    def schedule(self, device: torch.device) -> RetractionSchedule:
        """The retraction's schedule on ``device``, made at the first step (a copy to a GPU waits for it)."""
        if str(device) not in self._schedules:
            self._schedules[str(device)] = RetractionSchedule.on(device)
        return self._schedules[str(device)]

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


def msign(X: Tensor, iter_dtype: torch.dtype | None = None) -> Tensor:
    """Orthogonal polar factor to float precision: Polar Express (in ``iter_dtype``: bfloat16 on CUDA for a
    direction), then Newton–Schulz refinement in X's dtype (|σ − 1| ≈ 5e-3 after bfloat16 → float precision)."""
    X = orthogonalize(X, iter_dtype=iter_dtype)  # back in X's dtype (float32, or float64 in a test)
    for _ in range(REFINE_STEPS):
        X = 1.5 * X - 0.5 * X @ (X.mT @ X)
    return X


def tangent_direction(W: Tensor, G: Tensor, settings: DualAscent, multiplier: Tensor | None = None,
                      iter_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """argmax ⟨G, A⟩ over ‖A‖_op ≤ 1 with WᵀA + AᵀW = 0, for a batch (B, m, n) of W with orthonormal columns.

    Dual ascent on a symmetric Λ: A = msign(G + 2WΛ), Λ ← Λ − α_k (WᵀA + AᵀW). Each matrix stops on its own
    once its violation is below the tolerance (its Λ no longer moves). G is scaled to unit RMS first (msign
    ignores its scale; the step α then means the same for every layer). Returns (A, Λ, violation, iterations),
    the last two (B,). A matrix with G = 0 gets A = 0."""
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
        A = msign(G + 2 * W @ lam, iter_dtype)
        H = W.mT @ A
        H = H + H.mT
        violation = H.pow(2).mean(dim=(-2, -1)).sqrt()
        active = active & (violation >= settings.tolerance)
        if k == settings.iterations:
            break
        # No early exit once every matrix is within tolerance: asking would wait for the device at every
        # iteration. A matrix within it keeps its Λ (its step is masked), so its A and violation stay as they were.
        alpha = settings.step * (1 - k / settings.iterations)
        lam = lam - (alpha * active.to(H.dtype)).reshape(-1, 1, 1) * H
        iterations += active.to(iterations.dtype)
    A = torch.where(zero.reshape(-1, 1, 1), torch.zeros_like(A), A)
    return A, lam - fresh, torch.where(zero, torch.zeros_like(violation), violation), iterations


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


def _unit_matrices(atom, stacked: Tensor) -> tuple[Tensor, bool]:
    """A stack of an atom's weights (or directions) as unit-scale slices, tall (m ≥ n): (…, slices, m, n); whether
    they were transposed."""
    stack = atom.matrices(stacked).float() / atom.polar_scale
    wide = stack.shape[-2] < stack.shape[-1]
    return (stack.mT if wide else stack), wide


def _embedding_step(weight: Tensor, direction: Tensor, step: Tensor | float, scaled: bool) -> Tensor:
    """An embedding's change: each row on its sphere (radius √d at unit RMS, or its learned radius)."""
    d = weight.shape[-1]
    w = weight.float() / d**0.5
    moved = (scaled_sphere_step if scaled else sphere_step)(w, direction.float(), step)
    return ((w - moved) * d**0.5).to(weight.dtype)


@dataclass
class _MatrixPart:
    """One group of equal atoms in a batched manifold solve: its stacked weights and where its rows sit."""

    group: AtomGroup
    stacked: Tensor  # the weights, (atoms, …)
    shape: torch.Size  # its unit matrices' shape, (atoms, …, slices, m, n), tall
    wide: bool
    rows: int  # its matrices in the batch


def manifold_update(atoms: Sequence, weights: Sequence[Tensor], directions: Sequence[Tensor],
                    shares: Sequence[float], target_norm: float | Tensor, settings: DualAscent,
                    state: ManifoldState, kinds: Sequence[str] | None = None,
                    free_dualize: dict | None = None) -> list[Tensor]:
    """The change Δ = W − W_new of every atom (so the caller's ``w ← w − Δ`` lands on the manifold), with
    each atom's step = target × its share (a tensor (K,) of targets for packed members). ``kinds``: each
    atom's ``KINDS`` entry (default all fixed); ``free_dualize``: the duality map's settings for free atoms
    (``dualize_atoms``' method, steps, iter_dtype; the tangent direction's polar factor iterates in its
    iter_dtype too). Equal atoms of a kind are one group (``groups``), and every
    group whose matrices have one tall shape is one batched solve."""
    kinds = kinds or ["fixed"] * len(atoms)
    out: list[Tensor | None] = [None] * len(atoms)
    free = [i for i, kind in enumerate(kinds) if kind == "free" and shares[i] != 0]
    if free:
        steps = dualize_atoms([atoms[i] for i in free], [directions[i] for i in free], [shares[i] for i in free],
                              target_norm, **(free_dualize or {"method": "polar_express", "steps": None}))
        for i, step in zip(free, steps):
            out[i] = step
    batches: dict[tuple, list[_MatrixPart]] = defaultdict(list)
    for group in atom_groups(atoms, weights, shares, tags=kinds):
        if group.indices[0] in free:
            continue
        stacked = group.stack(weights)
        if group.idle:
            group.unstack(torch.zeros_like(stacked), out)
        elif group.atom.matrices(stacked) is not None:  # batched by their tall (unit-scale) shape
            unit, wide = _unit_matrices(group.atom, stacked)
            batches[(tuple(unit.shape[-2:]), unit.device)].append(
                _MatrixPart(group, stacked, unit.shape, wide, unit.shape.numel() // unit.shape[-2:].numel()))
        else:  # embeddings: one sphere per row
            pieces, steps = group.folded(stacked, target_norm)
            moved = _embedding_step(pieces, group.folded(group.stack(directions), target_norm)[0], steps[:, None, None],
                                    kinds[group.indices[0]] == "scaled")
            group.unstack(moved.reshape(stacked.shape), out)
    iter_dtype = (free_dualize or {}).get("iter_dtype")  # optim.ortho.dtype: the tangent direction's iteration
    stats = [_matrix_batch(parts, directions, target_norm, settings, state, out, iter_dtype)
             for parts in batches.values()]
    if stats:
        state.record(torch.cat([v for v, _ in stats]).mean(dim=0), torch.cat([k for _, k in stats]).mean(dim=0))
    return out  # type: ignore[return-value]


def _matrix_batch(parts: list[_MatrixPart], directions: Sequence[Tensor], target_norm: float | Tensor,
                  settings: DualAscent, state: ManifoldState, out: list,
                  iter_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """One batched manifold step for the matrices of one tall shape (fills ``out``); each atom's mean violation
    and iterations per member, stacked (atoms, *members)."""
    Ws, Gs, etas, learned, starts = [], [], [], [], []
    for part in parts:
        group, atom = part.group, part.group.atom
        W, _ = _unit_matrices(atom, part.stacked)
        G, _ = _unit_matrices(atom, group.stack(directions))
        _, steps = group.folded(part.stacked, target_norm)  # one per atom and member
        Ws.append(W.reshape(-1, *W.shape[-2:]))
        Gs.append(G.reshape(-1, *G.shape[-2:]))
        etas.append(steps.to(W.dtype)[:, None].expand(-1, part.rows // steps.shape[0]).reshape(-1))
        learned.append(torch.full((part.rows,), group.tag == "scaled", dtype=torch.bool, device=W.device))
        if settings.warm_start:
            starts.append(_start(group.indices, part.shape, state, W.device))
    W, G, eta, learn = (_joined(x) for x in (Ws, Gs, etas, learned))
    start = _joined(starts) if starts else None
    # W = r·U: a fixed matrix has r = 1 exactly (its numbers are those of the unscaled step); a scaled one's
    # r is its RMS singular value, all of which are equal on the manifold.
    r = torch.where(learn, W.pow(2).mean(dim=(-2, -1)).mul(W.shape[-2]).sqrt(), torch.ones_like(eta))
    U = W / r.reshape(-1, 1, 1)
    A, lam, violation, iterations = tangent_direction(U, G, settings, start, iter_dtype)
    # Compiled on a CPU, Inductor fails (KeyError in its outer-loop fusion, torch 2.14) when the two polar
    # factors share one graph: split it here.
    graph_break()
    new = retract(U, A, eta / r, state.schedule(U.device))
    r_new = torch.where(learn, radius_step(r, (G * U).sum(dim=(-2, -1)), eta), r)
    new = new * r_new.reshape(-1, 1, 1)
    sizes = [part.rows for part in parts]
    stats_v, stats_k = [], []
    for part, piece, multiplier, v, k in zip(parts, new.split(sizes), lam.split(sizes), violation.split(sizes),
                                             iterations.split(sizes)):
        group, atom = part.group, part.group.atom
        piece = piece.reshape(part.shape)
        piece = piece.mT if part.wide else piece
        new_weight = atom.from_matrices((piece * atom.polar_scale).reshape(-1, *piece.shape[-3:]))
        group.unstack(part.stacked - new_weight.reshape(part.stacked.shape).to(part.stacked.dtype), out)
        group.unstack(multiplier.reshape(*part.shape[:-2], *multiplier.shape[-2:]), state.multipliers)
        per_atom = part.shape[:-3]  # (atoms, K) for a packed run, (atoms,) otherwise; then the slices
        stats_v.append(v.reshape(*per_atom, -1).mean(dim=-1))
        stats_k.append(k.reshape(*per_atom, -1).mean(dim=-1))
    return torch.cat(stats_v), torch.cat(stats_k)


def _start(indices: tuple[int, ...], shape: torch.Size, state: ManifoldState, device: torch.device) -> Tensor:
    """The group's warm start: each atom's last multiplier correction, stacked; zeros (the fresh start) unless
    all have one of the shape of its unit matrices. Zeros, not None: the first step's compiled graph is then
    the next steps' too."""
    lams = [state.multipliers.get(i) for i in indices]
    per_atom = (*shape[1:-2], shape[-1], shape[-1])
    if any(lam is None or lam.shape != per_atom for lam in lams):
        return torch.zeros(shape.numel() // shape[-2:].numel(), shape[-1], shape[-1], device=device)
    stacked = torch.stack(lams) if len(lams) > 1 else lams[0].unsqueeze(0)
    return stacked.reshape(-1, shape[-1], shape[-1])


def _joined(tensors: list[Tensor]) -> Tensor:
    return torch.cat(tensors) if len(tensors) > 1 else tensors[0]


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
