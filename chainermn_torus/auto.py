"""auto: the algorithm and grid the planner predicts fastest, chosen when the size is known.

The choices, from the first call of each size to the exit, are ``tuning.lifecycle.Choices``'s
(the prediction: ``tuning.prediction``); this communicator holds none of its own, makes the
candidates on its MPI communicator and runs each call on the one the choices give.

The network figures come from ``planning.network_source`` (the option, the variable, the
default file, else a short measurement at start-up). The first gradient call of a given size
plans for that many bytes (every rank computes the same plan), creates that communicator on
this one's MPI communicator, and logs the choice and the runner-up on rank 0.

Where SimGrid is installed (``simulate='auto'``, the default, or
``$CHAINERMN_TORUS_SIMULATE``), rank 0 then simulates the planner's best few candidates
(``simulation.ranking``: link sharing, topology, measured synchronisation costs) and broadcasts
the ranking; a simulation that fails leaves the alpha-beta plan, and says so.

With ``tune='on'`` (``--tune on``, ``$CHAINERMN_TORUS_TUNE``) the prediction only proposes:
the gradient calls of the first iterations run the best few candidates in turn (the best of
each communicator kind, the next best, and the predicted best with other segment sizes),
timed from a barrier, the slowest rank's time counting, several rounds interleaved, the
clearly slower dropped (``tuning.trials``); then every later call runs the winner. Every
candidate computes the exact mean of the same gradients, so training goes on meanwhile (at
P > 2 two candidates' means can differ by the rounding of another summation order). Rank 0
reports every candidate's time, the prediction's miss and what the measuring cost beyond
the winner's time (the stages and the decision: ``tuning.tuner``), and remembers the
choice in a file for the job shape (``tuning.memory``): the next job of that shape starts
with it and measures nothing. Buffers under ``TUNE_MIN_BYTES`` and one-shot ``mean_array``
calls keep the prediction.
"""
import collections
import os

from mpi4py import MPI

from chainermn_torus.communicators import _packing, create_variant
from chainermn_torus.communicators._progress import Progress
from chainermn_torus.communicators.interface import Communicator
from chainermn_torus.errors import ConfigError
from chainermn_torus.planning.network_source import job_network
from chainermn_torus.runtime import agree
from chainermn_torus.tuning import memory
from chainermn_torus.tuning.collective_steps import MpiJob, Shape
from chainermn_torus.tuning.lifecycle import TUNE_MIN_BYTES, Choices, TuneInputs

__all__ = ['AutoCommunicator', 'TUNE_MIN_BYTES']


