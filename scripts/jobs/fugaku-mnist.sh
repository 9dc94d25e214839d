#!/bin/bash
#PJM -L "node=8x16"
#PJM -L "rscgrp=small"
#PJM -L "elapse=01:00:00"
#PJM --mpi "max-proc-per-node=4"
#PJM -g your-group
#PJM -N mnist-fugaku
#PJM -x PJM_LLIO_GFSCACHE=/vol0004
#PJM -s
# Fugaku: A64FX, 48 compute cores in 4 CMGs (NUMA nodes of 12 cores); 4
# rank(s) per node. Each rank's stdout and stderr go to files of their own under
# ./mnist-fugaku.<job id>/ (Fujitsu MPI's -stdout-proc/-stderr-proc, grouped by rank / 1000).
# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not inherit an activated one.
[ -f "$HOME"/venvs/chainermn-torus/bin/activate ] || { echo "chainermn-torus job: no virtualenv: "$HOME"/venvs/chainermn-torus/bin/activate does not exist on $(hostname) (--venv)" >&2; exit 2; }
. "$HOME"/venvs/chainermn-torus/bin/activate
set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
export OMP_NUM_THREADS=11
export PLE_MPI_STD_EMPTYFILE=off
# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=11
export CHAINERMN_TORUS_DEDICATED_CORES=1
export CHAINERMN_TORUS_EXPECT_RANKS=512
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job mnist-fugaku: 128 node(s) x 4 rank(s), 11 compute thread(s) per rank, communicator rsap, fujitsu MPI, on $(hostname) at $(date)"
echo "python: $(command -v python) ($(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
mpiexec -n 512 -stdout-proc ./mnist-fugaku.%j/%/1000r/stdout -stderr-proc ./mnist-fugaku.%j/%/1000r/stderr python -m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py --epoch 20 --out results
