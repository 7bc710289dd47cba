#!/usr/bin/env bash
# Reproduce every figure of "Scalable Optimization in the Modular Norm" on a SLURM cluster.
#
#   bash scripts/reproduce_paper.sh PARTITION [extra Hydra overrides...]
#
# Prepare the datasets first on a node with internet access (jobs then read the shared caches):
#   modula-prepare-data openwebtext data.num_proc=32
#   modula-prepare-data tinystories data.num_proc=32
#   modula-prepare-data cifar10
#   modula-prepare-data shakespeare
# Point data.root (or $MODULA_DATA) at a filesystem every node sees.
#
# Each command below submits one SLURM array (one task per grid point) and returns when the array is done,
# so run this script inside tmux/screen on the login node, or run the lines you need. Re-running it skips
# finished runs and resumes interrupted ones. Each figure lands in
#   outputs/sweeps/paper_<figure>/<arch>_<data>/{transfer.png, scale.png, optimal_lr.csv, results.csv}
# and `modula-sweep-report <that folder>` redraws it at any time, also while jobs are still running.
set -euo pipefail
cd "$(dirname "$0")/.."
partition=${1:?usage: reproduce_paper.sh PARTITION [overrides...]}
shift
launch=(hydra/launcher=slurm "hydra.launcher.partition=$partition" "$@")
all_pairs=("adam normed" "adam unnormed" "sgd normed" "sgd unnormed")

run() {  # run EXPERIMENT OPTIMIZER MODE
  modula-sweep "experiment=paper/$1" "optim=$2" "optim.mode=$3" "${launch[@]}" || echo "some runs of $1 ($2 $3) failed"
}

# Figure 1: normed Adam transfer across width and depth; the loss-vs-scale panel needs all four pairs.
for pair in "${all_pairs[@]}"; do run fig1_width $pair; run fig1_depth $pair; done
run fig3_mass_resmlp adam normed                      # Figure 3: mass × LR, ResMLP / CIFAR-10
for exp in fig4_resmlp_width fig4_resmlp_depth fig4_resnet_width fig4_resnet_depth; do
  for pair in "adam normed" "adam unnormed"; do run $exp $pair; done   # Figure 4
done
run fig5_standard_vs_modular_gpt adam unnormed        # Figure 5: nanoGPT vs modular GPT, both unnormed Adam
run fig6_mass_gpt adam normed                         # Figure 6: mass × LR, GPT / OpenWebText
for data in shakespeare tinystories openwebtext; do run "fig7_mass_$data" adam normed; done   # Figure 7
run fig8_context adam normed                          # Figure 8: context × LR
for exp in fig9_gpt_openwebtext_width fig9_gpt_openwebtext_depth fig10_gpt_tinystories_width \
           fig10_gpt_tinystories_depth fig11_resmlp_width fig11_resmlp_depth fig12_resnet_width fig12_resnet_depth; do
  for pair in "${all_pairs[@]}"; do run $exp $pair; done   # Figures 9–12: all four pairs
done
echo "done: figures are under outputs/sweeps/paper_*/"
