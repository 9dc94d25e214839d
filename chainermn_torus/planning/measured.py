"""The all-reduce times measured on a cluster, as rows the models are checked against.

``scripts/bench_emulated.sh`` leaves, per cluster shape K x R, ``allreduce-<model>-<K>x<R>
.json`` (``bench.allreduce``) and ``network-<K>x<R>.json`` (``calibrate``). Each benchmark
row named after a variant with a model (``algorithms.variants``) becomes one row here.
ChainerMN's ``naive`` and ``allreduce_1msg`` have no model and are left out; MPICH's pure
all-reduce is node-aware by default, so the ``pure_allreduce`` row is that variant's
(``pure_allreduce_node_aware``). ``bench.plan_check`` compares the planner with them,
``simulation.validate`` the simulator.
"""
import glob
import json
import os
import re

from chainermn_torus.algorithms import variants
from chainermn_torus.planning import planner

__all__ = ['measured_rows']

_ROW = re.compile(r'^(\w+)\((\d+)x(\d+)\)$')  # a grid variant's row: name(MxN)


def _variant_of(name):
    """(variant, grid) a benchmark row measured, or None where no model describes it."""
    if name == 'pure_allreduce':
        return 'pure_allreduce_node_aware', None
    g = _ROW.match(name)
    if not g or g.group(1) not in variants.VARIANTS:
        return None
    if variants.get(g.group(1)).algorithm is None:
        return None
    return g.group(1), (int(g.group(2)), int(g.group(3)))


def measured_rows(folder):
    """(model, K, R, row name, variant, grid, bytes, measured seconds, network) of every
    benchmark row that has a model, from the folder's allreduce-/network- files."""
    for path in sorted(glob.glob(os.path.join(folder, 'allreduce-*-*x*.json'))):
        m = re.search(r'allreduce-(\w+)-(\d+)x(\d+)\.json$', path)
        model, K, R = m.group(1), int(m.group(2)), int(m.group(3))
        net = planner.load_network(os.path.join(folder, 'network-{}x{}.json'.format(K, R)))
        with open(path) as f:
            report = json.load(f)
        for r in report['results']:
            found = _variant_of(r['name'])
            if found is None:
                continue
            algo, grid = found
            yield (model, K, R, r['name'], algo, grid, report['bytes'], r['median_ms'] / 1e3,
                   net)
