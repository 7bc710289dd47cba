#!/usr/bin/env bash
# Both engines on this machine, for the test suite's cluster tests and for trying the cluster launchers:
# a one-machine SLURM cluster with accounting (root, Debian's packages) and a local Ray head (from the active
# Python environment). Run it from the environment the tests use: `. .venv/bin/activate; bash scripts/cluster/up.sh`.
# Stop both with scripts/cluster/down.sh.
set -euo pipefail
here=$(dirname "$0")
bash "$here/install.sh"
bash "$here/slurm_up.sh"
bash "$here/ray_up.sh"
