"""A variant added through the public seams only (tests/mpi_workers/toy_variant.py: an
Algorithm with its schedule and cost, an MPI class, one table row) reaches the planner, the
simulator, the benchmark and the exact-mean check without a line of the package changed."""
import json
import os
import sys

import pytest

from conftest import ROOT, assert_ok, run_mpi

WORKERS = os.path.join(ROOT, 'tests', 'mpi_workers')


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.syspath_prepend(WORKERS)
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        filter(None, [WORKERS, os.environ.get('PYTHONPATH')])))
    import toy_variant
    toy_variant.register()
    yield toy_variant
    toy_variant.unregister()
    sys.modules.pop('toy_variant', None)


def test_toy_variant_is_planned_with_its_own_cost(toy):
    from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES
    from chainermn_torus.planning import planner
    net = planner.PRESETS['ofp']
    rows = planner.plan(4, 2, MODEL_BYTES['resnet50'], net)
    (row,) = [r for r in rows if r['algorithm'] == toy.NAME]
    assert row['grid'] is None and set(row['phases']) == {'reduce_scatter', 'allgather'}
    assert row['seconds'] == pytest.approx(sum(row['phases'].values()))
    # A flat reduce-scatter + all-gather moves the bytes of a flat Rabenseifner all-reduce
    # (with p - 1 latencies a step instead of log2 p): close to pure_allreduce's row.
    flat = planner.predict('pure_allreduce', 4, 2, MODEL_BYTES['resnet50'], net)[0]
    assert 0.8 * flat < row['seconds'] < 1.2 * flat, (row['seconds'], flat)


@pytest.mark.slow
def test_toy_variant_has_a_schedule_the_simulator_plays(toy):
    from chainermn_torus.algorithms import schedule
    calls = schedule.call_calls(schedule.Setup(toy.NAME, 4), [1003])
    assert [c.op for c in calls] == ['allreduce', 'reduce_scatter', 'compute', 'allgather',
                                     'allreduce', 'compute']
    assert calls[1].nbytes == 1000 * 4 and calls[4].nbytes == 3 * 4
    from chainermn_torus.simulation import platforms, simulate
    if not simulate.available():
        pytest.skip(simulate.why_unavailable())
    from chainermn_torus.planning import planner
    machine = platforms.fattree(8, 1, planner.PRESETS['ofp'])
    toy_s = simulate.simulate(machine, toy.NAME, 'mlp', timeout=120)['seconds']
    flat_s = simulate.simulate(machine, 'pure_allreduce', 'mlp', node_aware=False,
                               timeout=120)['seconds']
    assert 0 < toy_s < 2 * flat_s and toy_s > 0.3 * flat_s, (toy_s, flat_s)


@pytest.mark.slow
def test_toy_variant_in_the_benchmark_and_the_exact_mean_check(tmp_path):
    out = tmp_path / 'bench.json'
    toy = os.path.join(WORKERS, 'toy_variant.py')
    proc = run_mpi(3, [toy, 'chainermn_torus.bench.allreduce', '--model', 'mlp',
                       '--rounds', '2', '--warmup', '0', '--variants', 'rs_ag',
                       '--json', str(out)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [r['name'] for r in json.loads(out.read_text())['results']]
    assert 'rs_ag' in names, names
    proc = run_mpi(3, [toy, 'check_mean', 'rs_ag'], timeout=300)  # tests/mpi_workers/
    assert_ok(proc, 3)
