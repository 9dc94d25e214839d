"""A variant added through the public seams only (tests/mpi_workers/toy_variant.py: an
Algorithm with its schedule and cost, an MPI class, one table row) reaches the planner, the
simulator, the benchmark and the exact-mean check without a line of the package changed."""
import json
import os
import sys

import pytest

from conftest import ROOT, assert_ok, run_mpi
import package_probes

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


def test_toy_communicator_is_in_every_place_that_lists_communicators(toy):
    import argparse
    from chainermn_torus import _registry, command_line, communicators, run
    from chainermn_torus.algorithms import variants
    from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES
    from chainermn_torus.communicators import capabilities
    from chainermn_torus.errors import ConfigError
    from chainermn_torus.optimizers import update_modes
    from chainermn_torus.planning import planner
    from chainermn_torus.tuning import candidates
    # The factory's names, and the launcher's --communicator: accepted, and in its help.
    assert toy.NAME in _registry.names() and toy.NAME in _registry.valid_names()
    parser = run.build_parser()
    assert parser.parse_args(['--communicator', toy.NAME, 'x.py']).communicator == toy.NAME
    assert toy.NAME in ' '.join(parser.format_help().split())
    shared = argparse.ArgumentParser()
    command_line.add_arguments(shared)
    assert toy.NAME in shared.format_help()
    # The docs' table (docs/communicators.md is that table for the package's own), with
    # what its class declares: everything of the base's.
    row = [r for r in communicators.table().splitlines() if r.startswith('| `rs_ag` |')]
    assert row and 'the tests\' plugin' in row[0] and 'buckets' in row[0]
    assert capabilities.of(object()) is capabilities.FOREIGN
    assert communicators.communicator_class(toy.NAME).capabilities == capabilities.OURS
    # auto's candidates: the planner's rows, one kind each.
    rows = planner.plan(4, 2, MODEL_BYTES['resnet50'], planner.PRESETS['ofp'])
    assert toy.NAME in variants.planned()
    assert toy.NAME in [k[0] for k in candidates.kinds(rows, node_grid=(2, 4))]
    # The messages that name our communicators: the overlap refusal of ChainerMN's.
    with pytest.raises(ConfigError) as e:
        update_modes.Overlap(object(), True, None, None)
    assert toy.NAME in str(e.value) and 'auto' in str(e.value)
    # Taken out again, it is in none of them.
    toy.unregister()
    assert toy.NAME not in _registry.valid_names()
    assert toy.NAME not in communicators.table() and toy.NAME not in variants.planned()


def test_the_docs_table_is_the_registry_and_each_class_declares_its_capabilities():
    from chainermn_torus import _registry, communicators
    from chainermn_torus.communicators import capabilities
    with open(os.path.join(ROOT, 'docs', 'communicators.md')) as f:
        assert communicators.table() in f.read()
    for name in _registry.names():
        cls = communicators.communicator_class(name)
        assert cls.name == name and capabilities.of(cls.__new__(cls)).ours


def test_no_communicator_capability_is_probed_with_hasattr():
    # optimizers/ and launch/ ask capabilities.of(comm), never hasattr/getattr on one.
    import ast
    for part in ('optimizers', 'launch'):
        folder = os.path.join(ROOT, 'chainermn_torus', part)
        for name in sorted(os.listdir(folder)):
            if not name.endswith('.py'):
                continue
            tree = ast.parse(open(os.path.join(folder, name)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, 'id', None) in (
                        'hasattr', 'getattr') and node.args:
                    target = ast.unparse(node.args[0])
                    assert 'comm' not in target, (part, name, node.lineno, target)


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
    calls = package_probes.call_calls(schedule.Setup(toy.NAME, 4), [1003])
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
