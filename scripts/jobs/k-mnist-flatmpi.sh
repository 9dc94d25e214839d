#!/bin/bash
#PJM --rsc-list "node=8x16"
#PJM --rsc-list "elapse=01:00:00"
#PJM --rsc-list "rscgrp=small"
#PJM --mpi "proc=1024"
#PJM --mpi "rank-map-bychip"
#PJM --stg-transfiles all
#PJM --stgin "rank=* ./fashion-mnist/* %r:./data/"
#PJM --stgout "rank=0 %r:./results/* ./results/"
#PJM -s
# K computer: 8 rank(s) per node (FlatMPI when 8: one single-threaded rank
# per core); the dataset is staged in to every rank's local disk as ./data/.
. /work/system/Env_base
export OMP_NUM_THREADS=1 PARALLEL=1
export CHAINERMN_TORUS_THREADS=1
mkdir -p results
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job mnist-k: 128 node(s) x 8 rank(s), communicator rsap, on $(hostname) at $(date)"
mpiexec -n 1024 -of-proc results/output.%r python -m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py --data-dir ./data --epoch 20 --out results
