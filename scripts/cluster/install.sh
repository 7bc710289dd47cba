#!/usr/bin/env bash
# Install what a one-machine SLURM cluster with accounting needs, from Debian's packages (root):
# slurm-wlm (slurmctld, slurmd, the client commands), slurmdbd, MariaDB for its database, munge.
# Ray needs no system package: it comes with `pip install -e ".[ray]"` (or ".[dev]").
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then echo "scripts/cluster/install.sh: run as root (apt-get install)" >&2; exit 1; fi
packages=(slurm-wlm slurmdbd mariadb-server munge)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then echo "cluster packages: already installed"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "cluster packages: installed ${missing[*]}"
