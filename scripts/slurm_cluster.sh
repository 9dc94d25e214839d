#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm 22.05: slurmctld, slurmd, munge) on the emulated cluster:
# one slurmd per emulated node, in the node's network namespace and with its host name, so
# `sbatch` runs a job script written by `chainermn-torus jobscript --system slurm` the way a
# cluster would (srun, its --cpus-per-task and --mpi= PMI, task/affinity binding).
#
#   scripts/slurm_cluster.sh install          apt-get install slurm-wlm munge (root; nothing
#                                             where both are installed)
#   scripts/slurm_cluster.sh up K [CPUS]      emulated cluster of K nodes (if not up) + Slurm;
#                                             each node offers CPUS CPUs (default: this
#                                             machine's count; the nodes share its cores)
#   scripts/slurm_cluster.sh env              the SLURM_CONF line for sbatch/srun/sinfo
#   scripts/slurm_cluster.sh status           sinfo
#   scripts/slurm_cluster.sh down             stop the daemons, remove their state, then the
#                                             emulated cluster if this script brought it up
#
# Everything lives under /run/chainermn-torus-slurm (configuration, spool, logs); nothing in
# /etc/slurm is touched. /etc/hosts gets one marked line per node (removed by down). The controller listens on the bridge (198.18.0.254); node k is
# node$k at 198.18.0.$((k+1)). Process tracking is proctrack/linuxproc (no cgroups needed);
# binding is task/affinity. Needs root (namespaces, the daemons).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=/run/chainermn-torus-slurm
CONF=$DIR/slurm.conf
EMU=$HERE/emulate_cluster.sh

die() { echo "slurm_cluster: $*" >&2; exit 2; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, slurmd); you are uid $(id -u)"
}

need_slurm() {
  for tool in slurmctld slurmd munged sbatch; do
    command -v $tool >/dev/null || die "'$tool' is missing: run '$0 install' (Debian: slurm-wlm, munge)"
  done
}

# Named for what it does, not `install`: a function named after a command shadows it, and
# start_munge's `install -d` (coreutils) once ran apt-get again instead, leaving no
# /run/munge on every machine where munge's package had not started munged before.
SLURM_PACKAGES="slurm-wlm munge"
packages_installed() {
  local p
  for p in $SLURM_PACKAGES; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || return 1
  done
}

install_packages() {
  need_root
  if packages_installed && command -v slurmctld >/dev/null && command -v munged >/dev/null; then
    echo "slurm_cluster: $(slurmctld -V) and munge already installed"
    return 0
  fi
  command -v apt-get >/dev/null || die "install needs apt-get (Debian/Ubuntu); install slurm-wlm and munge with your package manager"
  # shellcheck disable=SC2086  # a list of package names
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $SLURM_PACKAGES \
    >/dev/null || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends $SLURM_PACKAGES >/dev/null; }
  echo "slurm_cluster: $(slurmctld -V) and munge installed"
}

write_conf() {
  local k=$1 cpus=$2
  mkdir -p "$DIR/ctld"
  {
    echo "# Written by scripts/slurm_cluster.sh: $k emulated nodes x $cpus CPUs"
    echo "ClusterName=cmt"
    echo "SlurmctldHost=$(hostname -s)(198.18.0.254)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$DIR/ctld"
    echo "SlurmdSpoolDir=$DIR/spool-%n"
    echo "SlurmctldPidFile=$DIR/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/slurmd-%n.pid"
    echo "SlurmctldLogFile=$DIR/slurmctld.log"
    echo "SlurmdLogFile=$DIR/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/affinity"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SlurmdTimeout=60"
    echo "KillWait=10"
    for ((n = 0; n < k; n++)); do
      echo "NodeName=node$n NodeAddr=198.18.0.$((n + 1)) CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 State=UNKNOWN"
    done
    echo "PartitionName=cmt Nodes=node[0-$((k - 1))] Default=YES MaxTime=INFINITE State=UP"
  } > "$CONF"
}

# munged's directories and key, from nothing: a new machine's munge package may have left
# none of them (no init system ran its service, so no /run/munge; no key where its postinst
# could not make one). Everything that exists is left as it is, but the socket directory's
# mode (see below).
munge_state() {
  id -u munge >/dev/null 2>&1 || die "no user 'munge' (the munge package makes it): run '$0 install'"
  # Modes set, not left to the umask: munged refuses a socket directory others cannot enter
  # ("execute permissions for all required on /run/munge"), and under umask 077 (a CI run,
  # a cautious user) mkdir made it 0700, which then stopped every later start too.
  command install -d -m 0755 -o munge -g munge /run/munge
  chmod 0755 /run/munge
  command install -d -m 0700 -o munge -g munge /var/log/munge /var/lib/munge
  command install -d -m 0700 -o munge -g munge /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null; then
      runuser -u munge -- mungekey --create --keyfile /etc/munge/munge.key
    else
      (umask 077 && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none)
    fi
    echo "slurm_cluster: made /etc/munge/munge.key (the munge package had made none)"
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
}

