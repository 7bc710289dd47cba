#!/usr/bin/env bash
# Stop what scripts/cluster/up.sh started: the Ray head, then SLURM's daemons, slurmdbd, MariaDB and munge.
set -uo pipefail
DIR=${MODULA_CLUSTER_DIR:-/var/lib/modula-cluster}
command -v ray >/dev/null && ray stop >/dev/null 2>&1
for daemon in slurmd slurmctld slurmdbd; do
  [ -f "$DIR/$daemon.pid" ] && kill "$(cat "$DIR/$daemon.pid")" 2>/dev/null
done
pkill -x mariadbd 2>/dev/null
pkill -x munged 2>/dev/null
echo "cluster stopped"
