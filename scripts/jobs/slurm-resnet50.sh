#!/bin/bash
#SBATCH --job-name=resnet50-slurm
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=16
#SBATCH --time=02:00:00
# (default queue)
export OMP_NUM_THREADS=16
export CHAINERMN_TORUS_THREADS=16
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=900
echo "chainermn-torus job resnet50-slurm: 4 node(s) x 2 rank(s), communicator auto, on $(hostname) at $(date)"
srun --cpu-bind=cores python -m chainermn_torus.run --communicator auto examples/imagenet/train_imagenet.py data/imagenet/train.txt data/imagenet/val.txt --arch resnet50 --loader ours --affinity dedicated --checkpoint-dir results/ckpt --auto-resume
