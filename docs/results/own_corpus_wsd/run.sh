#!/usr/bin/env bash
# The evidence of docs/results/own_corpus_wsd/README.md: a corpus of one's own (the Python standard library's
# docstrings, BPE of 2048 tokens, nanoGPT's token files) under a user's recipe (AdamW on matrices, WSD, clipping)
# against the same recipe with cosine decay and no clipping; four modes on the modular GPT, widths 32 → 128,
# 3 seeds packed, the LR search. Then a WSD horizon sweep. Run from the repository root:
#   bash docs/results/own_corpus_wsd/run.sh
set -euo pipefail
here=docs/results/own_corpus_wsd
corpus=${CORPUS:-$PWD/outputs/own_corpus/stdlib}
[ -f "$corpus/train.bin" ] || (cd examples/nanogpt && python prepare.py "$corpus" 2048)
common=(data=tokens "data.path=$corpus" data.context=64 arch=gpt arch.depth=2 arch.width=32,64,128 train.steps=200
        train.seed=0,1,2 sweep.pack=true sweep.search=true train.progress=false variant=modular optim=adamw_wsd_clip
        optim.mup_base_width=32)
for recipe in wsd_clip cosine; do
  extra=()
  [ "$recipe" = cosine ] && extra=(optim.schedule=cosine optim.grad_clip=null)
  for mode in unnormed mup muon dualized; do
    modula-sweep sweep=width "${common[@]}" "${extra[@]}" "optim.mode=$mode" \
        "hydra.sweep.dir=outputs/own_corpus/$recipe/$mode" > "outputs/own_corpus/$recipe-$mode.log" 2>&1
  done
done
