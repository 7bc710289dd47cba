#!/usr/bin/env bash
# A local Ray head for `hydra/launcher=ray_cluster` (and the test suite): `ray start --head` with this
# machine's CPUs, from the Python environment that has Ray (pip install -e ".[ray]"; `.[dev]` includes it).
# Workers run that same Python, so start it from the virtual environment the sweeps use. Idempotent.
#
#   RAY_CPUS   CPUs the head offers (default: all of this machine's)
set -euo pipefail
command -v ray >/dev/null || { echo "ray_up.sh: no \`ray\` command: activate the environment with Ray (pip install -e \".[ray]\")" >&2; exit 1; }
if ray status >/dev/null 2>&1; then echo "Ray: a cluster is already running here"; ray status 2>/dev/null | grep -E "CPU|GPU" || true; exit 0; fi
ray start --head --num-cpus="${RAY_CPUS:-$(nproc)}" --include-dashboard=false --disable-usage-stats >/dev/null
touch "${TMPDIR:-/tmp}/modula-ray.started"  # down.sh stops only a head this script started
for _ in $(seq 1 60); do ray status >/dev/null 2>&1 && break; sleep 0.5; done
ray status >/dev/null 2>&1 || { echo "ray_up.sh: the Ray head did not come up; see /tmp/ray/session_latest/logs" >&2; exit 1; }
echo "Ray: head started ($(python -c 'import ray; print(ray.__version__)'), ${RAY_CPUS:-$(nproc)} CPUs)"
