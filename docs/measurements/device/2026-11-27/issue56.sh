#!/bin/bash
# Issue 56's 16-core rows in one call: bf16 against DDP autocast at 1x16, 2x8, 4x4, 16x1
# (batch 8), then float32 1x16 batch 8, bf16 1x16 batch 32, then bench compute 64 px batch 1
# at 16 threads (float32 and bf16 rows beside PyTorch's float32 and autocast).
D=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$D/.." && pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log56") 2>&1
date
grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort | uniq -c
# 1. the venv and the four bf16 layouts (run.sh builds /tmp/v)
PRECISION=bf16 AMP=bf16 B=8 N=3 LAYOUTS="1x16 2x8 4x4 16x1" OUT=$OUT bash "$D"/run.sh
V=/tmp/v; PYSYS=python3
export PYTHONPATH="$ROOT" PYTHONUNBUFFERED=1
pair() {  # P T B [bf16]
  local P=$1 T=$2 B=$3 prec=$4
  timeout 200 env ${prec:+CHAINERMN_TORUS_PRECISION=$prec} $V/bin/mpiexec -n $P $V/bin/python \
    -m chainermn_torus.run --compute onednn --threads $T "$D"/chainer_r50.py $B 224 3 rsap 2>&1 \
    | grep -E 'median|Error|rror:' | head -3 | sed "s/^/[${prec:-fp32}] /"
  timeout 200 env -u PYTHONPATH ${prec:+AMP=bf16} $PYSYS "$D"/ddp_r50.py $P $B 224 3 $T 2>&1 \
    | grep -E 'median|Error' | head -3
}
echo "== float32 1x16 batch 8"; pair 1 16 8
echo "== bf16 1x16 batch 32"; pair 1 16 32 bf16
echo "== bench compute 64 px batch 1, 16 threads"
timeout 200 $V/bin/python -m chainermn_torus.bench.compute --model resnet50 --batch 1 --size 64 \
  --threads 16 --rounds 5 --torch $PYSYS --precision bf16 --torch-amp bf16 \
  --json "$OUT"/compute-64px-b1-t16.json 2>&1 | head -40
date
