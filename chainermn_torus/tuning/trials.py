"""The measuring schedule: which candidate runs the next gradient call, and which one wins.

The calls are the job's own: every candidate is an exact mean of the same gradients, so the
training goes on while it is measured (the means differ only by the rounding of another
summation order, none at P = 2). The schedule, for C candidates:

* one warm-up round: each candidate once, in the planner's order, not counted (its first
  call allocates its buffers and windows; one already called before skips it);
* ``ROUNDS`` counted rounds over every candidate, each round starting one place further
  on (interleaved: a slow phase of the machine falls on every candidate alike); no
  candidate is dropped before it has ``ROUNDS`` counted calls (one busy moment
  once dropped the best after a single call, and every later job kept the choice);
* then the best ``FINALISTS`` run ``FINAL_ROUNDS`` more rounds (one over ``BEHIND`` times
  the leader after 3 calls stops), and the lowest median of
  all their counted calls wins (ties go to the planner's order).

A call's figure is the slowest rank's time (one MPI_MAX per round), so every rank decides
from the same numbers, whatever it timed itself: the choice is the same everywhere.
"""
import numpy

__all__ = ['Trials', 'ROUNDS', 'FINAL_ROUNDS', 'FINALISTS', 'BEHIND']

# The measuring calls are training's own, and every call of a slower candidate costs (with
# 2 rounds the tuning cost 2.6 % of a one-epoch MNIST run at P = 4); but a median needs 3
# calls: with 1 round, one busy moment dropped rsaa (44.5 ms against 23.4 ms on a quiet node).
# Single calls on the 2-core test machine stray by up to 2x, and the order of close
# candidates flips between runs by 10-30 %: the finalists' cut is made on these medians.
ROUNDS = 3
# Finalists that stay close cost little beyond the winner's time per extra call, and a
# median of 5 calls tells them apart where 3 did not; one whose median is over BEHIND times
# the leader's after 3 calls is dropped (it would only add cost: 0.03-0.05 s of a one-epoch
# MNIST run at P = 4).
FINAL_ROUNDS = 4
BEHIND = 1.3
FINALISTS = 2


class Trials:
    """``next()`` gives the candidate index for the coming call, ``record(seconds)`` its
    time; ``agree`` is called at the end of each round with this rank's times (an array, NaN
    where a candidate did not run) and returns the slowest rank's (every rank alike)."""

    def __init__(self, count, agree, prior=None):
        if count < 1:
            raise ValueError('chainermn_torus: tuning needs at least one candidate')
        self.count = count
        self._agree = agree
        self.samples = [[] for _ in range(count)]   # counted, agreed seconds per candidate
        # Calls counted before (stage 1's winner, the same configuration): one stray call
        # in this stage cannot drop it, and it skips the warm-up (it was made and called).
        prior = prior or {}
        for i, seconds in prior.items():
            self.samples[i] = list(seconds)
        self.warmup = [None] * count                # agreed seconds of the warm-up call
        self.alive = list(range(count))
        self.dropped = {}                            # index -> why
        self.calls = 0
        self.choice = None if count > 1 else 0
        self._round = 0                              # 0: warm-up
        self._queue = [i for i in range(count) if i not in prior]
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
        if self._round == 1 + ROUNDS and len(self.alive) > FINALISTS:
            keep = sorted(self.alive, key=lambda i: (self.figure(i), i))[:FINALISTS]
            best = self.figure(keep[0])
            for i in self.alive:
                if i not in keep:
                    self.dropped[i] = (
                        f'{self.figure(i) / best:.2f}x the best, not among the {FINALISTS} '
                        f'fastest after {len(self.samples[i])} calls')
            self.alive = sorted(keep)
        if self._round > 1 + ROUNDS and len(self.alive) > 1:  # a final round
            lead = min(self.figure(i) for i in self.alive)
            for i in list(self.alive):
                if len(self.samples[i]) >= 3 and self.figure(i) > BEHIND * lead:
                    self.alive.remove(i)
                    self.dropped[i] = (f'{self.figure(i) / lead:.2f}x the leader '
                                       f'after {len(self.samples[i])} calls')
        if self._round >= 1 + ROUNDS + FINAL_ROUNDS or len(self.alive) == 1:
            self.choice = min(self.alive, key=lambda i: (self.figure(i), i))
            return
        shift = self._round % len(self.alive)
        self._queue = self.alive[shift:] + self.alive[:shift]

    @property
    def most_calls(self):
        """The most calls this schedule can take: warm-ups, the counted rounds, the
        finalists' rounds."""
        return (sum(1 for w in self.warmup if w is None) + self.count * ROUNDS
                + FINALISTS * FINAL_ROUNDS)

    def figure(self, i):
        """The candidate's figure: the median of its counted calls, what the job will see.
        (The fastest call was tried: it favoured configurations with a fast best case and a
        slow usual one, whole-buffer segments under Intel MPI, 1.1-1.2x the sweep's best.)"""
        return float(numpy.median(self.samples[i])) if self.samples[i] else float('inf')
