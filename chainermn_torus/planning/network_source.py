"""Where a job's network figures come from, identical on every rank, in this order: the
``network`` given (a preset name, a file written by ``chainermn-torus calibrate``, or a
``planner.Network`` itself; the caller resolves ``$CHAINERMN_TORUS_NETWORK`` into it); the
default file ``~/.config/chainermn-torus/network.json``; otherwise a short measurement at
start-up (ping-pong between rank 0 and a rank on another node, a few seconds at most),
broadcast from rank 0 so every rank plans with the same numbers."""
import os

from chainermn_torus.planning import planner
from chainermn_torus.planning.calibrate import calibrate

__all__ = ['job_network']


def job_network(mpi_comm, network=None, measure_timeout=10.0):
    """(Network, where it came from), identical on every rank (collective when measured);
    ``network``: a Network, or the name or file the settings gave (resolved by the caller)."""
    if isinstance(network, planner.Network):
        return network, f'given: {network.name}'
    choice = network
    if choice:
        return planner.load_network(choice), f'network {choice!r}'
    if os.path.lexists(planner.DEFAULT_NETWORK_FILE):
        return planner.load_network(planner.DEFAULT_NETWORK_FILE), planner.DEFAULT_NETWORK_FILE
    if mpi_comm.size == 1:
        return planner.PRESETS['ofp'], 'one rank: nothing to measure'
    data = calibrate(mpi_comm, large=4 << 20, reps=5, timeout=measure_timeout,
                     name='measured at start-up')
    data = mpi_comm.bcast(data, root=0)
    return planner.Network.from_dict(data), 'measured at start-up'
