#!/bin/bash
#PBS -N resnet50-pbs
#PBS -l select=4:ncpus=32:mpiprocs=2
#PBS -l walltime=02:00:00
# (default queue)
cd "${PBS_O_WORKDIR:-.}"
export OMP_NUM_THREADS=16
export CHAINERMN_TORUS_THREADS=16
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job resnet50-pbs: 4 node(s) x 2 rank(s), communicator auto, on $(hostname) at $(date)"
mpiexec -n 8 -ppn 2 python -m chainermn_torus.run --communicator auto examples/imagenet/train_imagenet.py data/imagenet/train.txt data/imagenet/val.txt --arch resnet50 --loader ours --affinity dedicated --checkpoint-dir results/ckpt --auto-resume