class AutoCommunicator(Communicator):
    """Options: ``network`` (preset or file), ``segment_size``, ``allreduce_grad_dtype``,
    ``measure_timeout`` (seconds a start-up ping-pong may wait for its peer), ``simulate``,
    ``tune`` (off: the predicted choice; on: measure on the first gradient calls, or take
    the choice a job of the same shape remembered; again: measure and replace it) and
    ``tune_dir`` (where choices are remembered).

    It holds no choice of its own: ``self.tuning`` (``tuning.lifecycle.Choices``) does, and
    every gradient call runs on the communicator it gives."""

    name = 'auto'

    def __init__(self, mpi_comm=None, network=None, segment_size=None,
                 allreduce_grad_dtype=None, measure_timeout=10.0, simulate=None, tune=None,
                 tune_dir=None, _remembered=None, settings=None, exact_sum=None, **made_by):
        super().__init__(mpi_comm, segment_size, allreduce_grad_dtype, settings,
                         exact_sum=exact_sum, **made_by)
        self._calls = 0
        self._options.update(network=network, measure_timeout=measure_timeout,
                             simulate=simulate, tune=tune, tune_dir=tune_dir)
        known = self.settings
        tune = known.pick('tune', tune, 'tune')[0]
        nodes = self.mpi_comm.allgather(self.intra_size)
        shape = Shape(self.size, self.rank, self.intra_size, self.inter_size,
                      len(set(nodes)) == 1)
        net, source = job_network(self.mpi_comm, known['network'] if network is None
                                  else network, measure_timeout)
        settings = TuneInputs(
            network=net, network_source=source,
            simulate=known.pick('simulate', simulate, 'simulate')[0], tune=tune,
            tune_dir=self._tune_dir(tune_dir) if tune != 'off' else None,
            segment_bytes=self.segment_bytes,
            segment_given=segment_size is not None or
            known.source('segment_bytes') is not None,
            mpi_library=MPI.Get_library_version())
        self.tuning = Choices(shape, settings, MpiJob(self.mpi_comm), self._make,
                              remembered=_remembered)

    def _tune_dir(self, given):
        """The folder of remembered choices, checked by rank 0 now, not at the end."""
        value, source = self.settings.pick('tune_dir', given, 'tune_dir')
        where = memory.folder(value, os.environ.get('XDG_CACHE_HOME'))
        problem = None
        if self.rank == 0:
            source = source or 'the tuning folder'
            try:
                memory.check_folder(where, source)
            except ConfigError as e:
                problem = str(e)
        agree.raise_everywhere(self.mpi_comm, problem, lambda bad: ConfigError(bad[0][1]))
        return where

    def _make(self, key):
        """The communicator of candidate ``key`` on this one's MPI communicator: the
        variants table's class and options (shm pinned off for rsaa/rsap, on for 'shm')."""
        algorithm, grid, segment = key
        comm = create_variant(algorithm, self.mpi_comm, grid=grid,
                              segment_size=self._options['segment_size']
                              if segment is None else segment,
                              allreduce_grad_dtype=self._options['allreduce_grad_dtype'],
                              exact_sum=self.exact_sum,
                              settings=self.settings, progress=self.progress)
        return comm

    @property
    def network(self):
        return self.tuning.settings.network

    @property
    def network_source(self):
        return self.tuning.settings.network_source

    # --- the gradient calls -------------------------------------------------------------------
    def _signature(self, named):
        """The memory signature: the arrays in name order, so that overlap's backward order
        finds what a job without it tuned."""
        return lambda: memory.signature(sorted((n, p.data.shape, p.data.dtype)
                                               for n, p in named), self._transfer_dtype(named))

    def _transfer_dtype(self, named):
        if self.allreduce_grad_dtype is not None:
            return self.allreduce_grad_dtype
        return _packing.transfer_dtype([p.data.dtype for _, p in named])

    def _bytes(self, named):
        return sum(p.data.size for _, p in named) * self._transfer_dtype(named).itemsize

    def mean_grad_in_slot(self, model, zero_fill=False, slot=0):
        named = _packing.grad_params(model, zero_fill)
        self.tuning.call(self._bytes(named), self._signature(named),
                         lambda inner: inner.mean_grad_in_slot(model, zero_fill, slot))
        self._calls += 1

    def mean_grads_by_bucket(self, named, bounds, ready):
        """overlap=True: the buckets go through the communicator chosen for this size
        (``Choices.for_buckets``)."""
        inner = self.tuning.for_buckets(self._bytes(named), self._signature(named))
        buf = inner.mean_grads_by_bucket(named, bounds, ready)
        self._calls += 1
        return buf

    def mean_array(self, array):
        # One-shot calls (benchmarks, tests): the predicted choice, never measured.
        return self.tuning.predicted(array.nbytes).mean_array(array)

    def set_config(self, name, value=True, **kwargs):
        super().set_config(name, value, **kwargs)
        if name == 'allreduce_grad_dtype':  # the communicators already chosen send it too
            for comm in self.tuning.made.values():
                comm.set_config(name, value, **kwargs)

    def clone(self, poll_interval=None):
        # The same figures (not measured again) and the same choices tuned in this job.
        twin = AutoCommunicator(mpi_comm=self.mpi_comm.Dup(), progress=Progress(poll_interval),
                                **dict(self.remade_options(), network=self.network,
                                       _remembered=self.tuning.remembered))
        twin.tuning.settings = twin.tuning.settings._replace(
            network_source=self.network_source)
        return twin

    @property
    def calls(self):
        return self._calls

    @property
    def timings(self):
        # A part no inner communicator has timed yet reads 0, as on the others.
        total = collections.defaultdict(float)
        for c in self.tuning.made.values():
            for k, v in c.timings.items():
                total[k] += v
        return total

    def finalize(self):
        self.tuning.finalize()
        super().finalize()  # no engine, no grid of its own

    def describe(self):
        s = self.tuning.settings
        return (f'auto on P = {self.size} ({self.inter_size} nodes x {self.intra_size} ranks), '
                f'network {s.network.name} [{s.network_source}], '
                f'tune {s.tune}: {self.tuning.describe()}')
