#!/usr/bin/env bash
# The same compute in two installs of the package, interleaved (a, b, a, b, ...), so that an
# install's cost is measured one right after the other on this noisy machine: ResNet-50's
# forward + backward (bench compute, batch 8, 224 px, the oneDNN row: what a job uses) and
# the MNIST example's time per iteration (P = 2, rsap, one epoch), each under its venv's MPI.
# Usage: bash scripts/bench_venvs.sh OUT_DIR REPEATS VENV_A VENV_B
# A venv's mpiexec is its own bin/mpiexec (the mpich wheel's), else the first on the PATH (a
# site's MPI: the cluster recipe's venv, scripts/cluster_recipe.py, with its module's bin
# first). Each venv runs the package it has installed, from the example's folder of the
# checkout it was installed from (VENV/..). Writes OUT_DIR/*.json and OUT_DIR/summary.json.
set -euo pipefail
out=$1 repeats=$2
shift 2
venvs=("$@")
[ "${#venvs[@]}" = 2 ] || { echo "usage: bench_venvs.sh OUT_DIR REPEATS VENV_A VENV_B" >&2; exit 2; }
data=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
run() {  # venv label
    local venv=$1 label=$2 mpiexec
    mpiexec=$venv/bin/mpiexec
    [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec)
    CHAINERMN_TORUS_QUIET=1 "$venv/bin/python" -m chainermn_torus.bench.compute \
        --model resnet50 --batch 8 --rounds 5 --json "$out/resnet50-$label.json" > /dev/null
    (cd "$venv/.." && CHAINERMN_TORUS_QUIET=1 "$mpiexec" -n 2 "$venv/bin/python" \
        examples/mnist/train_mnist.py --communicator rsap --epoch 1 --data-dir "$data" \
        --out "$out/mnist-$label" > /dev/null)
    echo "[bench_venvs] $label: $venv ($("$mpiexec" --version 2>&1 | grep -m1 -iE 'version|open'))"
}
for r in $(seq 1 "$repeats"); do
    run "${venvs[0]}" "a-r$r"
    run "${venvs[1]}" "b-r$r"
done
python3 - "$out" "$repeats" "${venvs[@]}" <<'PY'
import json, os, statistics, sys
out, repeats, venv_a, venv_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
med = statistics.median
rows = {}
for side in ('a', 'b'):
    fwd, it = [], []
    for r in range(1, repeats + 1):
        with open(os.path.join(out, f'resnet50-{side}-r{r}.json')) as f:
            fwd.append(json.load(f)['seconds']['onednn'])     # every round of the run
        with open(os.path.join(out, f'mnist-{side}-r{r}', 'summary.json')) as f:
            s = json.load(f)
        it.append(1e3 * s['train_seconds'] / s['gradient_communication_calls'])
    rows[side] = {'resnet50_fwd_bwd_s': fwd, 'mnist_iteration_ms': it}
summary = {'venv_a': venv_a, 'venv_b': venv_b, 'repeats': repeats, 'runs': rows}
for key in ('resnet50_fwd_bwd_s', 'mnist_iteration_ms'):
    a, b = rows['a'][key], rows['b'][key]
    flat = lambda v: [x for run in v for x in run] if isinstance(v[0], list) else v
    # the medians of all samples, and the median of each repeat's b over a (the two ran
    # one right after the other: the machine's drift between repeats cancels)
    paired = [med(flat([y])) / med(flat([x])) for x, y in zip(a, b)]
    summary[key] = {'a_median': med(flat(a)), 'b_median': med(flat(b)),
                    'b/a': med(flat(b)) / med(flat(a)), 'b/a_paired_median': med(paired),
                    'b/a_paired': paired}
    print(f'{key:20s} a {med(flat(a)):.4g}  b {med(flat(b)):.4g}  '
          f'b/a {med(flat(b)) / med(flat(a)):.3f}  paired {med(paired):.3f} '
          f'({", ".join(f"{p:.3f}" for p in paired)})')
with open(os.path.join(out, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=1)
PY
