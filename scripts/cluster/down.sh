#!/usr/bin/env bash
# Stop what scripts/cluster/up.sh started, and only that: the Ray head ray_up.sh started, SLURM's daemons,
# and slurmdbd, MariaDB and munge where slurm_up.sh started them (a workstation's own are left running).
set -uo pipefail
DIR=${MODULA_CLUSTER_DIR:-/var/lib/modula-cluster}
RAY_MARK=${TMPDIR:-/tmp}/modula-ray.started
if [ -f "$RAY_MARK" ] && command -v ray >/dev/null; then ray stop >/dev/null 2>&1; rm -f "$RAY_MARK"; fi
for daemon in slurmd slurmctld slurmdbd mariadb; do
  [ -f "$DIR/$daemon.pid" ] && kill "$(cat "$DIR/$daemon.pid")" 2>/dev/null
  rm -f "$DIR/$daemon.pid"
done
if [ -f "$DIR/munged.started" ]; then pkill -x munged 2>/dev/null; rm -f "$DIR/munged.started"; fi
echo "cluster stopped"
