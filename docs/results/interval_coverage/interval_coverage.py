"""How often the report's 95 % interval for the optimal LR covers the truth, on synthetic sweeps.

Each synthetic scale point: a known loss curve over the 9-point grid 2^-6 … 2^2, plus per-seed noise of two
kinds: independent noise at every point, and a per-seed tilt (a seed whose batches favour larger LRs at
every LR: it moves the seed's optimum, and is why the bootstrap resamples whole seeds). Two curve shapes:
a parabola in log2 LR (the fit's own model) and a skewed curve (steeper on the high-LR side, as real LR
curves are), whose true optimum the three-point parabola misses by a little.

Prints, per shape and seed count, the coverage of the plain percentile bootstrap interval and of the
report's widened interval, and the report interval's median width (in log2 LR).

    python docs/results/interval_coverage/interval_coverage.py --sweeps 300
"""

from __future__ import annotations

import argparse

import numpy as np

from modula_cli.analysis.stats import interval, optimum

GRID = np.arange(-6.0, 3.0)
TRUTH = -1.6


def parabola(x: np.ndarray) -> np.ndarray:
    return 2.0 + 0.05 * (x - TRUTH) ** 2


def skewed(x: np.ndarray) -> np.ndarray:
    """exp(a·d) − a·d with d = x − TRUTH: minimum at TRUTH, steeper above it."""
    d = 0.7 * (x - TRUTH)
    return 2.0 + 0.1 * (np.exp(d) - d - 1)


def coverage(shape, seeds: int, sweeps: int, rng: np.random.Generator) -> tuple[float, float, float]:
    plain = widened = 0
    widths = []
    for _ in range(sweeps):
        values = shape(GRID)[None] + 0.01 * rng.standard_normal((seeds, GRID.size))
        values = values + 0.01 * rng.standard_normal((seeds, 1)) * GRID[None]  # each seed's tilt
        fit = optimum(GRID, values, resamples=400, rng=rng)
        draws = fit.draws.log2_lr[np.isfinite(fit.draws.log2_lr)]
        low, high = np.percentile(draws, [2.5, 97.5])
        plain += low <= TRUTH <= high
        low, high = interval(fit.draws.log2_lr, fit.log2_optimal_lr, seeds)
        widened += low <= TRUTH <= high
        widths.append(high - low)
    return plain / sweeps, widened / sweeps, float(np.median(widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'curve':<9} {'seeds':>5} {'plain percentile':>17} {'report interval':>16} {'median width':>13}")
    for name, shape in (("parabola", parabola), ("skewed", skewed)):
        for seeds in (3, 4, 5, 8):
            plain, widened, width = coverage(shape, seeds, args.sweeps, rng)
            print(f"{name:<9} {seeds:>5} {plain:>17.0%} {widened:>16.0%} {width:>13.2f}")


if __name__ == "__main__":
    main()
