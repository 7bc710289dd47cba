#!/usr/bin/env bash
# A Ray cluster on this machine for `hydra/launcher=ray_cluster` (and the test suite): `ray start --head` with
# this machine's CPUs, from the Python environment that has Ray (pip install -e ".[ray]"; `.[dev]` includes
# it). Workers run that same Python, so start it from the virtual environment the sweeps use. Idempotent.
#
#   RAY_NODES   nodes (default 1: the head alone). With 2 or more (root), nodes raynode2, raynode3, ... join
#               the head, each with its own host name and address (scripts/cluster/node.sh); the head then
#               listens on 10.78.2.1, which every node reaches.
#   RAY_CPUS    CPUs each node offers (default: all of this machine's)
set -euo pipefail
command -v ray >/dev/null || { echo "ray_up.sh: no \`ray\` command: activate the environment with Ray (pip install -e \".[ray]\")" >&2; exit 1; }
NODES=${RAY_NODES:-1}
CPUS=${RAY_CPUS:-$(nproc)}
[[ "$NODES" =~ ^[1-9][0-9]?$ ]] || { echo "ray_up.sh: RAY_NODES=$NODES; allowed: 1 to 99" >&2; exit 1; }
if ray status >/dev/null 2>&1; then echo "Ray: a cluster is already running here"; ray status 2>/dev/null | grep -E "CPU|GPU" || true; exit 0; fi

here=$(cd "$(dirname "$0")" && pwd)
head_address=()
if [ "$NODES" -gt 1 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "ray_up.sh: RAY_NODES=$NODES needs root (network namespaces)" >&2; exit 1; fi
  for k in $(seq 2 "$NODES"); do bash "$here/node.sh" link "raynode$k"; done
  head_address=(--node-ip-address=10.78.2.1)
fi
# a node that stops answering is declared dead in about 10 s, and a task's owner gives up on a frozen worker's
# connection in about 10 s (Ray's defaults: 30 s and 5 min); every node and driver takes these from the head
TIMEOUTS='{"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, "health_check_failure_threshold": 5, "grpc_client_keepalive_time_ms": 5000, "grpc_client_keepalive_timeout_ms": 5000}'
ray start --head "${head_address[@]}" --num-cpus="$CPUS" --include-dashboard=false --disable-usage-stats \
  --system-config="$TIMEOUTS" >/dev/null
touch "${TMPDIR:-/tmp}/modula-ray.started"  # down.sh stops only a cluster this script started
for k in $(seq 2 "$NODES"); do RAY_CPUS=$CPUS bash "$here/node.sh" start "raynode$k"; done
alive() { [ "$(python -c 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(n["Alive"] for n in ray.nodes()))' 2>/dev/null)" = "$NODES" ]; }
for _ in $(seq 1 60); do alive && break; sleep 1; done
alive || { echo "ray_up.sh: $NODES Ray nodes did not come up; see /tmp/ray/session_latest/logs" >&2; exit 1; }
echo "Ray: $NODES node(s) started ($(python -c 'import ray; print(ray.__version__)'), $CPUS CPUs each)"
