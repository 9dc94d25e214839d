"""auto: the algorithm and grid the planner predicts fastest, chosen when the size is known.

The network figures come from, in this order: the ``network`` option (a preset name or a
file written by ``chainermn-torus calibrate``); ``$CHAINERMN_TORUS_NETWORK``; the default
file ``~/.config/chainermn-torus/network.json``; otherwise a short measurement at start-up
(ping-pong between rank 0 and a rank on another node, a few seconds at most), broadcast from
rank 0 so every rank plans with the same numbers. The first gradient call of a given size
plans for that many bytes (every rank computes the same plan), creates that communicator on
this one's MPI communicator, and logs the choice and the runner-up on rank 0.

Where SimGrid is installed (``simulate='auto'``, the default, or
``$CHAINERMN_TORUS_SIMULATE``), rank 0 then simulates the planner's best few candidates
(``simulation.plan``: link sharing, topology, measured synchronisation costs) and broadcasts
the ranking; a simulation that fails leaves the alpha-beta plan, and says so.
"""
import os

from chainermn_torus import config
from chainermn_torus.algorithms import variants
from chainermn_torus.communicators import _packing, create_variant
from chainermn_torus.communicators._base import TorusCommunicatorBase
from chainermn_torus.communicators._progress import Progress
from chainermn_torus.planning import planner
from chainermn_torus.planning.calibrate import calibrate
from chainermn_torus.runtime import report
from chainermn_torus.simulation import plan as simplan, simulate

__all__ = ['AutoCommunicator']

SIMULATE_MIN_S = 1e-3  # plans predicted faster than this keep the alpha-beta choice


def _network(mpi_comm, network, measure_timeout):
    """(Network, where it came from), identical on every rank."""
    choice = config.value('network', network)[0]
    if choice:
        return planner.load_network(choice), 'network {!r}'.format(choice)
    if os.path.isfile(planner.DEFAULT_NETWORK_FILE):
        return planner.load_network(planner.DEFAULT_NETWORK_FILE), planner.DEFAULT_NETWORK_FILE
    if mpi_comm.size == 1:
        return planner.PRESETS['ofp'], 'one rank: nothing to measure'
    data = calibrate(mpi_comm, large=4 << 20, reps=5, timeout=measure_timeout,
                     name='measured at start-up')
    data = mpi_comm.bcast(data, root=0)
    return planner.Network.from_dict(data), 'measured at start-up'


