"""One ``auto`` communicator's choices, from the first gradient call of each buffer size to
the job's exit: the one object that holds them.

For each buffer size, at its first call:

* ``tune='off'`` (and calls the tuning leaves alone: one rank, nodes of different sizes,
  buffers under ``TUNE_MIN_BYTES``, one-shot ``mean_array`` calls): the prediction
  (``prediction.rows``), said on rank 0 with the runner-up;
* ``tune='on'``: the choice this job tuned already, or the one a job of the same shape
  remembered (``memory``, read on rank 0 and shared), said with where it came from. A
  remembered one is checked: its calls after the first, ``CHECK_CALLS`` of them, are timed
  as a tuning times them; where their median is over ``RECHECK`` times the best figure the
  tuning recorded (or one call over ``FAR`` times: the check stops there), the buffer is
  tuned again, without it, and the new choice kept (a choice
  made on a busy node ran 1.38x and 4.25x slower than the best in later jobs). Said in one
  line either way. Else the tuning: each call runs the candidate the ``Tuner`` gives, timed
  from a common start, until it decides; the choice is then remembered (rank 0 writes the
  file), said, and the other candidates are freed once the choice has run twice (double
  buffering may still read the last call's means from a loser's buffer);
* ``tune='again'``: the tuning, whatever was remembered.

A job that ends while a tuning is measuring says so at exit, records it for the next job of
that shape (``memory.save_partial``: it measures afresh and says why), and frees the
candidates where every rank comes within ``EXIT_WAIT_S``.

The communicators are made by ``make(key)`` (the caller's: ``auto`` builds a variant on its
MPI communicator); the collective steps go through ``collective_steps`` (``MpiJob``, or
``OneRank`` in the tests without MPI). Nothing here knows MPI.
"""
import atexit
import collections
import sys
import time

import numpy

from chainermn_torus.runtime import report
from chainermn_torus.tuning import candidates, memory, prediction
from chainermn_torus.tuning.tuner import Tuner

__all__ = ['Choices', 'TuneInputs', 'TUNE_MIN_BYTES', 'EXIT_WAIT_S']

# Calls below this many bytes are latency-bound: the planner's alpha terms rank them well,
# and a measured difference would be within the noise of one call.
TUNE_MIN_BYTES = 256 << 10
EXIT_WAIT_S = 5.0  # at exit, how long a rank waits for the others before freeing
# A remembered choice's check: the median of this many calls (after one not counted: its
# buffers are made then) against the best median its tuning recorded. Medians of 3-5 calls
# on the 2-core test machine move by 10-30 % between runs: beyond RECHECK is a slower
# choice, not noise, and a needless retune costs only the tuning's calls.
CHECK_CALLS = 3
RECHECK = 1.3
# A check ends at once where a counted call is over FAR times the best: beyond the 2x a
# single call strays here, and a choice that slow (shm rows 30-50x the best on an
# oversubscribed node) would cost more in its check than the tuning again does.
FAR = 3.0
PREFIX = 'chainermn_torus auto: '


class TuneInputs(collections.namedtuple('TuneInputs', [
        'network', 'network_source', 'simulate', 'tune', 'tune_dir', 'segment_bytes',
        'segment_given', 'mpi_library'])):
    """network, and where it came from; simulate (auto, True, False); tune (off, on,
    again) and the folder of remembered choices; the default segment and whether the user
    gave one (then no other is tried); the MPI library's version line (memory's key)."""


