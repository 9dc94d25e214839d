#!/bin/bash
# This machine, 4 ranks (oversubscribed if it has fewer cores).
cd .
# The virtualenv (chainer, mpi4py, chainermn_torus): batch jobs do not inherit an activated one.
[ -f .venv/bin/activate ] || { echo "chainermn-torus job: no virtualenv: .venv/bin/activate does not exist on $(hostname) (--venv)" >&2; exit 2; }
. .venv/bin/activate
set -euo pipefail
# Raise what the site lets a job raise (open files for many ranks' connections, stack
# for deep recursion); a hard limit below stays as it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
ulimit -s unlimited 2>/dev/null || true
# More ranks than cores here: a waiting rank gives its core up instead of spinning.
if [ "$(nproc)" -lt 4 ]; then
    export MPIR_CVAR_ENABLE_HEAVY_YIELD=1
fi
# What the ranks apply (chainermn-torus config): compute threads, loader cores, the rank
# count MPI must start (the launcher stops on another: a PMI/launcher mismatch).
export CHAINERMN_TORUS_THREADS=1
export CHAINERMN_TORUS_EXPECT_RANKS=4
# A rank that stops (a frozen peer) ends the job instead of the time limit.
export CHAINERMN_TORUS_WATCHDOG=300
echo "chainermn-torus job mnist-local: 1 node(s) x 4 rank(s), 1 compute thread(s) per rank, communicator rsap, mpich MPI, on $(hostname) at $(date)"
echo "python: $(command -v python) ($(python -c 'import sys; print(sys.version.split()[0], sys.prefix)'))"
.venv/bin/mpiexec -n 4 .venv/bin/python -m chainermn_torus.run --communicator rsap examples/mnist/train_mnist.py --epoch 2 --checkpoint-dir results/ckpt --auto-resume
