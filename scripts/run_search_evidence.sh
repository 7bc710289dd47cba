#!/usr/bin/env bash
# Transfer along batch size, training horizon and weight decay, found with the LR search
# (sweep.search=true) instead of the full grid: normed, dualized and unnormed Adam, three seeds, the small
# GPT of experiment=small/gpt_width at width 32 (200 steps, batch 16, context 64 unless the axis sets it),
# over the paper's whole LR grid for each mode (the search starts in its middle and finds the valley itself),
# each scale's LRs × seeds packed into one run. Then the reports, copied to docs/results/search_axes/<axis>/
# (the search's spend against the grid's estimate in search.csv). Rerunning resumes.
#   AXES="horizon" MODES="normed" bash scripts/run_search_evidence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
AXES=${AXES:-batch horizon weight_decay}
MODES=${MODES:-normed dualized unnormed}
declare -A SCALES=(
  [batch]="train.batch_size=8,16,32,64"
  [horizon]="train.steps=100,200,400,800"
  [weight_decay]="optim.wd=0.015625,0.0625,0.25,1.0"
)
common=(arch.width=32 data.context=64 train.batch_size=16 train.steps=200 train.eval_every=0
        train.eval_batches=8 train.progress=false train.seed=0,1,2 sweep.pack=true sweep.search=true)
for axis in $AXES; do
  for mode in $MODES; do
    # a failed run must not stop the rest
    modula-sweep sweep="$axis" "${common[@]}" "${SCALES[$axis]}" optim.mode="$mode" \
      sweep.name="search_$axis" "$@" || true
  done
  folder=outputs/sweeps/search_$axis/gpt_shakespeare_paper
  modula-sweep-report "$folder" > "$folder/report.txt" || true
  mkdir -p "docs/results/search_axes/$axis"
  cp "$folder"/{results,curves,optimal_lr,transfer,search}.csv "$folder"/{transfer.png,search.json,report.txt} \
    "docs/results/search_axes/$axis/"
done
