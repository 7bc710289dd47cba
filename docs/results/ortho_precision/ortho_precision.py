"""Accuracy of the bfloat16 orthogonalisation against float32 and the exact SVD polar factor.

For each width n (128 … 4096) and input kind, runs ``orthogonalize`` (Polar Express, 8 steps) with a
float32 iteration and with a bfloat16 one, and prints max |σ − 1| of each result and its relative
Frobenius distance to the exact ``U Vᵀ`` (float64 SVD).

bfloat16 matmuls run on CUDA when present. On a CPU (where PyTorch's bfloat16 matmul is 50–200× slower than
float32, too slow past width 1024) the bfloat16 iteration is *emulated*: each product takes bfloat16
operands, accumulates in float32 and rounds its result to bfloat16, which is what a tensor core does (up to
the order of the float32 sums). ``--check-emulation N`` compares the emulation with PyTorch's own CPU
bfloat16 kernel up to width N first. The seconds columns time one call each (first-call overheads
included); the orthogonalisation's speed is ``scripts/bench.py --tables ortho``.

    python docs/results/ortho_precision/ortho_precision.py [--widths 128 256 … 4096] [--out results.csv]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import time
from collections.abc import Iterator

import torch

from modula_cli.nn import orthogonalize

KINDS = ("gaussian_square", "gaussian_1x4", "power_law")


def test_matrix(kind: str, n: int, generator: torch.Generator) -> torch.Tensor:
    """Square Gaussian (σ down to ~1/n of the top: too small for 8 steps, float32 included), 1:4 Gaussian
    (well conditioned), and a gradient-like square matrix with σ_i ∝ 1/i, i = 1 … n (condition number n)."""
    if kind == "gaussian_square":
        return torch.randn(n, n, generator=generator)
    if kind == "gaussian_1x4":
        return torch.randn(n, 4 * n, generator=generator)
    q1, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    sigma = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)
    return ((q1 * sigma) @ q2.T).float()


@contextlib.contextmanager
def emulated_bf16_matmuls() -> Iterator[None]:
    """bfloat16 bmm / baddbmm as a tensor core computes them: float32 products and sums, rounded result."""
    bmm, baddbmm = torch.bmm, torch.baddbmm

    def emulated_bmm(a, b):
        if a.dtype != torch.bfloat16:
            return bmm(a, b)
        return bmm(a.float(), b.float()).bfloat16()

    def emulated_baddbmm(c, a, b, *, beta=1.0, alpha=1.0):
        if a.dtype != torch.bfloat16:
            return baddbmm(c, a, b, beta=beta, alpha=alpha)
        return baddbmm(c.float(), a.float(), b.float(), beta=beta, alpha=alpha).bfloat16()

    torch.bmm, torch.baddbmm = emulated_bmm, emulated_baddbmm
    try:
        yield
    finally:
        torch.bmm, torch.baddbmm = bmm, baddbmm


def errors(out: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """max |σ − 1| of ``out`` and its relative Frobenius distance to the exact polar factor (float64)."""
    out = out.double()
    sigma = torch.linalg.svdvals(out)
    return float((sigma - 1).abs().max()), float((out - reference).norm() / reference.norm())


def exact_polar(G: torch.Tensor) -> torch.Tensor:
    """U Vᵀ by a float64 SVD, on G's device (a GPU's is much faster at width 4096)."""
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return U @ Vh


def timed(fn) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    out = fn()
    if out.is_cuda:
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--check-emulation", type=int, default=256, metavar="N",
                        help="on CPU, also run PyTorch's bfloat16 kernel up to width N (0: never)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", help="also write the table as CSV")
    args = parser.parse_args()
    emulate = args.device == "cpu"
    generator = torch.Generator().manual_seed(0)
    label = "emulated bf16" if emulate else "bf16"
    print(f"Polar Express, 8 steps, on {args.device}; float32 vs {label} iteration; "
          "max |σ−1| and relative Frobenius distance to the exact U Vᵀ")
    header = f"{'kind':<16}{'shape':>13}{'fp32 |σ−1|':>12}{'bf16 |σ−1|':>12}{'fp32 dist':>11}{'bf16 dist':>11}"
    header += f"{'fp32 s':>9}{'bf16 s':>9}" + (f"{'cpu-bf16 |σ−1|':>16}{'cpu-bf16 dist':>15}" if emulate else "")
    print(header)
    writer = None
    csv_file = open(args.out, "w", newline="") if args.out else None  # noqa: SIM115 - rows written as measured
    for n in args.widths:
        for kind in args.kinds:
            G = test_matrix(kind, n, generator).to(args.device)
            reference = exact_polar(G)
            out32, t32 = timed(lambda: orthogonalize(G))
            with emulated_bf16_matmuls() if emulate else contextlib.nullcontext():
                out16, t16 = timed(lambda: orthogonalize(G, iter_dtype=torch.bfloat16))
            row = {"kind": kind, "rows": G.shape[0], "cols": G.shape[1], "device": args.device,
                   "bf16": "emulated" if emulate else "native", "fp32_seconds": t32, "bf16_seconds": t16}
            row["fp32_sigma_error"], row["fp32_distance"] = errors(out32, reference)
            row["bf16_sigma_error"], row["bf16_distance"] = errors(out16, reference)
            line = (f"{kind:<16}{str(tuple(G.shape)):>13}{row['fp32_sigma_error']:>12.1e}"
                    f"{row['bf16_sigma_error']:>12.1e}{row['fp32_distance']:>11.1e}{row['bf16_distance']:>11.1e}"
                    f"{t32:>9.2f}{t16:>9.2f}")
            if emulate and n <= args.check_emulation:
                native = orthogonalize(G, iter_dtype=torch.bfloat16)
                row["cpu_bf16_sigma_error"], row["cpu_bf16_distance"] = errors(native, reference)
                line += f"{row['cpu_bf16_sigma_error']:>16.1e}{row['cpu_bf16_distance']:>15.1e}"
            else:
                row["cpu_bf16_sigma_error"] = row["cpu_bf16_distance"] = None
            print(line, flush=True)
            if csv_file:  # a row per matrix as soon as it is measured: a run cut short keeps its rows
                if writer is None:
                    writer = csv.DictWriter(csv_file, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow(row)
                csv_file.flush()
    if csv_file:
        csv_file.close()


if __name__ == "__main__":
    main()
