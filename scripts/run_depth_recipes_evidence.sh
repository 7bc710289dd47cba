#!/usr/bin/env bash
# CPU evidence for μP's depth recipes beside the modular norm (docs/mup.md, "Depth"): the character GPT on
# Shakespeare at width 64, depths 2, 4, 8 and 16, 200 steps, the LR search (experiment small/gpt_depth_recipes):
# the standard GPT under μP, μP + Depth-μP and μP + CompleteP (base depth 2, five seeds), and the modular GPT
# under normed and dualized Adam (three seeds). The reports go to docs/results/depth_recipes/<series>. Then the
# study of the modular GPT's effective branch multipliers and block update sizes against CompleteP's
# (scripts/depth_study.py) and the coordinate checks along depth. About 65 minutes on a 2-core CPU; rerunning
# resumes (finished runs are kept).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/sweeps/small_gpt_depth_recipes}
copy_report() {  # sweep folder → docs/results/depth_recipes/<name>
  modula-sweep-report "$1" > /dev/null
  mkdir -p "docs/results/depth_recipes/$2"
  cp "$1"/{results.csv,curves.csv,optimal_lr.csv,transfer.csv,transfer.png,scale.png,scale.csv,search.csv,law.csv} \
    "docs/results/depth_recipes/$2/"
}
sweep() {  # name, overrides…
  local name=$1; shift
  modula-sweep experiment=small/gpt_depth_recipes sweep.search=true "hydra.sweep.dir=$OUT/$name" "$@" || true
  copy_report "$OUT/$name" "$name"
}
if [ "${STUDY_ONLY:-0}" != 1 ]; then
  for recipe in none depth_mup completep; do
    # five seeds: with three, the optimum's interval at depths 2 to 8 stayed wider than the search's resolution
    sweep "standard_gpt_mup_$recipe" arch=standard_gpt optim.mode=mup "optim.mup.depth=$recipe" train.seed=0,1,2,3,4
  done
  for mode in normed dualized; do
    sweep "gpt_$mode" arch=gpt "optim.mode=$mode"
  done
fi
for seed in 0 1 2; do
  modula-coord-check arch=standard_gpt arch.width=64 data.context=64 optim.mode=mup coord.axis=depth \
    'coord.depths=[1,2,4,8,16]' 'coord.mup_depths=[none,depth_mup,completep]' train.seed=$seed \
    hydra.run.dir=docs/results/depth_recipes/coord/seed$seed
done
python scripts/depth_study.py --out docs/results/depth_recipes/study
