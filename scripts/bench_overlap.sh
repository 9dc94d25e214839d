#!/bin/bash
# Issue 16: real training on the emulated cluster with every way of averaging gradients
# (root: network namespaces). Two parts, each configuration in the same MPI job:
#   sweep:    2 nodes x 2 ranks, iteration times at RATES (default 250mbit 500mbit 1gbit
#             2gbit), MLP and ResNet-50 (64-pixel crops), no accuracy;
#   accuracy: 2x2 and 4x1 at the rate where one all-reduce takes about one iteration's
#             compute (MLP 2gbit, ResNet-50 1gbit, tiny 50mbit; see docs/optimizer.md),
#             EPOCHS epochs, test accuracy and total time.
#   bash scripts/bench_overlap.sh [OUTDIR] [sweep|accuracy|all]    (default results/overlap all)
# Then: .venv/bin/python -m chainermn_torus.bench.overlap_report OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/overlap}
PART=${2:-all}
RATES=${RATES:-250mbit 500mbit 1gbit 2gbit}
# SHAPES: the accuracy part's clusters, default "2x2 4x1" (nodes x ranks per node)
EPOCHS_MLP=${EPOCHS_MLP:-3}
EPOCHS_IMAGENET=${EPOCHS_IMAGENET:-3}
mkdir -p "$OUT"
E=scripts/emulate_cluster.sh
trap 'bash $E down >/dev/null 2>&1 || true' EXIT
[ -f data/imagenet-fmnist/train.txt ] || .venv/bin/python scripts/make_imagenet_subset.py \
    --out data/imagenet-fmnist --per-class 30
B=(.venv/bin/python -m chainermn_torus.bench.overlap_training)
quiet() { grep -v -i 'warn\|^chainermn_torus: rank\|^chainermn_torus: numba' || true; }

job() {  # nodes ranks rate model json args...
    local k=$1 r=$2 rate=$3 model=$4 json=$5; shift 5
    bash $E down >/dev/null 2>&1 || true
    bash $E up "$k" "$rate" >/dev/null
    echo "== $model, $k nodes x $r ranks, links $rate"
    # The emulated nodes share this machine's cores: one thread per rank, whatever the
    # ranks per "node" (the thread budget would give a lone rank every core).
    bash $E run "$r" env CHAINERMN_TORUS_QUIET=1 CHAINERMN_TORUS_THREADS=1 "${B[@]}" \
        --model "$model" --label "$rate" \
        --json "$json" "$@" 2>&1 | quiet
}

if [ "$PART" = sweep ] || [ "$PART" = all ]; then
    for rate in $RATES; do
        job 2 2 "$rate" mlp "$OUT/sweep-mlp-2x2-$rate.json" --iterations 40 --no-accuracy
        job 2 2 "$rate" resnet50 "$OUT/sweep-resnet50-2x2-$rate.json" --iterations 8 \
            --no-accuracy
    done
fi
if [ "$PART" = accuracy ] || [ "$PART" = all ]; then
    for shape in ${SHAPES:-"2x2 4x1"}; do
        k=${shape%x*}; r=${shape#*x}
        job "$k" "$r" 2gbit mlp "$OUT/accuracy-mlp-${k}x$r.json" --epochs "$EPOCHS_MLP"
        job "$k" "$r" 1gbit resnet50 "$OUT/accuracy-resnet50-${k}x$r.json" \
            --epochs "$EPOCHS_IMAGENET"
        job "$k" "$r" 50mbit tiny "$OUT/accuracy-tiny-${k}x$r.json" --epochs "$EPOCHS_IMAGENET"
    done
fi
