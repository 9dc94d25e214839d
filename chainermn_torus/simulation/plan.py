"""The planner's candidates ranked by the simulator (``plan`` and ``auto`` use it where
SimGrid is installed; the alpha-beta model alone is the fallback).

The alpha-beta model (``planning.planner``) is cheap and orders the candidates; the
simulator replays the ``top`` best of them with link sharing, topology and the measured
synchronisation costs, and those rows come first, in simulated order. The platform follows
the network: the ``ofp`` preset is a fat tree, ``k`` a torus, a calibrated file a cluster of
private links to one switch (what calibrate can see).
"""
from chainermn_torus.planning import planner
from chainermn_torus.simulation import platforms

__all__ = ['machine_for', 'rank_rows', 'TOP']

TOP = 4
# planner algorithm name -> (simulated algorithm, node-aware library all-reduce)
_SIMULATED = {'pure_allreduce': ('pure_allreduce', False),
              'pure_allreduce_node_aware': ('pure_allreduce', True),
              'rsaa': ('rsaa', True), 'rsap': ('rsap', True), 'shm': ('shm', True)}


def machine_for(net, nodes, R, topology=None):
    """The platform for ``net``: 'fattree', 'torus' or 'star' (default by network)."""
    if topology is None:
        topology = {'ofp': 'fattree', 'k': 'torus'}.get(net.name, 'star')
    if topology == 'fattree':
        return platforms.fattree(nodes, R, net)
    if topology == 'torus':
        return platforms.torus(nodes, R, net)
    if topology == 'star':
        return platforms.emulated(nodes, R, net, shared_cores=0)._replace(kind='emulated')
    raise ValueError('chainermn_torus: topology must be fattree, torus or star, got '
                     '{!r}'.format(topology))


def rank_rows(rows, nodes, R, model, net, top=TOP, topology=None, timeout=120):
    """``planner.plan`` rows with the best ``top`` replaced by simulated ones, first."""
    from chainermn_torus.simulation.simulate import simulate
    machine = machine_for(net, nodes, R, topology)
    simulated, rest, seen = [], [], 0
    for row in rows:
        algo = row['algorithm']
        if seen >= top or algo not in _SIMULATED:
            rest.append(row)
            continue
        seen += 1
        name, node_aware = _SIMULATED[algo]
        M = row['grid'][0] if row['grid'] else 1
        res = simulate(machine, name, model, M=M, node_aware=node_aware, timeout=timeout)
        simulated.append(dict(row, seconds=res['seconds'], predicted=row['seconds'],
                              phases={'simulated': res['seconds'],
                                      'alpha-beta': row['seconds']},
                              source='simulated'))
    simulated.sort(key=lambda r: r['seconds'])
    return simulated + rest


def model_or_bytes(model):
    """What ``simulate`` takes: a model name with real shapes, else a float32 count."""
    if model in planner.MODEL_BYTES:
        return model
    return planner.model_bytes(model) // 4
