#!/usr/bin/env bash
# CPU evidence for LR transfer: the small GPT width sweep (widths 32 … 256) and depth sweep
# (2, 4, 8 blocks at width 64) for normed, unnormed and dualized Adam (and manifold Adam
# with MODES=manifold EXPERIMENTS=small/gpt_width), three seeds each, every scale point's
# LRs × seeds packed into one run; then the reports, copied to docs/results/. The LR grids are the paper's
# narrowed to the region holding each mode's optimum on this data (about 2 h on a 2-core CPU).
# VARIANT=modular (the results in docs/results/small_gpt_*) or paper (the default variant:
# docs/results/small_gpt_width_paper). Rerunning resumes: finished runs are skipped, interrupted ones resume
# from their checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
VARIANT=${VARIANT:-modular}
declare -A GRID=(
  [normed]="0.03125,0.0625,0.125,0.25,0.5,1.0"                      # 2^-5 … 2^0
  [unnormed]="0.0009765625,0.001953125,0.00390625,0.0078125,0.015625,0.03125,0.0625,0.125"  # 2^-10 … 2^-3
  [dualized]="0.03125,0.0625,0.125,0.25,0.5,1.0"                    # 2^-5 … 2^0
  [manifold]="0.03125,0.0625,0.125,0.25,0.5,1.0"                    # 2^-5 … 2^0
)
# variant=paper: its optima sit higher for normed and dualized Adam (a one-seed pilot at widths 32
# and 128 over 2^-6 … 2^3 put them at 2^-1 … 2^0), so its grids move up one or two steps.
if [ "$VARIANT" = paper ]; then
  GRID[normed]="0.0625,0.125,0.25,0.5,1.0,2.0"                       # 2^-4 … 2^1
  GRID[dualized]="0.0625,0.125,0.25,0.5,1.0,2.0"                     # 2^-4 … 2^1
  GRID[unnormed]="0.0009765625,0.001953125,0.00390625,0.0078125,0.015625,0.03125,0.0625"  # 2^-10 … 2^-4
  # manifold with its learned scales: optimum 2^-1 at widths 32 and 64 (docs/results/manifold/manifold_candidates.sh)
  GRID[manifold]="0.0625,0.125,0.25,0.5,1.0,2.0"                     # 2^-4 … 2^1, as dualized
fi
suffix=$([ "$VARIANT" = modular ] && echo "" || echo "_$VARIANT")  # each variant sweeps into its own folder
# paper is the default: named by no override, its runs are those of a plain `modula-sweep experiment=…`
choice=$([ "$VARIANT" = paper ] && echo "" || echo "variant=$VARIANT")
EXPERIMENTS=${EXPERIMENTS:-small/gpt_width small/gpt_depth}
MODES=${MODES:-normed unnormed dualized}
for experiment in $EXPERIMENTS; do
  for mode in $MODES; do
    # a failed run must not stop the rest
    modula-sweep experiment="$experiment" $choice optim.mode="$mode" optim.lr="${GRID[$mode]}" "$@" || true
  done
done
for experiment in $EXPERIMENTS; do
  name=$(echo "$experiment" | tr / _)
  sweep_dir=outputs/sweeps/$name/gpt_shakespeare$suffix
  modula-sweep-report "$sweep_dir"
  mkdir -p "docs/results/$name$suffix"
  cp "$sweep_dir"/{results.csv,curves.csv,optimal_lr.csv,transfer.csv,transfer.png,scale.png,scale.csv} \
    "docs/results/$name$suffix/"
done
