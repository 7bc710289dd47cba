"""How often the report's 95 % interval for the optimal LR covers the truth, on synthetic sweeps.

Each synthetic scale point: a known loss curve over the 9-point grid 2^-6 … 2^2, plus per-seed noise of two
kinds: independent noise at every point, and a per-seed tilt (a seed whose batches favour larger LRs at
every LR: it moves the seed's optimum, and is why the bootstrap resamples whole seeds). Two curve shapes:
a parabola in log2 LR (the fit's own model) and a skewed curve (steeper on the high-LR side, as real LR
curves are), whose true optimum the three-point parabola misses by a little.

Prints, per shape and seed count, the coverage of the plain percentile bootstrap interval and of the
report's widened interval, and the report interval's median width (in log2 LR).

``--verdicts``: the transfer verdict instead (``analysis/verdict.py``). Two scale points three doublings
apart, 3 seeds each, the large one's optimum moved by a known shift (0, ½, 1, 2, 3 grid steps): how often the
shift's 95 % interval covers the true shift, how often the regret's upper end covers the true regret (the
large scale's true cost at the small scale's best grid LR over its true best grid LR), and how often the
verdict says each of transfers / drifts / moves / cannot tell.

    python docs/results/interval_coverage/interval_coverage.py --sweeps 300
    python docs/results/interval_coverage/interval_coverage.py --verdicts --sweeps 300
"""

from __future__ import annotations

import argparse

import numpy as np

from modula_cli.analysis.stats import interval, optimum, regret, shift
from modula_cli.analysis.verdict import CALLS, verdict

GRID = np.arange(-6.0, 3.0)
TRUTH = -1.6


def parabola(x: np.ndarray, truth: float = TRUTH) -> np.ndarray:
    return 2.0 + 0.05 * (x - truth) ** 2


def skewed(x: np.ndarray, truth: float = TRUTH) -> np.ndarray:
    """exp(a·d) − a·d with d = x − truth: minimum at truth, steeper above it."""
    d = 0.7 * (x - truth)
    return 2.0 + 0.1 * (np.exp(d) - d - 1)


def noisy(shape, truth: float, seeds: int, rng: np.random.Generator) -> np.ndarray:
    values = shape(GRID, truth)[None] + 0.01 * rng.standard_normal((seeds, GRID.size))
    return values + 0.01 * rng.standard_normal((seeds, 1)) * GRID[None]  # each seed's tilt


def verdicts(shape, moved: float, sweeps: int, rng: np.random.Generator, seeds: int = 3) -> dict[str, float]:
    """Coverage of the shift's and the regret's intervals, and the share of each verdict, for a true shift of
    ``moved`` grid steps between two scale points three doublings apart."""
    calls = dict.fromkeys(CALLS, 0)
    shift_covered = regret_covered = 0
    for _ in range(sweeps):
        small = optimum(GRID, noisy(shape, TRUTH, seeds, rng), resamples=400, rng=rng)
        large = optimum(GRID, noisy(shape, TRUTH + moved, seeds, rng), resamples=400, rng=rng)
        point, low, high = shift(small, large)
        shift_covered += bool(low <= moved <= high)
        true_large = shape(GRID, TRUTH + moved)
        true_regret = true_large[small.best] - true_large.min()
        _, _, regret_high = regret(small, large)
        regret_covered += bool(true_regret <= regret_high)
        widths = tuple(o.bounds()[1] - o.bounds()[0] for o in (small, large))
        calls[verdict(point, low, high, seeds, 1.0, 3.0, widths, "width 32 → 256", small.edge or large.edge).call] += 1
    return {"shift": shift_covered / sweeps, "regret": regret_covered / sweeps,
            **{call: n / sweeps for call, n in calls.items()}}


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
    parser.add_argument("--verdicts", action="store_true", help="the transfer verdict's coverage (3 seeds)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.verdicts:
        print(f"{'curve':<9} {'true shift':>10} {'shift covered':>14} {'regret covered':>15} "
              + " ".join(f"{call:>12}" for call in CALLS))
        for name, shape in (("parabola", parabola), ("skewed", skewed)):
            for moved in (0.0, 0.5, 1.0, 2.0, 3.0):
                share = verdicts(shape, moved, args.sweeps, rng)
                print(f"{name:<9} {moved:>10g} {share['shift']:>14.0%} {share['regret']:>15.0%} "
                      + " ".join(f"{share[call]:>12.0%}" for call in CALLS))
        return
    print(f"{'curve':<9} {'seeds':>5} {'plain percentile':>17} {'report interval':>16} {'median width':>13}")
    for name, shape in (("parabola", parabola), ("skewed", skewed)):
        for seeds in (3, 4, 5, 8):
            plain, widened, width = coverage(shape, seeds, args.sweeps, rng)
            print(f"{name:<9} {seeds:>5} {plain:>17.0%} {widened:>16.0%} {width:>13.2f}")


if __name__ == "__main__":
    main()
