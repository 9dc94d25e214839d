#!/usr/bin/env bash
# The same benchmarks on two checkouts of the package, interleaved (old, new, old, new), so
# that a refactoring's cost is measured one right after the other on this noisy machine:
# bench allreduce (ResNet-50, P = 2 and 4) and the MNIST example's time per iteration (P = 2,
# one epoch). Usage: bash scripts/bench_trees.sh OLD_TREE NEW_TREE OUT_DIR [REPEATS]
# (a tree: `git worktree add /tmp/old COMMIT`). Writes OUT_DIR/*.json and OUT_DIR/summary.json.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd) out=$3 repeats=${4:-2}
py=$here/.venv/bin/python mpiexec=$here/.venv/bin/mpiexec
data=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
run() {  # tree label
    local tree=$1 label=$2
    for p in 2 4; do
        CHAINERMN_TORUS_QUIET=1 "$mpiexec" -n $p "$py" "$here/scripts/with_tree.py" "$tree" \
            -m chainermn_torus.bench.allreduce --model resnet50 --no-auto \
            --json "$out/allreduce-p$p-$label.json" > /dev/null
    done
    CHAINERMN_TORUS_QUIET=1 "$mpiexec" -n 2 "$py" "$here/scripts/with_tree.py" "$tree" \
        "$tree/examples/mnist/train_mnist.py" --communicator rsap --epoch 1 \
        --data-dir "$data" --out "$out/mnist-$label" > /dev/null
}
for r in $(seq 1 "$repeats"); do
    run "$old" "old-r$r"
    run "$new" "new-r$r"
done
"$py" - "$out" "$repeats" <<'PY'
import json, os, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
summary = {}
for p in (2, 4):
    rows, rel = {}, {}
    for side in ('old', 'new'):
        for r in range(1, repeats + 1):
            with open(os.path.join(out, 'allreduce-p{}-{}-r{}.json'.format(p, side, r))) as f:
                results = json.load(f)['results']
            naive = next(x['median_ms'] for x in results if x['name'] == 'naive')
            for row in results:
                rows.setdefault(row['name'], {}).setdefault(side, []).append(row['median_ms'])
                # ChainerMN's naive is the same code in both trees: the control for drift
                rel.setdefault(row['name'], {}).setdefault(side, []).append(
                    row['median_ms'] / naive)
    med = statistics.median
    summary['allreduce-p{}'.format(p)] = {
        name: {'old_ms': med(v['old']), 'new_ms': med(v['new']),
               'new/old': med(v['new']) / med(v['old']),
               'new/old, each over naive': med(rel[name]['new']) / med(rel[name]['old'])}
        for name, v in rows.items() if 'old' in v and 'new' in v}
mnist = {}
for side in ('old', 'new'):
    per = []
    for r in range(1, repeats + 1):
        with open(os.path.join(out, 'mnist-{}-r{}'.format(side, r), 'summary.json')) as f:
            s = json.load(f)
        per.append(1e3 * s['train_seconds'] / s['gradient_communication_calls'])
    mnist[side + '_ms_per_iteration'] = per
mnist['new/old'] = statistics.median(mnist['new_ms_per_iteration']) / statistics.median(
    mnist['old_ms_per_iteration'])
summary['mnist-p2-iteration'] = mnist
with open(os.path.join(out, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=1)
for key in ('allreduce-p2', 'allreduce-p4'):
    print(key)
    for name, v in summary[key].items():
        print('  {:<22} old {:8.2f} ms  new {:8.2f} ms  new/old {:.2f}  over naive {:.2f}'.format(
            name, v['old_ms'], v['new_ms'], v['new/old'], v['new/old, each over naive']))
print('mnist P=2 ms/iteration: old {} new {} new/old {:.2f}'.format(
    ['{:.2f}'.format(x) for x in mnist['old_ms_per_iteration']],
    ['{:.2f}'.format(x) for x in mnist['new_ms_per_iteration']], mnist['new/old']))
PY