class Choices:

    def __init__(self, shape, settings, job, make, remembered=None):
        """``remembered``: choices tuned in this process, shared with clones (double
        buffering's thread): file name -> (choice, figures); read on rank 0 only."""
        self.shape, self.settings, self.job, self._make = shape, settings, job, make
        self.made = collections.OrderedDict()  # key -> communicator, in the order made
        self.chosen = {}    # bytes -> key (variant, grid, segment or None)
        self.measuring = {}  # bytes -> (Tuner, memory key)
        self.retiring = {}  # bytes -> [calls left, keys]
        self.remembered = {} if remembered is None else remembered
        self.log = []       # (bytes, plan rows) of every prediction, for users and tests
        self.tuned = {}     # bytes -> the tuning's figures
        self.checking = {}  # bytes -> [memory key, the recorded best ms, [call seconds]]
        self._exit_registered = False

    # --- the calls --------------------------------------------------------------------------
    def call(self, nbytes, signature, run):
        """One gradient call of ``nbytes``: ``run(comm)`` with the communicator chosen, or
        the one being measured. ``signature()`` gives the buffer's memory signature."""
        if not self._tunes(nbytes):
            run(self.predicted(nbytes))
            return
        if nbytes not in self.chosen and nbytes not in self.measuring:
            self._start(signature(), nbytes)  # remembered, or the tuning (decided at once
        key = self.chosen.get(nbytes)         # where there is one candidate in all)
        if key is not None and nbytes in self.checking:
            self._checked_call(nbytes, key, run)
            return
        if key is not None:
            run(self.communicator(key))
            self._retire_losers(nbytes)
            return
        tuner = self.measuring[nbytes][0]
        key = tuner.next_key()
        t0 = time.perf_counter()
        comm = self.communicator(key)  # the first time: made now (counted)
        made = time.perf_counter() - t0
        self.job.barrier()  # each call timed from a common start: no rank's lateness
        t1 = time.perf_counter()
        run(comm)
        tuner.record(key, made, time.perf_counter() - t1)
        if tuner.done:
            self._decided(nbytes)

    def for_buckets(self, nbytes, signature):
        """The communicator for an overlap call of ``nbytes``. A bucketed call waits for
        backward, so it is not timed: it takes the choice tuned in this job or remembered
        for the same model and shape where there is one, else the prediction, said once."""
        key = self.chosen.get(nbytes)
        if key is None and self._tunes(nbytes):
            key = self._remembered(memory_key(self.shape, self.settings, signature(),
                                              nbytes), nbytes)
            if key is None:
                report.say(f'tune={self.settings.tune}: the overlap buckets use the predicted '
                           'choice (a '
                           'bucketed call waits for backward, so its time is not the '
                           'communicator\'s); a choice tuned without --overlap for the same '
                           'model and job shape is used where there is '
                           'one', self.shape.rank, prefix=PREFIX,
                           key='auto-tune-overlap')
        return self.communicator(key) if key is not None else self.predicted(nbytes)

    def predicted(self, nbytes):
        """The predicted choice for ``nbytes`` (planned, and said, at its first call)."""
        key = self.chosen.get(nbytes)
        if key is None:
            rows, why = prediction.rows(self.shape, nbytes, self.settings.network,
                                        self.settings.simulate, self.job)
            best = rows[0]
            key = self.chosen[nbytes] = (best['algorithm'], best['grid'], None)
            self.log.append((nbytes, rows))
            runner = rows[1] if len(rows) > 1 else None
            report.say('{:.1f} MB on {} nodes x {} ranks -> {} ({}: {:.2f} ms predicted{}; '
                       'network: {} [{}])'.format(
                           nbytes / 1e6, self.shape.nodes, self.shape.ranks_per_node,
                           candidates.label(key), why, best['seconds'] * 1e3,
                           '' if runner is None else ', next {} {:.2f} ms'.format(
                               candidates.label((runner['algorithm'], runner['grid'], None)),
                               runner['seconds'] * 1e3),
                           self.settings.network.name, self.settings.network_source),
                       self.shape.rank, prefix=PREFIX)
        return self.communicator(key)

    def communicator(self, key):
        comm = self.made.get(key)
        if comm is None:
            comm = self.made[key] = self._make(key)
        return comm

    # --- the tuning --------------------------------------------------------------------------
    def _tunes(self, nbytes):
        return (self.settings.tune != 'off' and self.shape.size > 1 and self.shape.uniform
                and nbytes >= TUNE_MIN_BYTES)

    def _remembered(self, key, nbytes):
        """The choice tuned earlier in this job or remembered in a file, or None. Rank 0
        looks; every rank gets its answer (collective)."""
        found = None
        if self.shape.rank == 0:
            found = self._look_up(key)
        found = self.job.share(found)
        if found is None:
            return None
        choice, source, figures, from_file = found
        chosen = self.chosen[nbytes] = (choice['algorithm'], choice['grid'],
                                        choice['segment_bytes'])
        best_ms = _best_recorded(figures)
        if best_ms is not None and from_file:  # what this job tuned is checked already
            self.checking[nbytes] = [key, best_ms, []]
        report.say('{:.1f} MB on {} nodes x {} ranks -> {} ({}{})'.format(
            nbytes / 1e6, self.shape.nodes, self.shape.ranks_per_node,
            candidates.label(chosen), source,
            '' if not figures else ': {:.2f} ms measured'.format(figures['chosen_ms'])),
            self.shape.rank, prefix=PREFIX)
        return chosen

    def _checked_call(self, nbytes, key, run):
        """A call of a remembered choice under check: timed from a common start; after
        the last, kept or tuned again (module doc), every rank alike."""
        memo, best_ms, seconds = self.checking[nbytes]
        self.job.barrier()
        t0 = time.perf_counter()
        run(self.communicator(key))
        if not seconds:  # the first call makes its buffers: not counted
            seconds.append(None)
            return
        # The slowest rank's time, every rank alike (one MPI_MAX of one number).
        seconds.append(float(self.job.agree(numpy.asarray([time.perf_counter() - t0]))[0]))
        counted = seconds[1:]
        far = min(counted) * 1e3 > FAR * best_ms
        if len(counted) < CHECK_CALLS and not far:
            return
        del self.checking[nbytes]
        median_ms = float(numpy.median(counted)) * 1e3
        slower = far or median_ms > RECHECK * best_ms
        report.say('{:.1f} MB: the remembered {} ran {:.2f} ms (median of {} call{}), {:.2f}x '
                   'the best its tuning measured ({:.2f} ms): {}'.format(
                       nbytes / 1e6, candidates.label(key), median_ms, len(counted),
                       '' if len(counted) == 1 else 's', median_ms / best_ms, best_ms,
                       f'over {FAR if far else RECHECK:g}x, so it is tuned again'
                       if slower else f'within {RECHECK:g}x, kept'),
                   self.shape.rank, prefix=PREFIX)
        if slower:  # its own calls just measured it: the tuning again leaves it out
            del self.chosen[nbytes]
            self._tune(memo, nbytes, without=key[:2])

    def _look_up(self, key):
        """Rank 0: (choice, where from, figures, whether from its file) in this process or
        its file, or None."""
        found = self.remembered.get(key.file_name())
        if found is not None:
            return found[0], 'tuned earlier in this job', found[1], False
        if self.settings.tune != 'on':
            return None
        found = memory.load(key, self.shape.size, self.settings.tune_dir,
                            self.settings.segment_bytes)
        if found.message:
            report.say(found.message, 0, prefix=PREFIX)
        if found.choice is None:
            return None
        return found.choice, (f'remembered in {found.path} '
                              f'(tuned {found.written})'), found.figures, True

    def _start(self, signature, nbytes):
        """Take what a job of this shape remembered (``chosen``), else start the tuning
        (``measuring``)."""
        key = memory_key(self.shape, self.settings, signature, nbytes)
        if self._remembered(key, nbytes) is not None:
            return
        self._tune(key, nbytes)

    def _tune(self, key, nbytes, without=None):
        rows, why = prediction.rows(self.shape, nbytes, self.settings.network,
                                    self.settings.simulate, self.job, simulated=False)
        kept = [r for r in rows if candidates.key(r)[:2] != without]
        rows = kept or rows
        self.log.append((nbytes, rows))
        tuner = Tuner(rows, why, nbytes, self.settings.segment_bytes, self.job.agree,
                      segments=not self.settings.segment_given,
                      node_grid=(self.shape.ranks_per_node, self.shape.nodes))
        self.measuring[nbytes] = (tuner, key)
        if not self._exit_registered:  # a job may end before the tuning decides
            self._exit_registered = True
            atexit.register(self.at_exit)
        if tuner.done:
            self._decided(nbytes)

    def _decided(self, nbytes):
        """The tuner has chosen: run the choice from now on, remember it (rank 0), say it."""
        tuner, key = self.measuring.pop(nbytes)
        chosen = self.chosen[nbytes] = tuner.choice
        figures = self.tuned[nbytes] = tuner.figures()
        choice = {'algorithm': chosen[0], 'grid': chosen[1],
                  'segment_bytes': self.settings.segment_bytes if chosen[2] is None
                  else chosen[2]}
        where = 'kept for this job only'
        if self.shape.rank == 0:
            self.remembered[key.file_name()] = (choice, figures)
            try:
                where = 'remembered in ' + memory.save(key, choice, figures,
                                                       self.settings.tune_dir)
            except OSError as e:
                where = f'not remembered: {e}'
        report.say(tuner.summary(self.shape.nodes, self.shape.ranks_per_node, where),
                   self.shape.rank, prefix=PREFIX)
        # The others' buffers may still back gradients (double buffering applies the last
        # call's means during the next): freed once the choice has run twice.
        self.retiring[nbytes] = [2, [k for k in tuner.measured_keys() if k != chosen]]

    def _retire_losers(self, nbytes):
        entry = self.retiring.get(nbytes)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] > 0:
            return
        del self.retiring[nbytes]
        still = set(self.chosen.values()) | {
            k for tuner, _ in self.measuring.values() for k in tuner.measured_keys()}
        for k in entry[1]:
            if k not in still and k in self.made:
                self.made.pop(k).finalize()

    # --- the end ------------------------------------------------------------------------------
    def at_exit(self):
        """At exit, a tuning still measuring: say so, record it for the next job of this
        shape, and free the candidates where every rank reaches its exit within
        ``EXIT_WAIT_S`` (their windows are collective to free; a rank that does not come
        leaves them to MPI_Finalize)."""
        for nbytes, (tuner, key) in list(self.measuring.items()):
            report.say(self._unfinished(nbytes, tuner, key), self.shape.rank, prefix=PREFIX,
                       stream=sys.stderr)
        self.measuring.clear()
        if self.made and self.job.all_here(EXIT_WAIT_S):
            self.finalize()

    def _unfinished(self, nbytes, tuner, key):
        done = tuner.calls()
        where = 'nothing remembered'
        if self.shape.rank == 0:
            try:
                saved = memory.save_partial(key, self.shape.size, done,
                                            tuner.trials.most_calls, self.settings.tune_dir)
                if saved:
                    where = f'nothing remembered ({saved} says so; the next job of this shape ' \
                        'measures afresh)'
            except OSError as e:
                where = f'nothing remembered ({e})'
        return (f'the job ended after {done} gradient call(s) of {nbytes / 1e6:.1f} MB, before the '
                'tuning '
                f'decided (it was in stage {tuner.stage} of 2, whose schedule takes up '
                f'to {tuner.trials.most_calls} calls): '
                f'{where}. A job of this shape remembers a choice once it runs past the tuning: '
                'give one job more steps, or use tune=off (the predicted choice)')

    def finalize(self):
        """Free every communicator made for a choice or a candidate (collective)."""
        for key in list(self.made):  # made in the same order on every rank
            self.made.pop(key).finalize()

    def describe(self):
        return ', '.join('{:.1f} MB -> {}{}'.format(
            b / 1e6, candidates.label(k), ' (tuned)' if b in self.tuned else '')
            for b, k in self.chosen.items()) or 'nothing chosen yet'


def _best_recorded(figures):
    """The lowest median a remembered tuning recorded (its choice's, or a candidate's
    where the file's choice is not its best), in ms; None where it holds none."""
    if not isinstance(figures, dict):
        return None
    rows = figures.get('candidates') if isinstance(figures.get('candidates'), list) else []
    found = [figures.get('chosen_ms')] + [r.get('median_ms') for r in rows
                                          if isinstance(r, dict)]
    found = [float(v) for v in found if isinstance(v, (int, float)) and not
             isinstance(v, bool) and 0 < v < float('inf')]
    return min(found) if found else None


def memory_key(shape, settings, signature, nbytes):
    """The key a tuned choice is remembered under for this job shape and buffer."""
    return memory.Key(shape.ranks_per_node, shape.nodes, settings.mpi_library, signature,
                      nbytes)
