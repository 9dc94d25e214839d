#!/bin/bash
# Regenerates the example job scripts in this folder with `chainermn-torus jobscript`
# (tests/test_jobscript.py checks that they are up to date). Edit the arguments, not the
# scripts.
set -euo pipefail
cd "$(dirname "$0")/../.."
J=".venv/bin/python -m chainermn_torus.tools.cli jobscript"
IMAGENET=(python examples/imagenet/train_imagenet.py data/imagenet/train.txt
          data/imagenet/val.txt --arch resnet50 --loader ours --affinity dedicated
          --checkpoint-dir results/ckpt --auto-resume)
# Oakforest-PACS, seed 000/003: 256 KNL nodes, one rank per node, 64 compute threads.
$J --system ofp --nodes 256 --ranks-per-node 1 --hours 6 --group your-group \
   --queue regular-flat --communicator rsap --grid 2x128 --name resnet50-ofp \
   --output scripts/jobs/ofp-resnet50.sh -- "${IMAGENET[@]}"
# K computer, seed 002: MNIST on 128 nodes, FlatMPI (8 single-threaded ranks per node).
$J --system k --nodes 128 --ranks-per-node 8 --hours 1 --node-shape 8x16 \
   --stage-in './fashion-mnist/*' --communicator rsap --name mnist-k \
   --output scripts/jobs/k-mnist-flatmpi.sh -- \
   python examples/mnist/train_mnist.py --data-dir ./data --epoch 20 --out results
# An ordinary cluster: 4 nodes x 2 ranks.
$J --system slurm --nodes 4 --ranks-per-node 2 --hours 2 --threads 16 --communicator auto \
   --name resnet50-slurm --output scripts/jobs/slurm-resnet50.sh -- "${IMAGENET[@]}"
$J --system pbs --nodes 4 --ranks-per-node 2 --hours 2 --threads 16 --communicator auto \
   --name resnet50-pbs --output scripts/jobs/pbs-resnet50.sh -- "${IMAGENET[@]}"
# This machine: run it from the checkout's root (bash scripts/jobs/local-mnist.sh).
$J --system local --nodes 1 --ranks-per-node 4 --workdir . --venv .venv/bin --watchdog 300 \
   --name mnist-local --output scripts/jobs/local-mnist.sh -- \
   python examples/mnist/train_mnist.py --epoch 2 --checkpoint-dir results/ckpt --auto-resume
