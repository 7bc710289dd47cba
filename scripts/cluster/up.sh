#!/usr/bin/env bash
# Both engines on this machine, for the test suite's cluster tests and for trying the cluster launchers: a
# two-node SLURM cluster with accounting (root, Debian's packages; each node a slurmd with its own host name
# and address, scripts/cluster/node.sh) and a two-node Ray cluster (from the active Python environment).
# Run it from the environment the tests use: `. .venv/bin/activate; bash scripts/cluster/up.sh`.
# Stop both with scripts/cluster/down.sh.
set -euo pipefail
here=$(dirname "$0")
bash "$here/install.sh"
SLURM_NODES=${SLURM_NODES:-2} bash "$here/slurm_up.sh"
RAY_NODES=${RAY_NODES:-2} bash "$here/ray_up.sh"
