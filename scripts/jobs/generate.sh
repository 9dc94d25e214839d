#!/bin/bash
# Regenerates the example job scripts in this folder with `chainermn-torus jobscript`
# (tests/tools/test_jobscript.py checks that they are up to date). Edit the arguments, not the
# scripts. The virtualenv is ~/venvs/chainermn-torus on the cluster's shared home (make
# setup's .venv, or `python -m venv` + `pip install -e .` there).
set -euo pipefail
cd "$(dirname "$0")/../.."
J=".venv/bin/python -m chainermn_torus.tools.cli jobscript"
VENV=(--venv '~/venvs/chainermn-torus' --no-venv-check)  # the cluster's, not this machine's
IMAGENET=(python examples/imagenet/train_imagenet.py data/imagenet/train.txt
          data/imagenet/val.txt --arch resnet50 --loader ours --affinity auto
          --checkpoint-dir results/ckpt --auto-resume)
# Oakforest-PACS, seed 000/003: 256 KNL nodes, one rank per node, 64 compute threads and
# 2 loader cores (cores 0-1 stay with the OS), MCDRAM in flat mode.
$J --system ofp --nodes 256 --ranks-per-node 1 --hours 6 --group your-group \
   --queue regular-flat --communicator rsap --grid 2x128 --name resnet50-ofp "${VENV[@]}" \
   --output scripts/jobs/ofp-resnet50.sh -- "${IMAGENET[@]}"
# Fugaku (the K computer's successor), seed 002's MNIST: 128 nodes in an 8x16 shape, 4 ranks
# per node (one per CMG), 11 compute threads and one loader core each.
$J --system fugaku --nodes 128 --ranks-per-node 4 --hours 1 --node-shape 8x16 \
   --group your-group --communicator rsap --name mnist-fugaku "${VENV[@]}" \
   --output scripts/jobs/fugaku-mnist.sh -- \
   python examples/mnist/train_mnist.py --epoch 20 --out results
# An ordinary cluster: 4 nodes x 2 ranks, 16 compute threads + 1 loader core per rank.
$J --system slurm --nodes 4 --ranks-per-node 2 --hours 2 --threads 16 --loader-cores 1 \
   --communicator auto --name resnet50-slurm "${VENV[@]}" \
   --output scripts/jobs/slurm-resnet50.sh -- "${IMAGENET[@]}"
$J --system pbs --nodes 4 --ranks-per-node 2 --hours 2 --threads 16 --loader-cores 1 \
   --communicator auto --name resnet50-pbs "${VENV[@]}" \
   --output scripts/jobs/pbs-resnet50.sh -- "${IMAGENET[@]}"
# This machine: run it from the checkout's root (bash scripts/jobs/local-mnist.sh).
$J --system local --nodes 1 --ranks-per-node 4 --workdir . --venv .venv --watchdog 300 \
   --name mnist-local --output scripts/jobs/local-mnist.sh -- \
   python examples/mnist/train_mnist.py --epoch 2 --checkpoint-dir results/ckpt --auto-resume
