"""The all-reduce times measured on a cluster, as rows the models are checked against.

``scripts/bench_emulated.sh`` leaves, per cluster shape K x R, ``allreduce-<model>-<K>x<R>
.json`` (``bench.allreduce``) and ``network-<K>x<R>.json`` (``calibrate``). Each benchmark
row that a variant with a model describes (``algorithms.variants.of_benchmark_row``) becomes
one row here; ChainerMN's ``naive`` and ``allreduce_1msg`` have none and are left out.
``bench.plan_check`` compares the planner with them, ``simulation.validate`` the simulator.
"""
import glob
import json
import os
import re

from chainermn_torus.algorithms import variants
from chainermn_torus.planning import planner

__all__ = ['measured_rows']


def measured_rows(folder):
    """(model, K, R, row name, variant, grid, bytes, measured seconds, network) of every
    benchmark row that has a model, from the folder's allreduce-/network- files."""
    for path in sorted(glob.glob(os.path.join(folder, 'allreduce-*-*x*.json'))):
        m = re.search(r'allreduce-(\w+)-(\d+)x(\d+)\.json$', path)
        model, K, R = m.group(1), int(m.group(2)), int(m.group(3))
        net = planner.load_network(os.path.join(folder, f'network-{K}x{R}.json'))
        with open(path) as f:
            report = json.load(f)
        for r in report['results']:
            found = variants.of_benchmark_row(r['name'])
            if found is None:
                continue
            algo, grid = found
            yield (model, K, R, r['name'], algo, grid, report['bytes'], r['median_ms'] / 1e3,
                   net)
