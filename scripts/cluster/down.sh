#!/usr/bin/env bash
# Stop what scripts/cluster/up.sh started, and only that: the Ray nodes ray_up.sh started, SLURM's daemons
# (each namespaced node with its namespace and link), and slurmdbd, MariaDB and munge where slurm_up.sh
# started them (a workstation's own are left running).
set -uo pipefail
DIR=${MODULA_CLUSTER_DIR:-/var/lib/modula-cluster}
here=$(cd "$(dirname "$0")" && pwd)
RAY_MARK=${TMPDIR:-/tmp}/modula-ray.started
if [ -f "$RAY_MARK" ]; then
  if command -v ray >/dev/null; then
    ray stop >/dev/null 2>&1; rm -f "$RAY_MARK"
  else  # left running it would take CPU from whatever runs next (it slowed a test run by half)
    echo "down.sh: Ray was started by up.sh but 'ray' is not on PATH here: activate the environment that started it" \
         "(. .venv/bin/activate) and run down.sh again" >&2
  fi
fi
stopping=()
for file in "$DIR"/slurmctld.pid "$DIR"/slurmd*.pid "$DIR"/slurmdbd.pid "$DIR"/mariadb.pid; do
  pid=$(cat "$file" 2>/dev/null) || continue  # a daemon removes its own file as it exits
  kill "$pid" 2>/dev/null && stopping+=("$pid")
  rm -f "$file"
done
for pid in "${stopping[@]}"; do  # gone before anything starts again (a new MariaDB needs the old one's files)
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
done
# the nodes' namespaces go after the controller, which would otherwise call their addresses once gone
for node in $(ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^modula-\(\(ray\)\{0,1\}node[0-9]*\)$/\1/p'); do
  MODULA_CLUSTER_DIR=$DIR bash "$here/node.sh" remove "$node"
done
if [ -f "$DIR/munged.started" ]; then
  pkill -x munged 2>/dev/null; rm -f "$DIR/munged.started"
  for _ in $(seq 1 40); do pgrep -x munged >/dev/null || break; sleep 0.25; done  # a new munged needs its socket
fi
echo "cluster stopped"
