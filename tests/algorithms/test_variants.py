"""The variants table (algorithms.variants) and what reads it: planner, auto, benchmark."""
import inspect

import pytest

from chainermn_torus.algorithms import variants
from chainermn_torus.algorithms.base import Algorithm
from chainermn_torus import communicators
from chainermn_torus.planning import planner


def test_every_row_has_an_algorithm_object_or_none_and_planned_rows_are_modelled():
    for v in variants.VARIANTS.values():
        assert v.algorithm is None or isinstance(v.algorithm, Algorithm), v.name
        assert not (v.plan and v.algorithm is None), v.name
    planned = variants.planned()
    assert planned[0] == 'pure_allreduce'
    assert 'rsap_notify' not in planned and 'rsap_notify' in variants.simulated()
    assert 'rsap_acc' not in variants.simulated()


def test_every_row_names_a_registered_communicator_and_options_it_takes():
    for v in variants.VARIANTS.values():
        assert v.communicator in communicators.names(), v
        # Options are checked against the constructor without importing MPI-backed
        # modules' side effects: the signature is enough.
        from chainermn_torus.communicators import communicator_class
        takes = inspect.signature(communicator_class(v.communicator).__init__).parameters
        assert set(v.options) <= set(takes), (v.name, v.options)
        assert ('grid' in takes) == v.grid, v.name


def test_benchmark_rows_come_from_the_table():
    from chainermn_torus.bench import allreduce
    assert allreduce.VARIANTS == variants.benchmarked(asked=True)
    assert 'rsap_pscw' in allreduce.VARIANTS and 'rsap_pscw' not in allreduce.DEFAULT_VARIANTS
    # The reference row of ours is in every run, whatever --variants says.
    assert allreduce.ALWAYS == ['pure_allreduce'] and 'pure_allreduce' in allreduce.VARIANTS


def test_plan_rows_are_table_names_and_every_planned_variant_appears():
    rows = planner.plan(2, 2, planner.MODEL_BYTES['mlp'], planner.PRESETS['ofp'])
    assert {r['algorithm'] for r in rows} == set(variants.planned())


def test_unknown_or_unmodelled_variant_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="unknown algorithm variant 'ring'.*rsap_notify"):
        planner.predict('ring', 2, 2, 1000, planner.PRESETS['ofp'])
    with pytest.raises(ValueError, match="no cost model for 'rsap_acc'.*pure_allreduce"):
        planner.predict('rsap_acc', 2, 2, 1000, planner.PRESETS['ofp'], (2, 2))


def test_variants_command_prints_every_row():
    from conftest import run_cli
    proc = run_cli(['variants'])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 + len(variants.VARIANTS)
    assert any(line.split()[:2] == ['rsap_notify', "rsap(sync='notify')"] for line in lines), lines
