"""What ``auto`` predicts for a buffer size: the planner's rows, ranked again by the
simulator where it is installed, the same on every rank.

Where SimGrid is installed (``simulate='auto'``, the default, or ``$CHAINERMN_TORUS_SIMULATE``)
rank 0 simulates the planner's best few candidates (``simulation.ranking``: link sharing,
topology, measured synchronisation costs) while the others wait asleep, and shares the
ranking; a simulation that fails leaves the alpha-beta plan, and says why.
"""
from chainermn_torus.algorithms import variants
from chainermn_torus.planning import planner
from chainermn_torus.simulation import ranking, simulate as simulate_mod

__all__ = ['rows', 'SIMULATE_MIN_S']

SIMULATE_MIN_S = 1e-3  # plans predicted faster than this keep the alpha-beta choice


def rows(shape, nbytes, network, simulate, job, simulated=True):
    """(plan rows, why) for ``nbytes`` on the job ``shape``; ``simulated=False``: the
    planner's alone (the tuner measures anyway). Collective where it simulates."""
    if shape.size == 1 or not shape.uniform:
        flat = next(n for n in variants.planned() if not variants.get(n).grid)
        one = [{'algorithm': flat, 'grid': None, 'seconds': 0.0, 'phases': {}}]
        return one, 'one rank' if shape.size == 1 else 'nodes hold different rank counts'
    planned = planner.plan(shape.nodes, shape.ranks_per_node, nbytes, network)
    if simulated and simulate is not False:  # 'auto', or True (on)
        return _simulated(planned, shape, nbytes, network, simulate, job)
    return planned, 'planner'


def _simulated(planned, shape, nbytes, network, simulate, job):
    """Rank 0 simulates the best candidates; every rank gets its rows and reason.

    Calls the planner puts under SIMULATE_MIN_S are latencies the alpha-beta model already
    has, and not worth a simulation (about a second of rank 0's start): every rank sees the
    same rows, so every rank skips alike, without a message."""
    if planned[0]['seconds'] < SIMULATE_MIN_S:
        return planned, f'planner; under {SIMULATE_MIN_S * 1e3:g} ms, not simulated'
    out = None
    if shape.rank == 0:
        if not simulate_mod.available():
            out = (planned, 'planner' if simulate == 'auto' else
                   'planner; simulate=on but ' + simulate_mod.why_unavailable())
        else:
            try:
                out = (ranking.rank_rows(planned, shape.nodes, shape.ranks_per_node,
                                         nbytes // 4, network), 'simulated')
            except (RuntimeError, ValueError, OSError) as e:
                out = (planned, f'planner; the simulation failed: {e}')
    job.wait_for_root()
    return job.share(out)