class AutoCommunicator(TorusCommunicatorBase):
    """Options: ``network`` (preset or file), ``segment_size``, ``allreduce_grad_dtype``,
    ``measure_timeout`` (seconds a start-up ping-pong may wait for its peer)."""

    name = 'auto'
    uses_grid = False

    def __init__(self, mpi_comm=None, network=None, segment_size=None,
                 allreduce_grad_dtype=None, measure_timeout=10.0, simulate=None, _net=None):
        super(AutoCommunicator, self).__init__(mpi_comm, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        self._options.update(network=network, measure_timeout=measure_timeout,
                             simulate=simulate)
        self.simulate = config.value('simulate', simulate, 'simulate')[0]
        nodes = self.mpi_comm.allgather(self.intra_size)
        self.uniform = len(set(nodes)) == 1
        if _net is None:
            _net = _network(self.mpi_comm, network, measure_timeout)
        self.network, self.network_source = _net
        self._inner = {}     # (algorithm, grid) -> communicator
        self._chosen = {}    # bytes -> (algorithm, grid)
        self.choices = []    # log of (bytes, plan rows) for the user and tests

    def _choose(self, nbytes):
        key = self._chosen.get(nbytes)
        if key is None:
            if self.size == 1 or not self.uniform:
                flat = next(n for n in variants.planned() if not variants.get(n).grid)
                rows = [{'algorithm': flat, 'grid': None, 'seconds': 0.0, 'phases': {}}]
                why = 'one rank' if self.size == 1 else 'nodes hold different rank counts'
            else:
                rows = planner.plan(self.inter_size, self.intra_size, nbytes, self.network)
                why = 'planner'
                if self.simulate is not False:  # 'auto', or True (on)
                    rows, why = self._simulated(rows, nbytes)
            best = rows[0]
            key = self._chosen[nbytes] = (best['algorithm'], best['grid'])
            self.choices.append((nbytes, rows))
            runner = rows[1] if len(rows) > 1 else None
            report.say('{:.1f} MB on {} nodes x {} ranks -> {}{} ({}: {:.2f} ms predicted{}; '
                       'network: {} [{}])'.format(
                           nbytes / 1e6, self.inter_size, self.intra_size, best['algorithm'],
                           '' if best['grid'] is None else ' {}x{}'.format(*best['grid']), why,
                           best['seconds'] * 1e3,
                           '' if runner is None else ', next {} {:.2f} ms'.format(
                               runner['algorithm'] + ('' if runner['grid'] is None else
                                                      ' {}x{}'.format(*runner['grid'])),
                               runner['seconds'] * 1e3),
                           self.network.name, self.network_source),
                       self.rank, prefix='chainermn_torus auto: ')
        return self._communicator(key)

    def _simulated(self, rows, nbytes):
        """Rank 0 simulates the best candidates; every rank gets its rows and reason.

        Calls the planner puts under SIMULATE_MIN_S are latencies the alpha-beta model
        already has, and not worth a simulation (about a second of rank 0's start): every
        rank sees the same rows, so every rank skips alike, without a message."""
        if rows[0]['seconds'] < SIMULATE_MIN_S:
            return rows, 'planner; under {:g} ms, not simulated'.format(SIMULATE_MIN_S * 1e3)
        out = None
        if self.rank == 0:
            if not simulate.available():
                out = (rows, 'planner' if self.simulate == 'auto' else
                       'planner; simulate=on but ' + simulate.why_unavailable())
            else:
                try:
                    elems = nbytes // 4
                    out = (simplan.rank_rows(rows, self.inter_size, self.intra_size, elems,
                                             self.network), 'simulated')
                except (RuntimeError, ValueError, OSError) as e:
                    out = (rows, 'planner; the simulation failed: {}'.format(e))
        return self.mpi_comm.bcast(out, root=0)

    def _communicator(self, key):
        comm = self._inner.get(key)
        if comm is None:
            algorithm, grid = key
            # The planner's names are the variants table's: the row says which class and
            # options (shm pinned off for rsaa/rsap, on for 'shm').
            comm = create_variant(algorithm, self.mpi_comm, grid=grid,
                                   segment_size=self._options['segment_size'],
                                   allreduce_grad_dtype=self._options['allreduce_grad_dtype'])
            comm.progress = self.progress
            self._inner[key] = comm
        return comm

    def _bytes(self, named):
        dtype = _packing.transfer_dtype([p.data.dtype for _, p in named])
        if self.allreduce_grad_dtype is not None:
            dtype = self.allreduce_grad_dtype
        return sum(p.data.size for _, p in named) * dtype.itemsize

    def mean_grad_in_slot(self, model, zero_fill=False, slot=0):
        named = _packing.grad_params(model, zero_fill)
        inner = self._choose(self._bytes(named))
        inner.mean_grad_in_slot(model, zero_fill, slot)
        self.calls += 1

    def mean_array(self, array):
        return self._choose(array.nbytes).mean_array(array)

    def set_config(self, name, value=True, **kwargs):
        super(AutoCommunicator, self).set_config(name, value, **kwargs)
        if name == 'allreduce_grad_dtype':  # the communicators already chosen send it too
            for comm in self._inner.values():
                comm.set_config(name, value, **kwargs)

    def clone(self, poll_interval=None):
        opts = dict(self._options)
        twin = AutoCommunicator(mpi_comm=self.mpi_comm.Dup(), _net=(
            self.network, self.network_source), **opts)
        twin.progress = Progress(poll_interval)
        return twin

    def split(self, color, key):
        opts = dict(self._options)
        return AutoCommunicator(mpi_comm=self.mpi_comm.Split(color, key), **opts)

    @property
    def timings(self):
        total = {}
        for c in self._inner.values():
            for k, v in c.timings.items():
                total[k] = total.get(k, 0.0) + v
        return total

    def finalize(self):
        for c in self._inner.values():
            c.finalize()
        self._inner = {}
        super(AutoCommunicator, self).finalize()

    def describe(self):
        chosen = ', '.join('{:.1f} MB -> {}{}'.format(b / 1e6, a, '' if g is None else
                                                      ' {}x{}'.format(*g))
                           for b, (a, g) in self._chosen.items()) or 'nothing chosen yet'
        return 'auto on P = {} ({} nodes x {} ranks), network {} [{}]: {}'.format(
            self.size, self.inter_size, self.intra_size, self.network.name,
            self.network_source, chosen)
