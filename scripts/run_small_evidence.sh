#!/usr/bin/env bash
# CPU evidence for LR transfer (issue 6): the small GPT width sweep for normed, dualized and unnormed Adam,
# then the combined report copied to docs/results/small_gpt_width/. About 75 minutes on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
for mode in normed dualized unnormed; do
  modula-sweep experiment=small/gpt_width optim.mode="$mode" "$@" || true  # a failed run must not stop the rest
done
sweep_dir=outputs/sweeps/small_gpt_width/gpt_shakespeare
modula-sweep-report "$sweep_dir"
mkdir -p docs/results/small_gpt_width
cp "$sweep_dir"/{results.csv,optimal_lr.csv,transfer.png,scale.png,scale.csv} docs/results/small_gpt_width/
