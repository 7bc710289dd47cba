"""Atoms (docs/design.md, "Atoms"): the modules with weights. Dimensions are written output-first."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import require_positive_ints
from .atom import Atom
from .orthogonalize import orthogonalize
from .packed import per_member
from .spectral import exact_spectral_norm


def _orthogonal(rows: int, cols: int, generator: torch.Generator) -> Tensor:
    """A random matrix with all singular values 1 (Haar-distributed via QR with sign fix)."""
    gaussian = torch.randn(max(rows, cols), min(rows, cols), generator=generator)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q if rows >= cols else q.T


class MatrixAtom(Atom):
    """An atom whose weight is a stack of matrices, each measured in the RMS→RMS operator norm.

    ``atom norm = slice_count · max_slice sqrt(d_in/d_out) · σ_max`` (slice_count 1 for Linear, k² for
    Conv2D); dualizing maps every slice to ``(τ / slice_count) · sqrt(d_out/d_in) · U Vᵀ``.
    """

    d_out: int
    d_in: int
    is_matrix = True
    slice_count: int = 1
    init_std: float | None = None
    # normalize_piece: True scales each slice to the target on its own (the reference's Conv2D); False scales
    # the whole weight by its largest slice, which is the atom norm's own normalisation.
    normalize_slices: bool = False

    def matrices(self, weight: Tensor) -> Tensor:
        """View the weight as a batch of (d_out, d_in) slices: shape (…, slices, d_out, d_in), where …
        are leading member dimensions (none for a single network)."""
        raise NotImplementedError

    def from_matrices(self, matrices: Tensor) -> Tensor:
        raise NotImplementedError

    @property
    def polar_scale(self) -> float:
        """Scale of ``U Vᵀ`` that has atom norm 1."""
        return math.sqrt(self.d_out / self.d_in) / self.slice_count

    @property
    def natural_scale(self) -> float:
        return self.polar_scale if self.init_std is None else 1.0

    def factor_on_weight(self, x: Tensor, weight: Tensor) -> bool:
        # the output has d_out numbers for every d_in of the input (a large vocabulary's readout: far more)
        return weight.numel() * self.d_in <= x.numel() * self.d_out

    def atom_norm(self, weight: Tensor) -> float:
        sigma = exact_spectral_norm(self.matrices(weight)).max()
        return float(sigma) / self.polar_scale

    def normalize_piece(self, update: Tensor, target: float | Tensor, norms: Tensor | None = None) -> Tensor:
        """``norms``: the slices' spectral norms, shape (…, slices), if already estimated (power iteration);
        exact ones otherwise."""
        if norms is None:
            norms = exact_spectral_norm(self.matrices(update))
        if self.normalize_slices:
            return self._normalize_slices(update, target, norms)
        sigma = norms.amax(dim=-1)  # over the slices: one σ per network
        if isinstance(target, Tensor):
            target = target.to(sigma.device)
        factor = target * self.polar_scale / sigma.clamp_min(1e-30)
        factor = torch.where(sigma > 0, factor, torch.zeros_like(factor)).to(update.dtype)
        return update * factor.reshape(factor.shape + (1,) * (update.ndim - factor.ndim))

    def _normalize_slices(self, update: Tensor, target: float | Tensor, norms: Tensor) -> Tensor:
        """Each slice to spectral norm ``target · polar_scale`` on its own (``norms``: shape (…, slices))."""
        factor = per_member(target, norms) * self.polar_scale / norms.clamp_min(1e-30)
        factor = torch.where(norms > 0, factor, torch.zeros_like(factor)).to(update.dtype)
        return self.from_matrices(self.matrices(update) * factor[..., None, None])

    def from_polar(self, polar: Tensor, target: float | Tensor) -> Tensor:
        return self.from_matrices(polar * per_member(target * self.polar_scale, polar))

    def project_piece(self, weight: Tensor) -> Tensor:
        return self.from_polar(orthogonalize(self.matrices(weight)), 1.0)


class Linear(MatrixAtom):
    """``y = W x`` with W of shape (d_out, d_in); RMS → RMS; initial W orthogonal with norm 1.

    ``init_std`` swaps in Gaussian initialisation (standard parametrisation, for baselines).
    """

    def __init__(self, d_out: int, d_in: int, mass: float = 1.0, init_std: float | None = None):
        require_positive_ints("Linear", d_out=d_out, d_in=d_in)
        super().__init__(mass=mass, sensitivity=1.0)
        self.d_out, self.d_in, self.init_std = d_out, d_in, init_std
        self.features_in, self.features_out = d_in, d_out

    def apply(self, x: Tensor, weight: Tensor) -> Tensor:
        if weight.ndim == 2:
            return F.linear(x, weight)
        # Packed members: x (K, …, d_in), weight (K, d_out, d_in) → one batched matmul.
        members, *middle, _ = x.shape
        y = torch.bmm(x.reshape(members, -1, self.d_in), weight.transpose(-2, -1))
        return y.reshape(members, *middle, self.d_out)

    def init_weight(self, generator: torch.Generator) -> Tensor:
        if self.init_std is not None:
            return self.init_std * torch.randn(self.d_out, self.d_in, generator=generator)
        return self.polar_scale * _orthogonal(self.d_out, self.d_in, generator)

    def matrices(self, weight: Tensor) -> Tensor:
        return weight.unsqueeze(-3)

    def from_matrices(self, matrices: Tensor) -> Tensor:
        return matrices.squeeze(-3)

    def describe(self) -> str:
        return f"Linear({self.d_out}, {self.d_in})"


class Conv2D(MatrixAtom):
    """2-D convolution, weight (c_out, c_in, k, k); each of the k² slices is one RMS→RMS matrix."""

    def __init__(self, c_out: int, c_in: int, kernel_size: int = 3, stride: int = 1, padding: int = 1,
                 mass: float = 1.0):
        require_positive_ints("Conv2D", c_out=c_out, c_in=c_in, kernel_size=kernel_size, stride=stride)
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise ValueError(f"Conv2D: padding must be a non-negative integer, got {padding!r}")
        super().__init__(mass=mass, sensitivity=1.0)
        self.d_out, self.d_in = c_out, c_in
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.slice_count = kernel_size * kernel_size
        self.features_in, self.features_out = c_in, c_out
        self.feature_axis = -3  # output (…, c_out, H, W): each pixel's channel vector is one feature

    def apply(self, x: Tensor, weight: Tensor) -> Tensor:
        if weight.ndim == 4:
            return F.conv2d(x, weight, stride=self.stride, padding=self.padding)
        # Packed members: x (K, B, c_in, H, W) → channels (B, K·c_in, H, W), one grouped convolution.
        members, batch = x.shape[:2]
        grouped = x.transpose(0, 1).reshape(batch, members * self.d_in, *x.shape[-2:])
        y = F.conv2d(grouped, weight.reshape(members * self.d_out, *weight.shape[2:]), stride=self.stride,
                     padding=self.padding, groups=members)
        return y.reshape(batch, members, self.d_out, *y.shape[-2:]).transpose(0, 1)

    def init_weight(self, generator: torch.Generator) -> Tensor:
        slices = torch.stack([_orthogonal(self.d_out, self.d_in, generator) for _ in range(self.slice_count)])
        return self.from_matrices(self.polar_scale * slices)

    def matrices(self, weight: Tensor) -> Tensor:
        lead = weight.shape[:-4]
        slices = weight.movedim((-2, -1), (-4, -3))  # (…, k, k, c_out, c_in)
        return slices.reshape(*lead, self.slice_count, self.d_out, self.d_in)

    def from_matrices(self, matrices: Tensor) -> Tensor:
        k, lead = self.kernel_size, matrices.shape[:-3]
        slices = matrices.reshape(*lead, k, k, self.d_out, self.d_in)
        return slices.movedim((-4, -3), (-2, -1)).contiguous()

    def describe(self) -> str:
        return f"Conv2D({self.d_out}, {self.d_in}, k={self.kernel_size})"


class Embed(Atom):
    """Lookup table: input indices (one-hot, ℓ1), output an RMS-normed vector per index.

    The weight is stored as rows, shape (num_embed, d_embed), so row j is embedding vector j.
    ``renormalize_each_step``: ``regularize`` resets every row to RMS 1 whatever the strength (the
    reference code's embedding, whose rows stay on their sphere even without weight decay).
    """

    is_matrix = True  # a table of rows: decayed as nanoGPT's AdamW decays its embedding

    def __init__(self, d_embed: int, num_embed: int, mass: float = 1.0, init_std: float | None = None):
        require_positive_ints("Embed", d_embed=d_embed, num_embed=num_embed)
        super().__init__(mass=mass, sensitivity=1.0)
        self.d_embed, self.num_embed, self.init_std = d_embed, num_embed, init_std
        self.features_out = d_embed

    def apply(self, x: Tensor, weight: Tensor) -> Tensor:
        if weight.ndim == 2:
            return F.embedding(x, weight)
        # Packed members: weight (K, num_embed, d) read as one table; member k's rows start at k·num_embed.
        members = weight.shape[0]
        offsets = torch.arange(members, device=x.device).reshape(members, *([1] * (x.ndim - 1)))
        return F.embedding(x + offsets * self.num_embed, weight.reshape(-1, self.d_embed))

    def factor_on_weight(self, x: Tensor, weight: Tensor) -> bool:
        # a lookup's output has d_embed numbers per index: a large vocabulary's table can outweigh a batch
        return weight.numel() <= x.numel() * self.d_embed

    def init_weight(self, generator: torch.Generator) -> Tensor:
        vectors = torch.randn(self.num_embed, self.d_embed, generator=generator)
        if self.init_std is not None:
            return self.init_std * vectors
        return _rescale_rows(vectors, 1.0)

    @property
    def natural_scale(self) -> float:
        return math.sqrt(self.d_embed) if self.init_std is None else 1.0

    def atom_norm(self, weight: Tensor) -> float:
        return float(_row_rms(weight.float()).max())

    def regularize_piece(self, weight: Tensor, strength: float | Tensor) -> Tensor:
        if self.renormalize_each_step:  # back to the unit rows it was initialised with
            return _rescale_rows(weight, 1.0)
        return super().regularize_piece(weight, strength)

    def normalize_piece(self, update: Tensor, target: float | Tensor, norms: Tensor | None = None) -> Tensor:
        # As in the paper's code: every embedding vector is set to RMS τ, the same as the duality map.
        return _rescale_rows(update, target)

    def dualize_piece(self, grad: Tensor, target: float | Tensor) -> Tensor:
        return _rescale_rows(grad, target)

    def project_piece(self, weight: Tensor) -> Tensor:
        return _rescale_rows(weight, 1.0)

    def describe(self) -> str:
        return f"Embed({self.d_embed}, {self.num_embed})"


def _row_rms(matrix: Tensor) -> Tensor:
    return matrix.pow(2).mean(dim=-1, keepdim=True).sqrt()


def _rescale_rows(matrix: Tensor, target: float | Tensor) -> Tensor:
    rms = _row_rms(matrix.float())
    factor = torch.where(rms > 0, per_member(target, rms) / rms.clamp_min(1e-30), torch.zeros_like(rms))
    return matrix * factor.to(matrix.dtype)
