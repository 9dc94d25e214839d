#!/bin/bash
#PJM -L rscgrp=regular-flat
#PJM -L node=256
#PJM --mpi proc=256
#PJM -L elapse=06:00:00
#PJM -g your-group
#PJM -N resnet50-ofp
#PJM -j
# Oakforest-PACS: KNL, 68 cores x 4 hardware threads, quadrant mode; the resource group
# chooses the memory mode (regular-flat: MCDRAM is NUMA node 1, used through numactl in the
# launch line; regular-cache: MCDRAM caches DDR4).
# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not inherit an activated one.
[ -f "$HOME"/venvs/chainermn-torus/bin/activate ] || { echo "chainermn-torus job: no virtualenv: "$HOME"/venvs/chainermn-torus/bin/activate does not exist on $(hostname) (--venv)" >&2; exit 2; }
. "$HOME"/venvs/chainermn-torus/bin/activate
set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# PSM2 (Omni-Path) pins each process to one CPU at MPI_Init unless told not to; then
# Intel MPI's domains decide: cores 0-1 and their hyper-threads stay with the OS, each rank
# gets 66 cores (264 logical CPUs, 4 per KNL core).
export HFI_NO_CPUAFFINITY=1
export I_MPI_PIN_PROCESSOR_EXCLUDE_LIST=0,1,68,69,136,137,204,205
export I_MPI_PIN_DOMAIN=node
export I_MPI_FABRICS=shm:ofi FI_PROVIDER=psm2
export OMP_NUM_THREADS=64 KMP_AFFINITY=granularity=fine,compact,1,0
# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=64
export CHAINERMN_TORUS_DEDICATED_CORES=2
export CHAINERMN_TORUS_EXPECT_RANKS=256
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job resnet50-ofp: 256 node(s) x 1 rank(s), 64 compute thread(s) per rank, communicator rsap, impi MPI, on $(hostname) at $(date)"
echo "python: $(command -v python) ($(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
mpiexec.hydra -n 256 -ppn 1 numactl --preferred=1 python -m chainermn_torus.run --communicator rsap --grid 2x128 examples/imagenet/train_imagenet.py data/imagenet/train.txt data/imagenet/val.txt --arch resnet50 --loader ours --affinity auto --checkpoint-dir results/ckpt --auto-resume
