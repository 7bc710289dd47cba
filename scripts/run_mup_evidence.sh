#!/usr/bin/env bash
# CPU evidence for μP beside the modular norm (docs/mup.md): the small GPT width sweep (widths 32 … 256, five
# seeds, variant=paper as docs/results/small_gpt_width_paper) and depth sweep (2, 4, 8 blocks at width 64,
# three seeds, variant=modular as docs/results/small_gpt_depth) with the LR search, for μP Adam from base width
# 32 on the modular GPT and, along depth, on the nanoGPT-style standard GPT; the coordinate checks of both
# GPTs (three seeds); then the update sizes against dualized Adam's (scripts/mup_geometry.py). The reports go
# to docs/results/mup_*. About 45 minutes on a 2-core CPU; rerunning resumes (finished runs are kept).
set -euo pipefail
cd "$(dirname "$0")/.."
copy_report() {  # sweep folder → docs/results/<name>
  modula-sweep-report "$1" > /dev/null
  mkdir -p "docs/results/$2"
  cp "$1"/{results.csv,curves.csv,optimal_lr.csv,transfer.csv,transfer.png,scale.png,scale.csv,search.csv} "docs/results/$2/"
}
modula-sweep experiment=small/gpt_width optim.mode=mup sweep.search=true train.seed=0,1,2,3,4 || true
copy_report outputs/sweeps/small_gpt_width/gpt_shakespeare_paper mup_gpt_width
modula-sweep experiment=small/gpt_depth variant=modular optim.mode=mup sweep.search=true || true
copy_report outputs/sweeps/small_gpt_depth/gpt_shakespeare mup_gpt_depth
modula-sweep experiment=small/gpt_depth variant=modular arch=standard_gpt optim.mode=mup sweep.search=true || true
copy_report outputs/sweeps/small_gpt_depth/standard_gpt_shakespeare mup_standard_gpt_depth
for seed in 0 1 2; do
  modula-coord-check optim.mode=mup train.seed=$seed hydra.run.dir=docs/results/coord_gpt_width_mup/seed$seed
  modula-coord-check arch=standard_gpt optim.mode=mup train.seed=$seed \
    hydra.run.dir=docs/results/coord_standard_gpt_width_mup/seed$seed
done
# each mode at its tuned LR: μP's best grid LR per width (docs/results/mup_gpt_width), dualized Adam's 2^-1
python scripts/mup_geometry.py --mup-lrs 32=0.03125,64=0.0625,128=0.0625,256=0.0625 --dualized-lr 0.5 \
  --out docs/results/mup_geometry