start_munge() {
  if [ -S /run/munge/munge.socket.2 ] && pgrep -x munged >/dev/null; then return 0; fi
  munge_state
  runuser -u munge -- munged
  touch "$DIR/started-munge"
  local i
  for ((i = 0; i < 50; i++)); do [ -S /run/munge/munge.socket.2 ] && return 0; sleep 0.1; done
  die "munged did not open /run/munge/munge.socket.2: see /var/log/munge/munged.log"
}

up() {
  local k=${1:-} cpus=${2:-$(nproc)}
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] || die "up needs a node count >= 1, got '${k}'"
  [[ "$cpus" =~ ^[0-9]+$ ]] && [ "$cpus" -ge 1 ] || die "up: CPUS must be >= 1, got '${cpus}'"
  need_root
  need_slurm
  [ -f "$DIR/up" ] && die "Slurm is already up; run '$0 down' first"
  mkdir -p "$DIR"
  local have
  have=$(sed -n 's/^nodes=//p' /run/chainermn-torus-cluster 2>/dev/null || echo 0)
  if [ "$have" = 0 ]; then
    "$EMU" up "$k" >/dev/null
    touch "$DIR/started-emulation"
  elif [ "$have" != "$k" ]; then
    die "an emulated cluster of $have nodes is up, not $k; '$EMU down' first"
  fi
  write_conf "$k" "$cpus"
  # Node names resolve, as on a cluster (MPI launchers connect back to node0 by name).
  sed -i '/# chainermn-torus slurm_cluster$/d' /etc/hosts
  for ((n = 0; n < k; n++)); do
    echo "198.18.0.$((n + 1)) node$n # chainermn-torus slurm_cluster" >> /etc/hosts
  done
  start_munge
  SLURM_CONF=$CONF slurmctld
  for ((n = 0; n < k; n++)); do
    mkdir -p "$DIR/spool-node$n"
    # The node's network namespace, a UTS namespace named node$n (slurmd -N names itself;
    # the job's processes, its children, see the node's host name) and a mount namespace
    # with the node's own /sys: MPI libraries list network interfaces from /sys/class/net
    # (with the host's view, UCX finds only lo). The cgroup hierarchies slurmd probes are
    # carried over into it (`ip netns exec` would remount /sys without them).
    mkdir -p "$DIR/cgroup"
    nsenter --net=/run/netns/cmt-n$n unshare --uts --mount bash -c \
      "hostname node$n && mount --rbind /sys/fs/cgroup $DIR/cgroup &&
       mount -t sysfs sysfs /sys && mount --rbind $DIR/cgroup /sys/fs/cgroup &&
       SLURM_CONF=$CONF exec slurmd -N node$n"
  done
  touch "$DIR/up"
  local i
  for ((i = 0; i < 60; i++)); do
    if [ "$(SLURM_CONF=$CONF sinfo -h -o '%T' -t idle 2>/dev/null | wc -l)" -ge 1 ] &&
       [ "$(SLURM_CONF=$CONF sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle')" = "$k" ]; then
      echo "slurm_cluster: $k nodes idle (node0-node$((k - 1)), $cpus CPUs each); export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 1
  done
  SLURM_CONF=$CONF sinfo -N -l >&2 || true
  die "the nodes did not come up in 60 s: see $DIR/slurmctld.log and $DIR/slurmd-node*.log"
}

down() {
  need_root
  local pid i
  for f in "$DIR"/slurmd-*.pid "$DIR"/slurmctld.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  # Daemons that did not write a pid file (a failed start) are ours too if they read our conf.
  pkill -f "slurmd -N node" 2>/dev/null || true
  sleep 1
  pkill -9 -f "slurmd -N node" 2>/dev/null || true
  # Job processes outlive slurmd (proctrack/linuxproc does not hold them): a rank stuck in
  # MPI_Init would spin on a core for ever. Everything left in a node's namespace goes.
  for ((i = 0; i < 32; i++)); do
    [ -e /run/netns/cmt-n$i ] || continue
    ip netns pids "cmt-n$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  if [ -f "$DIR/started-munge" ]; then
    pkill -x munged 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do pgrep -x munged >/dev/null || break; sleep 0.1; done
  fi
  if [ -f "$DIR/started-emulation" ]; then
    "$EMU" down >/dev/null
  fi
  sed -i '/# chainermn-torus slurm_cluster$/d' /etc/hosts 2>/dev/null || true
  rm -rf "$DIR"
  echo "slurm_cluster: down"
}

cmd=${1:-}; shift || true
case "$cmd" in
  install) install_packages ;;
  up) up "$@" ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  status) SLURM_CONF=$CONF sinfo -N -l ;;
  down) down ;;
  *) die "usage: $0 install | up K [CPUS] | env | status | down (got '${cmd}')" ;;
esac
