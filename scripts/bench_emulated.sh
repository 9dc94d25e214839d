#!/bin/bash
# Issue 5's comparison on the emulated cluster (root): K nodes x R ranks, 1 Gbit/s links,
# MNIST-MLP and ResNet-50 gradients, every communicator in the same run, plus calibration.
#   bash scripts/bench_emulated.sh [OUTDIR]      (default results/emulated)
# Then: .venv/bin/python -m chainermn_torus.bench.plan_check OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/emulated}
RATE=${RATE:-1gbit}
mkdir -p "$OUT"
E=scripts/emulate_cluster.sh
trap 'bash $E down >/dev/null 2>&1 || true' EXIT
B="env CHAINERMN_TORUS_QUIET=1 .venv/bin/python -m chainermn_torus.bench.allreduce"
for cfg in "4 1" "2 2" "4 2"; do
    set -- $cfg; K=$1; R=$2
    bash $E down >/dev/null 2>&1 || true
    bash $E up "$K" "$RATE"
    bash $E run "$R" .venv/bin/python -m chainermn_torus.tools.calibrate \
        --output "$OUT/network-${K}x${R}.json" 2>&1 | grep -v -i warn
    if [ "$R" = 1 ]; then grids="2x2 4x1"; else grids="${R}x${K} $((K * R))x1"; fi
    [ "$K" = 4 ] && [ "$R" = 2 ] && grids="2x4"
    for model in mlp resnet50; do
        rounds=9; [ "$model" = resnet50 ] && rounds=5
        echo "== ${K} nodes x ${R} ranks, $model, grids $grids"
        bash $E run "$R" env CHAINERMN_TORUS_NETWORK="$OUT/network-${K}x${R}.json" $B \
            --model "$model" --rounds $rounds --warmup 1 --grids $grids \
            --json "$OUT/allreduce-${model}-${K}x${R}.json" 2>&1 | grep -v -i warn
    done
done
