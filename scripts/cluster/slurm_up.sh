#!/usr/bin/env bash
# A SLURM cluster with accounting on one machine, for trying `hydra/launcher=slurm` on a workstation and for
# the test suite: munge, MariaDB, slurmdbd, slurmctld and slurmd started by hand (no systemd), in one
# partition, `cpu`. Root; Debian's packages (scripts/cluster/install.sh). Idempotent: a daemon already
# running is left alone.
#
#   SLURM_NODES          compute nodes (default 1: this machine itself). With 2 or more, each node is a slurmd
#                        with its own host name (node1, node2, ...; a UTS namespace) and address (a network
#                        namespace modula-nodeK joined to this machine by a veth pair: 10.77.K.2, the machine
#                        10.77.K.1), each declared with this machine's CPUs and memory. Its jobs see the same
#                        file system, as on a cluster's shared one. scripts/cluster/node.sh stops one
#                        (freezes or kills every process of it) and starts it again.
#   SLURM_NODE_CPUS      CPUs each node declares (default: this machine's). More than the machine has are
#                        declared as given (SlurmdParameters=config_overrides): for measuring how jobs are
#                        packed (scripts/bench_runs_per_task.py), not for timing training
#   MODULA_CLUSTER_DIR   state, logs and pid files (default /var/lib/modula-cluster)
#   SLURM_CRED_EXPIRE    seconds a requeued job waits before it may start again (SLURM's default: 120)
#
# No cgroups: proctrack/linuxproc, task/none and jobacct_gather/none, so it runs in containers too. The
# configuration goes to /etc/slurm (where every SLURM command looks); a slurm.conf this script did not
# write is never overwritten.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then echo "scripts/cluster/slurm_up.sh: run as root" >&2; exit 1; fi
command -v slurmctld >/dev/null || { echo "slurm_up.sh: SLURM is not installed; run scripts/cluster/install.sh" >&2; exit 1; }

DIR=${MODULA_CLUSTER_DIR:-/var/lib/modula-cluster}
CRED_EXPIRE=${SLURM_CRED_EXPIRE:-120}
NODES=${SLURM_NODES:-1}
[[ "$NODES" =~ ^[1-9][0-9]?$ ]] || { echo "slurm_up.sh: SLURM_NODES=$NODES; allowed: 1 to 99" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
MARK="# written by modula-sweep scripts/cluster/slurm_up.sh"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
HOST=$(hostname -s)
mkdir -p "$DIR"/{log,slurmctld,slurmd} /etc/slurm

if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  echo "slurm_up.sh: $CONF exists and was not written by this script; not touching a real cluster's configuration" >&2
  exit 1
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "slurm_up.sh: $what did not come up within ${limit}s; logs in $DIR/log" >&2
  exit 1
}

# --- munge: authentication between the daemons and the commands ------------------------------------------
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -s /etc/munge/munge.key ] || { mungekey --create --force; chown munge:munge /etc/munge/munge.key; }
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged && touch "$DIR/munged.started"  # down.sh stops only what this started
fi
wait_for 10 munge sh -c 'munge -n | unmunge'

# --- MariaDB and slurmdbd: accounting, so that sacct knows every job's end ---------------------------------
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
if ! pgrep -x mariadbd >/dev/null && ! pgrep -x mysqld >/dev/null; then
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  nohup /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
    --skip-networking=0 --bind-address=127.0.0.1 >"$DIR/log/mariadb.log" 2>&1 &
  echo $! >"$DIR/mariadb.pid"
fi
wait_for 30 MariaDB mariadb -e 'select 1'
DB_PASS_FILE="$DIR/db_password"
[ -s "$DB_PASS_FILE" ] || { head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DB_PASS_FILE"; chmod 600 "$DB_PASS_FILE"; }
DB_PASS=$(cat "$DB_PASS_FILE")
mariadb <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL

cat >"$DBD_CONF" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
EOF
chmod 600 "$DBD_CONF"

# --- slurm.conf: the nodes of partition `cpu` --------------------------------------------------------------
HARDWARE=$(slurmd -C | head -n 1 | sed -e "s/^NodeName=[^ ]* //")
OVERRIDES=""
if [ -n "${SLURM_NODE_CPUS:-}" ]; then
  [[ "$SLURM_NODE_CPUS" =~ ^[1-9][0-9]*$ ]] || { echo "slurm_up.sh: SLURM_NODE_CPUS=$SLURM_NODE_CPUS; allowed: a count >= 1" >&2; exit 1; }
  HARDWARE="CPUs=$SLURM_NODE_CPUS $(echo "$HARDWARE" | grep -o 'RealMemory=[0-9]*')"
  OVERRIDES="SlurmdParameters=config_overrides"
fi
if [ "$NODES" -eq 1 ]; then  # this machine, addressed by loopback (its name need not resolve)
  CONTROLLER=127.0.0.1
  NODE_LINES="NodeName=$HOST NodeAddr=127.0.0.1 $HARDWARE State=UNKNOWN"
else  # node K answers at 10.77.K.2; the controller at this machine's side of node1's link, which every node reaches
  CONTROLLER=10.77.1.1
  NODE_LINES=$(for k in $(seq 1 "$NODES"); do echo "NodeName=node$k NodeAddr=10.77.$k.2 $HARDWARE State=UNKNOWN"; done)
fi
OLD=$(cat "$CONF" 2>/dev/null || true)
cat >"$CONF" <<EOF
$MARK
ClusterName=modula
SlurmctldHost=$HOST($CONTROLLER)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=$DIR/slurmctld
SlurmdSpoolDir=$DIR/slurmd/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# a pass over the pending jobs every 2 s (SLURM's defaults: 60 s, backfill 30 s): a requeued job starts as soon
# as its begin time passes, not at the next minute
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MpiDefault=none
ReturnToService=2
KillWait=10
# a node that stops answering is DOWN after 10 s (SLURM's default: 300 s), and its jobs are requeued
SlurmdTimeout=10
$OVERRIDES
$NODE_LINES
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

if [ "$OLD" != "$(cat "$CONF")" ]; then  # a changed slurm.conf: restart (some settings are read only at start)
  pids=("$DIR"/slurmd*.pid "$DIR/slurmctld.pid")
  for pid in "${pids[@]}"; do if running "$pid"; then kill "$(cat "$pid")"; fi; done
  for pid in "${pids[@]}"; do for _ in $(seq 1 40); do running "$pid" || break; sleep 0.25; done; done
fi
if ! running "$DIR/slurmdbd.pid"; then /usr/sbin/slurmdbd; fi
wait_for 30 slurmdbd sacctmgr -n list cluster
sacctmgr -i -Q add cluster modula >/dev/null 2>&1 || true
if [ "$NODES" -gt 1 ]; then
  for k in $(seq 1 "$NODES"); do MODULA_CLUSTER_DIR=$DIR bash "$here/node.sh" link "node$k"; done
fi
if ! running "$DIR/slurmctld.pid"; then /usr/sbin/slurmctld; fi
wait_for 30 slurmctld scontrol ping
if [ "$NODES" -eq 1 ]; then
  if ! running "$DIR/slurmd-$HOST.pid"; then /usr/sbin/slurmd -N "$HOST"; fi
else
  for k in $(seq 1 "$NODES"); do MODULA_CLUSTER_DIR=$DIR bash "$here/node.sh" start "node$k"; done
fi
usable() { [ "$(sinfo -h -N -o '%t' | grep -cE '^(idle|mix|alloc)')" -ge "$NODES" ]; }
wait_for 30 "every node" usable
sinfo -N
