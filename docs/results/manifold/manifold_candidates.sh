#!/usr/bin/env bash
# Which scales must manifold training learn (docs/manifold.md)? Each candidate design on the small GPT width
# evidence's setting (character GPT on Shakespeare, 3 blocks, context 64, batch 16, 200 steps, paper variant),
# widths 32 and 64 (WIDTHS to change), LRs 2^-3 … 2^0, seeds 0, 1, 2, packed; one sweep folder per candidate
# under outputs/sweeps/manifold_candidates_<name>/, then one table (docs/results/manifold/manifold_candidates.py).
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
WIDTHS=${WIDTHS:-32,64}
LRS=${LRS:-0.125,0.25,0.5,1.0}
ALL="[embed.token,embed.position,attn.q,attn.k,attn.v,attn.out,mlp.in,mlp.out,output]"
HIDDEN="[embed.token,embed.position,attn.v,attn.out,mlp.in,mlp.out]"
# each names both lists, so that the defaults (configs/optim/*.yaml) do not leak into a candidate
declare -A CANDIDATES=(
  [fixed]="optim.manifold_free=[] optim.manifold_scaled=[]"
  [free_readout_qk]="optim.manifold_free=[output,attn.q,attn.k] optim.manifold_scaled=[]"
  [scaled_readout_qk]="optim.manifold_free=[] optim.manifold_scaled=[output,attn.q,attn.k]"
  [scaled_all]="optim.manifold_free=[] optim.manifold_scaled=$ALL"
  [free_readout_qk_scaled_rest]="optim.manifold_free=[output,attn.q,attn.k] optim.manifold_scaled=$HIDDEN"
  [free_readout_qk_embed_scaled_rest]="optim.manifold_free=[output,attn.q,attn.k,embed.token,embed.position]
    optim.manifold_scaled=[attn.v,attn.out,mlp.in,mlp.out]"
  [free_readout_qk_mlp_scaled_rest]="optim.manifold_free=[output,attn.q,attn.k,mlp.in,mlp.out]
    optim.manifold_scaled=[embed.token,embed.position,attn.v,attn.out]"
  [free_readout_qk_vo_scaled_rest]="optim.manifold_free=[output,attn.q,attn.k,attn.v,attn.out]
    optim.manifold_scaled=[embed.token,embed.position,mlp.in,mlp.out]"
  [all_free]="optim.manifold_free=$ALL optim.manifold_scaled=[]"
)
NAMES=${NAMES:-free_readout_qk scaled_readout_qk scaled_all free_readout_qk_scaled_rest fixed
  free_readout_qk_embed_scaled_rest all_free free_readout_qk_mlp_scaled_rest free_readout_qk_vo_scaled_rest}
for name in $NAMES; do
  # shellcheck disable=SC2086 - the candidate's overrides are several words
  modula-sweep experiment=small/gpt_width optim.mode=manifold optim.lr="$LRS" "arch.width=$WIDTHS" \
    sweep.name="manifold_candidates_$name" ${CANDIDATES[$name]} "$@" || true
  modula-sweep-report "outputs/sweeps/manifold_candidates_$name/gpt_shakespeare_paper" > /dev/null || true
done
