#!/bin/bash
#PJM -L rscgrp=regular-flat
#PJM -L node=256
#PJM --mpi proc=256
#PJM -L elapse=06:00:00
#PJM -g your-group
#PJM -N resnet50-ofp
#PJM -j
# Oakforest-PACS (KNL, 68 cores). Memory mode = the resource group: regular-flat puts
# MCDRAM beside DDR4 as its own NUMA node (numactl --preferred=1 keeps arrays there),
# regular-cache uses it as a cache; the cluster mode is quadrant.
module load impi
# One rank per node: the whole node is its pinning domain; compute threads on the first
# 64 cores, one per core; the loader processes take the cores left (--affinity).
export I_MPI_PIN_DOMAIN=node
export OMP_NUM_THREADS=64 KMP_HW_SUBSET=64c,1t
export KMP_AFFINITY=granularity=fine,compact
export CHAINERMN_TORUS_THREADS=64
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job resnet50-ofp: 256 node(s) x 1 rank(s), communicator rsap, on $(hostname) at $(date)"
mpiexec.hydra -n 256 -ppn 1 python -m chainermn_torus.run --communicator rsap --grid 2x128 examples/imagenet/train_imagenet.py data/imagenet/train.txt data/imagenet/val.txt --arch resnet50 --loader ours --affinity dedicated --checkpoint-dir results/ckpt --auto-resume
