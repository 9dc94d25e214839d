"""One buffer size's tuning, from the planner's rows to the choice and its report.

Stage 1 measures one configuration of each communicator kind (``candidates.kinds``); stage
2 the winner on other grids and segment sizes (``candidates.refinements``), its stage-1
calls counted again; each stage's calls follow ``trials.Trials``. The caller runs the calls:
it asks ``next_key()``, makes and runs that candidate, and gives ``record(key, made,
took)`` the seconds; once ``done``, ``choice`` is the key, ``figures()`` the report as
data and ``summary()`` as the line rank 0 says. No MPI here: ``agree`` (this rank's seconds
per candidate -> the slowest rank's, every rank alike) is the caller's, so every rank's
tuner decides the same from the same numbers, and a test can feed times directly.
"""
import numpy

from chainermn_torus.tuning import candidates, trials

__all__ = ['Tuner']


class Tuner:

    def __init__(self, rows, predicted_by, nbytes, segment_bytes, agree, segments=True,
                 node_grid=None):
        """``rows``: the planner's rows, best first; ``predicted_by``: what ranked them
        (for the report); ``segment_bytes``: the communicator's default segment; with
        ``segments`` False (the user gave a size) no other segment size is tried;
        ``node_grid``: (ranks per node, nodes)."""
        self.rows, self.predicted_by, self.nbytes = rows, predicted_by, nbytes
        self.segment_bytes, self.segments, self.node_grid = segment_bytes, segments, node_grid
        self._agree = agree
        self.predicted = candidates.key(rows[0])  # the planner's best row
        self.keys = candidates.kinds(rows, node_grid=node_grid)
        self.trials = trials.Trials(len(self.keys), agree)
        self.stage = 1
        self.results = []   # (stage, key, Trials, index) of every candidate measured
        self.spent = 0.0    # this rank's seconds in the candidates' making and calls
        self.first = {}     # key -> seconds of its making and first call
        self.choice = None
        self._cost = None
        if self.trials.done:  # one kind only: straight to its shapes and segments
            self._next_stage()

    @property
    def done(self):
        return self.choice is not None

    def next_key(self):
        return self.keys[self.trials.next()]

    def record(self, key, made, took):
        """The candidate ``key`` (the one ``next_key`` gave) took ``made`` seconds to make
        (0 once made) and ``took`` seconds for its call, timed from a common start."""
        if key != self.next_key():
            raise ValueError('chainermn_torus: the tuner expected a call '
                             f'of {candidates.label(self.next_key())}, got {candidates.label(key)}')
        self.spent += made + took
        self.first.setdefault(key, made + took)
        self.trials.record(took)
        if self.trials.done:
            self._next_stage()

    def _next_stage(self):
        t = self.trials
        self.results += [(self.stage, k, t, i) for i, k in enumerate(self.keys)]
        winner = self.keys[t.choice]
        if self.stage == 2:
            return self._decide(winner)
        self.stage = 2
        self.keys = candidates.refinements(winner, self.rows, self.nbytes, self.segment_bytes,
                                           self.segments, node_grid=self.node_grid)
        self.trials = trials.Trials(len(self.keys), self._agree,
                                    prior={0: t.samples[t.choice]})
        if self.trials.done:
            self.results.append((2, winner, self.trials, 0))
            self._decide(winner)

    def calls(self):
        """Gradient calls made so far in both stages."""
        stages = {id(t): t.calls for _, _, t, _ in self.results}
        stages[id(self.trials)] = self.trials.calls
        return sum(stages.values())

    def measured_keys(self):
        return [k for _, k, _, _ in self.results] + list(self.keys)

    def _best(self, key):
        """The choice's figure: from the last stage that counted calls of it."""
        return ([t.figure(i) for _, k, t, i in self.results if k == key and t.samples[i]]
                or [0.0])[-1]

    def _decide(self, key):
        self.choice = key
        # What measuring cost against a job fixed to the winner: the slowest rank's time
        # making the candidates and running their calls, beyond the winner's making and
        # first call (that job pays those too) and as many more calls at the winner's
        # median. The barriers' waits are left out: without them the same lateness is
        # waited for inside the call.
        mine = numpy.array([self.spent - self.first.get(key, 0.0)])
        slowest = float(numpy.asarray(self._agree(mine))[0])
        self._cost = slowest - (self.calls() - 1) * self._best(key)

    def figures(self):
        """The decided tuning as data: the choice and its figure, the prediction and its
        measured figure, the calls, the cost, and every candidate's row."""
        key = self.choice
        rows = [{'stage': stage, 'candidate': candidates.label(k),
                 'median_ms': t.figure(i) * 1e3 if t.samples[i] else None,
                 'counted_calls': len(t.samples[i]),
                 'first_call_ms': None if t.warmup[i] is None else t.warmup[i] * 1e3,
                 'dropped': t.dropped.get(i)} for stage, k, t, i in self.results]
        predicted_ms = ([r['median_ms'] for r, (_, k, _, _) in zip(rows, self.results)
                         if k == self.predicted and r['median_ms'] is not None] or [None])[-1]
        return {'chosen': candidates.label(key), 'chosen_ms': self._best(key) * 1e3,
                'predicted': candidates.label(self.predicted),
                'predicted_by': self.predicted_by, 'predicted_ms': predicted_ms,
                'calls': self.calls(), 'cost_s': self._cost, 'candidates': rows}

    def summary(self, nodes, per_node, where):
        """The line rank 0 says; ``where``: what became of the choice (remembered ...)."""
        f = self.figures()

        def listed(stage):
            return ', '.join('{} {}'.format(r['candidate'], '-' if r['median_ms'] is None
                                           else '{:.2f} ms'.format(r['median_ms'])) +
                             (' (dropped: {})'.format(r['dropped']) if r['dropped'] else '')
                             for r in f['candidates'] if r['stage'] == stage)
        missed = '' if self.predicted == self.choice else ', measured {}'.format(
            'only its kind' if f['predicted_ms'] is None else
            '{:.2f} ms'.format(f['predicted_ms']))
        return ('tuned {:.1f} MB on {} nodes x {} ranks in {} calls -> {} ({:.2f} ms); '
                'predicted {} ({}){}; kinds: {}; shapes and segments: {}; the tuning cost '
                '{:.3f} s beyond the choice\'s time; {}'.format(
                    self.nbytes / 1e6, nodes, per_node, f['calls'], f['chosen'],
                    f['chosen_ms'], f['predicted'], self.predicted_by, missed, listed(1),
                    listed(2) or '-', f['cost_s'], where))
