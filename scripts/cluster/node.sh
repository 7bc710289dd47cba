#!/usr/bin/env bash
# One extra node of the clusters slurm_up.sh (SLURM_NODES >= 2) and ray_up.sh (RAY_NODES >= 2) start on this
# machine. Each has its own host name (a UTS namespace) and address (a network namespace joined to this
# machine by a veth pair), and sees this machine's file system, as a cluster node sees a shared one:
#
#   nodeK      a SLURM slurmd, at 10.77.K.2 (this machine's end of the link: 10.77.K.1), namespace modula-nodeK
#   raynodeK   a Ray node (K >= 2), at 10.78.K.2 (this machine's end: 10.78.K.1), namespace modula-raynodeK,
#              joining the head at 10.78.2.1 with RAY_CPUS CPUs (default: all of this machine's)
#
#   node.sh link   NODE   make its namespace and link (once; a SLURM node's before slurmctld starts, so that
#                         its address is on this machine before the controller first calls it)
#   node.sh start  NODE   link it, end whatever is left of it (as a reboot would), start its daemon
#   node.sh freeze NODE   SIGSTOP every process of it (daemons and jobs): it stops answering, as a node whose
#                         kernel hangs; its jobs keep their files and locks, as a lost node's do
#   node.sh kill   NODE   SIGKILL every process of it, as a node that loses power
#   node.sh remove NODE   kill it and delete its namespace and link (scripts/cluster/down.sh)
#
# Root. Nothing outside this machine is ever addressed: the links join this machine to namespaces on it.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then echo "scripts/cluster/node.sh: run as root" >&2; exit 1; fi
action=${1:-}; node=${2:-}
if [[ "$node" =~ ^node([1-9][0-9]?)$ ]]; then net=77
elif [[ "$node" =~ ^raynode([2-9]|[1-9][0-9])$ ]]; then net=78
else echo "node.sh: node '$node'; allowed: node1 to node99 (SLURM), raynode2 to raynode99 (Ray)" >&2; exit 1
fi
k=${BASH_REMATCH[1]}
DIR=${MODULA_CLUSTER_DIR:-/var/lib/modula-cluster}
ns=modula-$node here_end=m$node-h node_end=m$node
address=10.$net.$k.2

processes() { ip netns pids "$ns" 2>/dev/null || true; }
signal_all() { local pids; pids=$(processes); [ -z "$pids" ] || kill "-$1" $pids 2>/dev/null || true; }

link() {
  ip netns list | grep -qw "$ns" && return 0
  ip netns add "$ns"
  ip link add "$here_end" type veth peer name "$node_end"
  ip link set "$node_end" netns "$ns"
  ip addr add "10.$net.$k.1/24" dev "$here_end"
  ip link set "$here_end" up
  ip netns exec "$ns" ip addr add "$address/24" dev "$node_end"
  ip netns exec "$ns" ip link set "$node_end" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip route add default via "10.$net.$k.1"  # the controller or head is on another link
}

# in the node's namespaces; nsenter, not `ip netns exec`, which remounts /sys (slurmd looks for /sys/fs/cgroup)
on_node() { nsenter --net="/run/netns/$ns" unshare --uts sh -c "hostname $node && exec $*"; }

case "$action" in
  link) link ;;
  start)
    link
    signal_all KILL
    if [ "$net" = 77 ]; then
      rm -f "$DIR/slurmd-$node.pid"
      mkdir -p "$DIR/slurmd/$node" "$DIR/log"
      on_node /usr/sbin/slurmd -N "$node"
    else
      command -v ray >/dev/null || { echo "node.sh: no \`ray\` command: activate the environment with Ray" >&2; exit 1; }
      on_node ray start --address=10.78.2.1:6379 --node-ip-address="$address" \
        --num-cpus="${RAY_CPUS:-$(nproc)}" --disable-usage-stats >/dev/null
    fi
    ;;
  freeze) signal_all STOP ;;
  kill) signal_all KILL ;;
  remove)
    signal_all KILL
    ip netns del "$ns" 2>/dev/null || true  # deletes the link with it
    ip link del "$here_end" 2>/dev/null || true
    rm -f "$DIR/slurmd-$node.pid"
    ;;
  *) echo "node.sh: action '$action'; allowed: link, start, freeze, kill, remove" >&2; exit 1 ;;
esac
