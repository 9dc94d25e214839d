"""auto: the algorithm and grid the planner predicts fastest, chosen when the size is known.

The network figures come from ``planning.network_source`` (the option, the variable, the
default file, else a short measurement at start-up). The first gradient call of a given size
plans for that many bytes (every rank computes the same plan), creates that communicator on
this one's MPI communicator, and logs the choice and the runner-up on rank 0.

Where SimGrid is installed (``simulate='auto'``, the default, or
``$CHAINERMN_TORUS_SIMULATE``), rank 0 then simulates the planner's best few candidates
(``simulation.plan``: link sharing, topology, measured synchronisation costs) and broadcasts
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
import atexit
import collections
import sys
import time

import numpy
from mpi4py import MPI

from chainermn_torus import config
from chainermn_torus.algorithms import variants
from chainermn_torus.communicators import _packing, create_variant
from chainermn_torus.communicators.interface import Communicator
from chainermn_torus.communicators._progress import Progress
from chainermn_torus.planning import planner
from chainermn_torus.planning.network_source import job_network
from chainermn_torus.runtime import report
from chainermn_torus.simulation import plan as simplan, simulate
from chainermn_torus.tuning import candidates, memory
from chainermn_torus.tuning.tuner import Tuner

__all__ = ['AutoCommunicator']

SIMULATE_MIN_S = 1e-3  # plans predicted faster than this keep the alpha-beta choice
WAIT_POLL_S = 0.005    # how often ranks waiting for rank 0's simulation look
EXIT_WAIT_S = 5.0      # at exit, how long a rank waits for the others before freeing


# Calls below this many bytes are latency-bound: the planner's alpha terms rank them well,
# and a measured difference would be within the noise of one call.
TUNE_MIN_BYTES = 256 << 10


class AutoCommunicator(Communicator):
    """Options: ``network`` (preset or file), ``segment_size``, ``allreduce_grad_dtype``,
    ``measure_timeout`` (seconds a start-up ping-pong may wait for its peer), ``simulate``,
    ``tune`` (off: the predicted choice; on: measure on the first gradient calls, or take
    the choice a job of the same shape remembered; again: measure and replace it) and
    ``tune_dir`` (where choices are remembered)."""

    name = 'auto'

    def __init__(self, mpi_comm=None, network=None, segment_size=None,
                 allreduce_grad_dtype=None, measure_timeout=10.0, simulate=None, tune=None,
                 tune_dir=None):
        super(AutoCommunicator, self).__init__(mpi_comm, segment_size=segment_size,
                                               allreduce_grad_dtype=allreduce_grad_dtype)
        self._options.update(network=network, measure_timeout=measure_timeout,
                             simulate=simulate, tune=tune, tune_dir=tune_dir)
        self.simulate = config.value('simulate', simulate, 'simulate')[0]
        self.tune = config.value('tune', tune, 'tune')[0]
        self.tune_dir = memory.folder(tune_dir) if self.tune != 'off' else None
        nodes = self.mpi_comm.allgather(self.intra_size)
        self.uniform = len(set(nodes)) == 1
        self.network, self.network_source = job_network(self.mpi_comm, network,
                                                        measure_timeout)
        self._inner = {}     # (algorithm, grid, segment or None) -> communicator
        self._chosen = {}    # bytes -> (algorithm, grid, segment or None)
        self._tuning = {}    # bytes -> (Tuner, memory key), while measuring
        self._retire = {}    # bytes -> [calls left, keys]: candidates freed after 2 calls
        # Choices tuned in this process, shared with clones (double buffering's thread):
        # file name -> (choice, figures); read on rank 0 only, like the files.
        self._memory = {}
        self.choices = []    # log of (bytes, plan rows) for the user and tests
        self.tuned = {}      # bytes -> the tuning's report (figures), for the user and tests
        self._exit_registered = False

    # --- the predicted choice ---------------------------------------------------------------
    def _rows(self, nbytes, simulated=True):
        """(plan rows, why), the same on every rank; ``simulated=False``: the planner's
        alone (the tuner measures anyway)."""
        if self.size == 1 or not self.uniform:
            flat = next(n for n in variants.planned() if not variants.get(n).grid)
            rows = [{'algorithm': flat, 'grid': None, 'seconds': 0.0, 'phases': {}}]
            return rows, 'one rank' if self.size == 1 else 'nodes hold different rank counts'
        rows = planner.plan(self.inter_size, self.intra_size, nbytes, self.network)
        if simulated and self.simulate is not False:  # 'auto', or True (on)
            return self._simulated(rows, nbytes)
        return rows, 'planner'

    def _choose(self, nbytes):
        key = self._chosen.get(nbytes)
        if key is None:
            rows, why = self._rows(nbytes)
            best = rows[0]
            key = self._chosen[nbytes] = (best['algorithm'], best['grid'], None)
            self.choices.append((nbytes, rows))
            runner = rows[1] if len(rows) > 1 else None
            report.say('{:.1f} MB on {} nodes x {} ranks -> {} ({}: {:.2f} ms predicted{}; '
                       'network: {} [{}])'.format(
                           nbytes / 1e6, self.inter_size, self.intra_size,
                           candidates.label(key), why, best['seconds'] * 1e3,
                           '' if runner is None else ', next {} {:.2f} ms'.format(
                               candidates.label((runner['algorithm'], runner['grid'], None)),
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
        # The others wait asleep: spinning in a broadcast, they took the cores from the
        # simulation (on this 2-core machine with 4 ranks the first call took 6-7 s).
        waiting = self.mpi_comm.Ibarrier()
        while not waiting.Test():
            time.sleep(WAIT_POLL_S)
        return self.mpi_comm.bcast(out, root=0)

    def _communicator(self, key):
        comm = self._inner.get(key)
        if comm is None:
            algorithm, grid, segment = key
            # The planner's names are the variants table's: the row says which class and
            # options (shm pinned off for rsaa/rsap, on for 'shm').
            comm = create_variant(algorithm, self.mpi_comm, grid=grid,
                                   segment_size=self._options['segment_size']
                                   if segment is None else segment,
                                   allreduce_grad_dtype=self._options['allreduce_grad_dtype'])
            comm.progress = self.progress
            self._inner[key] = comm
        return comm

    # --- the measured choice ----------------------------------------------------------------
    def _tunes(self, nbytes):
        return (self.tune != 'off' and self.size > 1 and self.uniform
                and nbytes >= TUNE_MIN_BYTES)

    def _tuned_call(self, named, nbytes, run):
        """Run one gradient call with the candidate the tuner gives (or the choice)."""
        if nbytes not in self._chosen and nbytes not in self._tuning:
            self._start(named, nbytes)  # a remembered choice, or the tuning (decided at
        key = self._chosen.get(nbytes)  # once where there is one candidate in all)
        if key is not None:
            run(self._communicator(key))
            self._retire_losers(nbytes)
            return
        tuner = self._tuning[nbytes][0]
        key = tuner.next_key()
        t0 = time.perf_counter()
        comm = self._communicator(key)  # the first time: made now (counted)
        made = time.perf_counter() - t0
        self.mpi_comm.Barrier()  # each call timed from a common start: no rank's lateness
        t1 = time.perf_counter()
        run(comm)
        tuner.record(key, made, time.perf_counter() - t1)
        if tuner.done:
            self._decided(nbytes)

    def _memo(self, named, nbytes):
        """The memory key of this call: the arrays in name order, so that overlap's
        backward order finds what a job without it tuned."""
        return memory.Key(self.intra_size, self.inter_size, MPI.Get_library_version(),
                          memory.signature(sorted((n, p.data.shape, p.data.dtype)
                                                  for n, p in named),
                                           self._transfer_dtype(named)), nbytes)

    def _remembered(self, memo, nbytes):
        """The choice tuned earlier in this job or remembered in a file, or None. Rank 0
        looks; every rank gets its answer (collective)."""
        found = None
        if self.rank == 0:
            found = self._memory.get(memo.file_name())
            source = 'tuned earlier in this job'
            if found is None and self.tune == 'on':
                choice, figures, written, message = memory.load(memo, self.size,
                                                                self.tune_dir)
                if message:
                    report.say(message, 0, prefix='chainermn_torus auto: ')
                if choice is not None:
                    found = (choice, figures)
                    source = 'remembered in {} (tuned {})'.format(
                        memory.path(memo, self.tune_dir), written)
            if found is not None:
                found = (found[0], source, found[1])
        found = self.mpi_comm.bcast(found, root=0)
        if found is None:
            return None
        choice, source, figures = found
        key = self._chosen[nbytes] = (choice['algorithm'], choice['grid'],
                                      choice['segment_bytes'])
        report.say('{:.1f} MB on {} nodes x {} ranks -> {} ({}{})'.format(
            nbytes / 1e6, self.inter_size, self.intra_size, candidates.label(key), source,
            '' if not figures else ': {:.2f} ms measured'.format(figures['chosen_ms'])),
            self.rank, prefix='chainermn_torus auto: ')
        return key

    def _start(self, named, nbytes):
        """Take what a job of this shape remembered (``_chosen``), else start the tuning
        (``_tuning``)."""
        memo = self._memo(named, nbytes)
        if self._remembered(memo, nbytes) is not None:
            return
        rows, why = self._rows(nbytes, simulated=False)
        self.choices.append((nbytes, rows))
        given = self._options['segment_size'] is not None or \
            config.env('segment_bytes')[1] is not None
        tuner = Tuner(rows, why, nbytes, self.segment_bytes, self._agree, segments=not given,
                      node_grid=(self.intra_size, self.inter_size))
        self._tuning[nbytes] = (tuner, memo)
        if not self._exit_registered:  # a job may end before the tuning decides
            self._exit_registered = True
            atexit.register(self._at_exit)
        if tuner.done:
            self._decided(nbytes)

    def _agree(self, seconds):
        """The slowest rank's seconds per candidate (NaN where none ran), on every rank."""
        mine = numpy.where(numpy.isnan(seconds), -1.0, seconds)
        out = numpy.empty_like(mine)
        self.mpi_comm.Allreduce(mine, out, op=MPI.MAX)
        return numpy.where(out < 0, numpy.nan, out)

    def _decided(self, nbytes):
        """The tuner has chosen: run the choice from now on, remember it (rank 0), say it."""
        tuner, memo = self._tuning.pop(nbytes)
        key = self._chosen[nbytes] = tuner.choice
        figures = self.tuned[nbytes] = tuner.figures()
        choice = {'algorithm': key[0], 'grid': key[1],
                  'segment_bytes': self.segment_bytes if key[2] is None else key[2]}
        where = 'kept for this job only'
        if self.rank == 0:
            self._memory[memo.file_name()] = (choice, figures)
            try:
                where = 'remembered in ' + memory.save(memo, choice, figures, self.tune_dir)
            except OSError as e:
                where = 'not remembered: {}'.format(e)
        report.say(tuner.summary(self.inter_size, self.intra_size, where), self.rank,
                   prefix='chainermn_torus auto: ')
        # The others' buffers may still back gradients (double buffering applies the last
        # call's means during the next): freed once the choice has run twice.
        self._retire[nbytes] = [2, [k for k in tuner.measured_keys() if k != key]]

    def _retire_losers(self, nbytes):
        entry = self._retire.get(nbytes)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] > 0:
            return
        del self._retire[nbytes]
        still = set(self._chosen.values()) | {
            k for tuner, _ in self._tuning.values() for k in tuner.measured_keys()}
        for k in entry[1]:
            if k not in still and k in self._inner:
                self._inner.pop(k).finalize()

    # --- a job that ends before its tuning decides ----------------------------------------------
    def _at_exit(self):
        """At exit, a tuning still measuring: say so, record it for the next job of this
        shape (it measures afresh and says why), and free the candidates, where every rank
        reaches its exit within ``EXIT_WAIT_S`` (their windows are collective to free; a
        rank that does not come leaves them to MPI_Finalize)."""
        for nbytes, (tuner, memo) in list(self._tuning.items()):
            done = tuner.calls()
            where = 'nothing remembered'
            if self.rank == 0:
                try:
                    saved = memory.save_partial(memo, self.size, done,
                                                tuner.trials.most_calls, self.tune_dir)
                    if saved:
                        where = 'nothing remembered ({} says so; the next job of this ' \
                            'shape measures afresh)'.format(saved)
                except OSError as e:
                    where = 'nothing remembered ({})'.format(e)
            report.say(
                'the job ended after {} gradient call(s) of {:.1f} MB, before the tuning '
                'decided (it was in stage {} of 2, whose schedule takes up to {} calls): '
                '{}. A job of this shape remembers a choice once it runs past the tuning: '
                'give one job more steps, or use tune=off (the predicted choice)'.format(
                    done, nbytes / 1e6, tuner.stage, tuner.trials.most_calls, where),
                self.rank, prefix='chainermn_torus auto: ', stream=sys.stderr)
        self._tuning.clear()
        if not self._inner:
            return
        everyone = self.mpi_comm.Ibarrier()
        deadline = time.monotonic() + EXIT_WAIT_S
        while not everyone.Test():
            if time.monotonic() > deadline:
                return
            time.sleep(WAIT_POLL_S)
        self.finalize_inner()

    def finalize_inner(self):
        """Free every communicator made for a choice or a candidate (collective)."""
        for key in list(self._inner):  # made in the same order on every rank
            self._inner.pop(key).finalize()

    # --- the gradient calls -------------------------------------------------------------------
    def _transfer_dtype(self, named):
        if self.allreduce_grad_dtype is not None:
            return self.allreduce_grad_dtype
        return _packing.transfer_dtype([p.data.dtype for _, p in named])

    def _bytes(self, named):
        return sum(p.data.size for _, p in named) * self._transfer_dtype(named).itemsize

    def mean_grad_in_slot(self, model, zero_fill=False, slot=0):
        named = _packing.grad_params(model, zero_fill)
        nbytes = self._bytes(named)
        if self._tunes(nbytes):
            self._tuned_call(named, nbytes,
                             lambda inner: inner.mean_grad_in_slot(model, zero_fill, slot))
        else:
            self._choose(nbytes).mean_grad_in_slot(model, zero_fill, slot)
        self.calls += 1

    def mean_grads_by_bucket(self, named, bounds, ready):
        """overlap=True: the buckets go through the communicator chosen for this size. A
        bucketed call waits for backward, so it is not timed for tuning: it takes the
        choice tuned in this job or remembered for the same model and shape where there is
        one, else the prediction, said once."""
        nbytes = self._bytes(named)
        key = self._chosen.get(nbytes)
        if key is None and self._tunes(nbytes):
            key = self._remembered(self._memo(named, nbytes), nbytes)
            if key is None:
                report.say('tune={}: the overlap buckets use the predicted choice (a '
                           'bucketed call waits for backward, so its time is not the '
                           'communicator\'s); a choice tuned without --overlap for the same '
                           'model and job shape is used where there is one'.format(
                               self.tune), self.rank, prefix='chainermn_torus auto: ',
                           key='auto-tune-overlap')
        inner = self._communicator(key) if key is not None else self._choose(nbytes)
        buf = inner.mean_grads_by_bucket(named, bounds, ready)
        self.calls += 1
        return buf

    def mean_array(self, array):
        # One-shot calls (benchmarks, tests): the predicted choice, never measured.
        return self._choose(array.nbytes).mean_array(array)

    def set_config(self, name, value=True, **kwargs):
        super(AutoCommunicator, self).set_config(name, value, **kwargs)
        if name == 'allreduce_grad_dtype':  # the communicators already chosen send it too
            for comm in self._inner.values():
                comm.set_config(name, value, **kwargs)

    def clone(self, poll_interval=None):
        # The same figures (not measured again) and the same choices tuned in this job.
        twin = AutoCommunicator(mpi_comm=self.mpi_comm.Dup(),
                                **dict(self._options, network=self.network))
        twin.network_source, twin._memory = self.network_source, self._memory
        twin.progress = Progress(poll_interval)
        return twin

    def split(self, color, key):
        opts = dict(self._options)
        return AutoCommunicator(mpi_comm=self.mpi_comm.Split(color, key), **opts)

    @property
    def timings(self):
        # A part no inner communicator has timed yet reads 0, as on the others.
        total = collections.defaultdict(float)
        for c in self._inner.values():
            for k, v in c.timings.items():
                total[k] += v
        return total

    def finalize(self):
        self.finalize_inner()
        super(AutoCommunicator, self).finalize()

    def describe(self):
        chosen = ', '.join('{:.1f} MB -> {}{}'.format(
            b / 1e6, candidates.label(k), ' (tuned)' if b in self.tuned else '')
            for b, k in self._chosen.items()) or 'nothing chosen yet'
        return 'auto on P = {} ({} nodes x {} ranks), network {} [{}], tune {}: {}'.format(
            self.size, self.inter_size, self.intra_size, self.network.name,
            self.network_source, self.tune, chosen)
