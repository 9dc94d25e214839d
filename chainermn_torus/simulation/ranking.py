"""The planner's candidates ranked by the simulator (``plan`` and ``auto`` use it where
SimGrid is installed; the alpha-beta model alone is the fallback).

The alpha-beta model (``planning.planner``) is cheap and orders the candidates; the
simulator replays the ``top`` best of them with link sharing, topology and the measured
synchronisation costs, and those rows come first, in simulated order. The platform follows
the network: the ``ofp`` preset is a fat tree, ``k`` a torus, a calibrated file a cluster of
private links to one switch (what calibrate can see).
"""
import concurrent.futures
import os

from chainermn_torus.algorithms import variants
from chainermn_torus.algorithms.gradient_sets import MODEL_BYTES
from chainermn_torus.planning import planner
from chainermn_torus.simulation import platforms
from chainermn_torus.simulation.simulate import simulate

__all__ = ['machine_for', 'rank_rows', 'TOP']

TOP = 4


def machine_for(net, nodes, R, topology=None):
    """The platform for ``net``: 'fattree', 'torus' or 'star' (default by network)."""
    if topology is None:
        topology = {'ofp': 'fattree', 'k': 'torus'}.get(net.name, 'star')
    if topology == 'fattree':
        return platforms.fattree(nodes, R, net)
    if topology == 'torus':
        return platforms.torus(nodes, R, net)
    if topology == 'star':
        # What calibrate sees of a cluster: a private link per node to one switch, a core
        # per rank (the emulated cluster's platform without its shared cores).
        return platforms.emulated(nodes, R, net, shared_cores=0)
    raise ValueError('chainermn_torus: topology must be fattree, torus or star, got '
                     f'{topology!r}')


_CACHE = {}  # (machine, algorithm, model, M, node_aware) -> seconds, for this process


def _seconds(args):
    machine, name, model, M, node_aware, timeout = args
    key = (machine, name, model, M, node_aware)
    if key not in _CACHE:
        _CACHE[key] = simulate(machine, name, model, M=M, node_aware=node_aware,
                               timeout=timeout)['seconds']
    return _CACHE[key]


def rank_rows(rows, nodes, R, model, net, top=TOP, topology=None, timeout=120):
    """``planner.plan`` rows with the best ``top`` replaced by simulated ones, first.

    The candidates are simulated side by side (one child process each, as many at once as
    this machine has cores) and remembered for the process: ``auto`` asks again for its
    clones and for every gradient size."""
    machine = machine_for(net, nodes, R, topology)
    chosen, rest = [], []
    for row in rows:
        if len(chosen) < top and variants.get(row['algorithm']).algorithm is not None:
            chosen.append(row)
        else:
            rest.append(row)
    jobs = []
    for r in chosen:
        name = r['algorithm']
        node_aware = variants.get(name).algorithm.node_aware
        jobs.append((machine, name, model, r['grid'][0] if r['grid'] else 1, node_aware,
                     timeout))
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(jobs), os.cpu_count() or 1))) \
            as pool:
        times = list(pool.map(_seconds, jobs))
    simulated = [dict(row, seconds=t, predicted=row['seconds'],
                      phases={'simulated': t, 'alpha-beta': row['seconds']}, source='simulated')
                 for row, t in zip(chosen, times)]
    simulated.sort(key=lambda r: r['seconds'])
    return simulated + rest


def model_or_bytes(model):
    """What ``simulate`` takes: a model name with real shapes, else a float32 count."""
    if model in MODEL_BYTES:
        return model
    return planner.model_bytes(model) // 4
