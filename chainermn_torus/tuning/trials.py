"""The measuring schedule: which candidate runs the next gradient call, and which one wins.

The calls are the job's own: every candidate is an exact mean of the same gradients, so the
training goes on while it is measured (the means differ only by the rounding of another
summation order, none at P = 2). The schedule, for C candidates:

* one warm-up round: each candidate once, in the planner's order, not counted (its first
  call allocates its buffers and windows; one already called before skips it);
* ``ROUNDS`` counted rounds over every candidate still in, each round starting one place
  further on (interleaved: a slow phase of the machine falls on every candidate alike);
  after the first of them a candidate over ``DROP`` times the best is dropped;
* then the best ``FINALISTS`` run ``FINAL_ROUNDS`` more rounds, and the lowest figure (the fastest call) of
  all their counted calls wins (ties go to the planner's order).

A call's figure is the slowest rank's time (one MPI_MAX per round), so every rank decides
from the same numbers, whatever it timed itself: the choice is the same everywhere.
"""
import numpy

__all__ = ['Trials', 'ROUNDS', 'FINAL_ROUNDS', 'FINALISTS', 'DROP']

# Rounds are few because the measuring calls are training's own, and every call of a slower
# candidate costs: with ROUNDS = 2 the tuning cost 2.6 % of a one-epoch MNIST run at P = 4.
ROUNDS = 1
FINAL_ROUNDS = 2
FINALISTS = 2
# A candidate twice as slow as the best after one counted call rarely comes back: the order
# of close ones flips between runs on the 2-core test machine by 10-30 %, and single calls
# there stray by up to 2x (a candidate is then kept to the finalists' cut, after ROUNDS).
DROP = 2.0


class Trials(object):
    """``next()`` gives the candidate index for the coming call, ``record(seconds)`` its
    time; ``agree`` is called at the end of each round with this rank's times (an array, NaN
    where a candidate did not run) and returns the slowest rank's (every rank alike)."""

    def __init__(self, count, agree, warm=()):
        if count < 1:
            raise ValueError('chainermn_torus: tuning needs at least one candidate')
        self.count = count
        self._agree = agree
        self.samples = [[] for _ in range(count)]   # counted, agreed seconds per candidate
        self.warmup = [None] * count                # agreed seconds of the warm-up call
        self.alive = list(range(count))
        self.dropped = {}                            # index -> why
        self.calls = 0
        self.choice = None if count > 1 else 0
        self._round = 0                              # 0: warm-up
        # Candidates ``warm`` made and called before (stage 1's winner) skip the warm-up.
        self._queue = [i for i in range(count) if i not in warm]
        if not self._queue:
            self._round, self._queue = 1, list(range(count))
        self._times = numpy.full(count, numpy.nan)

    @property
    def done(self):
        return self.choice is not None

    def next(self):
        return self._queue[0]

    def record(self, seconds):
        index = self._queue.pop(0)
        self._times[index] = seconds
        self.calls += 1
        if not self._queue:
            self._end_round()

    def _end_round(self):
        agreed = numpy.asarray(self._agree(self._times), dtype=numpy.float64)
        ran = [i for i in range(self.count) if not numpy.isnan(self._times[i])]
        for i in ran:
            if self._round == 0:
                self.warmup[i] = float(agreed[i])
            else:
                self.samples[i].append(float(agreed[i]))
        self._times[:] = numpy.nan
        self._round += 1
        if self._round == 2:  # after the first counted round
            best = min(self.figure(i) for i in self.alive)
            for i in list(self.alive):
                if self.figure(i) > DROP * best:
                    self.alive.remove(i)
                    self.dropped[i] = '{:.1f}x the best after {} round{}'.format(
                        self.figure(i) / best, self._round - 1,
                        '' if self._round == 2 else 's')
        if self._round == 1 + ROUNDS and len(self.alive) > FINALISTS:
            keep = sorted(self.alive, key=lambda i: (self.figure(i), i))[:FINALISTS]
            for i in self.alive:
                if i not in keep:
                    self.dropped[i] = 'not among the {} fastest after {} rounds'.format(
                        FINALISTS, ROUNDS)
            self.alive = sorted(keep)
        if self._round >= 1 + ROUNDS + FINAL_ROUNDS or len(self.alive) == 1:
            self.choice = min(self.alive, key=lambda i: (self.figure(i), i))
            return
        shift = self._round % len(self.alive)
        self._queue = self.alive[shift:] + self.alive[:shift]

    def figure(self, i):
        """The candidate's figure: the fastest of its counted calls. Noise on a shared,
        loaded node only adds time, so with the few calls the tuner can afford the minimum
        ranks candidates more steadily than the median does."""
        return float(min(self.samples[i])) if self.samples[i] else float('inf')
