#!/usr/bin/env bash
# bench_mpis.sh [OUTDIR]: `chainermn-torus bench allreduce` on ResNet-50's gradients at P = 2
# and 4 under MPICH, Intel MPI and Open MPI (scripts/with_mpi.sh installs the last two on
# first use), one run each, in that order; then OUTDIR/table.md: every communicator's median
# time as a ratio to ChainerMN's naive under the same MPI, the figures in docs/portability.md.
# Run it on an otherwise idle machine: each row is a median of 15 rounds, and ranks share cores
# at P = 4 on two.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/results/mpis}
mkdir -p "$out"
py="$here/.venv/bin/python"
for mpi in mpich impi openmpi; do
    for p in 2 4; do
        echo "[bench_mpis] $mpi, P = $p"
        # shellcheck disable=SC2016  # expanded by the inner shell, after with_mpi.sh set it
        bash "$here/scripts/with_mpi.sh" "$mpi" bash -c \
            '"$CHAINERMN_TORUS_MPIEXEC" -n "$0" "$1" -m chainermn_torus.bench.allreduce \
                 --model resnet50 --json "$2"' \
            "$p" "$py" "$out/allreduce-resnet50-$mpi-p$p.json" \
            | grep -av '^chainermn_torus: rank'
    done
done
"$py" - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]
rows = {}
libs = {}
for mpi in ('mpich', 'impi', 'openmpi'):
    for p in (2, 4):
        with open(os.path.join(out, 'allreduce-resnet50-{}-p{}.json'.format(mpi, p))) as f:
            report = json.load(f)
        libs[mpi] = report['mpi'].split(',')[0]
        best = {}
        for r in report['results']:
            name = r['name']
            kind = re.sub(r'\(.*\)', '', name)
            if kind in ('copy_bound',) or name.endswith('(debug)'):
                continue
            if kind not in best or r['median_ms'] < best[kind][1]:
                best[kind] = (name, r['median_ms'], r['ratio_to_naive'])
        for kind, (name, ms, ratio) in best.items():
            rows.setdefault(kind, {})[(mpi, p)] = (name, ms, ratio)
cols = [(m, p) for m in ('mpich', 'impi', 'openmpi') for p in (2, 4)]
lines = ['| communicator | ' + ' | '.join('{} P={}'.format(m, p) for m, p in cols) + ' |',
         '|---|' + '---|' * len(cols)]
order = ['naive', 'allreduce_1msg', 'pure_allreduce', 'rsaa', 'rsap', 'rsap_notify',
         'rsap_acc', 'shm', 'auto']
for kind in order + sorted(set(rows) - set(order)):
    if kind not in rows:
        continue
    cells = []
    for c in cols:
        if c not in rows[kind]:
            cells.append('-')
            continue
        name, ms, ratio = rows[kind][c]
        grid = re.search(r'\((.*)\)', name)
        cells.append('{:.0f} ms, {:.2f}x{}'.format(ms, ratio, ' ' + grid.group(1) if grid else ''))
    lines.append('| {} | {} |'.format(kind, ' | '.join(cells)))
lines.append('')
lines.append('Libraries: ' + '; '.join('{}: {}'.format(m, libs[m]) for m in libs) + '. '
             'Each cell: median ms over 15 rounds, and that time / naive\'s under the same MPI '
             'and P (below 1 = faster); for rsaa/rsap/shm the fastest grid, named.')
with open(os.path.join(out, 'table.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
print('\n'.join(lines))
PY
