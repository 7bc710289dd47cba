#!/usr/bin/env bash
# CPU evidence for a plain torch model (docs/own_model.md): the nanoGPT-style GPT of examples/torch_gpt at the
# setting of the modular width evidence (experiment=small/gpt_width: Shakespeare, widths 32 … 256 at 3 blocks,
# context 64, batch 16, 200 steps, three seeds, packed), variant=modular, with the LR search, under unnormed
# Adam (standard parametrisation), μP Adam (base width 32) and Muon with each scale rule. First, at width 64,
# the study that chose Muon's Adam ratio (optim.muon.adam_ratio). Reports go to docs/results/own_model_*.
# Then the built-in modular GPT under muon (spectral: the modular norm's per-layer dual) at the same setting, beside
# its dualized row in docs/results/small_gpt_width (the duality paper's claim: the modular dualisation against
# per-layer orthogonalised steps). Then one row on Hugging Face's GPT-2 (examples/hf_gpt2, needs transformers): μP and Muon (original), widths
# 32 … 128 at 3 blocks (256 left out for time on 2 cores).
# Usage: bash scripts/run_own_model_evidence.sh [ratio|modes|modular|hf|all]; rerunning resumes (finished runs are kept).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
phase=${1:-all}
copy_report() {  # sweep folder → docs/results/<name>
  modula-sweep-report "$1" > /dev/null
  mkdir -p "$ROOT/docs/results/$2"
  for f in results.csv curves.csv optimal_lr.csv transfer.csv transfer.png scale.png scale.csv search.csv; do
    [ -f "$1/$f" ] && cp "$1/$f" "$ROOT/docs/results/$2/"
  done
}
cd examples/torch_gpt
common=(--config-dir configs arch=torch_gpt experiment=small/gpt_width variant=modular data.root="$ROOT/data")
if [[ $phase == ratio || $phase == all ]]; then
  # Muon (original scale) at width 64: its LR × the Adam parts' ratio, three seeds
  modula-sweep "${common[@]}" optim.mode=muon arch.width=64 train.seed=0,1,2 \
    'optim.lr=0.0078125,0.015625,0.03125,0.0625,0.125' \
    'optim.muon.adam_ratio=0.00390625,0.015625,0.0625,0.25,1.0' hydra.sweep.dir="$ROOT/outputs/own_model_ratio" || true
  copy_report "$ROOT/outputs/own_model_ratio" own_model_muon_ratio
fi
if [[ $phase == modes || $phase == all ]]; then
  for mode in "optim.mode=unnormed" "optim.mode=mup" "optim.mode=muon optim.muon.scale=original" \
              "optim.mode=muon optim.muon.scale=match_rms_adamw" "optim.mode=muon optim.muon.scale=spectral"; do
    # shellcheck disable=SC2086
    modula-sweep "${common[@]}" $mode sweep.search=true hydra.sweep.dir="$ROOT/outputs/own_model_width" || true
  done
  copy_report "$ROOT/outputs/own_model_width" own_model_width
fi
if [[ $phase == modular || $phase == all ]]; then
  cd "$ROOT"
  modula-sweep experiment=small/gpt_width variant=modular optim.mode=muon optim.muon.scale=spectral sweep.search=true \
    data.root="$ROOT/data" hydra.sweep.dir="$ROOT/outputs/own_model_modular_gpt_muon" || true
  copy_report "$ROOT/outputs/own_model_modular_gpt_muon" own_model_modular_gpt_muon
fi
if [[ $phase == hf || $phase == all ]]; then
  cd "$ROOT/examples/hf_gpt2"
  for mode in "optim.mode=mup" "optim.mode=muon optim.muon.scale=original"; do
    # shellcheck disable=SC2086
    modula-sweep --config-dir configs arch=hf_gpt2 experiment=small/gpt_width variant=modular data.root="$ROOT/data" \
      arch.depth=3 arch.width=32,64,128 $mode sweep.search=true hydra.sweep.dir="$ROOT/outputs/own_model_hf_gpt2" || true
  done
  copy_report "$ROOT/outputs/own_model_hf_gpt2" own_model_hf_gpt2
fi
