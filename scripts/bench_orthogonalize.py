"""Cost and accuracy of each orthogonalize method, measured side by side.

For each size, prints every method's time divided by the time of one matmul of the same shape
(G @ Gᵀ-side work is what the iterations do), and max |σ − 1| of its output on a Gaussian input.
CPU always; CUDA too when present (with the bfloat16 iteration as an extra row).

    python scripts/bench_orthogonalize.py [--sizes 128 256 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from modula_cli.nn import orthogonalize

METHODS = ["polar_express", "muon", "cubic", "svd"]


def timed(fn, device: str, repeats: int) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def max_sigma_error(out: torch.Tensor) -> float:
    sigma = torch.linalg.svdvals(out.double().cpu())
    return float((sigma - 1).abs().max())


def bench(device: str, shapes: list[tuple[int, ...]], repeats: int) -> None:
    print(f"\n{device.upper()}: time in matmul-equivalents (one matmul of the same shape) | max |σ−1|")
    variants = [(m, None) for m in METHODS]
    if device == "cuda":
        variants.append(("polar_express", torch.bfloat16))
    header = "".join(f"{m + (' bf16' if d else ''):>24}" for m, d in variants)
    print(f"{'shape':>18}{'matmul ms':>11}{header}")
    for shape in shapes:
        G = torch.randn(*shape, device=device)
        matmul_time = timed(lambda: G @ G.mT if G.shape[-2] <= G.shape[-1] else G.mT @ G, device, repeats)
        row = f"{str(tuple(shape)):>18}{1e3 * matmul_time:>11.2f}"
        for method, dtype in variants:
            if method == "svd" and max(shape[-2:]) > 2048:
                row += f"{'skipped':>24}"
                continue
            t = timed(lambda: orthogonalize(G, method, iter_dtype=dtype), device, repeats)
            err = max_sigma_error(orthogonalize(G, method, iter_dtype=dtype))
            row += f"{t / matmul_time:>14.1f}x | {err:.1e}"
        print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shapes: list[tuple[int, ...]] = []
    for n in args.sizes:
        shapes += [(n, n), (n, 4 * n)]
    shapes += [(9, 64, 64), (9, 256, 256)]  # conv-shaped batches of 3×3 slices
    torch.manual_seed(0)
    bench("cpu", shapes, args.repeats)
    if torch.cuda.is_available():
        bench("cuda", shapes, args.repeats)


if __name__ == "__main__":
    main()
