#!/usr/bin/env bash
# The evidence of docs/results/own_corpus_wsd/README.md: a corpus of one's own (the Python standard library's
# docstrings, BPE of 2048 tokens, nanoGPT's token files) under a user's recipe (AdamW on matrices, WSD, clipping)
# against the same recipe with cosine decay and no clipping; four modes on the modular GPT (depth 2, context 32,
# batch 16, 100 steps), widths 32 → 256, 3 seeds packed, the LR search. Then a WSD horizon sweep of μP Adam over
# widths 32, 64 and horizons 50, 100, 200, its cool-downs branched. Run from the repository root:
#   bash docs/results/own_corpus_wsd/run.sh
set -euo pipefail
here=docs/results/own_corpus_wsd
corpus=${CORPUS:-$PWD/outputs/own_corpus/stdlib}
[ -f "$corpus/train.bin" ] || (cd examples/nanogpt && python prepare.py "$corpus" 2048)
common=(data=tokens "data.path=$corpus" data.context=32 arch=gpt arch.depth=2 train.batch_size=16 train.seed=0,1,2
        sweep.pack=true sweep.search=true train.progress=false variant=modular optim=adamw_wsd_clip
        optim.mup_base_width=32 train.eval_every=0)
for recipe in wsd_clip cosine; do
  extra=()
  [ "$recipe" = cosine ] && extra=(optim.schedule=cosine optim.grad_clip=null)
  for mode in unnormed mup muon dualized; do
    modula-sweep sweep=width arch.width=32,64,128,256 train.steps=100 "${common[@]}" "${extra[@]}" "optim.mode=$mode" \
        "hydra.sweep.dir=outputs/own_corpus/$recipe/$mode" > "outputs/own_corpus/$recipe-$mode.log" 2>&1
  done
done
modula-sweep sweep=horizon arch.width=32,64 train.steps=50,100,200 "${common[@]}" optim.mode=mup \
    optim.warmup_fraction=null optim.warmup_steps=5 sweep.target=width:256+steps:800 \
    "hydra.sweep.dir=outputs/own_corpus/horizon/mup" > outputs/own_corpus/horizon-mup.log 2>&1
