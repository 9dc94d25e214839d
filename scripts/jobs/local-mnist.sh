#!/bin/bash
# This machine, 4 ranks (oversubscribed if it has fewer cores).
cd .
set -euo pipefail
# Crash... crash...: raise what the site lets a job raise (open files for many ranks'
# connections, stack for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=300
echo "chainermn-torus job mnist-local: 1 node(s) x 4 rank(s), communicator rsap, on $(hostname) at $(date)"
.venv/bin/mpiexec -n 4 .venv/bin/python -m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py --epoch 2 --checkpoint-dir results/ckpt --auto-resume
