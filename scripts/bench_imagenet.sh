#!/usr/bin/env bash
# The ImageNet path's loader comparison and iteration breakdown (issue 4), on this machine.
#   bash scripts/bench_imagenet.sh [OUT]      (default results/imagenet)
# Builds a 256-pixel JPEG subset (scripts/make_imagenet_subset.py), then trains the example
# for 2 epochs with each loader and rank count, then tabulates and plots the breakdowns.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/imagenet}
PY=${PY:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-.venv/bin/mpiexec}
ARCH=${ARCH:-tiny}
CROP=${CROP:-96}
BATCH=${BATCH:-16}
EPOCH=${EPOCH:-2}
DATA=$OUT/data
mkdir -p "$OUT"
$PY scripts/make_imagenet_subset.py --out "$DATA" --size 256 --per-class 30 --val-per-class 10
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  $MPIEXEC -n "$np" $PY examples/imagenet/train_imagenet.py "$DATA/train.txt" "$DATA/val.txt" \
    --root "$DATA" --mean "$DATA/mean.npy" --arch "$ARCH" --crop-size "$CROP" \
    --batchsize "$BATCH" --epoch "$EPOCH" --out "$OUT/$name" "$@" 2>&1 | grep -E '^iterations/s|^median' \
    | sed "s/^/$name: /"
}
# Same run: the loaders alternate, twice, so that machine noise reaches all of them.
for round in 1 2; do
  run p2-serial-$round 2 --loader serial
  run p2-multiprocess-$round 2 --loader multiprocess --loader-processes 1
  run p2-ours-$round 2 --loader ours --loader-processes 1 --affinity auto
done
run p1-serial 1 --loader serial
run p1-ours-dedicated 1 --loader ours --loader-processes 1 --affinity dedicated
run p4-serial 4 --loader serial
run p4-ours 4 --loader ours --loader-processes 1 --affinity auto
$PY -m chainermn_torus.bench.loader_breakdown "$OUT"/p1-serial "$OUT"/p1-ours-dedicated \
  "$OUT"/p2-serial-2 "$OUT"/p2-multiprocess-2 "$OUT"/p2-ours-2 "$OUT"/p4-serial "$OUT"/p4-ours \
  --png "$OUT/breakdown.png" --json "$OUT/breakdown-all.json"
