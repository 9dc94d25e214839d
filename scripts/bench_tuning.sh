#!/usr/bin/env bash
# bench_tuning.sh [OUTDIR] [MODEL]: predicted auto, tuned auto and an exhaustive sweep
# (chainermn_torus.bench.tuning), one run each, on MODEL's gradients (default mlp):
#   this machine under MPICH, Intel MPI and Open MPI at P = 2 and 4 (scripts/with_mpi.sh);
#   the emulated cluster, 2 nodes x 2 ranks, at 1 Gbit/s and 200 Mbit/s (needs root).
# Then OUTDIR/table.md. Run it on an otherwise idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/results/tuning}
model=${2:-mlp}
mkdir -p "$out"
py="$here/.venv/bin/python"
for mpi in mpich impi openmpi; do
    for p in 2 4; do
        echo "[bench_tuning] $mpi, P = $p"
        # shellcheck disable=SC2016  # expanded by the inner shell, after with_mpi.sh set it
        bash "$here/scripts/with_mpi.sh" "$mpi" bash -c \
            '"$CHAINERMN_TORUS_MPIEXEC" -n "$0" "$1" -m chainermn_torus.bench.tuning \
                 --model "$2" --tune-dir "$3" --out "$4"' \
            "$p" "$py" "$model" "$out/tuned" "$out/tuning-$model-$mpi-p$p.json" \
            | grep -av '^chainermn_torus: rank\|^  '
    done
done
if [ "$(id -u)" = 0 ]; then
    for rate in 1gbit 200mbit; do
        echo "[bench_tuning] emulated 2 x 2, $rate"
        bash "$here/scripts/emulate_cluster.sh" down >/dev/null
        bash "$here/scripts/emulate_cluster.sh" up 2 "$rate"
        bash "$here/scripts/emulate_cluster.sh" run 2 "$py" -m chainermn_torus.bench.tuning \
            --model "$model" --tune-dir "$out/tuned" \
            --out "$out/tuning-$model-emulated-$rate.json" | grep -av '^chainermn_torus: rank\|^  '
        bash "$here/scripts/emulate_cluster.sh" down >/dev/null
    done
else
    echo "[bench_tuning] not root: the emulated cluster rows are left out"
fi
"$py" -m chainermn_torus.bench.tuning_table "$out" > "$out/table.md"
cat "$out/table.md"
