#!/bin/bash
# Why bf16 and float32 trail DDP on the 16-core machine: oneDNN's ISA and implementations,
# the per-function split at 224 px batch 8 x 16 threads, and GNU OpenMP's passive wait.
D=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$D/.." && pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/diag56") 2>&1
LAYOUTS=" " OUT=$OUT bash "$D"/run.sh >/dev/null 2>&1   # builds /tmp/v only
V=/tmp/v; export PYTHONPATH="$ROOT" PYTHONUNBUFFERED=1
verbose() {  # label, env...
  local label=$1; shift
  env "$@" ONEDNN_VERBOSE=1 timeout 120 $V/bin/mpiexec -n 1 $V/bin/python -m chainermn_torus.run \
    --compute onednn --threads 16 "$D"/chainer_r50.py 8 224 1 rsap > "$OUT/verbose-$label.txt" 2>&1
  echo "== $label: $(grep -m1 'info,cpu,isa' "$OUT/verbose-$label.txt")"
  grep -E 'median' "$OUT/verbose-$label.txt"
  awk -F, '$2=="exec"{k=$4" "$5; n[k]++; t[k]+=$NF} END{for(i in n) printf "%9.1f ms %5d %s\n", t[i], n[i], i}' \
    "$OUT/verbose-$label.txt" | sort -rn | head -12
  gzip -f "$OUT/verbose-$label.txt"
}
verbose bf16 CHAINERMN_TORUS_PRECISION=bf16
verbose fp32 CHAINERMN_TORUS_PRECISION=fp32
echo "== bf16 1x16 B8, OMP_WAIT_POLICY=PASSIVE"
OMP_WAIT_POLICY=PASSIVE CHAINERMN_TORUS_PRECISION=bf16 timeout 120 $V/bin/mpiexec -n 1 $V/bin/python \
  -m chainermn_torus.run --compute onednn --threads 16 "$D"/chainer_r50.py 8 224 3 rsap 2>&1 | grep median
echo "== bench compute resnet50 224 px batch 8, 16 threads"
timeout 240 $V/bin/python -m chainermn_torus.bench.compute --model resnet50 --batch 8 --threads 16 \
  --rounds 2 --torch python3 --precision bf16 --torch-amp bf16 --json "$OUT"/compute-224-b8-t16.json \
  2>&1 | grep -v '^chainermn_torus: compute' | head -40
date
