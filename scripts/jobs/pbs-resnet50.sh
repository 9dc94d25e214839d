#!/bin/bash
#PBS -N resnet50-pbs
#PBS -l select=4:ncpus=34:mpiprocs=2:ompthreads=16
#PBS -l place=scatter:excl
#PBS -l walltime=02:00:00
# (the default queue)
cd "${PBS_O_WORKDIR:-.}"
# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not inherit an activated one.
[ -f "$HOME"/venvs/chainermn-torus/bin/activate ] || { echo "chainermn-torus job: no virtualenv: "$HOME"/venvs/chainermn-torus/bin/activate does not exist on $(hostname) (--venv)" >&2; exit 2; }
. "$HOME"/venvs/chainermn-torus/bin/activate
set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
export OMP_NUM_THREADS=16
# The ranks follow the allocation: resubmitted on another number of nodes, the same
# script starts that many ranks (--auto-resume continues a checkpoint on them).
NODES=$(sort -u "${PBS_NODEFILE:-/dev/null}" | wc -l)
[ "$NODES" -ge 1 ] || NODES=4
PROCS=$((NODES * 2))
# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=16
export CHAINERMN_TORUS_DEDICATED_CORES=1
export CHAINERMN_TORUS_EXPECT_RANKS=$PROCS
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job resnet50-pbs: $NODES node(s) x 2 rank(s), 16 compute thread(s) per rank, communicator auto, mpich MPI, on $(hostname) at $(date)"
echo "python: $(command -v python) ($(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
mpiexec -n $PROCS -ppn 2 -bind-to core:17 python -m chainermn_torus.run --communicator auto examples/imagenet/train_imagenet.py data/imagenet/train.txt data/imagenet/val.txt --arch resnet50 --loader ours --affinity auto --checkpoint-dir results/ckpt --auto-resume
